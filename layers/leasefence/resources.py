"""The public resources, defined once: the operation, the claim and the history.

Each resource is a frozen dataclass whose fields are the resource's fields, in the order the API
sends them, each with its type and what it means (:class:`Doc`). Everything that shows a resource
is derived from these classes:

* the SDK's types (:mod:`leasefence.client` re-exports them): a client reads an answer with
  ``Operation.from_json(...)`` (times as :class:`~datetime.datetime`, integers as ``int``);
* the API's answers (:mod:`leasefence.api.routes`): :func:`dump` writes a resource from the
  engine's record (times from integer milliseconds to RFC 3339 UTC, enums to their values);
* the OpenAPI document's schemas (:mod:`leasefence.api.models` builds its response models from
  these classes: :func:`wire_fields`).

So a new field is one line here (and the engine's record that holds it). Standard library only:
the SDK needs nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, TypedDict, TypeVar, Union

from leasefence.clock import to_rfc3339
from leasefence.validation import HASH_PATTERN

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


@dataclass(frozen=True, eq=False)  # hashed by identity: it sits in Annotated[...] | None
class Doc:
    """A field's meaning, and what the OpenAPI document says of it beside its type."""

    text: str = ""
    #: JSON Schema keywords beside the type's own (e.g. a pattern).
    schema: Mapping[str, Any] | None = None
    #: False: the SDK's own field, never sent by the API (e.g. the claim token a request carried).
    wire: bool = True
    #: The API always sends a value, never null (the SDK's None is for a server older than it).
    always: bool = False


class Intent(TypedDict):
    """Class D: what a holder said it was about to do (a heartbeat's ``intent``)."""

    fence: Annotated[int, Doc("The fence under which it was recorded")]
    what: str


Hash = Annotated[str, Doc("sha256:<64 lowercase hex>", {"pattern": HASH_PATTERN})]


def _one_of(names: Any) -> Doc:
    return Doc(schema={"enum": list(typing.get_args(names))})


# The SDK holds these as plain strings (as it always did); the document lists their values.
State = Annotated[str, _one_of(StateName)]
PayloadState = Annotated[str, _one_of(PayloadStateName)]
TargetClass = Annotated[str, _one_of(TargetClassName)]
TransitionKind = Annotated[str, _one_of(TransitionName)]


@dataclass(frozen=True)
class Operation:
    """An operation: its identity, where it stands, and who holds it."""

    operation_id: str
    job_type: str
    state: State
    fence: Annotated[int, Doc("Rises by one with every claim; never goes down")]
    attempts: Annotated[int, Doc("Claims made so far (attempts spent)")]
    max_attempts: int
    target_class: TargetClass
    payload_hash: Hash
    payload_ref: Annotated[
        str | None,
        Doc(
            "Where the payload lives: your reference, or leasefence's S3 object; null for a "
            "payload leasefence keeps in DynamoDB beside the operation (canonical JSON of at most "
            "1 KiB, or of at most 8 KiB that packs to 1 KiB)"
        ),
    ]
    outcome_code: str | None
    lease_owner: Annotated[str | None, Doc("The worker holding the claim (claimed only)")]
    lease_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    payload_state: Annotated[
        PayloadState | None,
        Doc(
            "external: the caller's payload_ref; stored: the inline payload is kept; purged: "
            "deleted after its retention; erased: deleted by an operator (with the operation's "
            "free text)",
            always=True,
        ),
    ] = None
    erased_at: Annotated[datetime | None, Doc("When the operation was erased; null if never")] = (
        None
    )
    job_type_version: Annotated[
        int | None,
        Doc(
            "The version of the job type's catalogue entry it was enqueued under; null for an "
            "uncatalogued job type"
        ),
    ] = None
    approval_expires_at: Annotated[
        datetime | None,
        Doc(
            "awaiting_approval: until when an approval is accepted (then the sweeper ends it "
            "failed_terminal, outcome approval_expired); null otherwise"
        ),
    ] = None
    approved_by: Annotated[
        str | None, Doc("The approver's identity (the token's sub); null if not approved")
    ] = None
    enqueued_by: Annotated[
        str | None,
        Doc(
            "Who enqueued it (the producer's identity), for an operation that went through the "
            "approval gate; null otherwise (the history's enqueue entry names the actor)"
        ),
    ] = None
    reason: Annotated[
        str | None,
        Doc(
            "The latest failure or park reason, or a rejection's note (null when none, or "
            "erased); an operator's resolution note is in the history"
        ),
    ] = None
    intent: Annotated[
        Intent | None,
        Doc(
            "Class D: the intent a holder recorded before its side effect (what, under which "
            "fence), or null"
        ),
    ] = None
    checkpoint: Annotated[
        Any, Doc("The latest checkpoint a holder kept (the handler's JSON), or null")
    ] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Operation:
        return from_json(cls, data)


@dataclass(frozen=True)
class Claim:
    """A claim: act on the operation under this fence until the lease runs out."""

    operation_id: str
    job_type: str
    fence: Annotated[int, Doc("Your fence: every command of this claim names it")]
    attempts: int
    lease_expires_at: datetime
    payload_ref: str | None
    payload_hash: Hash
    target_class: TargetClass
    reconcile_required: Annotated[
        bool,
        Doc("An earlier attempt may have acted: look before acting (after the first attempt)"),
    ]
    checkpoint: Annotated[Any, Doc("The last checkpoint a heartbeat kept, or null")]
    intent: Annotated[
        Intent | None,
        Doc("Class D: the intent an earlier holder recorded (a heartbeat's `intent`), or null"),
    ] = None
    claimed_at: Annotated[
        datetime | None,
        Doc(
            "When the claim was granted, by the server's clock: lease_expires_at is claimed_at "
            "+ lease_ms",
            always=True,
        ),
    ] = None
    lease_ms: Annotated[
        int | None,
        Doc(
            "The lease GRANTED, in ms: what was asked for, the job type's default when none "
            "was, or its max_lease_seconds when more was asked for. Renew well within it",
            always=True,
        ),
    ] = None
    lease_seconds: Annotated[
        int | None,
        Doc(
            "The lease granted in whole seconds (lease_ms // 1000; lease_ms is exact)",
            always=True,
        ),
    ] = None
    payload: Annotated[
        Any,
        Doc(
            "The payload as enqueued (the JSON value whose canonical JSON hashes to "
            "payload_hash), for a payload leasefence stores (payload_state stored): no GET "
            ".../payload needed. null when the payload is the caller's (payload_ref), purged, "
            "erased, or could not be read when the claim was answered (GET .../payload says why)"
        ),
    ] = dataclasses.field(default=None, repr=False)
    traceparent: Annotated[
        str | None,
        Doc(
            "The W3C traceparent to continue (OpenTelemetry): the claim's span when the service "
            "traces claims, else the producer's as enqueued (its `traceparent` header); null "
            "when the operation was enqueued without one and the claim was not traced"
        ),
    ] = dataclasses.field(default=None, compare=False)
    tracestate: Annotated[
        str | None,
        Doc("The W3C tracestate that goes with traceparent, or null"),
    ] = dataclasses.field(default=None, compare=False)
    claim_token: Annotated[
        str | None,
        Doc(
            "The claim token the request carried (resend it to get this claim again while it "
            "holds)",
            wire=False,
        ),
    ] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], claim_token: str | None = None) -> Claim:
        return from_json(cls, data, claim_token=claim_token)


@dataclass(frozen=True)
class HistoryEntry:
    """One transition of an operation (``GET /v1/operations/{id}/history``)."""

    sequence: Annotated[
        int, Doc("The operation's transition counter: 1 for the enqueue, +1 per transition")
    ]
    time: Annotated[datetime, Doc("When the transition was made (the clock of whoever made it)")]
    transition: Annotated[
        TransitionKind,
        Doc(
            "What happened: enqueue, claim, takeover (a claim of a lapsed lease: the fence rose "
            "past a holder that stalled), complete, fail (failed_terminal), retry / retry_later "
            "(a retryable failure back to queued, claimable at once / after a backoff), unknown, "
            "quarantine, sweep (the final lease lapsed: unknown), resolve / requeue (an "
            "operator's decision), erase, approve / reject (an approver's decision on an "
            "operation awaiting approval), approval_expire (no approval within its validity: "
            "failed_terminal), cancel (the producer withdrew it: cancelled)"
        ),
    ]
    previous_state: Annotated[State | None, Doc("The state before (null for the enqueue)")]
    state: State
    fence: Annotated[int, Doc("The operation's fence after the transition (a claim's is its own)")]
    attempt: Annotated[int, Doc("Attempts made so far")]
    actor: Annotated[
        str | None,
        Doc(
            "Who made it: the worker id (claims and a holder's closing transitions), the "
            "operator's or producer's identity from the token (sub, client_id or username), or "
            "leasefence-sweeper"
        ),
    ]
    previous_actor: Annotated[str | None, Doc("A takeover: the worker whose lease lapsed")] = None
    outcome_code: Annotated[str | None, Doc("complete, resolve: the outcome code")] = None
    reason: Annotated[
        str | None,
        Doc("The failure or park reason, or the operator's note (at most 256 characters)"),
    ] = None
    available_at: Annotated[
        datetime | None, Doc("retry, retry_later: when it is claimable again")
    ] = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryEntry:
        return from_json(cls, data)


@dataclass(frozen=True)
class HistoryPage:
    """A page of an operation's history, oldest first."""

    entries: Annotated[list[HistoryEntry], Doc("Oldest first")]
    next_cursor: str | None
    dropped: Annotated[
        int,
        Doc(
            "Entries left out to keep the history bounded (the oldest after the first: a "
            "history keeps the enqueue and the 49 newest transitions)"
        ),
    ] = 0
    history_expired_at: Annotated[
        datetime | None,
        Doc(
            "When the history expired (null: it did not): an ended operation keeps its history "
            "for the payload retention after its end (30 days by default), then only its identity "
            "(the entries are gone; an erasure after that adds its own entry)"
        ),
    ] = None


@dataclass(frozen=True)
class OperationPage:
    """A page of a tenant's operations, in id order."""

    operations: list[Operation]
    next_cursor: str | None


@dataclass(frozen=True)
class EnqueueResult:
    """An enqueue's answer: ``created`` is false for a replay (nothing new was scheduled)."""

    operation: Operation
    created: bool


# ---------------------------------------------------------------------------------- derivation

R = TypeVar("R")


@dataclass(frozen=True)
class WireField:
    """One field as the API sends it."""

    name: str
    #: The field's type without its :class:`Doc` (e.g. ``datetime | None``).
    type: Any
    doc: Doc


def _split(hint: Any) -> tuple[Any, Doc]:
    """``(type, doc)`` of an annotation: the field's own :class:`Doc` over an alias's (``Hash``),
    the alias's schema kept."""
    if typing.get_origin(hint) in (Union, types.UnionType):  # X | None with X an alias
        parts = [_split(arg) for arg in typing.get_args(hint)]
        lifted = next((d for _, d in parts if d.text or d.schema), Doc())
        return Union[tuple(base for base, _ in parts)], lifted  # noqa: UP007
    if typing.get_origin(hint) is not Annotated:
        return hint, Doc()
    base, *extras = typing.get_args(hint)
    inner, inner_doc = _split(base)
    doc = next((e for e in extras if isinstance(e, Doc)), None)
    if doc is None:
        return inner, inner_doc
    return inner, dataclasses.replace(
        doc, text=doc.text or inner_doc.text, schema=doc.schema or inner_doc.schema
    )


@functools.cache
def _all_fields(cls: type) -> tuple[WireField, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = (
        [f.name for f in dataclasses.fields(cls)]
        if dataclasses.is_dataclass(cls)
        else list(hints)  # a TypedDict
    )
    return tuple(WireField(name, *_split(hints[name])) for name in names)


def wire_fields(cls: type) -> tuple[WireField, ...]:
    """The fields of a resource (a dataclass above, or :class:`Intent`) that the API sends."""
    return tuple(f for f in _all_fields(cls) if f.doc.wire)


def optional(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None``, else ``(hint, False)``."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) < len(typing.get_args(hint)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return hint, False


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _read(hint: Any, value: Any) -> Any:
    """A JSON value as the SDK type ``hint`` holds it."""
    hint, _ = _split(hint)
    if value is None:
        return None
    hint, _nullable = optional(hint)
    if hint is datetime:
        return _parse_time(value)
    if hint is int:
        return int(value)
    if hint is bool:
        return bool(value)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return [_read(item, v) for v in value]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_json(hint, value)
    return value


def from_json(cls: type[R], data: Mapping[str, Any], **local: Any) -> R:
    """A resource read from the API's JSON. A field the answer lacks (a server older than the
    field) takes its default, or None when it may be null; ``local`` sets the SDK's own fields."""
    values: dict[str, Any] = {}
    defaults = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for field in _all_fields(typing.cast(type, cls)):
        if not field.doc.wire:
            if field.name in local:
                values[field.name] = local[field.name]
            continue
        if field.name in data:
            values[field.name] = _read(field.type, data[field.name])
        elif defaults[field.name].default is not dataclasses.MISSING:
            continue
        elif optional(field.type)[1] or field.type is Any:
            values[field.name] = None
        else:
            raise KeyError(field.name)
    return cls(**values)


def _write(hint: Any, value: Any) -> Any:
    """A value of a record (or of a resource) as the API sends it."""
    if value is None:
        return None
    hint, _nullable = optional(hint)
    if hint is datetime:
        if isinstance(value, datetime):
            return to_rfc3339(round(value.timestamp() * 1000))
        return to_rfc3339(int(value))  # the engine's integer milliseconds
    if isinstance(value, Enum):
        return value.value
    return value


def dump(cls: type, source: Any, **values: Any) -> dict[str, Any]:
    """The resource ``cls`` as the API sends it, each field taken from ``values`` or else from
    ``source`` (an engine record's attribute, or a mapping's key): one answer per resource."""
    out: dict[str, Any] = {}
    for field in wire_fields(cls):
        if field.name in values:
            value = values[field.name]
        elif isinstance(source, Mapping):
            value = source.get(field.name)
        else:
            value = getattr(source, field.name)
        out[field.name] = _write(field.type, value)
    return out
