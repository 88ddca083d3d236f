"""One decorator that fences an existing record handler (an SQS consumer under Powertools'
``BatchProcessor``, or any event whose records carry an identity).

::

    config = FenceConfig(job_type="refund", operation_id="powertools_json(body).refund_id")

    @fenced(leasefence, config)               # leasefence: an EngineBackend or an HttpBackend
    def record_handler(record: SQSRecord, job: Job) -> None:
        ...                                   # the target helpers of classes A to D take ``job``

Each call of the decorated handler, for one record:

1. derives the operation id from the record (:attr:`FenceConfig.operation_id`: a JMESPath
   expression over the record, Powertools' ``powertools_json`` and friends included, or a
   function; default ``messageId``) and its payload (:attr:`FenceConfig.payload`; default the
   record's body, parsed when it is JSON);
2. enqueues it (a redelivery is a replay: same id, same payload hash);
3. claims it by id, and runs the handler under that claim through the worker runtime (the
   ``on_claim`` and ``reconcile`` hooks, progress-tied heartbeats, lost-ownership mode, the
   closing write), the handler receiving the claimed :class:`~leasefence.worker.Job` as ``job``
   when it declares that parameter;
4. answers: it returns (the record is a success in the partial batch response, its message is
   deleted) once the operation has ENDED (``succeeded``, ``failed_terminal``, ``cancelled``),
   and raises a :class:`MessageKept` otherwise, which ``BatchProcessor`` reports as a batch item
   failure: the message stays in the queue, comes back after its visibility timeout, and goes to
   the queue's dead-letter queue after ``maxReceiveCount`` receives.

The rule is one sentence: **SQS keeps a message exactly while its operation may still have to
run.** So:

- a redelivery while another delivery holds the lease (or while the operation waits for a retry's
  backoff or an approval): :class:`TryLater`; the handler does not run a second time, and a
  later delivery takes the operation over once the lease lapsed (reconciling first);
- a ``payload_conflict`` (the id is bound to another payload: a poison message, which no retry
  will ever change): :class:`PoisonMessage`; the handler never runs for it, and the queue's
  redrive policy moves it to the dead-letter queue (a queue without one keeps it until its
  retention period ends: give it one);
- an operation parked ``unknown`` or ``quarantined`` (by this delivery or an earlier one):
  :class:`Parked`; it waits for an operator (``leasefence ops resolve``), in the dead-letter queue
  after ``maxReceiveCount``. A redrive after the operator's decision acknowledges it (resolved
  done or failed) or runs it (requeued: reconciled first);
- a delivery that ran the handler without ending the operation (a retryable failure, lost
  ownership: a stale fence refused by the target or the store, a store that stayed
  unavailable): :class:`NotFinished`; the next delivery claims when the retry is due or the
  lease has lapsed.

``BatchProcessor`` calls the record handler by keyword (``handler(record=...)``, plus
``lambda_context=`` when the handler declares it); the decorated function keeps the handler's
name and signature (:func:`functools.wraps`), less the ``job`` parameter it fills in.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from leasefence.errors import InvalidInput, PayloadConflict
from leasefence.metrics import MetricSink
from leasefence.model import PARKED_STATES, TERMINAL_STATES, Claim, EnqueueResult, State
from leasefence.payloads import canonicalize
from leasefence.privacy import keyed_hash
from leasefence.validation import validate_id
from leasefence.worker._runtime import Worker
from leasefence.worker.backend import Backend, EngineBackend
from leasefence.worker.handler import FunctionHandler, Job, Reconciled
from leasefence.worker.http_backend import HttpBackend

log = logging.getLogger("leasefence.fenced")

F = TypeVar("F", bound=Callable[..., Any])

#: The parameter through which a decorated handler receives its claimed job.
JOB_PARAMETER = "job"
#: The keyword ``BatchProcessor`` passes the record by.
RECORD_PARAMETER = "record"


# ---------------------------------------------------------------- what a kept message says


class MessageKept(Exception):
    """The record's message stays in the queue (a batch item failure): its operation may still
    have to run. ``op`` names the operation by its keyed hash, never by its id."""

    def __init__(self, reason: str, op: str) -> None:
        super().__init__(f"operation {op}: {reason}")
        self.reason = reason
        self.op = op


class TryLater(MessageKept):
    """Not claimable now: another delivery holds the lease, or the next attempt is not due (a
    retry's backoff, an approval awaited). The handler did not run."""


class PoisonMessage(MessageKept):
    """``payload_conflict``: the operation id is bound to another payload. No retry will change
    that; the handler never runs for it: the dead-letter queue is where it belongs."""


class Parked(MessageKept):
    """The operation is parked ``unknown`` or ``quarantined``: an operator decides."""


class NotFinished(MessageKept):
    """This delivery ran the handler but did not end the operation (a retryable failure, lost
    ownership, a store that stayed unavailable): a later delivery tries again."""


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True)
class FenceConfig:
    """How records become operations.

    ``operation_id``: a JMESPath expression over the record (as a dict: an ``SQSRecord``'s
    ``raw_event``, a pydantic model's JSON dump) with Powertools' functions
    (``powertools_json(body).refund_id``), or a function of the record. The default,
    ``messageId``, makes SQS *redeliveries* one operation; a message the producer sends again
    gets a new message id and so is another operation. Name the business key when sends repeat.

    ``payload``: the same kinds; the default is the record's ``body``, parsed when it is JSON (a
    producer that re-serializes with other key order or spacing sends the same payload).

    ``target_class``, ``max_attempts``: sent with the enqueue (a catalogue entry for the job
    type decides both when the tenant has one). ``lease_seconds``: the lease each claim asks for;
    a handler that runs longer calls ``job.progress()`` (progress-tied heartbeats)."""

    job_type: str
    operation_id: str | Callable[[Any], str] = "messageId"
    payload: str | Callable[[Any], Any] | None = None
    target_class: str | None = None
    max_attempts: int | None = None
    lease_seconds: int = 60
    worker_id: str | None = None


def record_data(record: Any) -> Any:
    """The record as plain data: a Powertools data class's ``raw_event``, a pydantic model's
    JSON dump, a mapping as it is."""
    raw = getattr(record, "raw_event", None)
    if raw is not None:
        return raw
    dump = getattr(record, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True)
    return record


def _body(data: Any) -> Any:
    body = data.get("body") if isinstance(data, Mapping) else None
    if not isinstance(body, str):
        return body
    try:
        return json.loads(body)
    except ValueError:
        return body


def _pick(spec: str | Callable[[Any], Any], record: Any) -> Any:
    if callable(spec):
        return spec(record)
    from aws_lambda_powertools.utilities.jmespath_utils import query

    return query(data=record_data(record), envelope=spec)


def _outcome_code(result: Any) -> str | None:
    """The handler's result as the operation's outcome code: a string that is one (1-256
    characters, no control characters); anything else completes as ``ok``."""
    if not isinstance(result, str):
        return None
    try:
        return validate_id("outcome_code", result)
    except InvalidInput:
        return None


# ---------------------------------------------------------------- enqueue and claim by id


class _Intake(Protocol):
    tenant_id: str

    def enqueue(self, operation_id: str, config: FenceConfig, payload: Any) -> str: ...

    def claim(self, operation_id: str, worker_id: str, config: FenceConfig) -> Claim | None: ...


class _EngineIntake:
    """In-process (IAM access to the table): the payload kept in the operation's item, or in the
    engine's payload store when it is larger."""

    def __init__(self, backend: EngineBackend, actor: str) -> None:
        if len(backend.tenants) != 1:
            raise ValueError("a fenced record handler serves one tenant: give it a backend of one")
        self.engine = backend.engine
        self.tenant_id = backend.tenants[0]
        #: Who enqueues (the history's actor; a job type that requires approval needs one, and
        #: that identity can never approve it).
        self.actor = actor

    def enqueue(self, operation_id: str, config: FenceConfig, payload: Any) -> str:
        canonical = canonicalize(payload)
        engine, tenant = self.engine, self.tenant_id
        admitted = engine.admit(
            tenant,
            operation_id,
            config.job_type,
            canonical.hash,
            target_class=config.target_class,
            max_attempts=config.max_attempts,
            payload=payload,
            payload_given=True,
            actor=self.actor,
        )
        if isinstance(admitted, EnqueueResult):  # already enqueued with this payload: a replay
            return str(admitted.operation.state)
        kept = engine.keeps_in_item(canonical)
        if not kept and engine.payloads is None:
            raise InvalidInput("a payload over the item's limit needs the engine's payload store")
        stored = None if kept else engine.payloads.put(tenant, operation_id, canonical)
        try:
            result = engine.enqueue(
                tenant,
                operation_id,
                config.job_type,
                canonical.hash,
                payload_ref=None if stored is None else stored.ref,
                max_attempts=config.max_attempts,
                target_class=config.target_class,
                payload_inline=stored is not None,
                actor=self.actor,
                admission=admitted,
                payload_json=canonical.body if kept else None,
            )
        except PayloadConflict:
            if stored is not None:
                engine.payloads.delete_quietly(stored.key)
            raise
        return str(result.operation.state)

    def claim(self, operation_id: str, worker_id: str, config: FenceConfig) -> Claim | None:
        return self.engine.claim(
            self.tenant_id,
            operation_id,
            worker_id,
            lease_ms=config.lease_seconds * 1000,
            job_types=[config.job_type],
        )


class _HttpIntake:
    """Over the HTTP API (an API token with the produce and work scopes)."""

    def __init__(self, backend: HttpBackend) -> None:
        self.backend = backend
        self.tenant_id = backend.tenant_id

    def enqueue(self, operation_id: str, config: FenceConfig, payload: Any) -> str:
        result = self.backend.client.enqueue(
            operation_id,
            config.job_type,
            payload,
            max_attempts=config.max_attempts,
            target_class=config.target_class,
        )
        return str(result.operation.state)

    def claim(self, operation_id: str, worker_id: str, config: FenceConfig) -> Claim | None:
        return self.backend.claim_operation(
            worker_id, operation_id, config.lease_seconds * 1000, [config.job_type]
        )


def _intake(backend: Backend, worker_id: str) -> _Intake:
    if isinstance(backend, EngineBackend):
        return _EngineIntake(backend, worker_id)
    if isinstance(backend, HttpBackend):
        return _HttpIntake(backend)
    raise TypeError("fenced needs an EngineBackend or an HttpBackend")


class _Closing:
    """The backend as the runtime sees it for one delivery: notes which closing write went
    through (``succeeded``, ``failed_terminal``, ``retry``, ``unknown``, ``quarantined``)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.closed: str | None = None

    def __getattr__(self, name: str) -> Any:  # claim_next, heartbeat, load_payload, ...
        return getattr(self._backend, name)

    def complete(self, claim: Claim, outcome_code: str) -> None:
        self._backend.complete(claim, outcome_code)
        self.closed = State.SUCCEEDED

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None:
        self._backend.fail(claim, retryable, reason, retry_after_ms)
        self.closed = "retry" if retryable else State.FAILED_TERMINAL

    def park_unknown(self, claim: Claim, reason: str) -> None:
        self._backend.park_unknown(claim, reason)
        self.closed = State.UNKNOWN

    def quarantine(self, claim: Claim, reason: str) -> None:
        self._backend.quarantine(claim, reason)
        self.closed = State.QUARANTINED


# ---------------------------------------------------------------- the decorator


def fenced(
    backend: Backend,
    config: FenceConfig,
    *,
    reconcile: Callable[[Job], Reconciled] | None = None,
    on_claim: Callable[[Job], None] | None = None,
    events: MetricSink | None = None,
) -> Callable[[F], F]:
    """Fence a record handler: see the module's docstring. ``reconcile`` and ``on_claim`` are the
    worker runtime's hooks (class B raises its target fences ``on_claim``; a handler that can look
    its side effect up reconciles). The handler's return value is the record's result in the
    batch response; a string that is a valid outcome code is also the operation's (else ``ok``).
    ``events``: where the worker runtime counts (``LostOwnership``, ``Heartbeats``, ...), e.g.
    :func:`leasefence.observability.record_event`; default: nowhere."""
    worker_id = config.worker_id or f"fenced-{uuid.uuid4().hex[:12]}"
    intake = _intake(backend, worker_id)

    def decorate(handler: F) -> F:
        signature = inspect.signature(handler)
        takes_job = JOB_PARAMETER in signature.parameters

        @functools.wraps(handler)
        def fenced_handler(*args: Any, **kwargs: Any) -> Any:
            record = kwargs[RECORD_PARAMETER] if RECORD_PARAMETER in kwargs else args[0]

            def call(job: Job) -> Any:
                return handler(*args, **kwargs, **({JOB_PARAMETER: job} if takes_job else {}))

            return _deliver(
                intake, backend, config, worker_id, record, call, reconcile, on_claim, events
            )

        if takes_job:
            fenced_handler.__signature__ = signature.replace(  # type: ignore[attr-defined]
                parameters=[p for p in signature.parameters.values() if p.name != JOB_PARAMETER]
            )
        return fenced_handler  # type: ignore[return-value]

    return decorate


def _deliver(
    intake: _Intake,
    backend: Backend,
    config: FenceConfig,
    worker_id: str,
    record: Any,
    call: Callable[[Job], Any],
    reconcile: Callable[[Job], Reconciled] | None,
    on_claim: Callable[[Job], None] | None,
    events: MetricSink | None,
) -> Any:
    """One record: enqueue, claim, run, answer (see the module's docstring)."""
    operation_id = str(_pick(config.operation_id, record))
    op = keyed_hash(intake.tenant_id, operation_id)
    payload = (
        _body(record_data(record)) if config.payload is None else _pick(config.payload, record)
    )
    if payload is None:
        raise InvalidInput("the record has no body: name its payload (FenceConfig.payload)")
    try:
        state = intake.enqueue(operation_id, config, payload)
    except PayloadConflict as conflict:
        log.warning("poison message: payload_conflict, not run", extra={"op": op})
        raise PoisonMessage("payload_conflict: the id is bound to another payload", op) from (
            conflict
        )
    if state in TERMINAL_STATES:
        return None  # a delivery of an operation that has ended: nothing to run again
    if state in PARKED_STATES:
        raise Parked(f"parked {state}: an operator decides", op)
    claim = intake.claim(operation_id, worker_id, config)
    if claim is None:
        raise TryLater(f"not claimable now ({state}): another delivery holds it, or not due", op)
    results: list[Any] = []

    def run(job: Job) -> str | None:
        results.append(call(job))
        return _outcome_code(results[0])

    closing = _Closing(backend)
    handler = FunctionHandler(run, reconcile, on_claim)
    runner = Worker(
        closing, {config.job_type: handler}, worker_id, config.lease_seconds * 1000, events=events
    )
    job = runner.process(claim)
    if job.completed or closing.closed in TERMINAL_STATES:
        return results[0] if results else None
    if closing.closed in PARKED_STATES:
        raise Parked(f"parked {closing.closed}: an operator decides", op)
    if job.cancelled.is_set():
        raise NotFinished(f"lost ownership: {job.lost_reason}", op)
    raise NotFinished("not finished: a retryable failure or a store that stayed busy", op)


__all__ = [
    "FenceConfig",
    "MessageKept",
    "NotFinished",
    "Parked",
    "PoisonMessage",
    "TryLater",
    "fenced",
    "record_data",
]
