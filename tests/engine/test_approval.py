"""The approval gate and cancel: every step is one conditional write, and an operation awaiting
approval is invisible to every way of claiming."""

from __future__ import annotations

import random
import threading

import pytest

from leasefence import Engine, InvalidInput, InvalidTransition, NotFound, State
from leasefence.errors import IdentityRequired, InlinePayloadRequired, PayloadMismatch, PayloadMissing, SelfApproval
from leasefence.model import SWEEPER_ACTOR
from leasefence.schema import DUE_PK, DUE_SK, PURGE_SK, SWEEP_PK, SWEEP_SK, TTL_ATTRIBUTE

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
T = "tenant-a"
HOUR = 3_600_000


def raw(engine, op="op-1"):
    return engine.store.get({"tenant_id": T, "operation_id": op})


#: An approval binds a payload leasefence stores (inline): the engine is told where it is.
STORED = {"payload_ref": "stored/1", "payload_inline": True}


def awaiting(engine, op="op-1", valid_ms=HOUR, by="producer-1"):
    return engine.enqueue(
        T, op, "refund", H1, actor=by, approval_required=True, approval_valid_ms=valid_ms, **STORED
    ).operation


def test_an_operation_that_needs_approval_waits_in_no_claim_index(engine, clock):
    op = awaiting(engine)
    assert op.state is State.AWAITING_APPROVAL and op.fence == 0
    assert op.approval_expires_at == clock() + HOUR
    item = raw(engine)
    assert DUE_PK not in item and DUE_SK not in item
    assert item[SWEEP_PK].startswith("sweep#") and item[SWEEP_SK] == clock() + HOUR
    assert item["enqueued_by"] == "producer-1" and TTL_ATTRIBUTE not in item
    assert engine.claim_next(T, "w1") is None
    assert engine.claim(T, "op-1", "w1") is None
    assert engine.claim_seen(item, "w1") is None
    assert raw(engine) == item
    # A replay is a replay (it changes nothing), even sent by reference or by nobody; the
    # default validity is a day.
    assert not engine.enqueue(T, "op-1", "refund", H1, approval_required=True).created
    assert raw(engine) == item
    second = engine.enqueue(T, "op-2", "refund", H1, actor="p", approval_required=True, **STORED).operation
    assert second.approval_expires_at == clock() + 86_400_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"approval_required": "yes"},
        {"approval_required": True, "approval_valid_ms": 999},
        {"approval_required": True, "approval_valid_ms": 31 * 86_400_000},
        {"approval_required": True, "approval_valid_ms": True},
        {"approval_required": False, "approval_valid_ms": "1h"},
    ],
)
def test_approval_settings_are_validated(engine, kwargs):
    with pytest.raises(InvalidInput):
        engine.enqueue(T, "op-1", "refund", H1, **kwargs)
    with pytest.raises(NotFound):
        engine.get(T, "op-1")


def test_approve_makes_it_claimable_at_once_and_records_the_approver(engine, clock, events):
    awaiting(engine)
    clock.advance(1_000)
    op = engine.approve(T, "op-1", H1, actor="approver-9")
    assert op.state is State.QUEUED and op.approved_by == "approver-9"
    assert op.approved_at == clock() and op.approval_expires_at is None
    item = raw(engine)
    assert item[DUE_PK] == item["due_home"] and item[DUE_SK] == clock()
    assert SWEEP_PK not in item and SWEEP_SK not in item
    assert (item["transition"], item["actor"], item["seq"]) == ("approve", "approver-9", 2)
    # Approving again (a retry, or another approver) is a replay: nothing changes.
    assert engine.approve(T, "op-1", H1, actor="approver-9") == op
    assert engine.approve(T, "op-1", H1, actor="someone-else").approved_by == "approver-9"
    assert raw(engine) == item
    claim = engine.claim_next(T, "w1")
    assert claim is not None and claim.fence == 1 and not claim.reconcile_required
    assert engine.approve(T, "op-1", H1, actor="approver-9").state is State.CLAIMED  # still a replay
    assert events.counts["Approvals"] == 1


def test_a_different_hash_or_the_enqueuer_changes_nothing(engine):
    awaiting(engine)
    before = raw(engine)
    with pytest.raises(PayloadMismatch) as mismatch:
        engine.approve(T, "op-1", H2, actor="approver-9")
    assert (mismatch.value.status, mismatch.value.code) == (409, "payload_mismatch")
    with pytest.raises(SelfApproval) as own:
        engine.approve(T, "op-1", H1, actor="producer-1")
    assert (own.value.status, own.value.code) == (403, "forbidden")
    # An erasure overwrites the transition's actor; the enqueuer is still known.
    engine.erase(T, "op-1", actor="operator-1")
    with pytest.raises(SelfApproval):
        engine.approve(T, "op-1", H1, actor="producer-1")
    assert raw(engine)["state"] == "awaiting_approval"
    assert {k: v for k, v in raw(engine).items() if k == "enqueued_by"} == {
        "enqueued_by": "producer-1"
    }
    assert before["seq"] + 1 == raw(engine)["seq"]  # the erasure's write only
    with pytest.raises(NotFound):
        engine.approve(T, "nope", H1, actor="approver-9")
    with pytest.raises(InvalidInput):
        engine.approve(T, "op-1", "sha256:abc", actor="approver-9")


def test_after_an_approval_the_enqueuer_is_still_refused_by_who_asks(engine, events):
    """An approve answers by who asks: the approver's repeat is a replay (200), the enqueuer's
    (with the right hash) the self-approval refusal it always gets, approved already or not."""
    awaiting(engine)
    engine.approve(T, "op-1", H1, actor="approver-9")
    after = raw(engine)
    with pytest.raises(SelfApproval) as own:
        engine.approve(T, "op-1", H1, actor="producer-1")
    assert (own.value.status, own.value.code) == (403, "forbidden")
    assert engine.approve(T, "op-1", H1, actor="approver-9").approved_by == "approver-9"
    engine.claim_next(T, "w1")
    with pytest.raises(SelfApproval):
        engine.approve(T, "op-1", H1, actor="producer-1")  # claimed by now: still refused
    assert raw(engine)["approved_by"] == "approver-9" and raw(engine)["seq"] == after["seq"] + 1
    assert events.counts["Approvals"] == 1


def test_an_approval_of_an_erased_payload_is_refused_and_changes_nothing(engine):
    """An erasure takes the bytes an approval would release: the approve is refused (410
    payload_missing, decided inside its conditional write), the operation stays awaiting for a
    reject or a cancel, and no claim ever spends an attempt on a payload that is gone."""
    awaiting(engine)
    engine.erase(T, "op-1", actor="operator-1")
    before = raw(engine)
    with pytest.raises(PayloadMissing) as gone:
        engine.approve(T, "op-1", H1, actor="approver-9")
    assert (gone.value.status, gone.value.code) == (410, "payload_missing")
    assert raw(engine) == before and before["state"] == "awaiting_approval"
    assert engine.claim_next(T, "w1") is None
    assert engine.reject(T, "op-1", actor="approver-9", note="erased").state is State.FAILED_TERMINAL


def test_an_approval_binds_a_stored_payload_and_a_known_enqueuer(engine):
    """An operation that needs approval is refused by reference (the approver could not read what
    it approves) and from nobody in particular (self-approval could not be decided): nothing is
    written. Under a catalogue entry that requires approval as when asked for directly."""
    with pytest.raises(InlinePayloadRequired) as by_ref:
        engine.enqueue(T, "op-1", "refund", H1, payload_ref="s3://theirs/1", actor="p", approval_required=True)
    assert (by_ref.value.status, by_ref.value.code) == (422, "inline_payload_required")
    with pytest.raises(IdentityRequired) as nobody:
        engine.enqueue(T, "op-1", "refund", H1, approval_required=True, **STORED)
    assert (nobody.value.status, nobody.value.code) == (403, "forbidden")
    engine.catalogue.put(T, "payout", {"target_class": "C", "approval_required": True})
    with pytest.raises(InlinePayloadRequired):
        engine.enqueue(T, "op-1", "payout", H1, payload_ref="s3://theirs/1", actor="p")
    with pytest.raises(IdentityRequired):
        engine.enqueue(T, "op-1", "payout", H1, **STORED)
    with pytest.raises(NotFound):
        engine.get(T, "op-1")
    assert engine.job_types(T) == []  # not even the directory was written
    op = engine.enqueue(T, "op-1", "payout", H1, actor="p", **STORED).operation
    assert op.state is State.AWAITING_APPROVAL and raw(engine)["enqueued_by"] == "p"
    with pytest.raises(SelfApproval):
        engine.approve(T, "op-1", H1, actor="p")


def test_reject_ends_it_failed_terminal_with_outcome_rejected(engine, clock):
    awaiting(engine)
    op = engine.reject(T, "op-1", actor="approver-9", note="refund too large")
    assert (op.state, op.outcome_code, op.reason) == (
        State.FAILED_TERMINAL,
        "rejected",
        "refund too large",
    )
    item = raw(engine)
    assert not {DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK, "approval_expires_at"} & set(item)
    assert item[TTL_ATTRIBUTE] > clock() // 1000 and PURGE_SK in item
    assert (item["transition"], item["actor"]) == ("reject", "approver-9")
    assert engine.reject(T, "op-1", actor="approver-9") == op  # a replay
    with pytest.raises(InvalidTransition):
        engine.approve(T, "op-1", H1, actor="approver-9")
    engine.enqueue(T, "op-2", "refund", H1)
    with pytest.raises(InvalidTransition):
        engine.reject(T, "op-2", actor="approver-9")  # not awaiting approval


def test_an_approval_not_given_in_time_ends_through_the_sweeper(engine, clock, events):
    awaiting(engine, "late", valid_ms=10_000)
    awaiting(engine, "in-time", valid_ms=60_000)
    clock.advance(9_999)
    assert engine.sweep().approvals_expired == 0  # not due yet
    clock.advance(1)
    with pytest.raises(InvalidTransition, match="window closed"):
        engine.approve(T, "late", H1, actor="approver-9")  # the deadline, not the sweeper, decides
    result = engine.sweep()
    assert (result.approvals_expired, result.swept, result.swept_keys) == (1, 0, [])
    op = engine.get(T, "late")
    assert (op.state, op.outcome_code) == (State.FAILED_TERMINAL, "approval_expired")
    item = raw(engine, "late")
    assert (item["transition"], item["actor"]) == ("approval_expire", SWEEPER_ACTOR)
    assert SWEEP_PK not in item and TTL_ATTRIBUTE in item
    assert engine.sweep().approvals_expired == 0  # safe to run twice
    assert raw(engine, "late") == item
    with pytest.raises(InvalidTransition):
        engine.approve(T, "late", H1, actor="approver-9")
    assert engine.get(T, "in-time").state is State.AWAITING_APPROVAL
    assert events.counts["ApprovalsExpired"] == 1


def test_an_expiry_racing_an_approval_leaves_exactly_one_of_them(engine, clock):
    awaiting(engine, valid_ms=10_000)
    entry = raw(engine)
    engine.approve(T, "op-1", H1, actor="approver-9")
    clock.advance(20_000)
    # A sweeper that read the index entry before the approval: its write is refused.
    result = engine.sweep()
    engine._expire_approval(entry, result)
    assert result.approvals_expired == 0 and engine.get(T, "op-1").state is State.QUEUED


def test_racing_claimers_never_claim_an_unapproved_operation(engine, ddb, spec, clock):
    awaiting(engine)
    image = raw(engine)
    engines = [Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(i)) for i in range(3)]
    barrier = threading.Barrier(len(engines))
    claims = []

    def race(e, i):
        barrier.wait()
        for _ in range(2):
            claims.extend(
                [
                    e.claim_next(T, f"w{i}", job_types=["refund"]),
                    e.claim_next(T, f"w{i}"),
                    e.claim(T, "op-1", f"w{i}"),
                    e.claim_seen(image, f"w{i}"),
                ]
            )

    threads = [threading.Thread(target=race, args=(e, i)) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert claims == [None] * 24
    assert raw(engine) == image
    engine.approve(T, "op-1", H1, actor="approver-9")
    won = [e.claim_next(T, f"w{i}") for i, e in enumerate(engines)]
    assert [c.fence for c in won if c is not None] == [1]


def _to_state(engine, state):
    """op-1 in ``state`` (the ways each is reached)."""
    if state == "awaiting_approval":
        return awaiting(engine)
    engine.enqueue(T, "op-1", "refund", H1, max_attempts=1)
    if state == "queued":
        return engine.get(T, "op-1")
    claim = engine.claim(T, "op-1", "w1")
    if state == "succeeded":
        engine.complete(T, "op-1", claim.fence, "ok")
    elif state == "failed_terminal":
        engine.fail(T, "op-1", claim.fence, False, "no")
    elif state == "unknown":
        engine.park_unknown(T, "op-1", claim.fence, "timeout")
    elif state == "quarantined":
        engine.quarantine(T, "op-1", claim.fence, "bad input")
    elif state == "cancelled":
        pytest.fail("not reached this way")
    return engine.get(T, "op-1")


@pytest.mark.parametrize("state", ["queued", "awaiting_approval"])
def test_cancel_ends_a_queued_or_awaiting_operation(engine, clock, events, state):
    _to_state(engine, state)
    clock.advance(1_000)
    op = engine.cancel(T, "op-1", actor="producer-1")
    assert (op.state, op.outcome_code) == (State.CANCELLED, "cancelled")
    item = raw(engine)
    assert not {DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK, "due_home"} & set(item)
    assert item[TTL_ATTRIBUTE] == (clock() + engine.identity_retention_ms) // 1000
    assert item[PURGE_SK] == clock() + engine.payload_retention_ms
    assert (item["transition"], item["actor"]) == ("cancel", "producer-1")
    assert engine.cancel(T, "op-1") == op  # cancelling again is a replay
    assert raw(engine) == item
    replay = engine.enqueue(T, "op-1", "refund", H1)
    assert not replay.created and replay.operation.state is State.CANCELLED
    assert engine.claim_next(T, "w1") is None and engine.claim(T, "op-1", "w1") is None
    clock.advance(2 * HOUR)
    assert engine.sweep().examined == 0  # in no index any more
    with pytest.raises(InvalidTransition):
        engine.approve(T, "op-1", H1, actor="approver-9")
    assert events.counts["Cancellations"] == 1


@pytest.mark.parametrize(
    "state", ["claimed", "succeeded", "failed_terminal", "unknown", "quarantined"]
)
def test_cancel_refuses_a_claimed_or_ended_operation(engine, state):
    _to_state(engine, state)
    before = raw(engine)
    with pytest.raises(InvalidTransition, match=state):
        engine.cancel(T, "op-1")
    assert raw(engine) == before
    with pytest.raises(NotFound):
        engine.cancel(T, "nope")
