"""Recording stand-ins for the targets: a DynamoDB client, the class C provider, the class D
gateway. Each records every request as an :class:`~leasefence_tools.kit.evidence.Action` (what the
target saw, and whose handler sent it) and lets the checks pause, crash or lose answers there.

- :class:`RecordingDynamoDB` wraps a boto3 DynamoDB client. Writes to any table other than the
  operations table are target writes (classes A and B; a class-A ``TransactWriteItems`` is one
  write, fenced by the completion inside it); a class-D intent record is an update of the
  operations table carrying an intent. Everything else passes through unrecorded.
- :class:`RecordingIdempotentApi` (class C): executes each idempotency key once, remembers the
  result, answers lookups by key. The same protocol as
  :class:`~leasefence.targets.idempotent_api.IdempotentApi`.
- :class:`SingleCallGateway` (class D): no idempotency, no lookup; every ``send`` is a call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError, ReadTimeoutError

from leasefence.targets.fenced_table import ENTRY_PREFIX
from leasefence_tools.kit.evidence import (
    BOOKKEEPING,
    CALL,
    DEDUPLICATED,
    INTENT,
    LANDED,
    LOOKUP,
    REFUSED,
    WRITE,
    Execution,
    TargetLog,
)

Holds = Callable[[Execution], bool]

_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items", "batch_write_item")
_REFUSALS = ("ConditionalCheckFailedException", "TransactionCanceledException")


def _classify_dynamodb(_result: Any, error: BaseException | None) -> str:
    if error is None:
        return LANDED
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        return REFUSED if code in _REFUSALS else f"error:{code}"
    return f"error:{type(error).__name__}"


def _lost_dynamodb() -> BaseException:
    return ReadTimeoutError(endpoint_url="leasefence-verify://answer-lost")


def _bookkeeping_only(request: dict[str, Any]) -> bool:
    """An update that touches only the fence bookkeeping (``lf_`` attributes, always named
    through placeholders by :class:`~leasefence.targets.fenced_table.FencedTable`)."""
    names = request.get("ExpressionAttributeNames") or {}
    update = request.get("UpdateExpression", "")
    used = [alias for alias in names if alias in update]
    return bool(used) and all(names[alias].startswith("lf_") for alias in used)


def _fence_condition(request: dict[str, Any]) -> bool:
    names = request.get("ExpressionAttributeNames") or {}
    condition = request.get("ConditionExpression", "")
    return any(
        alias in condition and name.startswith(ENTRY_PREFIX) for alias, name in names.items()
    )


class RecordingDynamoDB:
    """A boto3 DynamoDB client whose target writes are recorded (see the module docstring)."""

    def __init__(
        self, client: Any, log: TargetLog, operations_table: str, holds: Holds | None = None
    ) -> None:
        self._client = client
        self._log = log
        self._operations_table = operations_table
        self._holds = holds
        self._key_names: dict[str, tuple[str, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if name not in _WRITES:
            return target

        def call(**request: Any) -> Any:
            recorded = self._describe(name, request)
            if recorded is None:
                return target(**request)
            where, kind, items, fenced = recorded
            return self._log.act(
                where,
                kind,
                items,
                fenced,
                lambda: target(**request),
                _classify_dynamodb,
                _lost_dynamodb,
                self._holds,
            )

        return call

    # ------------------------------------------------------------ what a request is

    def _describe(
        self, method: str, request: dict[str, Any]
    ) -> tuple[str, str, tuple[str, ...], bool | None] | None:
        if method == "transact_write_items":
            return self._describe_transaction(request.get("TransactItems") or [])
        if method == "batch_write_item":
            items, tables = [], []
            for table, writes in (request.get("RequestItems") or {}).items():
                if table == self._operations_table:
                    continue
                tables.append(table)
                for write in writes:
                    body = write.get("PutRequest", {}).get("Item") or write.get(
                        "DeleteRequest", {}
                    ).get("Key", {})
                    items.append(self._item(table, body))
            if not items:
                return None
            return f"table {','.join(sorted(set(tables)))}", WRITE, tuple(items), False
        table = request.get("TableName", "")
        if table == self._operations_table:
            values = request.get("ExpressionAttributeValues") or {}
            if method == "update_item" and ":intent" in values:
                return "intent", INTENT, (), True
            return None
        body = request.get("Key") or request.get("Item") or {}
        kind = BOOKKEEPING if method == "update_item" and _bookkeeping_only(request) else WRITE
        return f"table {table}", kind, (self._item(table, body),), _fence_condition(request)

    def _describe_transaction(
        self, actions: list[dict[str, Any]]
    ) -> tuple[str, str, tuple[str, ...], bool | None] | None:
        items, tables, completes = [], [], False
        for action in actions:
            (verb, body), *_ = action.items()
            table = body.get("TableName", "")
            if table == self._operations_table:
                completes = completes or verb == "Update"
                continue
            if verb == "ConditionCheck":
                continue
            tables.append(table)
            items.append(self._item(table, body.get("Key") or body.get("Item") or {}))
        if not items:
            return None
        # Class A: the completion (conditional on the fence) commits with the business writes.
        fenced = completes or any(_fence_condition(a[next(iter(a))]) for a in actions)
        return f"table {','.join(sorted(set(tables)))}", WRITE, tuple(items), fenced

    def _item(self, table: str, body: dict[str, Any]) -> str:
        """``table:{key attributes}`` in wire format: one name per item, whatever the request."""
        names = self._key_names.get(table)
        if names is None:
            schema = self._client.describe_table(TableName=table)["Table"]["KeySchema"]
            names = self._key_names[table] = tuple(k["AttributeName"] for k in schema)
        key = {name: body.get(name) for name in names}
        return f"{table}:{json.dumps(key, sort_keys=True, separators=(',', ':'))}"


class RecordingIdempotentApi:
    """Class C fake: a provider with an idempotency key and a lookup by key.

    ``execute(key, request)`` performs the effect the first time a key is seen and returns the
    remembered result for every repeat (a different request under a used key is refused, as
    providers do); ``lookup(key)`` returns the result or None. Every call is recorded.
    """

    def __init__(self, log: TargetLog | None = None, holds: Holds | None = None) -> None:
        self.log = log if log is not None else TargetLog()
        self._holds = holds
        self._lock = threading.Lock()
        self.results: dict[str, Any] = {}
        self.requests: dict[str, Any] = {}

    def execute(self, key: str, request: Any) -> Any:
        def perform() -> tuple[str, Any]:
            with self._lock:
                if key in self.results:
                    if self.requests[key] != request:
                        raise ValueError("idempotency key reused with a different request")
                    return DEDUPLICATED, self.results[key]
                self.requests[key] = request
                self.results[key] = {"id": f"effect-{len(self.results) + 1}", "key": key}
                return LANDED, self.results[key]

        outcome = self.log.act(
            "provider",
            CALL,
            (key,),
            None,
            perform,
            lambda result, error: result[0] if error is None else f"error:{type(error).__name__}",
            lambda: TimeoutError("the provider's answer was lost"),
            self._holds,
        )
        return outcome[1]

    def lookup(self, key: str) -> Any | None:
        return self.log.act(
            "provider",
            LOOKUP,
            (key,),
            None,
            lambda: self.results.get(key),
            lambda _result, error: LANDED if error is None else f"error:{type(error).__name__}",
            lambda: TimeoutError("the provider's answer was lost"),
            self._holds,
        )

    @property
    def executed(self) -> list[str]:
        """Keys in the order the provider first executed them."""
        return list(self.results)


class SingleCallGateway:
    """Class D fake: no idempotency and no lookup. Every :meth:`send` reaches the gateway."""

    def __init__(self, log: TargetLog | None = None, holds: Holds | None = None) -> None:
        self.log = log if log is not None else TargetLog()
        self._holds = holds
        self._lock = threading.Lock()
        self.calls: list[Any] = []

    def send(self, request: Any) -> Any:
        def perform() -> Any:
            with self._lock:
                self.calls.append(request)
                return {"id": f"call-{len(self.calls)}"}

        return self.log.act(
            "gateway",
            CALL,
            (),
            None,
            perform,
            lambda _result, error: LANDED if error is None else f"error:{type(error).__name__}",
            lambda: TimeoutError("the gateway's answer was lost"),
            self._holds,
        )
