"""One claim token, one claim (issue 33): a claim-next resent with its token while the first
request still runs never claims a second operation.

Each thread runs what one API function invocation runs for ``POST /v1/claims`` (the handler parses
and calls this one engine method), on the real engine over the embedded endpoint (one request at
a time, as DynamoDB serializes writes of one item). The first request is stalled at a chosen
point (its client blocks before that request) until the resend has answered."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from leasefence import Engine, State, keys
from leasefence.errors import Unavailable

T = "acme"
H = "sha256:" + "5" * 64
OPERATIONS = 12


class Stalling:
    """``client``, blocking once before the first request ``stall_at`` picks, until released."""

    def __init__(self, client, stall_at):
        self._client, self._stall_at = client, stall_at
        self.stalled, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**request):
            if not self.stalled.is_set() and self._stall_at(name, request):
                self.stalled.set()
                assert self.release.wait(30), "the resend never answered"
            return method(**request)

        return call


def _stalled(stalling, first_call, meanwhile):
    """``first_call()`` in a thread, stalled where ``stalling`` says; ``meanwhile()`` runs during
    the stall. Returns (the first call's answer, what ``meanwhile`` returned)."""
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(first_call)
        assert stalling.stalled.wait(30)
        try:
            during = meanwhile()
        finally:
            stalling.release.set()
        return running.result(30), during


def _marker(engine, worker="w1", token="tok-1"):
    return engine.store.get(keys.tenant_key(T, keys.claim_marker_id(worker, token)))


def _claim_write(name, request):
    return name == "update_item" and "claimed_from = #state" in request.get("UpdateExpression", "")


def _marker_write(name, request):
    names = request.get("ExpressionAttributeNames") or {}
    return name == "update_item" and "claimed_op" in names.values()


@pytest.mark.parametrize(
    "stall_at",
    [_claim_write, _marker_write],
    ids=["between-marker-and-claim-write", "before-the-marker"],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_claim_next_resent_while_the_first_runs_claims_one_operation(ddb, spec, clock, stall_at, seed):
    setup = Engine(client=ddb, spec=spec, clock=clock)
    for i in range(OPERATIONS):
        setup.enqueue(T, f"op-{i:02d}", "refund", H)
    stalling = Stalling(ddb, stall_at)
    first = Engine(client=stalling, spec=spec, clock=clock, rng=random.Random(seed))
    resend = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(seed + 100))

    def claim(engine):
        return engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(claim, first)
        assert stalling.stalled.wait(30)
        try:
            again = claim(resend)
        finally:
            stalling.release.set()
        answered = running.result(30)
    claimed = [
        op for op in (setup.get(T, f"op-{i:02d}") for i in range(OPERATIONS)) if op.state == State.CLAIMED
    ]
    assert len(claimed) == 1, [(op.operation_id, op.fence) for op in claimed]
    assert again is not None and answered is not None
    # Both requests answer the one claim (the same fence: no attempt spent twice).
    assert (again.operation_id, again.fence) == (answered.operation_id, answered.fence)
    assert (claimed[0].operation_id, claimed[0].fence, claimed[0].attempts) == (again.operation_id, 1, 1)
    assert sum(setup.get(T, f"op-{i:02d}").attempts for i in range(OPERATIONS)) == 1
    # And the token stays spent on that claim: sent once more, it answers the same claim.
    assert claim(resend) == again


@pytest.fixture
def two(ddb, spec, clock):
    """Two queued operations, a stalling engine (the first request) and a plain one."""
    setup = Engine(client=ddb, spec=spec, clock=clock)
    for op in ("op-a", "op-b"):
        setup.enqueue(T, op, "refund", H)
    stalling = Stalling(ddb, _claim_write)
    first = Engine(client=stalling, spec=spec, clock=clock, rng=random.Random(5))
    return setup, stalling, first


def _other(op):
    return {"op-a": "op-b", "op-b": "op-a"}[op]


def test_a_candidate_lost_to_another_claimer_is_replaced_by_the_marker_writer(two):
    """The first request's claim write loses its candidate to another worker: as the marker's
    sole writer it points the marker at the next candidate (one conditional write) and claims it."""
    setup, stalling, first = two

    def take_it():
        named = _marker(setup)["claimed_op"]
        assert setup.claim(T, named, "w2", lease_ms=30_000) is not None
        return named

    answered, lost = _stalled(
        stalling, lambda: first.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1"), take_it
    )
    assert answered is not None and answered.operation_id == _other(lost)
    marker = _marker(setup)
    assert (marker["claimed_op"], int(marker["claimed_fence"])) == (answered.operation_id, 0)
    assert "taken" not in marker and "sealed" not in marker


@pytest.mark.needs("transactions")
def test_a_resend_after_the_candidate_was_lost_proves_it_and_claims_one_other(two):
    """While the first request is stalled, its candidate is claimed by another worker and the
    request is resent: the resend proves the candidate spent (a transaction with a ConditionCheck)
    and claims the other operation; the first, let go, answers that same claim."""
    setup, stalling, first = two
    resend = Engine(client=setup.store.client, spec=setup.spec, clock=setup.clock, rng=random.Random(9))

    def lose_it_then_resend():
        named = _marker(setup)["claimed_op"]
        assert setup.claim(T, named, "w2", lease_ms=30_000) is not None
        return resend.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")

    answered, again = _stalled(
        stalling, lambda: first.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1"), lose_it_then_resend
    )
    assert again is not None and (answered.operation_id, answered.fence) == (again.operation_id, again.fence)
    held = {op: setup.get(T, op) for op in ("op-a", "op-b")}
    assert sorted(op.lease_owner for op in held.values()) == ["w1", "w2"]
    assert held[again.operation_id].attempts == 1


def test_a_resend_that_cannot_tell_answers_in_progress_and_the_token_is_then_sealed(ddb, spec, clock):
    """The first request is about to take over a lapsed claim; its holder heartbeats meanwhile.
    A resend then sees the candidate at the marker's fence, live: it cannot know whether the
    first request's write will still commit, so it answers "in progress" (503) and claims nothing.
    The first request's write is refused; it answers none and seals the marker, and from then on
    the token answers none."""
    setup = Engine(client=ddb, spec=spec, clock=clock)
    setup.enqueue(T, "op-x", "refund", H)
    held = setup.claim_next(T, "w0", lease_ms=1_000)
    clock.advance(1_000)
    stalling = Stalling(ddb, _claim_write)
    first = Engine(client=stalling, spec=spec, clock=clock, rng=random.Random(5))
    resend = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(6))

    def renew_then_resend():
        setup.heartbeat(T, "op-x", held.fence, "w0", 60_000)
        with pytest.raises(Unavailable, match="in progress"):
            resend.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")
        return True

    answered, _ = _stalled(
        stalling, lambda: first.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1"), renew_then_resend
    )
    assert answered is None
    assert "sealed" in _marker(setup)
    assert resend.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1") is None
    op = setup.get(T, "op-x")
    assert (op.lease_owner, op.fence, op.attempts) == ("w0", 1, 1)


class Recording:
    """``client``, recording (method, key's sort key, ConsistentRead) of each item read."""

    def __init__(self, client):
        self._client, self.reads = client, []

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**request):
            if name == "get_item":
                self.reads.append((request["Key"]["operation_id"]["S"], request.get("ConsistentRead")))
            return method(**request)

        return call


def _marker_reads(recording, token="tok-1", worker="w1"):
    return [c for c in recording.reads if c[0] == keys.claim_marker_id(worker, token)]


def test_a_first_send_does_not_read_its_marker_and_a_resend_reads_it_consistently(ddb, spec, clock):
    """A claim-next's first send writes its marker without reading it (the write is refused where
    a marker is there); a resend, lost answer or not, reads it strongly consistent and answers the
    claim it names, spending no attempt and claiming nothing else, also when no work is left."""
    setup = Engine(client=ddb, spec=spec, clock=clock)
    setup.enqueue(T, "op-a", "refund", H)
    recording = Recording(ddb)
    engine = Engine(client=recording, spec=spec, clock=clock, rng=random.Random(3))
    first = engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")
    assert first is not None and _marker_reads(recording) == []
    # Sent again (its answer lost) with work queued: its search finds op-b, whose marker write is
    # refused; it reads the marker and answers op-a's claim.
    setup.enqueue(T, "op-b", "refund", H)
    again = engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")
    assert (again.operation_id, again.fence) == (first.operation_id, first.fence)
    assert _marker_reads(recording) and {c for _, c in _marker_reads(recording)} == {True}
    assert setup.get(T, "op-b").state == State.QUEUED
    # Sent again with no work left (op-b claimed by another worker): it reads the marker before
    # answering none, and answers op-a's claim.
    assert setup.claim_next(T, "w2", lease_ms=30_000) is not None
    recording.reads.clear()
    once_more = engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")
    assert (once_more.operation_id, once_more.fence) == (first.operation_id, first.fence)
    assert _marker_reads(recording)
    assert setup.get(T, first.operation_id).attempts == 1
    # A new token with no work: one marker read, nothing written, none answered.
    recording.reads.clear()
    assert engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-2") is None
    assert len(_marker_reads(recording, "tok-2")) == 1
    assert _marker(setup, token="tok-2") is None
