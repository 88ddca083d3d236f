"""Shadow mode: run leasefence beside an existing at-least-once consumer without changing it.

::

    from leasefence.shadow import Shadow, api_store

    shadow = Shadow(api_store(api_url, shadow_token), job_type="refund",
                    operation_id=lambda message: message["refund_id"],
                    payload=lambda message: message)
    handle = shadow.wrap(handle)      # the SQS consumer's own function, unchanged otherwise

Each execution of the wrapped function also does, in leasefence, what a leasefence worker would
have done for it: enqueue the operation (a replay after the first delivery), claim it by id,
heartbeat while the function runs, complete it (or fail it, retryable, when the function raised).
Whatever the existing path does, it still does: the function runs exactly as before, its result
and its exceptions pass through untouched. Executions that leasefence would have refused leave a
small record (a *run record*) that ``leasefence shadow report`` lists:

- ``duplicate``: the claim was refused because another execution held the operation (a live
  lease) or had already finished it: leasefence would not have started this execution at all.
- ``overtaken``: this execution held a claim, but another one took the operation over after its
  lease lapsed (its heartbeat or its completion was refused as a stale fence): leasefence would
  have refused its writes.
- ``conflict``: the same operation id arrived with a different payload: refused at enqueue.

Never blocks, delays or fails the wrapped call. Every leasefence request has a short timeout
(:func:`api_store`: 0.5 s, no retries); any failure (unreachable, throttled, a bug here) is
swallowed and counted as a *gap* (``stats["gaps"]``, event ``ShadowGaps``), and the breaker then
skips leasefence for ``cooldown_s`` so an endpoint that is down costs at most one timeout per
cooldown, not one per call. A refusal of what shadow mode sends, by the shadow tenant's catalogue
above all (a strict tenant without the job type: ``unknown_job_type``; a job type that requires
approval: ``inline_payload_required``; an entry whose attempts contradict the shadow's:
``invalid_request``; a full job-type directory: ``too_many_job_types``), is no outage: it is a
misconfiguration, counted as ``stats["misconfigured"]`` (event ``ShadowMisconfigured``) and named
in :attr:`Shadow.misconfigurations` (error code -> the refusal's message), logged once per code;
it does not open the breaker. Heartbeats run on a background thread.

Own identity space. Shadow operations live in their own tenant, ``shadow:<tenant>``
(:func:`shadow_tenant`): never mixed with real operations, and never dispatched to workers (a
worker serves the tenants it is given, and :class:`~leasefence.worker.EngineBackend` refuses a
shadow tenant). The ``shadow:`` namespace is reserved: over the HTTP API the tenant is the
token's, and a token for ``shadow:<tenant>`` is refused (403) unless it carries the scope
``leasefence/shadow`` as well (a *shadow token*: :data:`SHADOW_TOKEN_SCOPES`, which
:func:`api_store` checks); even a shadow token only claims the operation it names, never "the
next due one". Shadow tenants stay out of the fleet's signals: the API's engine for them counts
no metrics, and the sweeper's ``OldestDueAgeSeconds``, ``SweptToUnknown`` and
``OldestUnknownAgeSeconds`` skip them. (In-process, :class:`EngineShadowStore` counts through the
engine it is given: give it one whose ``events`` are not the fleet's.) Payloads are never sent:
only their hash (``payload_ref`` is the placeholder :data:`NOT_STORED`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from leasefence.api.security import SHADOW_MODE_SCOPES
from leasefence.errors import (
    InvalidInput,
    InvalidTransition,
    LeaseFenceError,
    NotFound,
    PayloadConflict,
    StaleFence,
)
from leasefence.keys import SHADOW_PREFIX, is_shadow_tenant
from leasefence.metrics import Metric
from leasefence.payloads import canonicalize
from leasefence.shadow_api import api_store

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("leasefence.shadow")

#: Refusals of what shadow mode sends, by the shadow tenant's catalogue above all (its
#: ``UnknownJobType``, ``InlinePayloadRequired``, ``TooManyJobTypes`` and contradictions are all
#: :class:`InvalidInput`): a misconfiguration to fix, not an outage (they do not open the
#: breaker, and are counted as ``misconfigured``, not as gaps).
Refusal = InvalidInput

#: Run records' operation ids start with this (then a digest of operation and execution ids).
RUN_PREFIX = "run~"
#: ``payload_ref`` of a shadow operation: the payload is never sent, only its hash.
NOT_STORED = "shadow:not-stored"
#: Attempts of a shadow operation: the existing path may run a job many times.
SHADOW_MAX_ATTEMPTS = 100
#: The kinds of run record, i.e. why leasefence would have refused an execution.
DUPLICATE, OVERTAKEN, CONFLICT = "duplicate", "overtaken", "conflict"
#: The scopes of a shadow token (tenant ``shadow:<tenant>``): enqueue and read, claim by id,
#: heartbeat and finish, list (the report), and ``leasefence/shadow``, without which the API
#: refuses any token for a shadow tenant.
SHADOW_TOKEN_SCOPES = SHADOW_MODE_SCOPES


def shadow_tenant(tenant_id: str) -> str:
    """The shadow namespace of a tenant (idempotent: a shadow tenant maps to itself)."""
    return tenant_id if is_shadow_tenant(tenant_id) else SHADOW_PREFIX + tenant_id


def run_record_id(operation_id: str, execution_id: str) -> str:
    """The run record of one execution: stable, so recording it twice is a replay."""
    digest = hashlib.sha256(f"{operation_id}\0{execution_id}".encode()).hexdigest()
    return RUN_PREFIX + digest[:40]


@dataclass(frozen=True)
class RunRecord:
    """What a run record says (it travels in the record's ``payload_ref``, as JSON)."""

    kind: str
    operation_id: str
    execution_id: str
    fence: int | None
    seen_state: str | None
    at_ms: int

    def to_ref(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "kind": self.kind,
                "operation_id": self.operation_id,
                "execution_id": self.execution_id,
                "fence": self.fence,
                "seen_state": self.seen_state,
                "at_ms": self.at_ms,
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_ref(cls, ref: str | None) -> RunRecord | None:
        """The record in a ``payload_ref``; None when it is not one."""
        if not ref or not ref.startswith("{"):
            return None
        try:
            data = json.loads(ref)
            return cls(
                kind=str(data["kind"]),
                operation_id=str(data["operation_id"]),
                execution_id=str(data["execution_id"]),
                fence=None if data.get("fence") is None else int(data["fence"]),
                seen_state=data.get("seen_state"),
                at_ms=int(data.get("at_ms", 0)),
            )
        except (ValueError, KeyError, TypeError):
            return None


# ---------------------------------------------------------------------------------- stores


class ShadowStore(Protocol):
    """What shadow mode needs: :class:`~leasefence.client.LeaseFenceClient` has it (over HTTP),
    :class:`EngineShadowStore` too (in-process, with IAM access to the table)."""

    def enqueue(
        self,
        operation_id: str,
        job_type: str,
        *,
        payload_ref: str | None = None,
        payload_hash: str | None = None,
        max_attempts: int | None = None,
    ) -> Any: ...

    def claim(
        self,
        worker_id: str,
        lease_seconds: int | None = None,
        job_types: list[str] | None = None,
        operation_id: str | None = None,
    ) -> Any: ...

    def heartbeat(self, operation_id: str, fence: int, worker_id: str) -> Any: ...

    def complete(self, operation_id: str, fence: int, outcome_code: str) -> Any: ...

    def fail(
        self,
        operation_id: str,
        fence: int,
        retryable: bool,
        reason: str,
        retry_after_seconds: int | None = None,
    ) -> Any: ...

    def get(self, operation_id: str) -> Any: ...

    def iter_operations(self) -> Iterator[Any]: ...


class EngineShadowStore:
    """Shadow operations through the engine, in the tenant's shadow namespace."""

    def __init__(self, engine: Any, tenant_id: str) -> None:
        self.engine = engine
        self.tenant_id = shadow_tenant(tenant_id)

    def enqueue(
        self,
        operation_id: str,
        job_type: str,
        *,
        payload_ref: str | None = None,
        payload_hash: str | None = None,
        max_attempts: int | None = None,
    ) -> Any:
        if payload_hash is None:
            raise ValueError("a shadow enqueue sends the payload's hash")
        return self.engine.enqueue(
            self.tenant_id,
            operation_id,
            job_type,
            payload_hash,
            payload_ref=payload_ref,
            max_attempts=max_attempts,
        )

    def claim(
        self,
        worker_id: str,
        lease_seconds: int | None = None,
        job_types: list[str] | None = None,
        operation_id: str | None = None,
    ) -> Any:
        lease_ms = (lease_seconds or 60) * 1000
        if operation_id is None:
            return self.engine.claim_next(self.tenant_id, worker_id, lease_ms, job_types)
        return self.engine.claim(self.tenant_id, operation_id, worker_id, lease_ms, job_types)

    def heartbeat(self, operation_id: str, fence: int, worker_id: str) -> Any:
        return self.engine.heartbeat(self.tenant_id, operation_id, fence, worker_id)

    def complete(self, operation_id: str, fence: int, outcome_code: str) -> Any:
        return self.engine.complete(self.tenant_id, operation_id, fence, outcome_code)

    def fail(
        self,
        operation_id: str,
        fence: int,
        retryable: bool,
        reason: str,
        retry_after_seconds: int | None = None,
    ) -> Any:
        after = None if retry_after_seconds is None else retry_after_seconds * 1000
        return self.engine.fail(self.tenant_id, operation_id, fence, retryable, reason, after)

    def get(self, operation_id: str) -> Any:
        return self.engine.get(self.tenant_id, operation_id)

    def iter_operations(self) -> Iterator[Any]:
        cursor = None
        while True:
            page = self.engine.list(self.tenant_id, limit=500, cursor=cursor)
            yield from page.operations
            if not page.next_cursor:
                return
            cursor = page.next_cursor


# ---------------------------------------------------------------------------------- the wrapper


@dataclass
class _Run:
    """One execution of the wrapped function, as leasefence saw it."""

    operation_id: str
    execution_id: str
    fence: int | None = None  # set when this execution held a claim
    overtaken: bool = False
    finished: bool = False


class _Skipped(Exception):
    """The breaker is open: leasefence is not asked (the execution is a gap)."""


class Shadow:
    """Wraps an existing handler so that each execution also claims, heartbeats and completes in
    leasefence, in a shadow namespace, without ever changing what the handler does.

    ``operation_id``, ``payload`` and ``execution_id`` receive the wrapped function's own
    arguments: the business identity of the job (the same one a leasefence enqueue would use),
    the payload whose hash binds it (default: the operation id alone, so no conflict is
    detected), and a name for this execution in the report (default: a random id; an SQS
    message id plus its receive count reads better). ``heartbeat_thread=False`` leaves the
    heartbeats to :meth:`heartbeat_now` (simulations with a manual clock).
    """

    def __init__(
        self,
        store: ShadowStore,
        job_type: str,
        operation_id: Callable[..., str],
        *,
        payload: Callable[..., Any] | None = None,
        execution_id: Callable[..., str] | None = None,
        lease_seconds: int = 60,
        heartbeat_thread: bool = True,
        cooldown_s: float = 30.0,
        worker_id: str | None = None,
        events: Callable[[str, float], None] | None = None,
    ) -> None:
        self.store = store
        self.job_type = job_type
        self.operation_id = operation_id
        self.payload = payload
        self.execution_id = execution_id
        self.lease_seconds = lease_seconds
        self.heartbeat_thread = heartbeat_thread
        self.cooldown_s = cooldown_s
        self.worker_id = worker_id or f"shadow-{uuid.uuid4().hex[:12]}"
        self.events = events if events is not None else (lambda _name, _value: None)
        self.stats: Counter[str] = Counter()
        #: The catalogue's refusals seen (:data:`Refusal`), by error code: the latest
        #: message of each (what to fix: the shadow tenant's catalogue, or the job type).
        self.misconfigurations: dict[str, str] = {}
        self._lock = threading.Lock()
        self._running: dict[int, _Run] = {}
        self._open_until = 0.0
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None

    # ------------------------------------------------------------ wrapping

    def wrap(self, handler: F) -> F:
        """The same function, with leasefence beside it."""

        @functools.wraps(handler)
        def shadowed(*args: Any, **kwargs: Any) -> Any:
            run = self._begin(args, kwargs)
            try:
                result = handler(*args, **kwargs)
            except BaseException:
                self._end(run, succeeded=False)
                raise
            self._end(run, succeeded=True)
            return result

        return shadowed  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the heartbeat thread."""
        self._stop.set()

    # ------------------------------------------------------------ one execution

    def _count(self, name: str) -> None:
        with self._lock:
            self.stats[name] += 1
        self.events(Metric("Shadow" + name.title().replace("_", "")), 1)

    def _gap(self) -> None:
        self._count("gaps")

    def _misconfigured(self, refused: LeaseFenceError) -> None:
        """leasefence refused what this execution sent (the shadow tenant's catalogue, above all):
        a misconfiguration, named by its error code (logged the first time each is seen), not a
        gap; the breaker stays closed."""
        with self._lock:
            first = refused.code not in self.misconfigurations
            self.misconfigurations[refused.code] = refused.message
        self._count("misconfigured")
        if first:
            log.warning(
                "shadow mode misconfigured: leasefence refuses what it sends (see the code)",
                extra={"code": refused.code},
            )

    def _call(self, request: Callable[[], Any]) -> Any:
        """One leasefence request, unless the breaker is open. A domain answer (stale fence,
        conflict, not found) is returned to the caller as the exception it is; anything else
        (unreachable, throttled, unexpected) opens the breaker."""
        if time.monotonic() < self._open_until:
            raise _Skipped()
        try:
            return request()
        except (StaleFence, PayloadConflict, NotFound, InvalidTransition, Refusal):
            raise
        except Exception:
            self._open_until = time.monotonic() + self.cooldown_s
            raise

    def _begin(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Run | None:
        self._count("executions")
        try:
            operation_id = str(self.operation_id(*args, **kwargs))
            execution_id = (
                str(self.execution_id(*args, **kwargs))
                if self.execution_id is not None
                else uuid.uuid4().hex
            )
            value = self.payload(*args, **kwargs) if self.payload is not None else operation_id
            payload_hash = canonicalize(value).hash
            run = _Run(operation_id, execution_id)
            try:
                self._call(
                    lambda: self.store.enqueue(
                        operation_id,
                        self.job_type,
                        payload_ref=NOT_STORED,
                        payload_hash=payload_hash,
                        max_attempts=SHADOW_MAX_ATTEMPTS,
                    )
                )
            except PayloadConflict:
                self._count("conflicts")
                self._record(CONFLICT, run, None)
                return None
            claim = self._call(
                lambda: self.store.claim(
                    self.worker_id, self.lease_seconds, [self.job_type], operation_id
                )
            )
            if claim is None:
                seen = self._call(lambda: self.store.get(operation_id))
                self._count("duplicates")
                self._record(DUPLICATE, run, seen)
                return None
            run.fence = int(claim.fence)
            self._count("claims")
            with self._lock:
                self._running[id(run)] = run
            self._start_heartbeats()
            return run
        except Refusal as refused:
            self._misconfigured(refused)
            return None
        except Exception:  # noqa: BLE001 - shadow mode must never fail the wrapped call
            self._gap()
            return None

    def _end(self, run: _Run | None, succeeded: bool) -> None:
        if run is None or run.fence is None:
            return
        fence = run.fence
        try:
            with self._lock:
                self._running.pop(id(run), None)
                run.finished = True
            if run.overtaken:
                return  # already recorded by the heartbeat that was refused
            if succeeded:
                self._call(lambda: self.store.complete(run.operation_id, fence, "ran"))
            else:
                self._call(
                    lambda: self.store.fail(
                        run.operation_id, fence, True, "the wrapped call raised", 0
                    )
                )
        except (StaleFence, NotFound):
            self._overtaken(run)
        except Exception:  # noqa: BLE001 - shadow mode must never fail the wrapped call
            self._gap()

    def _overtaken(self, run: _Run) -> None:
        with self._lock:
            if run.overtaken:
                return
            run.overtaken = True
        self._count("overtaken")
        try:
            seen = self._call(lambda: self.store.get(run.operation_id))
        except Exception:  # noqa: BLE001 - the record says less, the wrapped call is unaffected
            seen = None
        self._record(OVERTAKEN, run, seen)

    def _record(self, kind: str, run: _Run, seen: Any) -> None:
        """Leave the run record of an execution leasefence would have refused: one operation,
        enqueued, claimed and completed at once (so it never waits in any queue)."""
        record = RunRecord(
            kind=kind,
            operation_id=run.operation_id,
            execution_id=run.execution_id,
            fence=run.fence,
            seen_state=None if seen is None else str(seen.state),
            at_ms=time.time_ns() // 1_000_000,
        )
        record_id = run_record_id(run.operation_id, run.execution_id)
        ref = record.to_ref()
        try:
            self._call(
                lambda: self.store.enqueue(
                    record_id,
                    self.job_type,
                    payload_ref=ref,
                    payload_hash="sha256:" + hashlib.sha256(ref.encode()).hexdigest(),
                    max_attempts=1,
                )
            )
            claim = self._call(
                lambda: self.store.claim(self.worker_id, self.lease_seconds, None, record_id)
            )
            if claim is not None:
                self._call(lambda: self.store.complete(record_id, int(claim.fence), kind))
            self._count("recorded")
        except Exception:  # noqa: BLE001 - shadow mode must never fail the wrapped call
            self._gap()

    # ------------------------------------------------------------ heartbeats

    def heartbeat_now(self) -> None:
        """Renew the lease of every execution in flight once (the background thread calls this
        every third of a lease). A refusal means another execution took over: overtaken."""
        with self._lock:
            running = [run for run in self._running.values() if not run.finished]
        for run in running:
            fence = run.fence
            if fence is None:
                continue
            try:
                self._call(
                    functools.partial(self.store.heartbeat, run.operation_id, fence, self.worker_id)
                )
            except (StaleFence, NotFound):
                self._overtaken(run)
            except Exception:  # noqa: BLE001 - a missed heartbeat is a gap, never an error
                self._gap()

    def _start_heartbeats(self) -> None:
        if not self.heartbeat_thread or self._beater is not None:
            return
        with self._lock:
            if self._beater is not None:
                return
            self._beater = threading.Thread(
                target=self._beat_forever, name="leasefence-shadow-heartbeat", daemon=True
            )
        self._beater.start()

    def _beat_forever(self) -> None:
        while not self._stop.wait(max(self.lease_seconds / 3, 0.05)):
            self.heartbeat_now()


__all__ = [
    "CONFLICT",
    "DUPLICATE",
    "OVERTAKEN",
    "SHADOW_TOKEN_SCOPES",
    "EngineShadowStore",
    "RunRecord",
    "Shadow",
    "ShadowStore",
    "api_store",
    "is_shadow_tenant",
    "run_record_id",
    "shadow_tenant",
]
