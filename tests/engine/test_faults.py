"""The design's fault-injection tests, as engine tests (lost responses, crashes, stalls, throttling)."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, InvalidTransition, PayloadConflict, StaleFence, State, Unavailable
from leasefence.errors import InvalidInput
from leasefence_tools.testing.faults import AFTER, BEFORE, THROTTLE, FaultyClient

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
T = "acme"


@pytest.fixture
def faulty(ddb):
    return FaultyClient(ddb)


@pytest.fixture
def engine(faulty, spec, clock, events):
    return Engine(client=faulty, spec=spec, clock=clock, rng=random.Random(3), events=events)


class Provider:
    """A side-effect target of class C: executes each idempotency key once, and can be asked."""

    def __init__(self):
        self.executed = []

    def send(self, key):
        if key not in self.executed:
            self.executed.append(key)

    def lookup(self, key):
        return key in self.executed


def test_pause_after_claim_past_expiry(engine, clock):
    """Fault test 1: the paused holder's write is refused, the new holder's accepted."""
    engine.enqueue(T, "op", "refund", H1)
    first = engine.claim_next(T, "w1", lease_ms=1_000)
    clock.advance(5_000)  # w1 stalls (GC pause, lost network) past its lease
    second = engine.claim_next(T, "w2", lease_ms=1_000)
    assert second.fence == first.fence + 1
    for stale_write in (
        lambda: engine.heartbeat(T, "op", first.fence, "w1"),
        lambda: engine.complete(T, "op", first.fence, "refunded"),
        lambda: engine.fail(T, "op", first.fence, retryable=True, reason="x"),
        lambda: engine.park_unknown(T, "op", first.fence, "x"),
        lambda: engine.quarantine(T, "op", first.fence, "x"),
    ):
        with pytest.raises(StaleFence):
            stale_write()
    assert engine.complete(T, "op", second.fence, "refunded").state == State.SUCCEEDED
    assert engine.get(T, "op").fence == 2


def test_crash_after_the_external_call_reconciles_instead_of_repeating(engine, clock):
    """Fault test 2: the worker dies between the side effect and the completion write."""
    provider = Provider()
    engine.enqueue(T, "op", "email", H1)
    first = engine.claim_next(T, "w1", lease_ms=1_000)
    provider.send(f"{T}/op")  # the side effect happened ... and the worker crashed here
    clock.advance(1_000)
    second = engine.claim_next(T, "w2", lease_ms=1_000)
    assert second.reconcile_required and second.checkpoint is None and second.fence == first.fence + 1
    if provider.lookup(f"{T}/op"):  # reconcile before acting
        engine.complete(T, "op", second.fence, "already-sent")
    else:  # pragma: no cover - the lookup finds it
        provider.send(f"{T}/op")
    assert provider.executed == [f"{T}/op"]
    assert engine.get(T, "op").outcome_code == "already-sent"


def test_same_key_same_payload_then_different_payload(engine):
    """Fault test 3: replay versus conflict, nothing rescheduled, nothing changed."""
    assert engine.enqueue(T, "op", "refund", H1).created
    before = engine.store.get({"tenant_id": T, "operation_id": "op"})
    assert not engine.enqueue(T, "op", "refund", H1).created
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "op", "refund", H2)
    assert engine.store.get({"tenant_id": T, "operation_id": "op"}) == before


def test_enqueue_whose_answer_was_lost_is_a_replay_on_retry(engine, faulty):
    faulty.fail_next("put_item", AFTER)
    with pytest.raises(Unavailable):
        engine.enqueue(T, "op", "refund", H1)
    retry = engine.enqueue(T, "op", "refund", H1)
    assert not retry.created and retry.operation.state == State.QUEUED


def test_lost_response_in_the_middle_of_a_claim(engine, faulty):
    """Fault test 5 (failover mid-claim): the claim write commits, its answer is lost. The engine
    sends it again; the refusal carries its own claim token, so it is recognized: no double claim,
    no lost row, no wasted attempt."""
    engine.enqueue(T, "op", "refund", H1)
    faulty.fail_next("update_item", AFTER)
    claim = engine.claim_next(T, "w1")
    assert claim is not None and claim.fence == 1 and claim.attempts == 1
    assert faulty.injected[AFTER] == 1
    assert engine.claim_next(T, "w2") is None
    assert engine.complete(T, "op", 1, "done").state == State.SUCCEEDED


def test_claim_request_that_never_arrived_is_sent_again(engine, faulty):
    engine.enqueue(T, "op", "refund", H1)
    faulty.fail_next("update_item", BEFORE)
    faulty.fail_next("update_item", THROTTLE)
    claim = engine.claim_next(T, "w1")
    assert claim.fence == 1 and engine.get(T, "op").attempts == 1


def _claim_write(request):
    """The claim's own conditional update (not the claim-next marker, not an index repair)."""
    return "claimed_from = #state" in request.get("UpdateExpression", "")


@pytest.mark.parametrize("named", [False, True], ids=["claim-next", "named"])
@pytest.mark.parametrize("max_attempts", [5, 1], ids=["attempts-left", "final-attempt"])
def test_a_claim_that_committed_while_every_answer_was_lost_is_answered_again_when_resent(
    engine, faulty, clock, named, max_attempts
):
    """The claim write commits, its answer is lost, and the store's own resends never arrive: the
    request fails (a 503 over HTTP). The client resends it with the same claim token: it gets the
    claim that was made (same fence, attempts not raised), never a second claim or nothing (which
    would leave the first to lapse: an attempt spent, and on a final attempt an unknown)."""
    engine.enqueue(T, "op", "refund", H1, max_attempts=max_attempts)
    faulty.fail_next("update_item", AFTER, when=_claim_write)
    faulty.fail_next("update_item", BEFORE, when=_claim_write, times=2)

    def resend(token="tok-1", worker="w1"):
        if named:
            return engine.claim(T, "op", worker, lease_ms=10_000, claim_token=token)
        return engine.claim_next(T, worker, lease_ms=10_000, claim_token=token)

    with pytest.raises(Unavailable):
        resend()
    assert engine.get(T, "op").state == State.CLAIMED  # it committed, unseen by the claimer
    clock.advance(3_000)  # the client's backoff
    again = resend()
    assert again is not None and (again.fence, again.attempts) == (1, 1)
    assert again.lease_expires_at == engine.get(T, "op").lease_expires_at
    assert again.claimed_at == again.lease_expires_at - again.lease_ms
    assert resend() == again  # and again, while it holds
    item = engine.store.get({"tenant_id": T, "operation_id": "op"})
    assert (item["fence"], item["attempts"]) == (1, 1)
    # Another worker's request with the same token is not that claim's resend.
    assert resend(worker="w2") is None
    assert engine.complete(T, "op", again.fence, "refunded").state == State.SUCCEEDED
    # A claim that ended no longer holds: a resend is no claim of it.
    assert resend() is None


def test_a_resent_claim_whose_claim_was_taken_over_claims_nothing_more(engine, clock):
    """One claim token, one claim (issue 33): the claim the token made no longer holds, and the
    resend is no new claim (its claim may have been the lapsed one); a new token claims."""
    engine.enqueue(T, "op", "refund", H1)
    first = engine.claim_next(T, "w1", lease_ms=1_000, claim_token="tok-1")
    clock.advance(1_000)
    assert engine.claim_next(T, "w2", lease_ms=1_000).fence == 2  # took it over
    clock.advance(1_000)
    assert engine.claim_next(T, "w1", lease_ms=1_000, claim_token="tok-1") is None
    assert engine.claim_next(T, "w1", lease_ms=1_000, claim_token="tok-1") is None  # sealed
    again = engine.claim_next(T, "w1", lease_ms=1_000, claim_token="tok-2")
    assert (first.fence, again.fence, again.attempts) == (1, 3, 3)
    with pytest.raises(InvalidInput):
        engine.claim_next(T, "w1", claim_token="")
    with pytest.raises(InvalidInput):
        engine.claim(T, "op", "w1", claim_token="bad\ntoken")


def test_lost_response_in_the_middle_of_complete(engine, faulty):
    """The completion commits, its answer is lost; the same fence's retry is recognized as done."""
    engine.enqueue(T, "op", "refund", H1)
    claim = engine.claim_next(T, "w1")
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        engine.complete(T, "op", claim.fence, "refunded")
    assert engine.complete(T, "op", claim.fence, "refunded").state == State.SUCCEEDED
    with pytest.raises(StaleFence):
        engine.complete(T, "op", claim.fence, "something-else")


def test_lost_response_of_a_retryable_failure(engine, faulty, clock):
    engine.enqueue(T, "op", "refund", H1)
    claim = engine.claim_next(T, "w1")
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        engine.fail(T, "op", claim.fence, retryable=True, reason="timeout", retry_after_ms=0)
    assert engine.fail(T, "op", claim.fence, retryable=True, reason="timeout", retry_after_ms=0).state == State.QUEUED
    assert engine.claim_next(T, "w2").fence == 2


def test_throttled_store_surfaces_as_retryable_and_writes_nothing(engine, faulty):
    faulty.fail_next("put_item", THROTTLE)
    with pytest.raises(Unavailable) as error:
        engine.enqueue(T, "op", "refund", H1)
    assert error.value.retryable
    assert engine.list(T).operations == []


def _parked(engine, op="op"):
    engine.enqueue(T, op, "refund", H1)
    claim = engine.claim_next(T, "w1")
    return engine.park_unknown(T, op, claim.fence, "timeout")


def test_lost_answer_of_a_resolve_is_a_replay_on_retry(engine, faulty):
    """The resolve commits, its answer is lost: the retry is a replay (the operation as it is,
    nothing written), decided from the refused write's own item; it is not 409."""
    _parked(engine)
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        engine.resolve(T, "op", "succeeded", note="ledger checked", actor="op-1")
    done = engine.get(T, "op")
    replay = engine.resolve(T, "op", "succeeded", note="ledger checked", actor="op-1")
    assert replay == done and replay.state == State.SUCCEEDED and replay.outcome_code == "resolved:succeeded"
    # Another decision is not this one: 409 as before.
    for other in (
        {"resolution": "failed_terminal", "note": "ledger checked", "actor": "op-1"},
        {"resolution": "succeeded", "note": "ledger checked", "actor": "op-2"},
        {"resolution": "succeeded", "note": "", "actor": "op-1"},
    ):
        with pytest.raises(InvalidTransition):
            engine.resolve(T, "op", **other)
    assert engine.get(T, "op") == done


def test_lost_answer_of_a_requeue_is_a_replay_even_after_a_claim(engine, faulty):
    """With a request token the retry is recognized whatever happened since (a worker claimed the
    requeued operation at once), and never applied twice: parked again, the late retry of the
    first requeue does not requeue it a second time."""
    _parked(engine)
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        engine.resolve(T, "op", "requeue", actor="op-1", request_token="req-1")
    claim = engine.claim_next(T, "w2")
    assert claim.fence == 2 and claim.reconcile_required
    replay = engine.resolve(T, "op", "requeue", actor="op-1", request_token="req-1")
    assert replay.state == State.CLAIMED and replay.fence == 2  # as it is now; nothing written
    with pytest.raises(InvalidTransition):
        engine.resolve(T, "op", "requeue", actor="op-1", request_token="req-2")  # another request
    with pytest.raises(InvalidTransition):
        engine.resolve(T, "op", "requeue", actor="op-1")  # no token: its last transition is a claim
    engine.park_unknown(T, "op", 2, "timeout again")
    late = engine.resolve(T, "op", "requeue", actor="op-1", request_token="req-1")
    assert late.state == State.UNKNOWN and late.fence == 2
    assert engine.resolve(T, "op", "requeue", actor="op-1", request_token="req-2").state == State.QUEUED


def test_lost_answer_of_a_catalogue_put_reports_the_change_on_retry(engine, faulty):
    """The declaration commits, its answer is lost: the retry says changed (true), not 'it already
    said exactly this', when it carries the version it was based on or the request's token."""
    cat = engine.catalogue
    v1 = {"target_class": "B", "max_attempts": 3}
    v2 = {**v1, "max_attempts": 4}
    cat.put(T, "refund", v1)
    # Based on a version: changed is relative to it.
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        cat.put(T, "refund", v2, expected_version=1)
    entry, changed = cat.put(T, "refund", v2, expected_version=1)
    assert (entry.version, entry.spec.max_attempts, changed) == (2, 4, True)
    assert cat.put(T, "refund", v2, expected_version=2) == (entry, False)
    # With the request's token.
    faulty.fail_next("update_item", AFTER)
    with pytest.raises(Unavailable):
        cat.put(T, "refund", v1, request_token="put-1")
    entry, changed = cat.put(T, "refund", v1, request_token="put-1")
    assert (entry.version, entry.spec.max_attempts, changed) == (3, 3, True)
    assert cat.put(T, "refund", v1, request_token="put-2") == (entry, False)  # another request
    assert cat.put(T, "refund", v1) == (entry, False)
    assert cat.get(T, "refund").version == 3  # the retries wrote nothing
