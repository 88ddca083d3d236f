"""A payload item (layout 2) is deleted by DynamoDB's TTL, not by a purge pass (issue 32, step 4):
no TTL while its operation is live (queued for weeks, parked, awaiting approval, waiting on a
retry), the end + the payload retention once it ended, every reader treating an item past its
expiry as gone before TTL deletes it. Months pass on the manual clock, on the embedded endpoint
with DynamoDB's TTL deletion emulated (fidelity: a day to three after the TTL time, never
before)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from leasefence import Engine, State, keys
from leasefence.clock import ManualClock
from leasefence.engine import _payload_items as payload_items
from leasefence.errors import PayloadMissing, Unavailable
from leasefence.payloads import canonicalize
from leasefence.schema import PURGE_PK, TTL_ATTRIBUTE, TableSpec

T = "acme"
HOUR = 3_600_000
DAY = 86_400_000
RETENTION = 30 * DAY
_tables = itertools.count()

pytestmark = pytest.mark.needs("embedded")


@pytest.fixture
def world(ttl_aws):
    """An engine (payload retention 30 days, identity 400) on a fresh table, a manual clock that
    moves the endpoint's clock with it, and ``travel``."""
    spec = ttl_aws.create_tables(
        TableSpec(table_name=f"payload-ttl-{next(_tables)}", operation_shards=(1,))
    )
    clock = ManualClock()
    ttl_aws.set_time(clock())

    def travel(ms):
        clock.advance(ms)
        ttl_aws.advance_time(ms)

    def engine(retention=RETENTION):
        return Engine(
            client=ttl_aws.client(),
            spec=spec,
            clock=clock,
            rng=random.Random(7),
            identity_retention_ms=400 * DAY,
            payload_retention_ms=retention,
        )

    return engine, clock, travel


PAYLOAD = {"card": "4111", "cents": 995}
C = canonicalize(PAYLOAD)


def enqueue(engine, op, **kwargs):
    return engine.enqueue(T, op, "refund", C.hash, payload_json=C.body, **kwargs).operation


def payload_item(engine, op):
    """The payload item as stored (None: deleted), whatever its expiry."""
    return engine.store.get(keys.payload_key(T, op, C.hash))


def expiry_ms(engine, op):
    found = payload_item(engine, op)
    assert found is not None, "the payload item is gone"
    return None if TTL_ATTRIBUTE not in found else int(found[TTL_ATTRIBUTE]) * 1000


def ends_at(ms):
    """The payload item's expiry (ms, whole seconds rounded up) of an operation ended at ``ms``."""
    return -(-(ms + RETENTION) // 1000) * 1000


def reads(engine, op):
    return json.loads(engine.payload(engine.get(T, op))) == PAYLOAD


def test_an_ordinary_lifecycle_leaves_its_payload_to_ttl_and_readers_are_honest(world, ttl_aws):
    make, clock, travel = world
    engine = make()
    enqueue(engine, "op-1")
    assert expiry_ms(engine, "op-1") is None  # live: nothing may delete it
    claim = engine.claim(T, "op-1", "w1")
    assert json.loads(engine.payload(claim)) == PAYLOAD
    engine.heartbeat(T, "op-1", claim.fence, "w1", intent="charge")
    ended = engine.complete(T, "op-1", claim.fence, "ok").updated_at
    item = engine.store.get({"tenant_id": T, "operation_id": "op-1"})
    assert PURGE_PK not in item  # no purge index entry: nothing for the sweeper
    assert expiry_ms(engine, "op-1") == ends_at(ended)

    travel(ended + RETENTION - 1 - clock())  # the last moment of the retention
    assert reads(engine, "op-1") and len(engine.history(T, "op-1").entries) == 3
    assert engine.purge_payloads().examined == 0

    travel(1)  # the retention is over: it reads as purged, its history as expired
    operation = engine.get(T, "op-1")
    assert operation.payload_state == "purged" and operation.intent is None
    with pytest.raises(PayloadMissing):
        engine.payload(operation)
    page = engine.history(T, "op-1")
    assert page.entries == [] and page.expired_at == ended + RETENTION
    assert [o.payload_state for o in engine.list(T, limit=10).operations] == ["purged"]

    # Past the item's own expiry, not yet deleted by TTL (it deletes a day or more late): gone
    # all the same to every reader.
    travel(expiry_ms(engine, "op-1") - clock())
    ttl_aws.reap_ttl()
    assert payload_item(engine, "op-1") is not None
    with pytest.raises(PayloadMissing):
        payload_items.read(engine._ctx, T, "op-1", C.hash)

    # Months later: TTL deleted it; the identity (400 days) still answers a replay.
    travel(90 * DAY)
    ttl_aws.reap_ttl()
    assert payload_item(engine, "op-1") is None
    assert engine.get(T, "op-1").state is State.SUCCEEDED
    assert not engine.enqueue(T, "op-1", "refund", C.hash, payload_json=C.body).created
    assert payload_item(engine, "op-1") is None  # the replay keeps nothing past the retention


def test_live_operations_keep_their_payload_for_months_until_they_end(world, ttl_aws):
    """Queued with nobody working, parked by its holder or the sweeper, awaiting approval,
    waiting on a retry: months pass, TTL runs, and every payload is still there."""
    make, clock, travel = world
    engine = make()
    enqueue(engine, "backlog-1")
    enqueue(engine, "parked-1")
    claim = engine.claim(T, "parked-1", "w1")
    engine.park_unknown(T, "parked-1", claim.fence, "timeout")
    enqueue(engine, "swept-1", max_attempts=1)
    engine.claim(T, "swept-1", "w1", lease_ms=5_000)
    enqueue(engine, "gated-1", approval_required=True, approval_valid_ms=30 * DAY, actor="alice")
    enqueue(engine, "retry-1")
    claim = engine.claim(T, "retry-1", "w1")
    engine.fail(T, "retry-1", claim.fence, True, "busy", retry_after_ms=DAY)
    travel(10_000)
    assert engine.sweep().swept == 1  # the sweeper parks swept-1: unknown
    live = ("backlog-1", "parked-1", "swept-1", "gated-1", "retry-1")
    # A replay of a live operation gives its payload no expiry.
    assert not engine.enqueue(T, "parked-1", "refund", C.hash, payload_json=C.body).created

    travel(29 * DAY)
    engine.approve(T, "gated-1", C.hash, "bob")
    travel(60 * DAY)  # 89 days: far past the payload retention
    ttl_aws.reap_ttl()
    for op in live:
        assert expiry_ms(engine, op) is None and reads(engine, op), op

    resolved = engine.resolve(T, "parked-1", "succeeded", note="checked").updated_at
    assert expiry_ms(engine, "parked-1") == ends_at(resolved)
    engine.resolve(T, "swept-1", "requeue", note="run it again")
    assert expiry_ms(engine, "swept-1") is None  # requeued: live again
    for op in ("backlog-1", "swept-1", "gated-1", "retry-1"):
        claim = engine.claim(T, op, "w2")
        assert json.loads(engine.payload(claim)) == PAYLOAD, op
        ended = engine.complete(T, op, claim.fence, "ok").updated_at
        assert expiry_ms(engine, op) == ends_at(ended), op

    travel(RETENTION + 4 * DAY)
    ttl_aws.reap_ttl()
    for op in live:
        assert payload_item(engine, op) is None, op


def test_the_expiry_is_written_once_never_shortened_and_mended_by_a_replay(world):
    make, clock, travel = world
    engine = make()
    enqueue(engine, "op-2")
    claim = engine.claim(T, "op-2", "w1")
    real = payload_items.after_end
    payload_items.after_end = lambda ctx, item: None  # a crash right after the ending write
    try:
        ended = engine.complete(T, "op-2", claim.fence, "ok").updated_at
    finally:
        payload_items.after_end = real
    assert expiry_ms(engine, "op-2") is None
    travel(HOUR)
    engine.complete(T, "op-2", claim.fence, "ok")  # the client's retry: a replay, and the mend
    assert expiry_ms(engine, "op-2") == ends_at(ended)  # the end's time, not the replay's
    # A later write for the same end (a replay of a replay) changes nothing, nor shortens it.
    engine._ctx.payload_retention_ms = 0
    engine.complete(T, "op-2", claim.fence, "ok")
    assert expiry_ms(engine, "op-2") == ends_at(ended)
    # An erased operation's payload item is gone, and an ending write never brings it back.
    enqueue(engine, "op-3")
    claim = engine.claim(T, "op-3", "w1")
    engine.complete(T, "op-3", claim.fence, "ok")
    engine.erase(T, "op-3")
    engine.complete(T, "op-3", claim.fence, "ok")
    assert payload_item(engine, "op-3") is None


@pytest.mark.parametrize("command", ["cancel", "reject"])
def test_a_cancel_or_reject_sent_again_mends_an_expiry_that_did_not_land(world, command):
    # The composed torture run (seed 2, 1,000 operations) found a cancelled operation's payload
    # item kept without an expiry: the cancel's ending write landed, the expiry's write did not
    # (a store fault between the two), and the client's resend was answered as a replay without
    # writing it. Complete, fail and resolve mended it on a replay; cancel and reject did not.
    make, clock, travel = world
    engine = make()
    op = f"ended-by-{command}"
    enqueue(engine, op, approval_required=True, approval_valid_ms=30 * DAY, actor="alice")
    real = payload_items.after_end
    payload_items.after_end = lambda ctx, item: None  # a fault right after the ending write
    try:
        if command == "cancel":
            ended = engine.cancel(T, op, actor="alice").updated_at
        else:
            ended = engine.reject(T, op, "bob", "no").updated_at
    finally:
        payload_items.after_end = real
    assert expiry_ms(engine, op) is None
    travel(HOUR)
    again = (
        engine.cancel(T, op, actor="alice")
        if command == "cancel"
        else engine.reject(T, op, "bob", "no")
    )
    assert again.state in (State.CANCELLED, State.FAILED_TERMINAL)
    assert expiry_ms(engine, op) == ends_at(ended)  # the end's time, not the resend's


def test_an_approval_the_sweeper_expires_gets_its_expiry_through_a_transient_fault(world):
    # The sweeper never sends its end again: a store fault on the expiry's write (after the
    # ending write landed) is tried again at once, or the payload item would keep no expiry (the
    # composed run's payload_kept, seed 2: an approval nobody gave, expired by the sweeper).
    make, clock, travel = world
    engine = make()
    enqueue(engine, "gated-x", approval_required=True, approval_valid_ms=DAY, actor="alice")
    travel(DAY + HOUR)
    store, real = engine.store, engine.store.update
    faults = []

    def flaky(key, *args, **kwargs):
        if key["operation_id"].startswith("\x02") and not faults:
            faults.append(key)
            raise Unavailable("store busy, retry")
        return real(key, *args, **kwargs)

    store.update = flaky
    try:
        assert engine.sweep().approvals_expired == 1
    finally:
        store.update = real
    assert faults, "the expiry's write met no fault"
    ended = engine.get(T, "gated-x")
    assert ended.state is State.FAILED_TERMINAL
    assert expiry_ms(engine, "gated-x") == ends_at(ended.updated_at)
