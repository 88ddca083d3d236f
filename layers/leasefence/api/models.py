"""Request and response models: the validation rules and the OpenAPI schemas, in one place.

Requests are strict (no type coercion: ``"3"`` is not a fence, ``1`` is not ``true``) and refuse
unknown fields, so a misspelt ``max_attemps`` is a 422, not a silent default. Every rule the
engine would enforce on input is checked here too, before anything is written (an enqueue
uploads its payload before the conditional put, so the engine's own checks come too late to
keep "bad input writes nothing").

Responses are documented here; the handlers return the engine's ``to_public()`` dicts, which
these models describe (their extra fields are allowed, so the contract can grow).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from leasefence.limits import MAX_CHECKPOINT_DEPTH, MAX_FENCE, MAX_LEASE_SECONDS
from leasefence.limits import MAX_ID_LENGTH as MAX_ID
from leasefence.limits import MAX_TEXT_LENGTH as MAX_TEXT
from leasefence.validation import HASH_PATTERN, NO_CONTROL

Id = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID,
        pattern=NO_CONTROL,
        description="1-256 characters, no control characters",
    ),
]
Fence = Annotated[int, Field(ge=1, le=MAX_FENCE, description="The fence returned by the claim")]
Reason = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
LeaseSeconds = Annotated[int, Field(ge=1, le=MAX_LEASE_SECONDS)]
StateName = Literal[
    "queued",
    "claimed",
    "succeeded",
    "failed_terminal",
    "unknown",
    "quarantined",
    "awaiting_approval",
    "cancelled",
]
PayloadStateName = Literal["external", "stored", "purged", "erased"]
TargetClassName = Literal["A", "B", "C", "D"]
PayloadHash = Annotated[str, Field(pattern=HASH_PATTERN, description="sha256:<64 lowercase hex>")]


def _depth(value: Any) -> int:
    """Nesting depth of a JSON value, computed without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in current.values())
        elif isinstance(current, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in current)
    return deepest


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ---------------------------------------------------------------------------------- requests


class EnqueueRequest(Strict):
    """Either `payload` (stored inline) or `payload_ref` + `payload_hash` (stored by you)."""

    operation_id: Id
    job_type: Id
    payload: Any = Field(
        default=None,
        description="Any JSON value but null; at most 256 KiB as RFC 8785 canonical JSON. "
        "Its hash is SHA-256 over that canonical JSON.",
    )
    payload_ref: str | None = Field(
        default=None, min_length=1, max_length=MAX_TEXT, pattern=NO_CONTROL
    )
    payload_hash: PayloadHash | None = Field(
        default=None,
        description="Required with payload_ref; with payload it must equal the computed hash",
    )
    max_attempts: int | None = Field(
        default=None, ge=1, le=100, description="Default 5 (1 for class D)"
    )
    target_class: TargetClassName = "C"

    @model_validator(mode="after")
    def _one_payload(self) -> EnqueueRequest:
        inline = "payload" in self.model_fields_set
        if inline and self.payload is None:
            raise ValueError("payload must be a JSON value other than null")
        by_ref = self.payload_ref is not None
        if inline and by_ref:
            raise ValueError("give either payload or payload_ref + payload_hash, not both")
        if not inline and not by_ref:
            raise ValueError("give payload, or payload_ref + payload_hash")
        if by_ref and self.payload_hash is None:
            raise ValueError("payload_ref needs payload_hash")
        if self.target_class == "D" and self.max_attempts not in (None, 1):
            raise ValueError("target_class D allows exactly one attempt (max_attempts 1)")
        return self


class ClaimRequest(Strict):
    worker_id: Id
    lease_seconds: LeaseSeconds = Field(
        default=60,
        description="Default: the job type's lease_seconds when it is catalogued, else 60; above "
        "its max_lease_seconds, that maximum",
    )
    job_types: list[Id] | None = Field(default=None, min_length=1, max_length=50)
    operation_id: Id | None = Field(
        default=None, description="Claim this operation only (404 if it does not exist)"
    )
    claim_token: Id | None = Field(
        default=None,
        description="Your token for this claim request (one per claim you mean to make; a UUID "
        "will do), sent again unchanged when the answer was lost: while the claim that request "
        "made holds (still claimed under it: not taken over, parked or finished), the resend "
        "answers that same claim (same fence, no attempt spent). Without it, a resend is a new "
        "claim. Scoped to the worker_id: another worker's token never matches",
    )


class HeartbeatRequest(Strict):
    fence: Fence
    worker_id: Id
    lease_seconds: LeaseSeconds | None = Field(
        default=None, description="Default: the claim's lease"
    )
    checkpoint: Any = Field(
        default=None,
        description="Kept and handed to the next claim of this operation (at most 4 KiB of JSON)",
    )
    intent: Id | None = Field(
        default=None,
        description="Class D: record, under this fence, that a side effect is about to start (what it is). "
        "Kept in its own attribute (no checkpoint overwrites it) and handed to every later claim as `intent`",
    )

    @model_validator(mode="after")
    def _shallow_checkpoint(self) -> HeartbeatRequest:
        if _depth(self.checkpoint) > MAX_CHECKPOINT_DEPTH:
            raise ValueError(
                f"checkpoint must be nested at most {MAX_CHECKPOINT_DEPTH} levels deep"
            )
        return self


class CompleteRequest(Strict):
    fence: Fence
    outcome_code: Annotated[str, Field(min_length=1, max_length=MAX_ID)]


class FailRequest(Strict):
    fence: Fence
    retryable: bool
    reason: Reason
    retry_after_seconds: int | None = Field(default=None, ge=0, le=86_400)


class ParkRequest(Strict):
    fence: Fence
    reason: Reason


#: A caller's name for one command, so that sending it again after a lost answer is recognized.
RequestToken = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        pattern=NO_CONTROL,
        description="Your name for this request (e.g. a UUID), the same on every retry of it: a "
        "retry after a lost answer is then recognized as this request",
    ),
]


class ResolveRequest(Strict):
    resolution: Literal["succeeded", "failed_terminal", "requeue"]
    note: str = Field(default="", max_length=MAX_TEXT)
    request_token: RequestToken | None = None


class EraseRequest(Strict):
    """No fields: send `{}` (or no body). Unknown fields are refused like everywhere."""


class JobTypeRequest(Strict):
    """A job type's catalogue entry. Omitted fields take their defaults (not the old values):
    a PUT declares the whole entry."""

    target_class: TargetClassName = Field(description="What the job type's target can enforce")
    max_attempts: int | None = Field(
        default=None, ge=1, le=100, description="The attempt budget (default 5; class D: 1)"
    )
    lease_seconds: LeaseSeconds = Field(
        default=60, description="The lease of a claim that names none"
    )
    max_lease_seconds: LeaseSeconds = Field(
        default=900, description="Longer leases asked for by a claim are cut to this"
    )
    owner: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    runbook_url: str | None = Field(
        default=None, min_length=1, max_length=MAX_TEXT, description="An http(s) URL"
    )
    approval_required: bool = False
    approval_valid_seconds: int | None = Field(
        default=None,
        ge=60,
        le=30 * 86_400,
        description="With approval_required: how long an approval may take (default 86400)",
    )
    payload_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Schema that inline payloads must match (local $refs only; at most "
        "16 KiB). A job type with one refuses payloads by reference",
    )
    expected_version: int | None = Field(
        default=None,
        ge=0,
        le=MAX_FENCE,
        description="Write only if the entry is at this version (0: only if it does not exist); "
        "else 409 version_conflict",
    )
    request_token: RequestToken | None = None


class SettingsRequest(Strict):
    strict_job_types: bool = Field(
        description="true: an enqueue of a job type that is not in the catalogue is refused "
        "(422 unknown_job_type)"
    )


class ApproveRequest(Strict):
    payload_hash: PayloadHash = Field(
        description="The hash of the payload the approver saw: a different one is 409 "
        "payload_mismatch and changes nothing"
    )


class RejectRequest(Strict):
    note: str = Field(default="", max_length=MAX_TEXT, description="Why (kept as the reason)")


class CancelRequest(Strict):
    """No fields: send `{}` (or no body). Unknown fields are refused like everywhere."""


# ---------------------------------------------------------------------------------- responses

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


class Intent(BaseModel):
    fence: int = Field(description="The fence under which it was recorded")
    what: str


class OperationOut(BaseModel):
    operation_id: str
    job_type: str
    state: StateName
    fence: int
    attempts: int
    max_attempts: int
    target_class: TargetClassName
    payload_hash: PayloadHash
    payload_ref: str | None
    outcome_code: str | None
    lease_owner: str | None
    lease_expires_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp
    payload_state: PayloadStateName = Field(
        description="external: the caller's payload_ref; stored: the inline payload is kept; purged: deleted after "
        "its retention; erased: deleted by an operator (with the operation's free text)"
    )
    erased_at: Timestamp | None = Field(description="When the operation was erased; null if never")
    job_type_version: int | None = Field(
        default=None,
        description="The version of the job type's catalogue entry it was enqueued under; null "
        "for an uncatalogued job type",
    )
    approval_expires_at: Timestamp | None = Field(
        default=None,
        description="awaiting_approval: until when an approval is accepted (then the sweeper ends it "
        "failed_terminal, outcome approval_expired); null otherwise",
    )
    approved_by: str | None = Field(
        default=None, description="The approver's identity (the token's sub); null if not approved"
    )
    enqueued_by: str | None = Field(
        default=None,
        description="Who enqueued it (the producer's identity), for an operation that went "
        "through the approval gate; null otherwise (the history's enqueue entry names the actor)",
    )
    reason: str | None = Field(
        default=None,
        description="The latest failure or park reason, or a rejection's note (null when none, "
        "or erased); an operator's resolution note is in the history",
    )
    intent: Intent | None = Field(
        default=None,
        description="Class D: the intent a holder recorded before its side effect (what, under "
        "which fence), or null",
    )
    checkpoint: Any = Field(
        default=None,
        description="The latest checkpoint a holder kept (the handler's JSON), or null",
    )


class EnqueueOut(BaseModel):
    operation: OperationOut
    created: bool


class OperationEnvelope(BaseModel):
    operation: OperationOut


class OperationPage(BaseModel):
    operations: list[OperationOut]
    next_cursor: str | None


class ClaimOut(BaseModel):
    operation_id: str
    job_type: str
    fence: int
    attempts: int
    lease_expires_at: Timestamp
    payload_ref: str | None
    payload_hash: PayloadHash
    target_class: TargetClassName
    reconcile_required: bool
    checkpoint: Any = None
    intent: Intent | None = Field(
        default=None,
        description="Class D: the intent an earlier holder recorded (a heartbeat's `intent`), or null",
    )
    claimed_at: Timestamp = Field(
        description="When the claim was granted, by the server's clock: lease_expires_at is "
        "claimed_at + lease_ms"
    )
    lease_ms: int = Field(
        description="The lease GRANTED, in ms: what was asked for, the job type's default when "
        "none was, or its max_lease_seconds when more was asked for. Renew well within it"
    )
    lease_seconds: int = Field(
        description="The lease granted in whole seconds (lease_ms // 1000; lease_ms is exact)"
    )


class ClaimEnvelope(BaseModel):
    claim: ClaimOut


class LeaseOut(BaseModel):
    lease_expires_at: Timestamp


class HealthOut(BaseModel):
    status: Literal["ok"]


TransitionName = Literal[
    "enqueue",
    "claim",
    "takeover",
    "complete",
    "fail",
    "retry",
    "retry_later",
    "unknown",
    "quarantine",
    "sweep",
    "resolve",
    "requeue",
    "erase",
    "approve",
    "reject",
    "approval_expire",
    "cancel",
]


class HistoryEntryOut(BaseModel):
    sequence: int = Field(
        description="The operation's transition counter: 1 for the enqueue, +1 per transition"
    )
    time: Timestamp = Field(
        description="When the transition was made (the clock of whoever made it)"
    )
    transition: TransitionName = Field(
        description="What happened: enqueue, claim, takeover (a claim of a lapsed lease: the fence "
        "rose past a holder that stalled), complete, fail (failed_terminal), retry / retry_later "
        "(a retryable failure back to queued, claimable at once / after a backoff), unknown, "
        "quarantine, sweep (the final lease lapsed: unknown), resolve / requeue (an operator's "
        "decision), erase, approve / reject (an approver's decision on an operation awaiting approval), "
        "approval_expire (no approval within its validity: failed_terminal), cancel (the producer "
        "withdrew it: cancelled)"
    )
    previous_state: StateName | None = Field(description="The state before (null for the enqueue)")
    state: StateName
    fence: int = Field(
        description="The operation's fence after the transition (a claim's is its own)"
    )
    attempt: int = Field(description="Attempts made so far")
    actor: str | None = Field(
        description="Who made it: the worker id (claims and a holder's closing transitions), the "
        "operator's or producer's identity from the token (sub, client_id or username), or "
        "leasefence-sweeper"
    )
    previous_actor: str | None = Field(
        default=None, description="A takeover: the worker whose lease lapsed"
    )
    outcome_code: str | None = Field(
        default=None, description="complete, resolve: the outcome code"
    )
    reason: str | None = Field(
        default=None,
        description="The failure or park reason, or the operator's note (at most 256 characters)",
    )
    available_at: Timestamp | None = Field(
        default=None, description="retry, retry_later: when it is claimable again"
    )


class HistoryOut(BaseModel):
    entries: list[HistoryEntryOut] = Field(description="Oldest first")
    next_cursor: str | None
    dropped: int = Field(
        description="Entries left out to keep the history bounded (the oldest after the first: a "
        "history keeps the enqueue and the 49 newest transitions)"
    )


class JobTypeOut(BaseModel):
    job_type: str
    version: int = Field(description="Rises by one with every change (a deletion too)")
    target_class: TargetClassName
    max_attempts: int
    lease_seconds: int
    max_lease_seconds: int
    owner: str | None
    runbook_url: str | None
    approval_required: bool
    approval_valid_seconds: int | None
    payload_schema: dict[str, Any] | None
    updated_at: Timestamp
    updated_by: str | None = Field(description="The identity in the writer's token")


class JobTypeEnvelope(BaseModel):
    job_type: JobTypeOut
    changed: bool = Field(description="false: the entry already said exactly this (no new version)")


class JobTypeList(BaseModel):
    job_types: list[JobTypeOut]


class SettingsOut(BaseModel):
    strict_job_types: bool
    identity_retention_days: int | None = Field(
        default=None,
        description="The deployment's identity retention in days (null: forever); read-only",
    )
    payload_retention_days: int | None = Field(
        default=None, description="The deployment's payload retention in days; read-only"
    )


class StateCountsOut(BaseModel):
    counts: dict[StateName, int] = Field(description="Operations per state (every state listed)")
    total: int
    examined: int = Field(description="Operations read")
    complete: bool = Field(
        description="true: every operation of the tenant was read (else the counts are a lower bound)"
    )


class ResolutionsAdvice(BaseModel):
    requeue: str
    succeeded: str
    failed_terminal: str


class TargetClassOut(BaseModel):
    target_class: TargetClassName
    name: str
    guarantee: str = Field(description="What the fence enforces for this class")
    reconcile: str = Field(description="How to find out whether the side effect happened")
    resolutions: ResolutionsAdvice = Field(
        description="What each resolution of an unknown or quarantined operation means for it"
    )


class TargetClassesOut(BaseModel):
    target_classes: list[TargetClassOut]


class ControlOut(BaseModel):
    control: int = Field(description="1-9, as the Lease-Plus-Fence design numbers them")
    name: str
    go: bool
    evidence: str


class JobTypeControlsOut(BaseModel):
    job_type: str
    catalogued: bool
    version: int | None
    go: bool = Field(description="true only when all nine controls hold")
    controls: list[ControlOut]


class ControlsOut(BaseModel):
    go: bool = Field(description="true only when every job type is go")
    job_types: list[JobTypeControlsOut]


class FieldProblem(BaseModel):
    field: str
    type: str
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(
        description="invalid_request, unauthorized, forbidden, not_found, payload_conflict, "
        "stale_fence, invalid_transition, payload_too_large, payload_missing, payload_mismatch, "
        "unknown_job_type, version_conflict, already_attempted, tenant_erasing, too_many_job_types, "
        "unavailable, internal_error"
    )
    message: str
    details: list[FieldProblem] | None = Field(
        default=None, description="Per-field problems (422 only)"
    )


class ErrorOut(BaseModel):
    error: ErrorDetail
