"""A claim-next that names the operation its request closes (``after``) keeps its token's marker
in that operation's payload item, in the write that sets the payload's expiry after the close
(one write instead of two), or in a shell under that key when there is no payload item. A resend
finds it there whatever happened meanwhile: nothing deletes the item before the marker's expiry
(an erasure, a dropped replay and DynamoDB's TTL all wait for it; the emulated TTL deletes a day
to three after the TTL time, as DynamoDB does). Days and months pass on the manual clock."""

from __future__ import annotations

import itertools
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from leasefence import Engine, State, keys
from leasefence.clock import ManualClock
from leasefence.engine import closing_round
from leasefence.engine._marker import Marker, after_home, owner_of
from leasefence.errors import InvalidInput, InvalidTransition, NotFound, PayloadMissing
from leasefence.limits import CLAIM_MARKER_TTL_MS
from leasefence.payloads import canonicalize
from leasefence.schema import TTL_ATTRIBUTE, TableSpec

T = "acme"
DAY = 86_400_000
RETENTION = 30 * DAY
_tables = itertools.count()

pytestmark = pytest.mark.needs("embedded")


class Writes:
    """The DynamoDB client, recording each write's kind and the sort key it wrote."""

    def __init__(self, client):
        self._client = client
        self.log: list[tuple[str, str]] = []

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if name not in ("put_item", "update_item", "delete_item", "transact_write_items"):
            return method

        def call(**request):
            key = request.get("Key") or request.get("Item") or {}
            self.log.append((name, key.get("operation_id", {}).get("S", "")))
            return method(**request)

        return call

    def to(self, operation_id_prefix):
        return [kind for kind, sk in self.log if sk.startswith(operation_id_prefix)]


@pytest.fixture
def world(ttl_aws):
    spec = ttl_aws.create_tables(
        TableSpec(table_name=f"after-{next(_tables)}", operation_shards=(1,))
    )
    clock = ManualClock()
    ttl_aws.set_time(clock())

    def travel(ms):
        clock.advance(ms)
        ttl_aws.advance_time(ms)

    def engine(retention=RETENTION, client=None, seed=7):
        return Engine(
            client=client or ttl_aws.client(),
            spec=spec,
            clock=clock,
            rng=random.Random(seed),
            payload_retention_ms=retention,
        )

    return engine, clock, travel, ttl_aws


def payload(op):
    return canonicalize({"op": op, "cents": 995})


def enqueue(engine, op, **kwargs):
    c = payload(op)
    if "payload_ref" in kwargs:
        return engine.enqueue(T, op, "refund", c.hash, **kwargs)
    return engine.enqueue(T, op, "refund", c.hash, payload_json=c.body, **kwargs)


def payload_item(engine, op):
    return engine.store.get(keys.payload_key(T, op, payload(op).hash))


def own_marker(engine, token, worker="w1"):
    return engine.store.get(keys.tenant_key(T, keys.claim_marker_id(worker, token)))


def claimed_ops(engine, ops):
    return [op for op in ops if engine.get(T, op).state == State.CLAIMED]


def close_and_claim(engine, a, token, worker="w1", action="complete"):
    """A round: close ``a`` (claimed by ``worker``), then claim the next with ``after=a``."""
    fence = engine.get(T, a).fence
    with closing_round():
        if action == "complete":
            engine.complete(T, a, fence, "sent")
        else:
            engine.fail(T, a, fence, True, "try again")
        return engine.claim_next(T, worker, lease_ms=60_000, claim_token=token, after=a)


def test_the_marker_rides_with_the_close_expiry_in_one_write(world):
    make, clock, _, aws = world
    writes = Writes(aws.client())
    engine = make(client=writes)
    for op in ("a", "b"):
        enqueue(engine, op)
    first = engine.claim_next(T, "w1", claim_token="t0")
    a = first.operation_id
    writes.log.clear()
    nxt = close_and_claim(engine, a, "t1")
    assert nxt is not None and nxt.operation_id != a
    # One write on a's payload item: its expiry and the marker together; no marker item.
    assert writes.to(keys.payload_prefix(a)) == ["update_item"]
    assert own_marker(engine, "t1") is None
    item = payload_item(engine, a)
    ended = engine.get(T, a)
    assert int(item[TTL_ATTRIBUTE]) == -(-(engine._ctx.clock() + RETENTION) // 1000)
    assert bytes(item["mo"].value) == owner_of(keys.claim_marker_id("w1", "t1"))
    assert (item["mc"], int(item["mf"])) == (nxt.operation_id, 0)
    assert ended.state == State.SUCCEEDED
    # The same round without `after`: a marker item of its own and the expiry apart.
    enqueue(engine, "c")
    writes.log.clear()
    with closing_round():
        engine.complete(T, nxt.operation_id, nxt.fence, "sent")
        engine.claim_next(T, "w1", claim_token="t2")
    assert own_marker(engine, "t2") is not None
    assert writes.to(keys.payload_prefix(nxt.operation_id)) == ["update_item"]
    assert writes.to(keys.CLAIM_MARKER_PREFIX) == ["update_item"]
    assert int(payload_item(engine, nxt.operation_id)[TTL_ATTRIBUTE]) > clock() // 1000


def test_a_resend_after_a_lost_answer_answers_the_same_claim(world):
    make, *_ = world
    engine = make()
    ops = [f"op-{i}" for i in range(4)]
    for op in ops:
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    nxt = close_and_claim(engine, a, "t1")
    # The whole round again (its answer lost): the close is a replay, the claim the same.
    again = close_and_claim(engine, a, "t1")
    assert (again.operation_id, again.fence, again.attempts) == (nxt.operation_id, nxt.fence, 1)
    # The claim alone again, in no round (the worker's next claim resends the token).
    alone = engine.claim_next(T, "w1", claim_token="t1", after=a)
    assert (alone.operation_id, alone.fence) == (nxt.operation_id, nxt.fence)
    assert claimed_ops(engine, ops) == [nxt.operation_id]
    # Once that claim ended, the token claims nothing more.
    engine.complete(T, nxt.operation_id, nxt.fence, "sent")
    assert engine.claim_next(T, "w1", claim_token="t1", after=a) is None
    assert claimed_ops(engine, ops) == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_resend_while_the_first_runs_claims_one_operation(world, seed):
    """The first request stalls between its marker (in a's payload item) and its claim write;
    a resend with the same token and ``after`` answers that claim or "in progress", never
    another."""
    make, _, _, aws = world
    setup = make()
    ops = [f"op-{i}" for i in range(6)]
    for op in ops:
        enqueue(setup, op)
    a = setup.claim_next(T, "w1", claim_token="t0").operation_id
    setup.complete(T, a, setup.get(T, a).fence, "sent")

    stalled, release = threading.Event(), threading.Event()

    class Stalling:
        def __init__(self, client):
            self._client = client

        def __getattr__(self, name):
            method = getattr(self._client, name)

            def call(**request):
                expression = request.get("UpdateExpression", "")
                if (
                    name == "update_item"
                    and "claimed_from = #state" in expression
                    and not stalled.is_set()
                ):
                    stalled.set()
                    assert release.wait(30)
                return method(**request)

            return call

    first = make(client=Stalling(aws.client()), seed=seed)
    resend = make(seed=seed + 100)

    def claim(engine):
        return engine.claim_next(T, "w1", lease_ms=30_000, claim_token="t1", after=a)

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(claim, first)
        assert stalled.wait(30)
        try:
            try:
                again = claim(resend)
            except Exception as exc:  # noqa: BLE001 - "in progress" is an answer here
                again = exc
        finally:
            release.set()
        answered = running.result(30)
    held = claimed_ops(setup, ops)
    assert held == [answered.operation_id]
    assert isinstance(again, Exception) or again.operation_id == answered.operation_id
    assert own_marker(setup, "t1") is None


def test_an_erasure_between_send_and_resend_keeps_the_marker(world):
    make, clock, travel, _ = world
    engine = make()
    ops = [f"op-{i}" for i in range(4)]
    for op in ops:
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    nxt = close_and_claim(engine, a, "t1")
    engine.erase(T, a, "ops")
    # The payload is gone, the item with the marker stays.
    with pytest.raises(PayloadMissing):
        engine.payload(engine.get(T, a))
    item = payload_item(engine, a)
    assert "payload_json" not in item and "payload_z" not in item and "mo" in item
    # A replay of a's enqueue drops the payload item it wrote: the marker's stays.
    enqueue(engine, a)
    assert "mo" in payload_item(engine, a)
    again = engine.claim_next(T, "w1", claim_token="t1", after=a)
    assert (again.operation_id, again.fence) == (nxt.operation_id, nxt.fence)
    assert claimed_ops(engine, ops) == [nxt.operation_id]
    # The emptied item keeps the expiry the close gave it: TTL deletes it then (a day to three
    # later), with its marker long expired.
    assert int(item[TTL_ATTRIBUTE]) * 1000 >= clock() + RETENTION - DAY
    travel(RETENTION + 3 * DAY + 1000)
    assert payload_item(engine, a) is None


def test_without_a_payload_item_the_marker_is_a_shell_under_its_key(world):
    make, _clock, travel, _ = world
    engine = make()
    enqueue(engine, "ref", payload_ref="s3://bucket/ref")
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    assert a == "ref" and payload_item(engine, a) is None
    enqueue(engine, "b")
    nxt = close_and_claim(engine, a, "t1")
    shell = payload_item(engine, a)
    assert shell is not None and "mo" in shell and "payload_json" not in shell
    assert int(shell[TTL_ATTRIBUTE]) == int(shell["mx"])
    assert engine.get(T, a).payload_state != "stored" or engine.get(T, a).payload_ref
    again = engine.claim_next(T, "w1", claim_token="t1", after=a)
    assert (again.operation_id, again.fence) == (nxt.operation_id, nxt.fence) == ("b", 1)
    travel(CLAIM_MARKER_TTL_MS + 3 * DAY + 1000)
    assert payload_item(engine, a) is None
    # b's own payload was never touched.
    assert engine.get(T, "b").state == State.CLAIMED


def test_a_second_token_naming_the_same_operation_is_refused_and_claims_nothing(world):
    """One claim names each close: the payload item holds one token's marker, and a claim with
    another token naming the same operation is refused (its resends alike), nothing claimed."""
    make, *_ = world
    engine = make()
    ops = [f"op-{i}" for i in range(5)]
    for op in ops:
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    first = close_and_claim(engine, a, "t1")
    for _ in range(2):
        with pytest.raises(InvalidTransition):
            engine.claim_next(T, "w1", claim_token="t2", after=a)
    assert own_marker(engine, "t2") is None
    again = engine.claim_next(T, "w1", claim_token="t1", after=a)
    assert (again.operation_id, again.fence) == (first.operation_id, first.fence)
    assert claimed_ops(engine, ops) == [first.operation_id]


def test_with_no_payload_retention_the_item_outlives_the_marker(world):
    """Retention 0: the close's expiry is the end itself, but the item holding a marker stays
    until the marker's expiry, also when the operation ended after the marker was written (a
    retryable failure requeued it in the round, and a later close ended it)."""
    make, _clock, travel, _ = world
    engine = make(retention=0)
    ops = [f"op-{i}" for i in range(4)]
    for op in ops:
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    nxt = close_and_claim(engine, a, "t1", action="fail")  # a requeued: live, no expiry
    assert engine.get(T, a).state == State.QUEUED
    item = payload_item(engine, a)
    assert TTL_ATTRIBUTE not in item and "mo" in item
    # a is claimed and completed by another worker a moment later: retention 0.
    travel(1000)
    again_a = engine.claim(T, a, "w2")
    engine.complete(T, a, again_a.fence, "sent")
    item = payload_item(engine, a)
    assert int(item[TTL_ATTRIBUTE]) >= int(item["mx"])
    # Within the marker's day the resend finds it (TTL deleted nothing), and the same claim.
    travel(CLAIM_MARKER_TTL_MS - 60_000)
    assert payload_item(engine, a) is not None
    again = engine.claim_next(T, "w1", claim_token="t1", after=a)
    assert (again.operation_id, again.fence) == (nxt.operation_id, nxt.fence)
    travel(3 * DAY + 120_000)
    assert payload_item(engine, a) is None


def test_a_fold_at_retention_zero_expires_with_the_marker(world):
    make, clock, _travel, _ = world
    engine = make(retention=0)
    for op in ("a", "b"):
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    close_and_claim(engine, a, "t1")
    item = payload_item(engine, a)
    assert int(item[TTL_ATTRIBUTE]) == int(item["mx"]) >= (clock() + CLAIM_MARKER_TTL_MS) // 1000
    with pytest.raises(PayloadMissing):  # retention 0: the payload reads as gone at once
        engine.payload(engine.get(T, a))


def test_after_that_names_no_operation_or_has_no_token_claims_nothing(world):
    make, _, _, aws = world
    writes = Writes(aws.client())
    engine = make(client=writes)
    enqueue(engine, "a")
    writes.log.clear()
    with pytest.raises(NotFound):
        engine.claim_next(T, "w1", claim_token="t1", after="nobody")
    with pytest.raises(InvalidInput):
        engine.claim_next(T, "w1", after="a")
    assert writes.log == [] and engine.get(T, "a").state == State.QUEUED


def test_a_round_writes_the_expiries_no_claim_took(world):
    make, clock, _, aws = world
    writes = Writes(aws.client())
    engine = make(client=writes)
    for op in ("a", "b"):
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0")
    b = engine.claim_next(T, "w2", claim_token="t0")
    with closing_round() as closes:
        engine.complete(T, a.operation_id, a.fence, "sent")
        engine.complete(T, b.operation_id, b.fence, "sent")
        # Nothing left to claim: the claim after a writes no marker; its expiry waits.
        assert engine.claim_next(T, "w1", claim_token="t1", after=a.operation_id) is None
        assert TTL_ATTRIBUTE not in payload_item(engine, a.operation_id)
    assert closes.unwritten == set()
    for op in (a.operation_id, b.operation_id):
        assert int(payload_item(engine, op)[TTL_ATTRIBUTE]) == -(-(clock() + RETENTION) // 1000)
    # The token's answer "none" was sealed where its marker would have been: none again.
    assert engine.claim_next(T, "w1", claim_token="t1", after=a.operation_id) is None


@pytest.mark.parametrize("after", [False, True], ids=["own item", "payload item"])
def test_a_resend_that_took_the_pair_and_died_before_its_claim_write_does_not_block_the_next(
    world, after
):
    """A resend takes the pair (it is to send the same claim write) and dies before sending it:
    the next resend takes it again and claims, rather than answering "in progress" for good."""
    make, *_ = world
    engine = make()
    enqueue(engine, "x")
    home = after_home(engine._ctx, T, "x", "tok") if after else None
    first = Marker(engine._ctx, T, "w1", "tok", home)
    first.point("x", engine.get(T, "x").fence)
    taker = Marker(
        engine._ctx, T, "w1", "tok", after_home(engine._ctx, T, "x", "tok") if after else None
    )
    taker.read()
    taker.take()  # ... and dies here
    claim = engine.claim_next(T, "w1", claim_token="tok", after="x" if after else None)
    assert claim is not None and (claim.operation_id, claim.fence) == ("x", 1)


def test_a_marker_past_its_expiry_gives_way_to_another_token(world):
    """One token's marker a day old (its resends are over) no longer refuses another token that
    names the same operation."""
    make, _, travel, _ = world
    engine = make()
    ops = [f"op-{i}" for i in range(4)]
    for op in ops:
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0").operation_id
    first = close_and_claim(engine, a, "t1")
    with pytest.raises(InvalidTransition):
        engine.claim_next(T, "w2", claim_token="t2", after=a)
    travel(CLAIM_MARKER_TTL_MS + 1000)
    second = engine.claim_next(T, "w2", claim_token="t2", after=a)
    assert second is not None and second.operation_id not in (a, first.operation_id)
    item = payload_item(engine, a)
    assert bytes(item["mo"].value) == owner_of(keys.claim_marker_id("w2", "t2"))
    assert int(item[TTL_ATTRIBUTE]) >= int(item["mx"]) and "mt" not in item and "ms" not in item
    again = engine.claim_next(T, "w2", claim_token="t2", after=a)
    assert (again.operation_id, again.fence) == (second.operation_id, second.fence)


def test_a_marker_on_an_item_whose_expiry_comes_first_moves_that_expiry_in_its_own_write(world):
    """The operation ended (outside a round) with no payload retention: its payload item expires
    at its end. A claim naming it later writes its marker and moves that expiry to the marker's,
    in one write, so TTL deletes neither before the marker's day is over."""
    make, clock, travel, aws = world
    writes = Writes(aws.client())
    engine = make(retention=0, client=writes)
    for op in ("a", "b"):
        enqueue(engine, op)
    a = engine.claim_next(T, "w1", claim_token="t0")
    engine.complete(T, "a" if a.operation_id == "a" else "b", a.fence, "sent")
    done = a.operation_id
    assert int(payload_item(engine, done)[TTL_ATTRIBUTE]) <= -(-clock() // 1000)
    writes.log.clear()
    nxt = engine.claim_next(T, "w1", claim_token="t1", after=done)
    item = payload_item(engine, done)
    assert int(item[TTL_ATTRIBUTE]) == int(item["mx"]) >= (clock() + CLAIM_MARKER_TTL_MS) // 1000
    # Refused once for its expiry, then the marker with the expiry moved: two tries, one write.
    assert writes.to(keys.payload_prefix(done)) == ["update_item", "update_item"]
    travel(CLAIM_MARKER_TTL_MS - 60_000)
    again = engine.claim_next(T, "w1", claim_token="t1", after=done)
    assert (again.operation_id, again.fence) == (nxt.operation_id, nxt.fence)
