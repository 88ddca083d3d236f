"""Cancel only before any attempt: an operation a worker ever claimed may have had its side effect,
so it is never cancelled, even when it is queued again (a retry, a takeover's retry, an operator's
requeue from unknown). The refusal is decided inside the cancel's one conditional write and read
from its answer."""

from __future__ import annotations

import pytest

from leasefence import InvalidTransition, State
from leasefence.errors import AlreadyAttempted

H = "sha256:" + "c" * 64
T = "acme"
LEASE = 1_000


def raw(engine, op):
    return engine.store.get({"tenant_id": T, "operation_id": op})


def queued_after_a_retry(engine, _clock, op):
    engine.enqueue(T, op, "refund", H)
    held = engine.claim(T, op, "w1", lease_ms=LEASE)
    engine.fail(T, op, held.fence, retryable=True, reason="timeout", retry_after_ms=0)


def queued_after_a_takeover_and_a_retry(engine, clock, op):
    engine.enqueue(T, op, "refund", H)
    engine.claim(T, op, "w1", lease_ms=LEASE)  # w1 stalls
    clock.advance(LEASE)
    taken = engine.claim(T, op, "w2", lease_ms=LEASE)
    assert taken.takeover and taken.fence == 2
    engine.fail(T, op, taken.fence, retryable=True, reason="busy", retry_after_ms=60_000)


def queued_after_a_requeue_from_unknown(engine, _clock, op):
    engine.enqueue(T, op, "sms", H, target_class="D")
    held = engine.claim(T, op, "w1", lease_ms=LEASE)
    engine.park_unknown(T, op, held.fence, "no answer from the provider")
    engine.resolve(T, op, "requeue", note="check, then retry")


@pytest.mark.parametrize(
    "attempted",
    [queued_after_a_retry, queued_after_a_takeover_and_a_retry, queued_after_a_requeue_from_unknown],
)
def test_an_operation_queued_again_after_an_attempt_cannot_be_cancelled(engine, clock, attempted):
    attempted(engine, clock, "op-1")
    before = raw(engine, "op-1")
    assert before["state"] == State.QUEUED and before["attempts"] >= 1
    with pytest.raises(AlreadyAttempted) as refused:
        engine.cancel(T, "op-1", actor="producer-1")
    assert refused.value.code == "already_attempted" and refused.value.status == 409
    assert isinstance(refused.value, InvalidTransition)  # a kind of invalid transition
    assert refused.value.details["attempts"] == before["attempts"]
    assert raw(engine, "op-1") == before  # nothing was written
    # Its next claim reconciles it, as it must.
    clock.advance(120_000)
    again = engine.claim(T, "op-1", "w3", lease_ms=LEASE)
    assert again is not None and again.reconcile_required


def test_a_never_claimed_operation_is_still_cancelled(engine):
    engine.enqueue(T, "op-2", "refund", H)
    op = engine.cancel(T, "op-2", actor="producer-1")
    assert (op.state, op.fence, op.attempts) == (State.CANCELLED, 0, 0)
    assert engine.cancel(T, "op-2") == op  # a replay


def test_cancel_racing_a_claim_never_ends_a_claimed_operation(engine):
    """Whoever writes first wins: after the claim, the cancel is refused from its own answer."""
    engine.enqueue(T, "op-3", "refund", H)
    held = engine.claim(T, "op-3", "w1", lease_ms=LEASE)
    with pytest.raises(InvalidTransition, match="claimed") as refused:
        engine.cancel(T, "op-3")
    assert not isinstance(refused.value, AlreadyAttempted)
    engine.complete(T, "op-3", held.fence, "ok")
    assert engine.get(T, "op-3").state is State.SUCCEEDED
