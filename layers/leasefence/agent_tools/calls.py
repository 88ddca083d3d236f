"""One agent tool call as one leasefence operation: the id derivation, the ledger it is recorded
in, and the call itself (enqueue, approval gate, claim, run through the worker runtime, close).

Independent of any agent framework or MCP SDK (:mod:`leasefence.agent_tools.mcp_server` puts it
behind a Model Context Protocol server). See docs/agent-tools.md.

**The operation id** of a call is derived from the run and the logical call, never from the
framework's call id (a model's ``call_...`` id, an MCP request id), which changes when a run is
resumed and its turn generated again::

    operation_id = "agent-call-" + hex(SHA-256(RFC 8785 JSON of
                   ["leasefence.agent-call.v1", job_type, run_id, call_key]))

``run_id`` names the run durably (what the runtime persists and resumes under), ``call_key`` the
call within the run (its position in the run's durable plan, or a name the application gives
it); the job type is the tool's name. So a resumed or replayed run that makes the same logical
call lands on the same operation, whatever call id the framework gives it this time, and the
same logical call made with other arguments is a ``payload_conflict``, not a second call.

**The payload** is the call's arguments (all of them, defaults filled in), as canonical JSON:
its hash is what an approver approves, and what the tool runs with is the payload the operation
stored (the approved bytes), not the arguments of the request that happens to run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from leasefence.errors import InvalidInput, LeaseFenceError, PayloadConflict, Unavailable
from leasefence.limits import MAX_ID_LENGTH
from leasefence.model import Claim, State, TargetClass
from leasefence.payloads import CanonicalPayload, canonicalize
from leasefence.validation import validate_id
from leasefence.worker._runtime import Worker
from leasefence.worker.backend import Backend
from leasefence.worker.handler import Ambiguous, FunctionHandler, Job, Permanent, Reconciled

#: The derivation's version tag: part of the hashed input, so a future derivation cannot collide.
CALL_ID_VERSION = "leasefence.agent-call.v1"
CALL_ID_PREFIX = "agent-call-"


def call_operation_id(job_type: str, run_id: str, call_key: str) -> str:
    """The operation id of the logical call ``call_key`` of run ``run_id`` to tool ``job_type``
    (each 1-256 characters, no control characters: else :class:`InvalidInput`). Each part is a
    JSON string of its own, so no choice of characters makes two calls share an id."""
    parts = [
        CALL_ID_VERSION,
        validate_id("job_type", job_type),
        validate_id("run_id", run_id),
        validate_id("call_key", call_key),
    ]
    return CALL_ID_PREFIX + canonicalize(parts).hash.removeprefix("sha256:")


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a job type: its class, budget, approval and the handler's hooks.

    ``run(job, **arguments)`` makes the side effect through the target helper of its class
    (``job`` carries the fence: :class:`~leasefence.targets.fenced_table.FencedTable`,
    :func:`~leasefence.targets.idempotent_api.call`, :func:`~leasefence.targets.single_shot.call_once`)
    and returns a short outcome code, what a replay answers with (cut to 256 characters; anything
    but a string or None parks the call ``unknown``: the side effect may have been made).
    ``on_claim`` and ``reconcile`` are the worker handler's hooks (class B raises its target's
    fence in ``on_claim``; a resumed call after a crash reconciles before it runs)."""

    job_type: str
    run: Callable[..., str | None]
    target_class: TargetClass = TargetClass.C
    approval: bool = False
    approval_valid_ms: int | None = None
    max_attempts: int | None = None
    on_claim: Callable[[Job], None] | None = None
    reconcile: Callable[[Job], Reconciled] | None = None

    def handler(self) -> FunctionHandler:
        def run(job: Job) -> str | None:
            arguments = job.payload  # the stored (approved) payload, not the request's copy
            if not isinstance(arguments, dict):
                raise Permanent("the stored payload is not a tool call's arguments")
            outcome = self.run(job, **arguments)
            if outcome is None or isinstance(outcome, str):
                # The side effect is made: record it, its code cut to what an outcome holds.
                return outcome[:MAX_ID_LENGTH] if outcome else outcome
            raise Ambiguous(f"tool returned {type(outcome).__name__}, not an outcome code")

        return FunctionHandler(run, self.reconcile, self.on_claim)


@dataclass(frozen=True)
class CallOutcome:
    """What a call answers: ``ok`` with the outcome code, or an error with a machine ``code``."""

    ok: bool
    code: str
    message: str
    operation_id: str | None = None
    state: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.operation_id is not None:
            body["operation_id"] = self.operation_id
        if self.state is not None:
            body["state"] = self.state
        return {("result" if self.ok else "error"): {**body, **self.details}}


@dataclass(frozen=True)
class CallState:
    """A call's operation as a ledger reads it (in-process or over HTTP); times RFC 3339."""

    operation_id: str
    state: State
    fence: int
    payload_hash: str
    outcome_code: str | None = None
    reason: str | None = None
    lease_expires_at: str | None = None
    approval_expires_at: str | None = None
    #: Enqueued under the approval gate (awaiting approval, or it was once).
    gated: bool = False


class CallLedger(Protocol):
    """Where calls are recorded: one tenant, the server's credentials. ``backend`` runs claims."""

    @property
    def backend(self) -> Backend: ...

    def enqueue(
        self,
        operation_id: str,
        spec: ToolSpec,
        arguments: dict[str, Any],
        payload: CanonicalPayload,
    ) -> CallState:
        """Enqueue the call (a replay answers the operation as it is); ``spec.approval`` asks
        for the approval gate. :class:`~leasefence.errors.PayloadConflict` for other arguments."""
        ...

    def get(self, operation_id: str) -> CallState: ...

    def claim(self, operation_id: str, worker_id: str, lease_ms: int) -> Claim | None: ...


#: An ended or parked operation, answered without running anything: (ok, code, message).
_SETTLED: dict[State, tuple[bool, str, str]] = {
    State.SUCCEEDED: (True, "succeeded", "the call was made"),
    State.UNKNOWN: (
        False,
        "outcome_unknown",
        "the call may or may not have reached its target: an operator resolves it",
    ),
    State.QUARANTINED: (False, "quarantined", "the call cannot be run as stored"),
    State.CANCELLED: (False, "cancelled", "the call was withdrawn before it ran"),
}

#: failed_terminal, by outcome code: the approver's answers have codes of their own.
_FAILED: dict[str | None, tuple[str, str]] = {
    "rejected": ("approval_rejected", "an approver rejected these arguments"),
    "approval_expired": ("approval_expired", "no approval came in time"),
}


class FencedCalls:
    """Runs tool calls as operations of one ledger (one tenant), each at most once at its target.

    A call: derive the id, enqueue the arguments (a replay for a call already made), then by the
    operation's state: wait for an approver (``approval_required``), answer a finished call
    again (``replayed``), or claim it and run it through the worker runtime (reconcile first on
    a takeover, heartbeats, the closing write). The fence is checked when the tool runs, not when
    it was approved: an approval only makes the operation claimable."""

    def __init__(
        self,
        ledger: CallLedger,
        worker_id: str,
        lease_ms: int = 60_000,
        events: Callable[[str, float], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.events = events

    def call(
        self, spec: ToolSpec, run_id: str, call_key: str, arguments: dict[str, Any]
    ) -> CallOutcome:
        try:
            operation_id = call_operation_id(spec.job_type, run_id, call_key)
            payload = canonicalize(arguments)
        except InvalidInput as bad:
            return CallOutcome(False, "invalid_request", bad.message)
        try:
            op = self.ledger.enqueue(operation_id, spec, arguments, payload)
        except PayloadConflict:
            return CallOutcome(
                False,
                "payload_conflict",
                "this call of the run was made with other arguments: nothing was called. "
                "A call with new arguments is a new call (another call_key), approved anew.",
                operation_id,
            )
        except LeaseFenceError as refused:
            return _refused(refused, operation_id)
        if spec.approval and not op.gated:
            return CallOutcome(
                False,
                "approval_not_enforced",
                "the tool requires approval but its operation was enqueued without the gate "
                "(over HTTP: the job type's catalogue entry must set approval_required)",
                operation_id,
                op.state,
            )
        if op.state in {State.QUEUED, State.CLAIMED}:
            return self._run(spec, op)
        return self._answer(op, replayed=True)

    def _run(self, spec: ToolSpec, op: CallState) -> CallOutcome:
        try:
            claim = self.ledger.claim(op.operation_id, self.worker_id, self.lease_ms)
        except LeaseFenceError as refused:
            return _refused(refused, op.operation_id)
        if claim is None:
            return self._answer(self.ledger.get(op.operation_id), replayed=True)
        worker = Worker(
            self.ledger.backend,
            {spec.job_type: spec.handler()},
            worker_id=self.worker_id,
            lease_ms=self.lease_ms,
            events=self.events,
        )
        job = worker.process(claim)
        if job.cancelled.is_set():
            return CallOutcome(
                False,
                "stale_fence",
                "this call lost its claim (a later holder of the same call took over): "
                f"nothing more was written. {job.lost_reason or ''}".strip(),
                op.operation_id,
                State.CLAIMED,
                {"fence": claim.fence},
            )
        return self._answer(self.ledger.get(op.operation_id), replayed=False)

    def _answer(self, op: CallState, replayed: bool) -> CallOutcome:
        state, oid = op.state, op.operation_id
        details: dict[str, Any] = {"fence": op.fence}
        if state is State.AWAITING_APPROVAL:
            details |= {
                "payload_hash": op.payload_hash,
                "approval_expires_at": op.approval_expires_at,
            }
            return CallOutcome(
                False,
                "approval_required",
                "an approver must approve these exact arguments (their payload_hash); then "
                "call again with the same run_id, call_key and arguments",
                oid,
                state,
                details,
            )
        if state in _SETTLED:
            ok, code, message = _SETTLED[state]
            if ok:
                details |= {"outcome_code": op.outcome_code, "replayed": replayed}
            return CallOutcome(ok, code, message, oid, state, details)
        if state is State.FAILED_TERMINAL:
            code, message = _FAILED.get(op.outcome_code, ("failed", "the call failed for good"))
            return CallOutcome(False, code, message, oid, state, details | {"reason": op.reason})
        if state is State.CLAIMED:
            details["lease_expires_at"] = op.lease_expires_at
            return CallOutcome(
                False,
                "in_progress",
                "another holder runs this call; once its lease lapses, call again and the "
                "call is taken over (reconciled first: never run twice)",
                oid,
                state,
                details,
            )
        return CallOutcome(
            False,
            "retry_later",
            "the call failed and will be tried again: call again later",
            oid,
            state,
            details | {"reason": op.reason},
        )


def _refused(refused: LeaseFenceError, operation_id: str) -> CallOutcome:
    code = "unavailable" if isinstance(refused, Unavailable) else refused.code
    return CallOutcome(False, code, refused.message, operation_id)
