"""Fault injection for tests, demos and the torture harness.

:class:`FaultyClient` wraps a boto3 client and, on request, makes a call fail the way networks
and DynamoDB fail: before the request reaches the store (nothing written), after it committed
(the response is lost), or with throttling.

Throttled transactions (:data:`TXN_THROTTLE`, :data:`TXN_THROTTLE_PROVISIONED`) fail as DynamoDB
fails them: not with a throttling error code, but with ``TransactionCanceledException`` whose
``CancellationReasons`` hold, per action in request order, ``ThrottlingError`` (on-demand tables) or
``ProvisionedThroughputExceeded`` (provisioned tables) for the throttled actions and ``None`` for
the others. botocore does not retry them. :func:`cancellation_reasons` builds those reasons; the
embedded endpoint (``Fidelity.txn_throttle_rate``) uses it too.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

BEFORE = "before"  # the request never reached the store
AFTER = "after"  # the store committed; the answer was lost
THROTTLE = "throttle"  # the store refused with a throttling error
CONFLICT = "conflict"  # a transaction was cancelled by a conflicting transaction
TXN_THROTTLE = (
    "txn_throttle"  # a transaction was cancelled: some actions throttled (on-demand table)
)
TXN_THROTTLE_PROVISIONED = "txn_throttle_provisioned"  # the same on a provisioned table

#: DynamoDB's cancellation messages (TransactionCanceledException documentation), by code.
THROTTLE_MESSAGES = {
    "ThrottlingError": (
        "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically "
        "scaling your table or index so please try again shortly. If exceptions persist, check if you "
        "have a hot key: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
    ),
    "ProvisionedThroughputExceeded": (
        "The level of configured provisioned throughput for the table was exceeded. Consider increasing "
        "your provisioning level with the UpdateTable API."
    ),
}
_TXN_METHODS = {
    "transact_write_items": "TransactWriteItems",
    "transact_get_items": "TransactGetItems",
}

Predicate = Callable[[dict[str, Any]], bool]
#: Decides, per call, whether to inject a fault: (method, request) -> mode or None.
Chaos = Callable[[str, dict[str, Any]], str | None]


def cancellation_reasons(
    actions: int, throttled: Iterable[int], code: str = "ThrottlingError"
) -> list[dict[str, str]]:
    """Per action, in request order: ``{"Code": code, "Message": ...}`` where throttled, else
    ``{"Code": "None"}`` (DynamoDB sends the literal string "None" and no message)."""
    throttled = set(throttled)
    return [
        {"Code": code, "Message": THROTTLE_MESSAGES[code]}
        if index in throttled
        else {"Code": "None"}
        for index in range(actions)
    ]


def cancellation_message(reasons: list[dict[str, str]]) -> str:
    return (
        "Transaction cancelled, please refer cancellation reasons for specific reasons [{}]".format(
            ", ".join(reason["Code"] for reason in reasons)
        )
    )


def pick_throttled(actions: int, rng: random.Random) -> list[int]:
    """Which actions of a throttled transaction report the throttle: each with even odds, at least one."""
    if actions <= 0:
        return []
    chosen = [index for index in range(actions) if rng.random() < 0.5]
    return chosen or [rng.randrange(actions)]


def throttled_transaction_error(
    actions: int,
    throttled: Iterable[int] | None = None,
    code: str = "ThrottlingError",
    operation: str = "TransactWriteItems",
    error_class: type[ClientError] = ClientError,
) -> ClientError:
    """The ``ClientError`` botocore raises for a throttled transaction (same response shape as a
    parsed DynamoDB answer: ``Error``, ``Message``, ``CancellationReasons``, ``ResponseMetadata``)."""
    reasons = cancellation_reasons(actions, [0] if throttled is None else throttled, code)
    message = cancellation_message(reasons)
    return error_class(
        {
            "Error": {"Message": message, "Code": "TransactionCanceledException"},
            "ResponseMetadata": {"HTTPStatusCode": 400, "RetryAttempts": 0},
            "Message": message,
            "CancellationReasons": reasons,
        },
        operation,
    )


class FaultyClient:
    """A boto3 client proxy that injects planned faults into named operations.

    ``rng`` (seeded) decides which actions of a transaction report a :data:`TXN_THROTTLE`."""

    def __init__(
        self, client: Any, chaos: Chaos | None = None, rng: random.Random | None = None
    ) -> None:
        self._client = client
        self._chaos = chaos
        self._rng = rng if rng is not None else random.Random(0)
        self._lock = threading.Lock()
        self._plan: dict[str, list[tuple[str, Predicate | None]]] = defaultdict(list)
        self._hooks: dict[str, list[tuple[Callable[[], Any], Predicate | None]]] = defaultdict(list)
        self.injected: dict[str, int] = defaultdict(int)

    def fail_next(
        self, method: str, mode: str, when: Predicate | None = None, times: int = 1
    ) -> None:
        with self._lock:
            self._plan[method].extend([(mode, when)] * times)

    def before_next(
        self, method: str, action: Callable[[], Any], when: Predicate | None = None
    ) -> None:
        """Run ``action`` once, just before the next call of ``method`` (that ``when`` accepts)
        is sent: a race made to land between two steps of the caller (another request, another
        process's write). Counted in :attr:`injected` as ``"race"``."""
        with self._lock:
            self._hooks[method].append((action, when))

    def _hook(self, method: str, kwargs: dict[str, Any]) -> Callable[[], Any] | None:
        with self._lock:
            for index, (action, when) in enumerate(self._hooks.get(method) or []):
                if when is None or when(kwargs):
                    del self._hooks[method][index]
                    self.injected["race"] += 1
                    return action
            return None

    def _take(self, method: str, kwargs: dict[str, Any]) -> str | None:
        with self._lock:
            plan = self._plan.get(method)
            if not plan:
                mode = self._chaos(method, kwargs) if self._chaos is not None else None
                if mode is not None:
                    self.injected[mode] += 1
                return mode
            for index, (mode, when) in enumerate(plan):
                if when is None or when(kwargs):
                    del plan[index]
                    self.injected[mode] += 1
                    return mode
            return None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if not callable(target) or name.startswith("_") or name in ("exceptions", "meta"):
            return target

        def call(**kwargs: Any) -> Any:
            hook = self._hook(name, kwargs)
            if hook is not None:
                hook()
            mode = self._take(name, kwargs)
            if mode == BEFORE:
                raise EndpointConnectionError(endpoint_url="injected://before")
            if mode == THROTTLE:
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "injected throttle"}}, name
                )
            if mode == CONFLICT:
                raise ClientError(
                    {
                        "Error": {
                            "Code": "TransactionCanceledException",
                            "Message": "injected conflict",
                        },
                        "CancellationReasons": [{"Code": "TransactionConflict"}],
                    },
                    name,
                )
            if mode in (TXN_THROTTLE, TXN_THROTTLE_PROVISIONED):
                raise self._throttled(name, kwargs, mode)
            result = target(**kwargs)
            if mode == AFTER:
                raise ReadTimeoutError(endpoint_url="injected://after")
            return result

        return call

    def _throttled(self, name: str, kwargs: dict[str, Any], mode: str) -> ClientError:
        provisioned = mode == TXN_THROTTLE_PROVISIONED
        exceptions = getattr(self._client, "exceptions", None)
        if name in _TXN_METHODS:
            actions = len(kwargs.get("TransactItems") or [])
            with self._lock:
                throttled = pick_throttled(actions, self._rng)
            return throttled_transaction_error(
                actions,
                throttled,
                "ProvisionedThroughputExceeded" if provisioned else "ThrottlingError",
                _TXN_METHODS[name],
                getattr(exceptions, "TransactionCanceledException", ClientError),
            )
        # A single-item operation is throttled with its own error code (botocore would retry it).
        code = "ProvisionedThroughputExceededException" if provisioned else "ThrottlingException"
        return ClientError({"Error": {"Code": code, "Message": "injected throttle"}}, name)


class ItemlessRefusals:
    """A boto3 client proxy for a store without ``ReturnValuesOnConditionCheckFailure`` (as
    dynalite, or a proxy that drops it): a refused conditional write, or a cancelled transaction's
    refused action, comes back without the item. ``refusals`` counts the refusals it passed on."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refusals = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if not callable(target) or name.startswith("_") or name in ("exceptions", "meta"):
            return target

        def call(**kwargs: Any) -> Any:
            try:
                return target(**kwargs)
            except ClientError as error:
                error.response.pop("Item", None)
                for reason in error.response.get("CancellationReasons") or []:
                    reason.pop("Item", None)
                code = error.response.get("Error", {}).get("Code")
                self.refusals += code in _REFUSALS
                raise

        return call


_REFUSALS = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})
