"""The engine's pure decisions (leasefence.engine._rules), without a store: what a claim may be
tried on, and what a refused write's ALL_OLD item means (a replay, a lost race, which refusal)."""

from __future__ import annotations

import json

import pytest
from leasefence.engine import _rules as rules
from leasefence.engine._expr import Expr, in_states, job_type_in, unchanged
from leasefence.errors import (
    AlreadyAttempted,
    InvalidTransition,
    NotFound,
    PayloadMismatch,
    SelfApproval,
    StaleFence,
)
from leasefence.limits import BACKOFF_BASE_MS, BACKOFF_CAP_MS, FENCE_EPOCH_SPAN, PURGE_BEFORE_TTL_MS
from leasefence.model import Resolution, State, Transition
from leasefence.schema import DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK

H = "sha256:" + "a" * 64
NOW = 1_000_000


def item(**fields):
    base = {"tenant_id": "t", "operation_id": "op", "job_type": "refund", "fence": 0,
            "attempts": 0, "max_attempts": 3, "state": "queued", DUE_SK: NOW}
    return {**base, **fields}


def claimed(fence=1, lease=NOW + 5_000, **fields):
    base = {"state": "claimed", "fence": fence, "attempts": fence, "lease_expires_at": lease,
            "lease_owner": "w1", "claim_token": "tok"}
    return item(**{**base, **fields})


# ------------------------------------------------------------------ claimable


def test_a_queued_operation_is_claimable_once_due():
    assert rules.is_claimable(item(), NOW)
    assert not rules.is_claimable(item(**{DUE_SK: NOW + 1}), NOW)
    assert rules.is_claimable(item(**{DUE_SK: NOW + 1}), NOW + 1)


def test_a_claim_is_claimable_only_once_its_lease_lapsed():
    assert not rules.is_claimable(claimed(lease=NOW + 1), NOW)
    assert rules.is_claimable(claimed(lease=NOW), NOW)
    # An index entry carries no lease: the claim write's condition checks the real one.
    entry = {k: v for k, v in claimed().items() if k != "lease_expires_at"}
    assert rules.is_claimable(entry, NOW)


def test_nothing_without_attempts_left_or_of_another_type_or_state_is_claimable():
    assert not rules.is_claimable(item(attempts=3), NOW)
    assert not rules.is_claimable(item(), NOW, types=("email",))
    assert rules.is_claimable(item(), NOW, types=("email", "refund"))
    for state in ("succeeded", "failed_terminal", "unknown", "quarantined", "awaiting_approval", "cancelled"):
        assert not rules.is_claimable(item(state=state), NOW), state


def test_live_claims_and_claims_of_a_worker_under_a_token():
    assert rules.is_live_claim(claimed(lease=NOW + 1), NOW)
    assert not rules.is_live_claim(claimed(lease=NOW), NOW)
    assert not rules.is_live_claim(item(), NOW)
    assert rules.is_claim_of(claimed(), "w1", "tok")
    assert not rules.is_claim_of(claimed(), "w2", "tok")
    assert not rules.is_claim_of(claimed(), "w1", "other")
    assert not rules.is_claim_of(claimed(state="succeeded"), "w1", "tok")  # finished: no longer held
    assert not rules.is_claim_of(None, "w1", "tok")
    assert rules.is_claim_of(claimed(lease=NOW - 1), "w1", "tok")  # a lapsed lease alone does not end it


def test_a_refusal_showing_a_higher_fence_is_a_lost_race():
    assert rules.lost_race(claimed(fence=2), item(fence=1))
    assert not rules.lost_race(item(fence=1, attempts=1), item(fence=1))


def test_a_lease_above_the_job_types_maximum_is_cut_to_it():
    assert rules.capped_lease(item(lease_max_ms=30_000), 60_000) == 30_000
    assert rules.capped_lease(item(lease_max_ms=90_000), 60_000) == 60_000
    assert rules.capped_lease(item(), 60_000) == 60_000
    assert rules.capped_lease(item(lease_max_ms=30_000), None) is None


def test_a_live_claim_filed_before_its_lease_is_refiled_in_its_own_index():
    due = claimed(lease=NOW + 5_000, **{DUE_PK: "t#0#refund", DUE_SK: NOW - 1})
    assert rules.misfiled_index(due, NOW) == (DUE_SK, DUE_PK)
    last = {k: v for k, v in claimed(lease=NOW + 5_000).items() if k not in (DUE_SK,)}
    last.update({SWEEP_PK: "sweep#0", SWEEP_SK: NOW - 1})
    assert rules.misfiled_index(last, NOW) == (SWEEP_SK, SWEEP_PK)
    assert rules.misfiled_index(dict(due, **{DUE_SK: NOW + 5_000}), NOW) is None  # filed at it
    assert rules.misfiled_index(claimed(lease=NOW - 1, **{DUE_PK: "p", DUE_SK: NOW - 5}), NOW) is None
    assert rules.misfiled_index(item(**{DUE_PK: "p"}), NOW) is None


# ------------------------------------------------------------------ fenced commands


def test_a_refused_fenced_command_is_not_found_or_a_stale_fence():
    assert isinstance(rules.fenced_refusal(None), NotFound)
    stale = rules.fenced_refusal(claimed(fence=4))
    assert isinstance(stale, StaleFence)
    assert stale.details == {"current_fence": 4, "state": "claimed"}


def test_a_heartbeat_refused_only_for_its_lease_names_the_maximum():
    current = claimed(fence=2, lease_max_ms=120_000)
    assert rules.lease_over_maximum(current, 2, "w1", 300_000)
    assert not rules.lease_over_maximum(current, 2, "w1", 60_000)
    assert not rules.lease_over_maximum(current, 1, "w1", 300_000)  # another fence holds it
    assert not rules.lease_over_maximum(current, 2, "w2", 300_000)
    assert not rules.lease_over_maximum(None, 2, "w1", 300_000)
    assert "(120 s)" in rules.lease_too_long(current).message


@pytest.mark.parametrize(
    ("command", "target", "delay", "expected"),
    [
        ("complete", State.SUCCEEDED, None, Transition.COMPLETE),
        ("fail", State.FAILED_TERMINAL, None, Transition.FAIL),
        ("fail", State.QUEUED, None, Transition.RETRY),
        ("fail", State.QUEUED, 0, Transition.RETRY),
        ("fail", State.QUEUED, 5_000, Transition.RETRY_LATER),
        ("unknown", State.UNKNOWN, None, Transition.UNKNOWN),
        ("quarantine", State.QUARANTINED, None, Transition.QUARANTINE),
    ],
)
def test_each_closing_command_records_its_transition(command, target, delay, expected):
    assert rules.closing_transition(command, target, delay) is expected


def test_a_close_sent_again_by_the_same_fence_is_a_replay():
    done = item(state="succeeded", fence=2, closed_fence=2, closed_by="complete", outcome_code="ok")
    fields = {"outcome_code": "ok"}
    assert rules.classify_close_refusal(done, 2, "complete", fields, State.SUCCEEDED) is rules.CloseRefusal.REPLAY
    # Another outcome, another command, or a fence claimed since: not this close.
    other = {"outcome_code": "different"}
    assert rules.classify_close_refusal(done, 2, "complete", other, State.SUCCEEDED) is rules.CloseRefusal.REFUSED
    assert rules.classify_close_refusal(done, 2, "fail", {"reason": "x"}, State.FAILED_TERMINAL) is rules.CloseRefusal.REFUSED
    taken = dict(done, fence=3)
    assert rules.classify_close_refusal(taken, 2, "complete", fields, State.SUCCEEDED) is rules.CloseRefusal.REFUSED
    assert rules.classify_close_refusal(None, 2, "complete", fields, State.SUCCEEDED) is rules.CloseRefusal.REFUSED


def test_a_requeue_refused_while_the_fence_still_holds_means_no_attempt_is_left():
    holding = claimed(fence=3, attempts=3)
    fields = {"reason": "busy"}
    assert rules.classify_close_refusal(holding, 3, "fail", fields, State.QUEUED) is rules.CloseRefusal.NO_ATTEMPTS_LEFT
    assert rules.classify_close_refusal(holding, 2, "fail", fields, State.QUEUED) is rules.CloseRefusal.REFUSED
    assert rules.classify_close_refusal(holding, 3, "fail", fields, State.FAILED_TERMINAL) is rules.CloseRefusal.REFUSED


def test_the_backoff_doubles_with_the_fence_up_to_its_cap_in_every_epoch():
    assert rules.backoff_ceiling_ms(1) == BACKOFF_BASE_MS
    assert rules.backoff_ceiling_ms(3) == 4 * BACKOFF_BASE_MS
    assert rules.backoff_ceiling_ms(40) == BACKOFF_CAP_MS
    assert rules.backoff_ceiling_ms(FENCE_EPOCH_SPAN + 1) == BACKOFF_BASE_MS  # the epoch's first claim


# ------------------------------------------------------------------ the gate and the operator


def awaiting(**fields):
    return item(state="awaiting_approval", payload_hash=H, enqueued_by="alice", **fields)


def test_the_approval_refusal_ladder():
    assert isinstance(rules.approval_refusal(None, H, "bob"), NotFound)
    other = "sha256:" + "b" * 64
    assert isinstance(rules.approval_refusal(awaiting(), other, "bob"), PayloadMismatch)
    # Approved already (by anyone), with the same content: a replay.
    assert rules.approval_refusal(item(payload_hash=H, approved_by="carol"), H, "bob") is None
    # A mismatch wins over a replay: the approver saw other content.
    assert isinstance(rules.approval_refusal(item(payload_hash=H, approved_by="carol"), other, "bob"), PayloadMismatch)
    late = rules.approval_refusal(item(state="cancelled", payload_hash=H), H, "bob")
    assert isinstance(late, InvalidTransition) and "state is cancelled" in late.message
    assert isinstance(rules.approval_refusal(awaiting(), H, "alice"), SelfApproval)
    closed = rules.approval_refusal(awaiting(), H, "bob")
    assert isinstance(closed, InvalidTransition) and "window closed" in closed.message


def test_rejection_and_cancel_refusals_and_their_replays():
    assert isinstance(rules.rejection_refusal(None), NotFound)
    assert rules.rejection_refusal(item(state="failed_terminal", outcome_code="rejected")) is None
    assert isinstance(rules.rejection_refusal(item(state="failed_terminal", outcome_code="approval_expired")), InvalidTransition)
    assert isinstance(rules.cancel_refusal(None), NotFound)
    assert rules.cancel_refusal(item(state="cancelled")) is None
    again = rules.cancel_refusal(item(attempts=2, fence=2))
    assert isinstance(again, AlreadyAttempted) and again.details == {"attempts": 2}
    assert isinstance(rules.cancel_refusal(claimed()), InvalidTransition)
    assert not isinstance(rules.cancel_refusal(claimed()), AlreadyAttempted)


def test_a_resolve_is_a_replay_only_when_the_item_shows_this_very_decision():
    resolved = item(state="succeeded", resolved_as="succeeded", transition="resolve", actor="ops",
                    resolution_note="checked")
    assert rules.resolved_already(resolved, Resolution.SUCCEEDED, "checked", "ops", None)
    assert not rules.resolved_already(resolved, Resolution.SUCCEEDED, "other note", "ops", None)
    assert not rules.resolved_already(resolved, Resolution.SUCCEEDED, "checked", "someone", None)
    assert not rules.resolved_already(resolved, Resolution.FAILED_TERMINAL, "checked", "ops", None)
    tokened = dict(resolved, resolve_token="r-1")
    assert rules.resolved_already(tokened, Resolution.SUCCEEDED, "anything", "anyone", "r-1")
    assert not rules.resolved_already(tokened, Resolution.SUCCEEDED, "checked", "ops", "r-2")
    assert not rules.resolved_already(tokened, Resolution.SUCCEEDED, "checked", "ops", None)
    requeued = item(resolved_as="requeue", transition="requeue", actor="ops")
    assert rules.resolved_already(requeued, Resolution.REQUEUE, "", "ops", None)
    assert rules.resolution_transition(Resolution.REQUEUE) is Transition.REQUEUE


# ------------------------------------------------------------------ erasure


def test_an_erasure_keeps_only_the_fence_of_an_intent():
    assert json.loads(rules.erased_intent({"intent": '{"fence":3,"what":"charge card 4242"}'})) == {
        "fence": 3, "what": "erased"}
    assert json.loads(rules.erased_intent({"checkpoint": '{"intent_fence":2,"card":"4242"}'})) == {
        "fence": 2, "what": "erased"}
    assert rules.erased_intent({"checkpoint": '{"step":2}'}) is None
    assert rules.erased_intent({"intent": "not json"}) is None
    assert rules.erased_intent({}) is None


# ------------------------------------------------------------------ the expression builder


def test_an_expression_renders_its_clauses_in_order_and_leaves_empty_sections_out():
    expr = Expr({"#state": "state"}).set("#state = :to", "updated_at = :now").remove("lease_owner")
    expr.transition(Transition.COMPLETE)
    update, condition, names, values = expr.write("#state = :claimed")
    assert update == "SET #state = :to, updated_at = :now, #tr = :tr REMOVE lease_owner ADD #seq :one"
    assert condition == "#state = :claimed"
    assert names == {"#state": "state", "#tr": "transition", "#seq": "seq"}
    assert values == {":tr": "complete", ":one": 1}
    assert Expr().set("a = :a").render() == "SET a = :a"


def test_the_end_of_life_keeps_no_ttl_when_identities_are_kept_forever():
    kept = Expr().end_of_life(NOW, None, 1_000)
    assert "#ttl = :ttl" not in kept.sets and ":ttl" not in kept.values
    assert kept.values[":purge"] == NOW + 1_000
    windowed = Expr().end_of_life(NOW, 86_400_000, 1_000)
    # At least PURGE_BEFORE_TTL_MS past the payload's purge time: TTL never deletes the item
    # (and its purge index entry) before a late sweeper purged its payload.
    assert windowed.values[":ttl"] == (NOW + 1_000 + PURGE_BEFORE_TTL_MS) // 1000
    assert Expr().end_of_life(NOW, 400 * 86_400_000, 1_000).values[":ttl"] == (
        NOW + 400 * 86_400_000
    ) // 1000
    assert "claimed_from" in windowed.removes and "#home_" in windowed.removes


def test_condition_helpers_bind_their_own_values():
    assert job_type_in(["a", "b"]) == ("job_type IN (:jt0, :jt1)", {":jt0": "a", ":jt1": "b"})
    assert in_states([State.QUEUED]) == ("#state IN (:src0)", {":src0": "queued"})
    assert unchanged("intent", {"intent": "x"}) == ("intent = :was_intent", {":was_intent": "x"})
    assert unchanged("intent", {}) == ("attribute_not_exists(intent)", {})


def test_a_claim_must_reconcile_after_the_first_attempt_or_a_requeue():
    full = claimed(fence=1, lease=NOW + 5_000, payload_hash=H, target_class="C", lease_ms=5_000,
                   created_at=1, updated_at=NOW, claimed_at=NOW)
    first = rules.claim_of(full, "w1", takeover=False)
    assert (first.fence, first.lease_expires_at, first.lease_ms, first.claimed_at) == (1, NOW + 5_000, 5_000, NOW)
    assert not first.reconcile_required and not first.takeover and first.worker_id == "w1"
    assert rules.claim_of(dict(full, attempts=2, fence=2), "w2", takeover=True).reconcile_required
    assert rules.claim_of(dict(full, requeued=True), "w1", takeover=False).reconcile_required
    # A claim written before claimed_at was kept says when it was made from its lease.
    older = {k: v for k, v in full.items() if k != "claimed_at"}
    assert rules.claim_of(older, "w1", takeover=False).claimed_at == NOW
