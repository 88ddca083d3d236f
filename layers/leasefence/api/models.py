"""Request and response models: the validation rules and the OpenAPI schemas, in one place.

Requests are strict (no type coercion: ``"3"`` is not a fence, ``1`` is not ``true``) and refuse
unknown fields, so a misspelt ``max_attemps`` is a 422, not a silent default. Every rule the
engine would enforce on input is checked here too, before anything is written (an enqueue
uploads its payload before the conditional put, so the engine's own checks come too late to
keep "bad input writes nothing").

Responses are documented here: those of the operation, the claim and the history are derived from
:mod:`leasefence.resources` (which the handlers write the answers with); the others describe the
``to_public()`` dicts of the catalogue, the controls and the listing counts (their extra fields
are allowed, so the contract can grow).
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    create_model,
    model_validator,
)

from leasefence import resources
from leasefence.api.models_errors import (  # noqa: F401  (the error answers' models, re-exported)
    ERROR_CODES,
    ErrorCode,
    ErrorDetail,
    ErrorOut,
    FieldProblem,
    GatewayErrorOut,
)
from leasefence.limits import (
    MAX_APPROVAL_VALID_SECONDS,
    MAX_ATTEMPTS,
    MAX_CHECKPOINT_DEPTH,
    MAX_CLAIM_JOB_TYPES,
    MAX_FENCE,
    MAX_LEASE_SECONDS,
    MAX_RETRY_AFTER_SECONDS,
    MIN_APPROVAL_VALID_SECONDS,
)
from leasefence.limits import MAX_ID_LENGTH as MAX_ID
from leasefence.limits import MAX_TEXT_LENGTH as MAX_TEXT
from leasefence.resources import StateName, TargetClassName
from leasefence.validation import HASH_PATTERN, NO_CONTROL


def _whole_number(value: Any) -> Any:
    """JSON Schema's ``integer`` is any number without a fraction: ``2.0`` is the integer 2 (and
    ``2.5``, ``"2"`` and ``true`` are not integers, which strict validation refuses)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: Integers as the OpenAPI document (JSON Schema) defines them: ``2`` or ``2.0``, nothing else.
#: (The bounds come before the validator, so that the schema states them as minimum/maximum.)
_WHOLE = BeforeValidator(_whole_number)

Id = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID,
        pattern=NO_CONTROL,
        description="1-256 characters, no control characters",
    ),
]
Fence = Annotated[
    int, Field(ge=1, le=MAX_FENCE, description="The fence returned by the claim"), _WHOLE
]
Reason = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
LeaseSeconds = Annotated[int, Field(ge=1, le=MAX_LEASE_SECONDS), _WHOLE]
Attempts = Annotated[int, Field(ge=1, le=MAX_ATTEMPTS), _WHOLE]
DelaySeconds = Annotated[int, Field(ge=0, le=MAX_RETRY_AFTER_SECONDS), _WHOLE]
ApprovalSeconds = Annotated[
    int, Field(ge=MIN_APPROVAL_VALID_SECONDS, le=MAX_APPROVAL_VALID_SECONDS), _WHOLE
]
Version = Annotated[int, Field(ge=0, le=MAX_FENCE), _WHOLE]
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


class IJsonValue(RootModel[Any]):
    """The document's schema of an inline payload (the server checks it with :func:`canonicalize
    <leasefence.payloads.canonicalize>`): any JSON value RFC 8785 (I-JSON) canonicalizes but null.
    Not recursive, so that every client generator handles it: what an array or object holds is
    any JSON value, its integers within +-(2**53 - 1) too (the server checks that)."""

    model_config = ConfigDict(
        title="IJsonValue",
        json_schema_extra={
            "description": "Any JSON value RFC 8785 can canonicalize, but null: integers within "
            "+-(2**53 - 1), here and anywhere inside an array or object (a payload's hash is "
            "taken over its canonical JSON, so a larger integer has none; answered 422)",
            "anyOf": [
                {"type": "object", "additionalProperties": True},
                {"type": "array", "items": {}},
                {"type": "string"},
                {"type": "boolean"},
                {"type": "integer", "minimum": -MAX_FENCE, "maximum": MAX_FENCE},
                {"type": "number", "not": {"type": "integer"}},
            ],
        },
    )


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


#: JSON Schema for "target_class D allows exactly one attempt" (a model validator enforces it).
_CLASS_D_ONE_ATTEMPT: dict[str, Any] = {
    "if": {"required": ["target_class"], "properties": {"target_class": {"const": "D"}}},
    "then": {"properties": {"max_attempts": {"anyOf": [{"const": 1}, {"type": "null"}]}}},
}


# ---------------------------------------------------------------------------------- requests


class _EnqueueFields(Strict):
    """The fields every enqueue body has, whichever way it gives its payload."""

    model_config = ConfigDict(json_schema_extra=_CLASS_D_ONE_ATTEMPT)

    operation_id: Id
    job_type: Id
    max_attempts: Attempts | None = Field(default=None, description="Default 5 (1 for class D)")
    target_class: TargetClassName = "C"


_INLINE_PAYLOAD = (
    "Any JSON value but null; at most 256 KiB as RFC 8785 canonical JSON. Its hash is SHA-256 "
    "over that canonical JSON."
)
PayloadRef = Annotated[str, Field(min_length=1, max_length=MAX_TEXT, pattern=NO_CONTROL)]


def _component(model: type[BaseModel]) -> dict[str, str]:
    """A reference to ``model``'s schema among the document's components."""
    return {"$ref": f"#/components/schemas/{model.__name__}"}


class EnqueueInline(_EnqueueFields):
    """An enqueue whose payload leasefence stores: `payload` required, `payload_ref` and
    `payload_hash` absent (or null). (A `payload_hash` equal to the payload's own is tolerated as
    a check, another is 422: no schema can state that, so this one leaves it out.)"""

    payload: IJsonValue = Field(description=_INLINE_PAYLOAD)
    payload_ref: None = None
    payload_hash: None = None


class EnqueueByReference(_EnqueueFields):
    """An enqueue whose payload you store (`payload_ref` and `payload_hash`, required; no
    `payload`)."""

    payload_ref: PayloadRef
    payload_hash: PayloadHash = Field(description="The hash of the payload `payload_ref` names")


class EnqueueRequest(_EnqueueFields):
    """Either `payload` (stored inline) or `payload_ref` + `payload_hash` (stored by you).

    The document states this body as :class:`EnqueueInline` or :class:`EnqueueByReference`
    (``oneOf`` of the two, nothing beside it), which generated clients type correctly; this
    model validates it as it always did: either form, and beside an inline payload a
    `payload_hash` equal to the payload's own (a check no schema can state).

    Beside the rules the schemas state, an enqueue may be refused for what no schema can state:
    a payload over 256 KiB as canonical JSON (413), and the tenant's catalogue and settings (a
    job type outside the catalogue in strict mode, a class or attempt budget that contradicts
    its entry, a payload its `payload_schema` refuses, a by-reference payload for a job type that
    requires approval, a 101st job type: 422 with the codes the responses list)."""

    payload: Any = Field(default=None, description=_INLINE_PAYLOAD)
    payload_ref: PayloadRef | None = None
    payload_hash: PayloadHash | None = Field(
        default=None,
        description="Required with payload_ref, and only with it (beside an inline payload, a "
        "hash equal to the payload's own is tolerated as a check; another is 422)",
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        return {"oneOf": [_component(EnqueueInline), _component(EnqueueByReference)]}

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


#: JSON Schema for "after needs a claim_token, and no operation_id" (a model validator enforces it).
_AFTER_NEEDS_A_TOKEN: dict[str, Any] = {
    "if": {"required": ["after"], "properties": {"after": {"type": "string"}}},
    "then": {
        "required": ["claim_token"],
        "properties": {"claim_token": {"type": "string"}, "operation_id": {"type": "null"}},
    },
}


class ClaimRequest(Strict):
    model_config = ConfigDict(json_schema_extra=_AFTER_NEEDS_A_TOKEN)

    worker_id: Id
    lease_seconds: LeaseSeconds = Field(
        default=60,
        description="Default: the job type's lease_seconds when it is catalogued, else 60; above "
        "its max_lease_seconds, that maximum",
    )
    job_types: list[Id] | None = Field(default=None, min_length=1, max_length=MAX_CLAIM_JOB_TYPES)
    operation_id: Id | None = Field(
        default=None, description="Claim this operation only (404 if it does not exist)"
    )
    claim_token: Id | None = Field(
        default=None,
        description="Your token for this claim request (one per claim you mean to make; a UUID "
        "will do), sent again unchanged when the answer was lost: while the claim that request "
        "made holds (still claimed under it: not taken over, parked or finished), the resend "
        "answers that same claim (same fence, no attempt spent). Without operation_id, one token "
        "makes at most one claim, also when resent while the first request still runs (503 "
        "unavailable 'in progress' until the first one's claim can be answered; 204 once it "
        "no longer holds). Without it, a resend is a new claim. Scoped to the worker_id: "
        "another worker's token never matches",
    )
    after: Id | None = Field(
        default=None,
        description="With claim_token and without operation_id: the operation this worker "
        "closes in the same request (a finish item of `POST /v1/batch/work`). The token's marker "
        "is then kept in that operation's stored payload, written with the payload's expiry "
        "that the close sets anyway: one write unit less per claim. Send the same value with "
        "every resend of the token (it says where the marker is); 404 when no operation has "
        "that id, 409 when a claim with another token named it already",
    )

    @model_validator(mode="after")
    def _after_needs_a_token(self) -> ClaimRequest:
        if self.after is not None and (self.claim_token is None or self.operation_id is not None):
            raise ValueError("after needs a claim_token, and no operation_id")
        return self


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
    retry_after_seconds: DelaySeconds | None = None


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


# ---------------------------------------------------------------------------------- batches
# A batch names up to MAX_BATCH_ITEMS operations, each once; each item is the body of its
# one-at-a-time route plus the operation's id, and gets that route's answer (BatchOut).


# ---------------------------------------------------------------------------------- responses

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]


def _annotation(hint: Any, extra: dict[str, Any] | None = None) -> Any:
    """The schema type of a resource field (:mod:`leasefence.resources`); ``extra``: JSON Schema
    keywords of the value itself (inside the ``anyOf`` with null when it may be null)."""
    base, nullable = resources.optional(hint)
    if base is datetime:
        schema_type: Any = Timestamp
    elif typing.get_origin(base) is list:
        (item,) = typing.get_args(base)
        schema_type = list[_annotation(item)]  # type: ignore[misc]
    elif isinstance(base, type) and (dataclasses.is_dataclass(base) or typing.is_typeddict(base)):
        schema_type = _resource_model(base)
    else:
        schema_type = base
    if extra:
        schema_type = Annotated[schema_type, Field(json_schema_extra=extra)]
    return schema_type | None if nullable else schema_type


_MODELS: dict[type, type[BaseModel]] = {}


def _resource_model(resource: type, name: str | None = None) -> type[BaseModel]:
    """The response model (OpenAPI schema) of a resource: every field it sends, in order, each
    required (the API always sends every field; null where the type allows it)."""
    if resource not in _MODELS:
        fields: dict[str, Any] = {}
        for f in resources.wire_fields(resource):
            hint = resources.optional(f.type)[0] if f.doc.always else f.type
            annotation = _annotation(hint, dict(f.doc.schema or {}))
            fields[f.name] = (annotation, Field(description=f.doc.text or None))
        model = create_model(name or resource.__name__, __doc__=resource.__doc__, **fields)
        _MODELS[resource] = model
    return _MODELS[resource]


# The response models of the operation, claim and history resources, and their pages.
OperationOut = _resource_model(resources.Operation, "OperationOut")
ClaimOut = _resource_model(resources.Claim, "ClaimOut")
HistoryEntryOut = _resource_model(resources.HistoryEntry, "HistoryEntryOut")
HistoryOut = _resource_model(resources.HistoryPage, "HistoryOut")
OperationPage = _resource_model(resources.OperationPage, "OperationPage")
EnqueueOut = _resource_model(resources.EnqueueResult, "EnqueueOut")


class OperationEnvelope(BaseModel):
    operation: OperationOut  # type: ignore[valid-type]


class ClaimEnvelope(BaseModel):
    claim: ClaimOut  # type: ignore[valid-type]


class LeaseOut(BaseModel):
    lease_expires_at: Timestamp


class HealthOut(BaseModel):
    status: Literal["ok"]


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
    approval_summary: list[str] | None = Field(
        default=None, description="The payload fields the approvers' inbox shows"
    )
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


class ResolutionRisk(BaseModel):
    when: Literal["intent"] = Field(
        description="The operation's fact that makes the resolution dangerous (intent: an "
        "intent is on record)"
    )
    risk: str = Field(description="The risk, in words")


class TargetClassOut(BaseModel):
    target_class: TargetClassName
    name: str
    guarantee: str = Field(description="What the fence enforces for this class")
    reconcile: str = Field(description="How to find out whether the side effect happened")
    resolutions: ResolutionsAdvice = Field(
        description="What each resolution of an unknown or quarantined operation means for it"
    )
    risks: dict[str, ResolutionRisk] = Field(
        default_factory=dict,
        description="Resolutions that are dangerous for this class given an operation's facts "
        "(never the console's primary choice; a bulk requeue names such operations)",
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


#: Schemas the document holds beside those of the routes' models: the alternatives of
#: ``EnqueueRequest`` (and what they refer to).
DOCUMENT_MODELS: tuple[type[BaseModel], ...] = (EnqueueInline, EnqueueByReference)
