"""Domain values: states, target classes, and the records the engine returns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from leasefence.keys import tenant_of
from leasefence.tracecontext import TraceContext


class State(StrEnum):
    QUEUED = "queued"
    CLAIMED = "claimed"
    SUCCEEDED = "succeeded"
    FAILED_TERMINAL = "failed_terminal"
    UNKNOWN = "unknown"
    QUARANTINED = "quarantined"
    #: Enqueued under a job type that requires approval: in no claim index until approved.
    AWAITING_APPROVAL = "awaiting_approval"
    #: Withdrawn by its producer before any worker started it (final).
    CANCELLED = "cancelled"


#: States an operator must resolve; nothing automatic leaves them.
PARKED_STATES = frozenset({State.UNKNOWN, State.QUARANTINED})
#: States that never change again (and get a retention TTL).
TERMINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED_TERMINAL, State.CANCELLED})


class TargetClass(StrEnum):
    """What the side-effect target can enforce (see README, "Target classes")."""

    A = "A"  # same database: completion and business write in one transaction
    B = "B"  # conditional-write store: the target rejects a lower fence inside the write
    C = "C"  # external API with idempotency key and lookup: dedupe, not fencing
    D = "D"  # no idempotency, no lookup: one attempt, ambiguity parks as unknown


class Transition(StrEnum):
    """What the last write of an operation did, kept on the item (``transition``) with the
    ``actor`` who did it and a per-operation ``seq`` that every transition raises by one. The
    table's stream carries all three, so history, outcome events and stream dispatch read them
    from the stream record alone (see :mod:`leasefence.streams`)."""

    ENQUEUE = "enqueue"  # producer
    CLAIM = "claim"  # worker (a claim of a lapsed lease is shown as a takeover: claimed_from)
    COMPLETE = "complete"  # worker -> succeeded
    FAIL = "fail"  # worker -> failed_terminal
    RETRY = "retry"  # worker: a retryable failure, back to queued and claimable at once
    RETRY_LATER = "retry_later"  # worker: the same, claimable after a backoff
    UNKNOWN = "unknown"  # worker -> unknown
    QUARANTINE = "quarantine"  # worker -> quarantined
    SWEEP = "sweep"  # sweeper: final lease lapsed -> unknown
    RESOLVE = "resolve"  # operator -> succeeded | failed_terminal
    REQUEUE = "requeue"  # operator -> queued (fresh attempt budget)
    ERASE = "erase"  # operator: payload and free text erased (state unchanged)
    APPROVE = "approve"  # approver: awaiting_approval -> queued (claimable at once)
    REJECT = "reject"  # approver: awaiting_approval -> failed_terminal (outcome rejected)
    APPROVAL_EXPIRE = "approval_expire"  # sweeper: no approval in time -> failed_terminal
    CANCEL = "cancel"  # producer: queued | awaiting_approval -> cancelled
    #: Never written: how history and events name a claim of a lapsed lease (``claimed_from``
    #: is ``claimed``: the fence rose past a holder that stalled).
    TAKEOVER = "takeover"


#: The ``actor`` of a sweep, and of operator actions whose caller is not known.
SWEEPER_ACTOR = "leasefence-sweeper"
OPERATOR_ACTOR = "operator"


class Resolution(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED_TERMINAL = "failed_terminal"
    REQUEUE = "requeue"


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _json_attr(item: Mapping[str, Any], name: str) -> Any:
    raw = item.get(name)
    return None if raw is None else json.loads(raw)


@dataclass(frozen=True)
class Operation:
    tenant_id: str
    operation_id: str
    job_type: str
    state: State
    fence: int
    attempts: int
    max_attempts: int
    target_class: TargetClass
    payload_hash: str
    payload_ref: str | None
    outcome_code: str | None
    lease_owner: str | None
    lease_expires_at: int | None
    created_at: int
    updated_at: int
    reason: str | None = None
    checkpoint: Any = None
    #: Class D: what the holder said it was about to do, and under which fence (its own
    #: attribute: a later checkpoint never overwrites it). ``{"fence": int, "what": str}``.
    intent: Any = None
    #: The payload is an inline one that leasefence stores (``payload_ref`` names its object in
    #: S3; None: it is kept in the item, ``payload_json``).
    payload_inline: bool = False
    #: When the stored payload was deleted (after its retention, or by erasure); None while kept.
    payload_purged_at: int | None = None
    #: When an operator erased this operation's payload and free text (identity is kept).
    erased_at: int | None = None
    #: The version of the job type's catalogue entry it was enqueued under (None: uncatalogued).
    job_type_version: int | None = None
    #: Approval gate: until when an approval is accepted (set while it awaits one), who gave it
    #: (the approver's identity) and when.
    approval_expires_at: int | None = None
    approved_by: str | None = None
    approved_at: int | None = None
    #: It was enqueued under the approval gate (awaiting approval, or it did once): what a token
    #: with only the approve scope may read.
    approval_gated: bool = False
    #: Who enqueued it, kept for an operation enqueued under the approval gate (None otherwise).
    enqueued_by: str | None = None
    #: A stored payload kept in the item: its canonical JSON (None: in S3, by reference, purged
    #: or erased). Read it with :meth:`leasefence.engine.Engine.payload` (hash checked); never in
    #: the operation's ``repr``.
    payload_json: str | None = field(default=None, repr=False, compare=False)
    #: The table layout its item was written under (:data:`leasefence.schema.LAYOUT`; 1: by main
    #: 4f60178 or before). Layout 2 keeps a stored payload that fits 1 KiB (packed or not) in a
    #: payload item.
    layout: int = 1

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Operation:
        return cls(
            tenant_id=tenant_of(item["tenant_id"]),
            operation_id=item["operation_id"],
            job_type=item["job_type"],
            state=State(item["state"]),
            fence=int(item["fence"]),
            attempts=int(item["attempts"]),
            max_attempts=int(item["max_attempts"]),
            target_class=TargetClass(item["target_class"]),
            payload_hash=item["payload_hash"],
            payload_ref=item.get("payload_ref"),
            outcome_code=item.get("outcome_code"),
            lease_owner=item.get("lease_owner"),
            lease_expires_at=_int(item.get("lease_expires_at")),
            created_at=int(item["created_at"]),
            updated_at=int(item["updated_at"]),
            reason=item.get("reason"),
            checkpoint=_json_attr(item, "checkpoint"),
            intent=_json_attr(item, "intent"),
            payload_inline=bool(item.get("payload_inline", False)),
            payload_purged_at=_int(item.get("payload_purged_at")),
            erased_at=_int(item.get("erased_at")),
            job_type_version=_int(item.get("job_type_version")),
            approval_expires_at=_int(item.get("approval_expires_at")),
            approved_by=item.get("approved_by"),
            approved_at=_int(item.get("approved_at")),
            # Every gated operation records its enqueuer (kept by erasure, compaction and every
            # transition); older ones are recognized by their state or their approver.
            approval_gated=item.get("enqueued_by") is not None
            or item["state"] == State.AWAITING_APPROVAL
            or item.get("approved_by") is not None,
            enqueued_by=item.get("enqueued_by"),
            payload_json=item.get("payload_json"),
            layout=int(item.get("lv", 1)),
        )

    @property
    def payload_state(self) -> str:
        """``external`` (a caller's ``payload_ref``), ``stored``, ``purged`` or ``erased``."""
        if self.erased_at is not None:
            return "erased"
        if not self.payload_inline:
            return "external"
        return "stored" if self.payload_purged_at is None else "purged"


@dataclass(frozen=True)
class EnqueueResult:
    operation: Operation
    created: bool


@dataclass(frozen=True)
class Claim:
    tenant_id: str
    operation_id: str
    job_type: str
    fence: int
    attempts: int
    lease_expires_at: int
    lease_ms: int
    payload_ref: str | None
    payload_hash: str
    target_class: TargetClass
    reconcile_required: bool
    checkpoint: Any
    takeover: bool
    worker_id: str
    #: The intent a previous holder recorded (class D), or None.
    intent: Any = None
    #: The payload is one leasefence stores (``payload_ref`` names its object; None: in the item).
    payload_inline: bool = False
    #: When this claim was granted (ms), by the clock of the engine that granted it: the claim
    #: write sets ``lease_expires_at = claimed_at + lease_ms``, where ``lease_ms`` is the lease
    #: GRANTED (a job type's ``max_lease_seconds`` may have cut the lease asked for). Both
    #: backends state it; None only for a claim built by hand without it (then
    #: ``lease_expires_at - lease_ms`` is the claim time: see
    #: :func:`leasefence.targets.fenced_table.claimed_at`).
    claimed_at: int | None = None
    #: The payload's JSON value as a claim answer over HTTP carried it (None: not carried, e.g.
    #: by reference, or a server older than the field; read it with ``GET .../payload``). Never
    #: in the claim's ``repr``: a claim may be logged, a payload never is.
    payload: Any = field(default=None, repr=False, compare=False)
    #: In-process: the stored payload's canonical JSON as the claimed item keeps it (None: in
    #: S3, by reference, or gone); :meth:`leasefence.engine.Engine.payload` reads it, hash checked.
    payload_json: str | None = field(default=None, repr=False, compare=False)
    #: The table layout of the claimed item (see :attr:`Operation.layout`).
    layout: int = 1
    #: The trace context the worker continues (:mod:`leasefence.otel`): the claim span's when
    #: the claimer traced the claim, else the producer's as the operation keeps it; None when
    #: the operation was enqueued without one and nobody traced the claim. Telemetry, not the
    #: claim: a resent claim request answers the same claim in a span of its own.
    trace_context: TraceContext | None = field(default=None, compare=False)

    @property
    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of :attr:`trace_context` (what a claim answer carries)."""
        return None if self.trace_context is None else self.trace_context.traceparent

    @property
    def tracestate(self) -> str | None:
        """Its ``tracestate``, when there is one."""
        return None if self.trace_context is None else self.trace_context.tracestate


@dataclass(frozen=True)
class Page:
    operations: list[Operation]
    next_cursor: str | None


@dataclass
class TenantErasure:
    """One bounded step of a tenant-wide erasure; call again with ``next_cursor`` until None."""

    rows_deleted: int = 0
    payloads_deleted: int = 0
    held: int = 0  # claimed operations left alone this time (erase again once they end)
    next_cursor: str | None = None
    #: Everything of the tenant is gone, its hold too (enqueues are accepted again: a new tenant).
    finished: bool = False
    #: How long to wait before the step ``next_cursor`` names can finish (ms; 0: at once).
    wait_ms: int = 0

    def to_public(self) -> dict[str, Any]:
        return {
            "rows_deleted": self.rows_deleted,
            "payloads_deleted": self.payloads_deleted,
            "held": self.held,
            "next_cursor": self.next_cursor,
            "finished": self.finished,
            "wait_ms": self.wait_ms,
        }


@dataclass
class TtlClearing:
    """One bounded step of clearing the TTLs of ended identities after the identity retention
    became forever (:meth:`leasefence.engine.Engine.clear_ttls`)."""

    #: ``window``: retention is a window, nothing to clear; ``clearing``: a pass is under way;
    #: ``waiting``: a pass ended, the final one starts after the switch's grace; ``done``.
    state: str = "window"
    examined: int = 0  # items this step's page of the table scan read
    cleared: int = 0  # TTLs removed by this step


@dataclass
class PurgeResult:
    examined: int = 0
    purged: int = 0
    failed: int = 0  # transient store failures: those payloads stay due for the next run


@dataclass
class SweepResult:
    examined: int = 0
    swept: int = 0
    repaired: int = 0
    #: Operations whose approval was not given in time, ended ``failed_terminal``.
    approvals_expired: int = 0
    swept_keys: list[tuple[str, str]] = field(default_factory=list)
