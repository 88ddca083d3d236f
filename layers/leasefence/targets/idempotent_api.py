"""Class C: an external API with a documented idempotency key and a lookup by key.

The key is derived from ``(tenant_id, operation_id)``: tenant-scoped, and stable across attempts
and fences, so every retry of one operation presents the same key and the provider deduplicates
it. After an ambiguous attempt, look the key up before any retry. This is dedupe as the provider
defines it (its retention window, its payload-mismatch rule), not fencing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from leasefence.targets.identity import identity_digest
from leasefence.worker.handler import Ambiguous, Job, Reconciled


def idempotency_key(tenant_id: str, operation_id: str) -> str:
    return "lf-" + identity_digest(tenant_id, operation_id)[:48]


class IdempotentApi(Protocol):
    def execute(self, key: str, request: Any) -> Any: ...

    def lookup(self, key: str) -> Any | None: ...


def call(job: Job, api: IdempotentApi, request: Any) -> Any:
    """Send ``request`` under the operation's key; a timeout or lost answer is ambiguous."""
    job.guard()
    try:
        return api.execute(idempotency_key(job.tenant_id, job.operation_id), request)
    except TimeoutError as error:
        raise Ambiguous("the provider did not answer; look the key up before any retry") from error


def reconcile(
    job: Job, api: IdempotentApi, outcome: Callable[[Any], str] = lambda _result: "reconciled"
) -> Reconciled:
    """Look the key up: found -> done; not found -> not done (safe to send under the key)."""
    result = api.lookup(idempotency_key(job.tenant_id, job.operation_id))
    return Reconciled.done(outcome(result)) if result is not None else Reconciled.not_done()


class InMemoryIdempotentApi:
    """A provider for tests and demos: executes each key once and remembers the result.

    ``lose_answer_next`` makes the next call execute and then time out (the answer is lost).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.results: dict[str, Any] = {}
        self.requests: dict[str, Any] = {}
        self.executions: list[str] = []
        self.calls = 0
        self.lose_answer_next = False

    def execute(self, key: str, request: Any) -> Any:
        with self._lock:
            self.calls += 1
            if key in self.results:
                if self.requests[key] != request:
                    raise ValueError("idempotency key reused with a different request")
                return self.results[key]
            self.executions.append(key)
            self.requests[key] = request
            self.results[key] = {"id": f"effect-{len(self.executions)}"}
            if self.lose_answer_next:
                self.lose_answer_next = False
                raise TimeoutError("answer lost")
            return self.results[key]

    def lookup(self, key: str) -> Any | None:
        with self._lock:
            return self.results.get(key)
