"""Fault injection for tests, demos and the torture harness.

:class:`FaultyClient` wraps a boto3 client and, on request, makes a call fail the way networks
and DynamoDB fail: before the request reaches the store (nothing written), after it committed
(the response is lost), or with throttling.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Callable

from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

BEFORE = "before"  # the request never reached the store
AFTER = "after"  # the store committed; the answer was lost
THROTTLE = "throttle"  # the store refused with a throttling error
CONFLICT = "conflict"  # a transaction was cancelled by a conflicting transaction

Predicate = Callable[[dict[str, Any]], bool]
#: Decides, per call, whether to inject a fault: (method, request) -> mode or None.
Chaos = Callable[[str, dict[str, Any]], str | None]


class FaultyClient:
    """A boto3 client proxy that injects planned faults into named operations."""

    def __init__(self, client: Any, chaos: Chaos | None = None) -> None:
        self._client = client
        self._chaos = chaos
        self._lock = threading.Lock()
        self._plan: dict[str, list[tuple[str, Predicate | None]]] = defaultdict(list)
        self.injected: dict[str, int] = defaultdict(int)

    def fail_next(self, method: str, mode: str, when: Predicate | None = None, times: int = 1) -> None:
        with self._lock:
            self._plan[method].extend([(mode, when)] * times)

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
                        "Error": {"Code": "TransactionCanceledException", "Message": "injected conflict"},
                        "CancellationReasons": [{"Code": "TransactionConflict"}],
                    },
                    name,
                )
            result = target(**kwargs)
            if mode == AFTER:
                raise ReadTimeoutError(endpoint_url="injected://after")
            return result

        return call
