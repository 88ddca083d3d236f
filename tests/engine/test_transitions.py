"""Every transition of the engine, and every refusal."""

from __future__ import annotations

import pytest

from leasefence import (
    InvalidInput,
    InvalidTransition,
    NotFound,
    PayloadConflict,
    StaleFence,
    State,
)
from leasefence.schema import DUE_PK, DUE_SK, SWEEP_PK, TTL_ATTRIBUTE

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
T = "tenant-a"


def raw(engine, tenant, op):
    return engine.store.get({"tenant_id": tenant, "operation_id": op})


def claimed(engine, op="op-1", lease_ms=10_000, **enqueue):
    engine.enqueue(T, op, "refund", H1, **enqueue)
    claim = engine.claim(T, op, "w1", lease_ms=lease_ms)
    assert claim is not None
    return claim


# ---------------------------------------------------------------- enqueue


def test_enqueue_creates_a_queued_operation_in_the_claim_index(engine):
    result = engine.enqueue(T, "op-1", "refund", H1, payload_ref="s3://b/k", target_class="B")
    assert result.created
    op = result.operation
    assert (op.state, op.fence, op.attempts, op.max_attempts) == (State.QUEUED, 0, 0, 5)
    assert op.target_class == "B" and op.payload_ref == "s3://b/k" and op.payload_hash == H1
    item = raw(engine, T, "op-1")
    assert item[DUE_PK].startswith(T + "#") and item[DUE_SK] == op.created_at


def test_replay_changes_nothing_and_conflict_is_refused(engine, clock, events):
    engine.enqueue(T, "op-1", "refund", H1)
    before = raw(engine, T, "op-1")
    clock.advance(5_000)
    replay = engine.enqueue(T, "op-1", "refund", H1, max_attempts=9)
    assert not replay.created and replay.operation.max_attempts == 5
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "op-1", "refund", H2)
    assert raw(engine, T, "op-1") == before
    assert events.counts == {"Replays": 1, "PayloadConflicts": 1}


def test_replay_of_a_claimed_operation_does_not_reschedule_it(engine, clock):
    claim = claimed(engine)
    before = raw(engine, T, "op-1")
    assert not engine.enqueue(T, "op-1", "refund", H1).created
    assert raw(engine, T, "op-1") == before
    assert engine.get(T, "op-1").fence == claim.fence


@pytest.mark.parametrize(
    "kwargs",
    [
        {"operation_id": ""},
        {"operation_id": "x" * 257},
        {"operation_id": "bad\nid"},
        {"job_type": "\x00"},
        {"payload_hash": "md5:abc"},
        {"payload_hash": "sha256:" + "A" * 64},
        {"max_attempts": 0},
        {"max_attempts": 101},
        {"max_attempts": True},
        {"target_class": "E"},
        {"target_class": "D", "max_attempts": 2},
    ],
)
def test_enqueue_refuses_bad_input_and_writes_nothing(engine, kwargs):
    args = {"tenant_id": T, "operation_id": "op-1", "job_type": "refund", "payload_hash": H1} | kwargs
    with pytest.raises(InvalidInput):
        engine.enqueue(**args)
    assert engine.list(T).operations == []


def test_class_d_defaults_to_one_attempt(engine):
    assert engine.enqueue(T, "op-d", "sms", H1, target_class="D").operation.max_attempts == 1


def test_zero_is_a_value_not_missing(engine, clock):
    claimed(engine)
    op = engine.fail(T, "op-1", 1, retryable=True, reason="flaky", retry_after_ms=0)
    assert op.state == State.QUEUED
    assert raw(engine, T, "op-1")[DUE_SK] == clock()
    assert engine.claim_next(T, "w2") is not None


# ---------------------------------------------------------------- claim


def test_claim_raises_fence_sets_lease_and_counts_the_attempt(engine, clock, events):
    engine.enqueue(T, "op-1", "refund", H1)
    claim = engine.claim_next(T, "w1", lease_ms=30_000)
    assert (claim.operation_id, claim.fence, claim.attempts) == ("op-1", 1, 1)
    assert claim.lease_expires_at == clock() + 30_000 and not claim.reconcile_required and not claim.takeover
    op = engine.get(T, "op-1")
    assert (op.state, op.lease_owner, op.lease_expires_at) == (State.CLAIMED, "w1", clock() + 30_000)
    assert engine.claim_next(T, "w2") is None
    assert events.counts["Claims"] == 1


def test_expired_lease_is_taken_over_with_a_higher_fence_and_reconcile(engine, clock, events):
    claimed(engine, lease_ms=1_000)
    clock.advance(999)
    assert engine.claim_next(T, "w2") is None  # not expired yet, to the millisecond
    clock.advance(1)
    claim = engine.claim_next(T, "w2")
    assert (claim.fence, claim.attempts, claim.takeover, claim.reconcile_required) == (2, 2, True, True)
    assert events.counts["Takeovers"] == 1


def test_claim_of_a_named_operation(engine):
    engine.enqueue(T, "op-1", "refund", H1)
    engine.enqueue(T, "op-2", "refund", H1)
    claim = engine.claim(T, "op-2", "w1")
    assert claim.operation_id == "op-2"
    assert engine.claim(T, "op-2", "w2") is None
    with pytest.raises(NotFound):
        engine.claim(T, "missing", "w1")


def test_claim_respects_job_types(engine):
    engine.enqueue(T, "op-email", "email", H1)
    engine.enqueue(T, "op-refund", "refund", H1)
    claim = engine.claim_next(T, "w1", job_types=["refund"])
    assert claim.operation_id == "op-refund"
    assert engine.claim_next(T, "w1", job_types=["refund", "crm"]) is None
    assert engine.claim(T, "op-email", "w1", job_types=["refund"]) is None
    assert engine.claim_next(T, "w1", job_types=["email"]).operation_id == "op-email"


def test_delayed_operation_is_not_claimable_before_its_time(engine, clock):
    claimed(engine)
    engine.fail(T, "op-1", 1, retryable=True, reason="later", retry_after_ms=5_000)
    assert engine.claim_next(T, "w2") is None
    clock.advance(5_000)
    assert engine.claim_next(T, "w2").fence == 2


def test_final_attempt_moves_from_the_claim_index_to_the_sweep_index(engine):
    engine.enqueue(T, "op-1", "refund", H1, max_attempts=1)
    engine.claim_next(T, "w1")
    item = raw(engine, T, "op-1")
    assert DUE_PK not in item and SWEEP_PK in item


@pytest.mark.parametrize("lease_ms", [999, 900_001, 1.5, True])
def test_claim_refuses_bad_leases(engine, lease_ms):
    engine.enqueue(T, "op-1", "refund", H1)
    with pytest.raises(InvalidInput):
        engine.claim_next(T, "w1", lease_ms=lease_ms)
    assert engine.get(T, "op-1").state == State.QUEUED


# ---------------------------------------------------------------- heartbeat


def test_heartbeat_extends_the_lease_and_keeps_a_checkpoint_for_the_next_claim(engine, clock):
    claimed(engine, lease_ms=2_000)
    clock.advance(1_500)
    assert engine.heartbeat(T, "op-1", 1, "w1", checkpoint={"page": 3}) == clock() + 2_000
    clock.advance(1_000)
    assert engine.claim_next(T, "w2") is None  # the heartbeat moved the lease
    assert engine.heartbeat(T, "op-1", 1, "w1", lease_ms=5_000) == clock() + 5_000
    clock.advance(5_000)
    takeover = engine.claim_next(T, "w2")
    assert takeover.fence == 2 and takeover.checkpoint == {"page": 3}


def test_heartbeat_after_the_lease_lapsed_still_works_until_someone_claims(engine, clock):
    claimed(engine, lease_ms=1_000)
    clock.advance(10_000)
    assert engine.heartbeat(T, "op-1", 1, "w1") == clock() + 1_000
    assert engine.claim_next(T, "w2") is None


def test_heartbeat_refusals(engine, clock):
    claimed(engine, lease_ms=1_000)
    with pytest.raises(StaleFence):
        engine.heartbeat(T, "op-1", 2, "w1")
    with pytest.raises(StaleFence):
        engine.heartbeat(T, "op-1", 1, "someone-else")
    with pytest.raises(NotFound):
        engine.heartbeat(T, "nope", 1, "w1")
    with pytest.raises(InvalidInput):
        engine.heartbeat(T, "op-1", 1, "w1", checkpoint="x" * 5000)
    clock.advance(1_000)
    engine.claim_next(T, "w2")
    with pytest.raises(StaleFence):
        engine.heartbeat(T, "op-1", 1, "w1")


# ---------------------------------------------------------------- complete


def test_complete_and_its_retry_by_the_same_fence(engine, clock):
    claimed(engine)
    op = engine.complete(T, "op-1", 1, "refunded")
    assert (op.state, op.outcome_code, op.lease_owner, op.lease_expires_at) == (State.SUCCEEDED, "refunded", None, None)
    item = raw(engine, T, "op-1")
    assert DUE_PK not in item and SWEEP_PK not in item and item[TTL_ATTRIBUTE] > clock() // 1000
    assert engine.complete(T, "op-1", 1, "refunded").state == State.SUCCEEDED
    with pytest.raises(StaleFence):
        engine.complete(T, "op-1", 1, "other-outcome")
    with pytest.raises(StaleFence):
        engine.complete(T, "op-1", 2, "refunded")


def test_complete_refusals(engine, clock, events):
    engine.enqueue(T, "op-1", "refund", H1)
    with pytest.raises(StaleFence):
        engine.complete(T, "op-1", 1, "ok")  # never claimed
    with pytest.raises(NotFound):
        engine.complete(T, "missing", 1, "ok")
    with pytest.raises(InvalidInput):
        engine.complete(T, "op-1", 0, "ok")
    engine.claim_next(T, "w1", lease_ms=1_000)
    clock.advance(1_000)
    engine.claim_next(T, "w2")
    with pytest.raises(StaleFence) as refused:
        engine.complete(T, "op-1", 1, "ok")
    assert refused.value.details == {"current_fence": 2, "state": "claimed"}
    assert events.counts["StaleFenceRejections"] == 2


# ---------------------------------------------------------------- fail


def test_retryable_failure_requeues_with_backoff_until_attempts_run_out(engine, clock):
    engine.enqueue(T, "op-1", "refund", H1, max_attempts=2)
    engine.claim_next(T, "w1")
    op = engine.fail(T, "op-1", 1, retryable=True, reason="timeout")
    assert op.state == State.QUEUED and op.lease_owner is None
    due = raw(engine, T, "op-1")[DUE_SK]
    assert clock() <= due <= clock() + 1_000  # full jitter under the first ceiling
    clock.advance(1_000)
    assert engine.claim_next(T, "w1").fence == 2
    op = engine.fail(T, "op-1", 2, retryable=True, reason="timeout again")
    assert op.state == State.FAILED_TERMINAL and op.reason == "timeout again"
    assert engine.fail(T, "op-1", 2, retryable=True, reason="timeout again").state == State.FAILED_TERMINAL


def test_non_retryable_failure_is_terminal(engine):
    claimed(engine)
    assert engine.fail(T, "op-1", 1, retryable=False, reason="card closed").state == State.FAILED_TERMINAL
    with pytest.raises(StaleFence):
        engine.fail(T, "op-1", 2, retryable=False, reason="x")


def test_fail_refusals(engine):
    claimed(engine)
    with pytest.raises(StaleFence):
        engine.fail(T, "op-1", 7, retryable=True, reason="x")
    with pytest.raises(InvalidInput):
        engine.fail(T, "op-1", 1, retryable="yes", reason="x")
    with pytest.raises(InvalidInput):
        engine.fail(T, "op-1", 1, retryable=True, reason="x", retry_after_ms=-1)
    assert engine.get(T, "op-1").state == State.CLAIMED


# ---------------------------------------------------------------- unknown, quarantine, sweep


def test_park_unknown_and_quarantine_are_fenced(engine, events):
    claimed(engine, "op-u")
    claimed(engine, "op-q")
    with pytest.raises(StaleFence):
        engine.park_unknown(T, "op-u", 2, "timeout from provider")
    assert engine.park_unknown(T, "op-u", 1, "timeout from provider").state == State.UNKNOWN
    assert engine.quarantine(T, "op-q", 1, "unparseable payload").state == State.QUARANTINED
    assert engine.quarantine(T, "op-q", 1, "a retry of the same transition").state == State.QUARANTINED
    with pytest.raises(StaleFence):
        engine.park_unknown(T, "op-q", 1, "another transition by the same fence")
    assert engine.claim_next(T, "w2") is None
    assert events.counts["UnknownParked"] == 1 and events.counts["Quarantined"] == 1


def test_sweep_parks_only_expired_final_attempts(engine, clock, events):
    engine.enqueue(T, "last", "refund", H1, max_attempts=1)
    engine.enqueue(T, "more", "refund", H1, max_attempts=2)
    engine.claim(T, "last", "w1", lease_ms=1_000)
    engine.claim(T, "more", "w1", lease_ms=1_000)
    assert engine.sweep().swept == 0
    clock.advance(1_000)
    result = engine.sweep()
    assert result.swept == 1 and result.swept_keys == [(T, "last")]
    assert engine.get(T, "last").state == State.UNKNOWN
    assert engine.get(T, "more").state == State.CLAIMED  # attempts left: a takeover, not a park
    with pytest.raises(StaleFence):
        engine.complete(T, "last", 1, "late")
    assert engine.sweep().examined == 0
    assert events.counts["SweptToUnknown"] == 1


def test_sweep_respects_heartbeats_and_repairs_its_entry(engine, clock):
    engine.enqueue(T, "last", "refund", H1, max_attempts=1)
    engine.claim(T, "last", "w1", lease_ms=1_000)
    engine.heartbeat(T, "last", 1, "w1", lease_ms=10_000)
    clock.advance(2_000)
    result = engine.sweep()
    assert (result.swept, result.repaired) == (0, 1)
    assert engine.sweep().examined == 0  # the entry now sits at the real expiry
    clock.advance(10_000)
    assert engine.sweep().swept == 1


def test_sweep_is_bounded(engine, clock):
    for i in range(5):
        engine.enqueue(T, f"op-{i}", "refund", H1, max_attempts=1)
        engine.claim(T, f"op-{i}", "w1", lease_ms=1_000)
    clock.advance(1_000)
    assert engine.sweep(limit=2).swept == 2
    assert engine.sweep(limit=10).swept == 3


# ---------------------------------------------------------------- resolve


def test_resolve_requeue_grants_a_fresh_budget_and_requires_reconcile(engine, clock):
    engine.enqueue(T, "op-1", "refund", H1, max_attempts=1)
    engine.claim_next(T, "w1", lease_ms=1_000)
    clock.advance(1_000)
    engine.sweep()
    op = engine.resolve(T, "op-1", "requeue", note="provider says not sent")
    assert (op.state, op.attempts, op.max_attempts, op.fence) == (State.QUEUED, 1, 2, 1)
    claim = engine.claim_next(T, "w2")
    assert claim.fence == 2 and claim.reconcile_required


@pytest.mark.parametrize("resolution", ["succeeded", "failed_terminal"])
def test_resolve_to_a_final_state(engine, resolution):
    claimed(engine)
    engine.quarantine(T, "op-1", 1, "bad input")
    assert engine.resolve(T, "op-1", resolution, note="checked").state == resolution
    with pytest.raises(InvalidTransition):
        engine.resolve(T, "op-1", "requeue")


def test_resolve_refusals(engine):
    claimed(engine)
    with pytest.raises(InvalidTransition):
        engine.resolve(T, "op-1", "succeeded")
    with pytest.raises(NotFound):
        engine.resolve(T, "missing", "succeeded")
    with pytest.raises(InvalidInput):
        engine.resolve(T, "op-1", "maybe")
    assert engine.get(T, "op-1").state == State.CLAIMED


# ---------------------------------------------------------------- reads


def test_get_and_list_with_pagination_and_state_filter(engine):
    for i in range(7):
        engine.enqueue(T, f"op-{i}", "refund", H1)
    engine.enqueue("other-tenant", "op-x", "refund", H1)
    for op in ("op-1", "op-4", "op-6"):
        engine.claim(T, op, "w1")
    seen, cursor = [], None
    while True:
        page = engine.list(T, limit=3, cursor=cursor)
        assert len(page.operations) <= 3
        seen += [o.operation_id for o in page.operations]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [f"op-{i}" for i in range(7)]
    claimed_page = engine.list(T, state="claimed", limit=2)
    assert [o.operation_id for o in claimed_page.operations] == ["op-1", "op-4"]
    rest = engine.list(T, state="claimed", limit=2, cursor=claimed_page.next_cursor)
    assert [o.operation_id for o in rest.operations] == ["op-6"]
    with pytest.raises(InvalidInput):
        engine.list(T, cursor="!!not-a-cursor")
    with pytest.raises(InvalidInput):
        engine.list(T, state="sleeping")
    with pytest.raises(NotFound):
        engine.get(T, "op-x")


def test_parked_operations_are_indexed_for_the_oldest_unknown_alarm(engine, clock):
    assert engine.oldest_parked_age_ms("unknown") == 0
    claimed(engine, "op-u")
    engine.park_unknown(T, "op-u", 1, "provider timed out")
    engine.enqueue("other", "op-s", "refund", H1, max_attempts=1)
    engine.claim_next("other", "w1", lease_ms=1_000)
    clock.advance(1_000)
    engine.sweep()  # parks other/op-s as unknown, one second after op-u
    claimed(engine, "op-q")
    engine.quarantine(T, "op-q", 1, "bad input")
    clock.advance(5_000)
    assert engine.oldest_parked_age_ms("unknown") == 6_000
    assert engine.oldest_parked_age_ms("quarantined") == 5_000
    engine.resolve(T, "op-u", "failed_terminal", note="checked")
    assert engine.oldest_parked_age_ms("unknown") == 5_000  # the swept one is now the oldest
    engine.resolve("other", "op-s", "requeue", note="retry")
    assert engine.oldest_parked_age_ms("unknown") == 0
    with pytest.raises(InvalidInput):
        engine.oldest_parked_age_ms("queued")
