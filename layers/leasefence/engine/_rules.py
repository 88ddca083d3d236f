"""The engine's pure decisions: no I/O, no clock, no metrics; items in, answers out.

Each transition is one conditional write; these functions decide what a write may be tried on
(:func:`is_claimable`), and what a refused write's ``ALL_OLD`` item means: a replay of this very
command, a lost race, or which refusal to raise (the ``*_refusal`` functions return the error, or
None when the refusal is a replay that answers with the item as it is). They are unit-tested
without a store (``tests/engine/test_rules.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

from leasefence.errors import (
    AlreadyAttempted,
    InvalidInput,
    InvalidTransition,
    LeaseFenceError,
    NotFound,
    PayloadMismatch,
    PayloadMissing,
    SelfApproval,
    StaleFence,
)
from leasefence.limits import BACKOFF_BASE_MS, BACKOFF_CAP_MS, FENCE_EPOCH_SPAN
from leasefence.model import Claim, Operation, Resolution, State, Transition
from leasefence.schema import DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK, OperationItem
from leasefence.tracecontext import TraceContext

Item = OperationItem

#: The outcome codes of the approval gate's ends (``failed_terminal``) and of a cancel.
OUTCOME_REJECTED = "rejected"
OUTCOME_APPROVAL_EXPIRED = "approval_expired"
OUTCOME_CANCELLED = "cancelled"
#: What an erased class-D intent says instead of the handler's description (its fence stays).
ERASED_INTENT = "erased"

# ------------------------------------------------------------------ claims


def is_claimable(item: Item, now: int, types: tuple[str, ...] | None = None) -> bool:
    """Whether a claim write may be tried on ``item`` (as read, or from an index entry) at
    ``now``: of a job type asked for, attempts left, and queued and due or claimed under a lapsed
    lease (index entries carry no lease: the write's condition checks the real one)."""
    if types is not None and item.get("job_type") not in types:
        return False
    if int(item["attempts"]) >= int(item["max_attempts"]):
        return False
    state = item.get("state")
    if state == State.QUEUED:
        return int(item.get(DUE_SK, now)) <= now
    if state == State.CLAIMED:
        return "lease_expires_at" not in item or int(item["lease_expires_at"]) <= now
    return False


def is_live_claim(item: Item, now: int) -> bool:
    """Claimed under a lease that has not lapsed at ``now``."""
    return item.get("state") == State.CLAIMED and int(item.get("lease_expires_at", now)) > now


def is_claim_of(item: Item | None, worker_id: str, claim_token: str) -> bool:
    """Whether ``item`` (as a refused write returned it, or as read) shows the claim this worker
    made under this token, still held: every claim write sets ``claim_token``, so a later claim by
    anyone else replaced it; a finished or parked claim is no longer ``claimed``. A lapsed lease
    alone does not end it (as for every fenced write)."""
    return (
        item is not None
        and item.get("state") == State.CLAIMED
        and item.get("claim_token") == claim_token
        and item.get("lease_owner") == worker_id
    )


def claim_fence(fence: int, fence_floor: int) -> int:
    """The fence a claim of an operation read at ``fence`` gives: one above it, and above the
    floor of the engine's fence epoch (after a restore, above every fence handed out before)."""
    return max(fence + 1, fence_floor + 1)


def claimed_by_another(item: Item, fence: int, claim_token: str) -> bool:
    """Whether ``item`` holds, at ``fence``, a claim made under another claim token."""
    return (
        item.get("state") == State.CLAIMED
        and int(item.get("fence", -1)) == fence
        and item.get("claim_token") != claim_token
    )


def lost_race(current: Item, snapshot: Item) -> bool:
    """A claim write refused because another claimer took the operation since ``snapshot``."""
    return int(current.get("fence", 0)) > int(snapshot["fence"])


def capped_lease(current: Item, lease_ms: int | None) -> int | None:
    """The lease to ask for next: the job type's maximum when ``lease_ms`` is above it."""
    if lease_ms is not None and int(current.get("lease_max_ms", lease_ms)) < lease_ms:
        return int(current["lease_max_ms"])
    return lease_ms


def misfiled_index(item: Item, now: int) -> tuple[str, str] | None:
    """For a live claim filed in the ``due`` (else ``sweep``) index before its lease (heartbeats
    extended it): that index's ``(sort key, partition key)`` to re-file it at; else None."""
    if item.get("state") != State.CLAIMED or "lease_expires_at" not in item:
        return None
    lease = int(item["lease_expires_at"])
    if lease <= now:
        return None
    if DUE_PK in item and int(item.get(DUE_SK, lease)) < lease:
        return DUE_SK, DUE_PK
    if SWEEP_PK in item and int(item.get(SWEEP_SK, lease)) < lease:
        return SWEEP_SK, SWEEP_PK
    return None


def claim_of(item: OperationItem, worker_id: str, takeover: bool) -> Claim:
    """The :class:`~leasefence.model.Claim` a claimed item shows."""
    operation = Operation.from_item(item)
    lease_expires_at, lease_ms = int(item["lease_expires_at"]), int(item["lease_ms"])
    return Claim(
        tenant_id=operation.tenant_id,
        operation_id=operation.operation_id,
        job_type=operation.job_type,
        fence=operation.fence,
        attempts=operation.attempts,
        lease_expires_at=lease_expires_at,
        lease_ms=lease_ms,
        payload_ref=operation.payload_ref,
        payload_hash=operation.payload_hash,
        target_class=operation.target_class,
        # Any claim after the first attempt (a requeue from unknown is always after one) may
        # follow a side effect that already happened: reconcile before acting.
        reconcile_required=operation.attempts > 1 or bool(item.get("requeued")),
        checkpoint=operation.checkpoint,
        takeover=takeover,
        worker_id=worker_id,
        intent=operation.intent,
        payload_inline=operation.payload_inline,
        payload_json=operation.payload_json,
        layout=operation.layout,
        # A claim written before ``claimed_at`` was kept, and not renewed since, says it so.
        claimed_at=int(item.get("claimed_at", lease_expires_at - lease_ms)),
        trace_context=TraceContext.of_item(item),
    )


# ------------------------------------------------------------------ fenced commands


def fenced_refusal(current: Item | None) -> NotFound | StaleFence:
    """A fenced command refused: the operation is gone, or this fence no longer holds it."""
    if current is None:
        return NotFound("operation not found")
    return StaleFence(
        "this fence no longer holds the claim",
        current_fence=int(current.get("fence", 0)),
        state=current.get("state"),
    )


def lease_over_maximum(current: Item | None, fence: int, worker_id: str, lease_ms: int) -> bool:
    """A heartbeat of the holding fence refused only because its lease is above the maximum."""
    return (
        current is not None
        and current.get("state") == State.CLAIMED
        and int(current.get("fence", -1)) == fence
        and current.get("lease_owner") == worker_id
        and int(current.get("lease_max_ms", lease_ms)) < lease_ms
    )


def lease_too_long(current: Item) -> InvalidInput:
    return InvalidInput(
        f"lease_seconds exceeds this job type's maximum lease "
        f"({int(current['lease_max_ms']) // 1000} s)"
    )


def closing_transition(command: str, target: State, delay_ms: int | None) -> Transition:
    """The transition a holder's closing command records."""
    if target is State.QUEUED:
        return Transition.RETRY if not delay_ms else Transition.RETRY_LATER
    return {
        "complete": Transition.COMPLETE,
        "fail": Transition.FAIL,
        "unknown": Transition.UNKNOWN,
        "quarantine": Transition.QUARANTINE,
    }[command]


class CloseRefusal(Enum):
    """What a refused closing write means."""

    #: The same fence already made this transition: a retry after a lost answer.
    REPLAY = "replay"
    #: A requeue refused only because no attempt is left: the failure is terminal instead.
    NO_ATTEMPTS_LEFT = "no_attempts_left"
    #: The operation is gone or this fence no longer holds it (:func:`fenced_refusal`).
    REFUSED = "refused"


def classify_close_refusal(
    current: Item | None, fence: int, command: str, fields: Mapping[str, Any], target: State
) -> CloseRefusal:
    """Decide from the refused close's ``ALL_OLD`` item (``fields``: what the close writes; its
    ``outcome_code``, if any, must match for a replay)."""
    if current is None:
        return CloseRefusal.REFUSED
    if (
        current.get("closed_fence") == fence
        and int(current.get("fence", -1)) == fence  # nobody claimed since: not a stale fence
        and current.get("closed_by") == command
        and ("outcome_code" not in fields or current.get("outcome_code") == fields["outcome_code"])
    ):
        return CloseRefusal.REPLAY
    if (
        target is State.QUEUED
        and current.get("state") == State.CLAIMED
        and int(current.get("fence", -1)) == fence
    ):
        return CloseRefusal.NO_ATTEMPTS_LEFT
    return CloseRefusal.REFUSED


def backoff_ceiling_ms(fence: int) -> int:
    """The longest backoff of a retryable failure under ``fence`` (full jitter below it): doubles
    with the fence's place in its epoch (each claim raises it, and the attempts, by one)."""
    step = (fence - 1) % FENCE_EPOCH_SPAN
    return min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * int(2 ** min(step, 20)))


# ------------------------------------------------------------------ the approval gate, operator


def approval_refusal(current: Item | None, payload_hash: str, actor: str) -> LeaseFenceError | None:
    """Why an approval was refused (checked in this order), or None: it was approved already (a
    replay)."""
    if current is None:
        return NotFound("operation not found")
    if current["payload_hash"] != payload_hash:
        return PayloadMismatch(
            "payload_hash is not the operation's: the approval names other content"
        )
    # By who asks: the enqueuer is refused in every state, a replay of an approval included
    # (its 200 would read as a self-approval that succeeded).
    if current.get("enqueued_by") == actor:
        return SelfApproval("an operation cannot be approved by the identity that enqueued it")
    if current.get("approved_by") is not None:
        return None
    state = current["state"]
    if state != State.AWAITING_APPROVAL:
        return InvalidTransition(
            f"only an operation awaiting approval can be approved (state is {state})"
        )
    if "erased_at" in current or "payload_purged_at" in current:
        return PayloadMissing(
            "the payload was erased: there is nothing left to approve (reject or cancel it)"
        )
    return InvalidTransition("the approval window closed; the operation ends approval_expired")


def rejection_refusal(current: Item | None) -> LeaseFenceError | None:
    """Why a rejection was refused, or None: it was rejected already (a replay)."""
    if current is None:
        return NotFound("operation not found")
    if (
        current["state"] == State.FAILED_TERMINAL
        and current.get("outcome_code") == OUTCOME_REJECTED
    ):
        return None
    return InvalidTransition(
        f"only an operation awaiting approval can be rejected (state is {current['state']})"
    )


def cancel_refusal(current: Item | None) -> LeaseFenceError | None:
    """Why a cancel was refused, or None: it was cancelled already (a replay). Queued (or
    awaiting) again after an attempt is :class:`AlreadyAttempted`."""
    if current is None:
        return NotFound("operation not found")
    if current["state"] == State.CANCELLED:
        return None
    if current["state"] in (State.QUEUED, State.AWAITING_APPROVAL):
        return AlreadyAttempted(
            "only an operation no worker ever claimed can be cancelled: this one was "
            f"attempted {int(current.get('attempts', 0))} time(s) and is queued again; "
            "its next claim reconciles it (or an operator resolves it)",
            attempts=int(current.get("attempts", 0)),
        )
    return InvalidTransition(
        "only a queued operation or one awaiting approval can be cancelled "
        f"(state is {current['state']})"
    )


def changed_since_seen(
    current: Item, seen_state: State | str | None, seen_fence: int | None
) -> LeaseFenceError | None:
    """Why a write pinned to the state and fence an operator saw was refused, when the
    operation moved on since (:class:`StaleFence`: read it again and decide again); None when
    it is still as seen (or nothing was pinned)."""
    state, fence = current.get("state"), int(current.get("fence", 0))
    if (seen_state is None or state == State(seen_state)) and (
        seen_fence is None or fence == seen_fence
    ):
        return None
    return StaleFence(
        f"the operation changed since it was read (it is {state} under fence {fence}; it was "
        f"read {seen_state or state} under fence {fence if seen_fence is None else seen_fence}): "
        "read it again and decide again"
    )


def resolution_transition(resolution: Resolution) -> Transition:
    return Transition.REQUEUE if resolution is Resolution.REQUEUE else Transition.RESOLVE


def resolved_already(
    item: Item, resolution: Resolution, note: str, actor: str | None, request_token: str | None
) -> bool:
    """Whether a refused resolve's item shows this very decision applied already: with a request
    token, the item carries it; without one, the item's last transition is this decision (same
    resolution, actor and note, and no token)."""
    if item.get("resolved_as") != resolution.value:
        return False
    if request_token is not None:
        return bool(item.get("resolve_token") == request_token)
    return (
        item.get("transition") == resolution_transition(resolution).value
        and item.get("actor") == actor
        and item.get("resolution_note", "") == note
        and "resolve_token" not in item
    )


# ------------------------------------------------------------------ erasure


def erased_intent(item: Item) -> str | None:
    """The intent an erasure keeps (JSON ``{"fence": f, "what": "erased"}``), or None when no
    intent was ever recorded: from the ``intent`` attribute, or from a checkpoint of an operation
    recorded before that attribute existed (``{"intent_fence": f, ...}``)."""
    fence = None
    for text, field in ((item.get("intent"), "fence"), (item.get("checkpoint"), "intent_fence")):
        try:
            value = json.loads(text) if text is not None else None
        except (TypeError, ValueError):
            value = None
        if isinstance(value, dict) and isinstance(value.get(field), int):
            fence = value[field]
            break
    if fence is None:
        return None
    return json.dumps({"fence": fence, "what": ERASED_INTENT}, separators=(",", ":"))
