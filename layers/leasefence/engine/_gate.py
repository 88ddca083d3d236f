"""The approval gate and the operator's decisions: approve, reject, cancel, resolve.

Each is one conditional write; what refused it is read from the refusal's ``ALL_OLD`` item
(:mod:`._rules`), never checked beforehand, and the same decision sent again is a replay.
"""

from __future__ import annotations

import logging
from typing import Any

from leasefence import hash_form, history
from leasefence.engine import _expr as x
from leasefence.engine import _payload_items as payload_items
from leasefence.engine import _rules as rules
from leasefence.engine._context import EngineContext
from leasefence.errors import (
    InvalidInput,
    InvalidTransition,
    NotFound,
    PayloadMismatch,
    Unavailable,
)
from leasefence.limits import MAX_REASON_LENGTH
from leasefence.metrics import Metric
from leasefence.model import (
    OPERATOR_ACTOR,
    Operation,
    Resolution,
    State,
    Transition,
)
from leasefence.schema import (
    DUE_HOME,
    DUE_PK,
    DUE_SK,
    PARKED_PK,
    PARKED_SK,
    SWEEP_PK,
    SWEEP_SK,
    OperationItem,
)
from leasefence.store import ConditionFailed
from leasefence.validation import validate_actor, validate_hash, validate_id, validate_text

log = logging.getLogger("leasefence.engine")

_INDEXES = {"#dpk": DUE_PK, "#due": DUE_SK, "#spk": SWEEP_PK, "#sat": SWEEP_SK}


def _pinned(expr: x.Expr, expected: tuple[State | None, int | None]) -> str:
    """The condition's part that pins a resolve to what the operator saw (a bulk triage's
    items): the state and the fence read ("" when nothing is pinned)."""
    seen_state, seen_fence = expected
    condition = ""
    if seen_state is not None:
        if State(seen_state) not in (State.UNKNOWN, State.QUARANTINED):
            raise InvalidInput("expected_state of a resolve must be unknown or quarantined")
        expr.value({":seen": State(seen_state).value})
        condition += " AND #state = :seen"
    if seen_fence is not None:
        expr.name({"#fence": "fence"}).value({":seenf": seen_fence})
        condition += " AND #fence = :seenf"
    return condition


def _refuse_if_moved_on(current: Any, expected: tuple[State | None, int | None]) -> None:
    """A pinned resolve refused because the parked operation moved on since it was read:
    :class:`~leasefence.errors.StaleFence` (one no longer parked is refused as before)."""
    changed = rules.changed_since_seen(current, *expected)
    if changed is not None and current.get("state") in (State.UNKNOWN, State.QUARANTINED):
        raise changed from None


def end_early(
    ctx: EngineContext,
    tenant_id: str,
    operation_id: str,
    transition: Transition,
    target: State,
    outcome_code: str,
    actor: str | None,
    sources: tuple[State, ...],
    reason: str | None,
    extra_condition: str = "",
    extra_names: dict[str, str] | None = None,
    extra_values: dict[str, Any] | None = None,
) -> OperationItem:
    """End an operation no worker holds (one of ``sources``) in ``target``: one conditional
    write that takes it out of every index and gives it a final state's retention.
    :class:`ConditionFailed` (with the current item) when it was in no source state."""
    now = ctx.clock()
    in_a_source, source_values = x.in_states(sources)
    expr = x.Expr(x.TRANSITION_NAMES, x.ACTOR, x.STATE, _INDEXES)
    expr.value(
        {
            ":to": target.value,
            ":code": outcome_code,
            ":now": now,
            ":tr": transition.value,
            ":actor": actor,
            ":one": 1,
            **source_values,
        }
    )
    expr.set("#state = :to", "outcome_code = :code", "updated_at = :now", "#tr = :tr")
    expr.set("#actor = :actor")
    expr.history(
        history.compact_entry(
            transition, now, actor=actor, state=target, outcome_code=outcome_code, reason=reason
        )
    )
    if reason is not None:
        expr.values[":why"] = reason
        expr.set("reason = :why")
    expr.remove("#dpk", "#due", "#spk", "#sat", "approval_expires_at")
    expr.name(extra_names or {}).value(extra_values or {})
    expr.end_of_life(now, ctx.identity_retention_ms, ctx.payload_retention_ms)
    item = ctx.store.update_operation(
        ctx.locate(tenant_id, operation_id),
        *expr.add("#seq :one").write(in_a_source + extra_condition),
    )
    assert item is not None
    payload_items.after_end(ctx, item)
    return item


class ApprovalGate:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def approve(
        self, tenant_id: str, operation_id: str, payload_hash: str, actor: str
    ) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_hash(payload_hash)
        actor = validate_id("actor", actor)
        ctx = self.ctx
        expr = x.Expr(x.TRANSITION_NAMES, x.ACTOR, x.STATE, _INDEXES, {"#home": DUE_HOME})
        expr.value(
            {
                ":queued": State.QUEUED.value,
                ":awaiting": State.AWAITING_APPROVAL.value,
                **hash_form.condition_values(payload_hash),  # either stored form
                ":now": ctx.clock(),
                ":actor": actor,
                ":tr": Transition.APPROVE.value,
                ":one": 1,
            }
        )
        expr.set("#state = :queued", "#dpk = #home", "#due = :now", "approved_by = :actor")
        expr.set("approved_at = :now", "updated_at = :now", "#tr = :tr", "#actor = :actor")
        expr.history(history.compact_entry(Transition.APPROVE, expr.values[":now"], actor=actor))
        expr.remove("#spk", "#sat", "approval_expires_at").add("#seq :one")
        # Still awaiting, on the content the approver saw and that is still stored, in time, by
        # someone else.
        condition = (
            f"{x.IS_AWAITING_APPROVAL} AND {x.SAME_PAYLOAD} AND {x.PAYLOAD_KEPT} "
            f"AND {x.APPROVAL_WINDOW_OPEN} AND {x.NOT_SELF_APPROVAL}"
        )
        try:
            item = ctx.store.update_operation(
                ctx.locate(tenant_id, operation_id), *expr.write(condition)
            )
        except ConditionFailed as refused:
            error = rules.approval_refusal(refused.operation, payload_hash, actor)
            if error is None:
                assert refused.item is not None
                return Operation.from_item(refused.item)  # approved already: a replay
            if isinstance(error, PayloadMismatch):
                ctx.count(Metric.APPROVAL_MISMATCHES)
            raise error from None
        assert item is not None
        ctx.count(Metric.APPROVALS)
        log.info("approved", extra={"op": ctx.tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def reject(self, tenant_id: str, operation_id: str, actor: str, note: str) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_id("actor", actor)
        validate_text("note", note, MAX_REASON_LENGTH, required=False)
        ctx = self.ctx
        try:
            item = end_early(
                ctx,
                tenant_id,
                operation_id,
                Transition.REJECT,
                State.FAILED_TERMINAL,
                rules.OUTCOME_REJECTED,
                actor,
                (State.AWAITING_APPROVAL,),
                note or None,
            )
        except ConditionFailed as refused:
            error = rules.rejection_refusal(refused.operation)
            if error is None:
                assert refused.item is not None
                # Rejected already: a replay (its payload's expiry written again, in
                # case a fault between the two writes kept it from landing).
                return Operation.from_item(payload_items.after_close(ctx, refused.item))
            raise error from None
        ctx.count(Metric.REJECTIONS)
        log.info("rejected", extra={"op": ctx.tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def cancel(
        self,
        tenant_id: str,
        operation_id: str,
        actor: str | None,
        expected_state: State | None = None,
    ) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        sources: tuple[State, ...] = (State.QUEUED, State.AWAITING_APPROVAL)
        if expected_state is not None:
            # Pinned to the state the operator saw (a bulk triage's items).
            if State(expected_state) not in sources:
                raise InvalidInput("expected_state of a cancel must be queued or awaiting_approval")
            sources = (State(expected_state),)
        ctx = self.ctx
        try:
            item = end_early(
                ctx,
                tenant_id,
                operation_id,
                Transition.CANCEL,
                State.CANCELLED,
                rules.OUTCOME_CANCELLED,
                actor,
                sources,
                None,
                extra_condition=f" AND {x.NEVER_ATTEMPTED}",
                extra_names={"#fence": "fence"},
                extra_values={":zero": 0},
            )
        except ConditionFailed as refused:
            current = refused.operation
            if current is not None and current.get("state") in (
                State.QUEUED,
                State.AWAITING_APPROVAL,
            ):
                changed = rules.changed_since_seen(current, expected_state, None)
                if changed is not None and not int(current.get("attempts", 0)):
                    raise changed from None
            error = rules.cancel_refusal(current)
            if error is None:
                assert refused.item is not None
                # Cancelled already: a replay (its payload's expiry written again, in
                # case a fault between the two writes kept it from landing).
                return Operation.from_item(payload_items.after_close(ctx, refused.item))
            raise error from None
        ctx.count(Metric.CANCELLATIONS)
        log.info("cancelled", extra={"op": ctx.tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def resolve(
        self,
        tenant_id: str,
        operation_id: str,
        resolution: Resolution | str,
        note: str,
        actor: str | None,
        request_token: str | None,
        expected: tuple[State | None, int | None] = (None, None),
    ) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        try:
            resolution = Resolution(resolution)
        except ValueError as error:
            raise InvalidInput(
                "resolution must be succeeded, failed_terminal or requeue"
            ) from error
        validate_text("note", note, MAX_REASON_LENGTH, required=False)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        if request_token is not None:
            validate_id("request_token", request_token)
        ctx = self.ctx
        now = ctx.clock()
        expr = x.Expr(
            x.STATE,
            {"#ppk": PARKED_PK, "#pat": PARKED_SK, "#rtok": "resolve_token", "#ras": "resolved_as"},
            x.TRANSITION_NAMES,
            x.ACTOR,
        )
        expr.value(
            {
                ":unknown": State.UNKNOWN.value,
                ":quarantined": State.QUARANTINED.value,
                ":now": now,
                ":note": note or "",
                ":tr": rules.resolution_transition(resolution).value,
                ":actor": actor,
                ":one": 1,
                ":as": resolution.value,
            }
        )
        expr.set("resolution_note = :note", "updated_at = :now", "#tr = :tr", "#actor = :actor")
        expr.set("#ras = :as").remove("#ppk", "#pat")
        condition = x.IS_PARKED + _pinned(expr, expected)
        if request_token is None:
            expr.remove("#rtok")
        else:
            expr.values[":tok"] = request_token
            expr.set("#rtok = :tok")
            condition += f" AND {x.NOT_THIS_REQUEST}"
        expr.history(
            history.compact_entry(
                rules.resolution_transition(resolution),
                now,
                actor=actor,
                state=State.QUEUED if resolution is Resolution.REQUEUE else resolution.value,
                outcome_code=None
                if resolution is Resolution.REQUEUE
                else f"resolved:{resolution.value}",
                reason=note or None,
            )
        )
        if resolution is Resolution.REQUEUE:
            # A requeue restarts a loop: its history must have room (the history's bound,
            # leasefence.history); a refusal for that compacts it and requeues again, below.
            condition += f" AND {expr.history_room()}"
            expr.name({"#dpk": DUE_PK, "#due": DUE_SK, "#home": DUE_HOME})
            expr.value({":queued": State.QUEUED.value, ":true": True})
            expr.set(
                "#state = :queued",
                "max_attempts = attempts + attempt_budget",
                "#dpk = #home",
                "#due = :now",
                "requeued = :true",
            )
        else:
            expr.value({":to": resolution.value, ":code": f"resolved:{resolution.value}"})
            expr.set("#state = :to", "outcome_code = :code")
            expr.end_of_life(now, ctx.identity_retention_ms, ctx.payload_retention_ms)
        expr.add("#seq :one")
        for _ in range(3):
            try:
                item = ctx.store.update_operation(
                    ctx.locate(tenant_id, operation_id), *expr.write(condition)
                )
                break
            except ConditionFailed as refused:
                current = refused.operation
                if current is None:
                    raise NotFound("operation not found") from None
                if rules.resolved_already(current, resolution, note or "", actor, request_token):
                    ctx.count(Metric.REPLAYS)
                    # This decision, sent again: a replay (its payload's expiry written again,
                    # in case a crash kept it from landing).
                    return Operation.from_item(payload_items.after_close(ctx, current))
                _refuse_if_moved_on(current, expected)
                if (
                    resolution is Resolution.REQUEUE
                    and current.get("state") in (State.UNKNOWN, State.QUARANTINED)
                    and history.needs_room(current)
                ):
                    # Refused for the history's room: this write makes it (from the refusal's
                    # item, pinned to its seq), then requeues again. No publisher needed.
                    history.make_room(ctx.store, current)
                    continue
                raise InvalidTransition(
                    f"only unknown or quarantined operations can be resolved (state is {current['state']})"
                ) from None
        else:
            raise Unavailable("the operation kept changing while it was requeued; requeue it again")
        assert item is not None
        return Operation.from_item(payload_items.after_close(ctx, item))
