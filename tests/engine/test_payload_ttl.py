"""A payload item (layout 2) is deleted by DynamoDB's TTL, not by a purge pass (issue 32, step 4):
an ordinary lifecycle writes nothing after its end, every reader treats an item past its expiry
as gone before TTL deletes it, and an operation parked, awaiting approval or waiting on a retry
past the slack keeps its payload. Months pass on the manual clock, on the embedded endpoint with
DynamoDB's TTL deletion emulated (fidelity: a day to three after the TTL time, never before)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from leasefence import Engine, State, keys
from leasefence.clock import ManualClock
from leasefence.engine import _payload_items as payload_items
from leasefence.errors import PayloadMissing
from leasefence.limits import PAYLOAD_EXPIRY_SLACK_MS
from leasefence.payloads import canonicalize
from leasefence.schema import PURGE_PK, TTL_ATTRIBUTE, TableSpec
from leasefence_tools.local.embedded import EmbeddedAws, Fidelity

T = "acme"
HOUR = 3_600_000
DAY = 86_400_000
RETENTION = 30 * DAY
_tables = itertools.count()

pytestmark = pytest.mark.needs("embedded")


@pytest.fixture(scope="module")
def ttl_aws():
    """DynamoDB's TTL: an expired item is deleted one to three days after its TTL time."""
    fidelity = Fidelity(ttl_lag_ms=3 * DAY, ttl_lag_min_ms=DAY, index_lag_ms=0)
    with EmbeddedAws(fidelity=fidelity) as aws:
        yield aws


@pytest.fixture
def world(ttl_aws):
    """An engine (payload retention 30 days, identity 400) on a fresh table, a manual clock that
    moves the endpoint's clock with it, and ``travel``."""
    spec = ttl_aws.create_tables(TableSpec(table_name=f"payload-ttl-{next(_tables)}"))
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


def reads(engine, op):
    return json.loads(engine.payload(engine.get(T, op))) == PAYLOAD


def test_an_ordinary_lifecycle_leaves_its_payload_to_ttl_and_readers_are_honest(world, ttl_aws):
    make, clock, travel = world
    engine = make()
    created = enqueue(engine, "op-1").created_at
    assert expiry_ms(engine, "op-1") == created + RETENTION + PAYLOAD_EXPIRY_SLACK_MS
    claim = engine.claim(T, "op-1", "w1")
    assert json.loads(engine.payload(claim)) == PAYLOAD
    engine.heartbeat(T, "op-1", claim.fence, "w1", intent="charge")
    ended = engine.complete(T, "op-1", claim.fence, "ok").updated_at
    item = engine.store.get({"tenant_id": T, "operation_id": "op-1"})
    assert PURGE_PK not in item  # no purge index entry: nothing for the sweeper
    assert expiry_ms(engine, "op-1") == created + RETENTION + PAYLOAD_EXPIRY_SLACK_MS  # no push

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


def test_a_parked_operation_keeps_its_payload_for_months_until_it_ends(world, ttl_aws):
    make, _clock, travel = world
    engine = make()
    enqueue(engine, "parked-1")
    claim = engine.claim(T, "parked-1", "w1")
    engine.park_unknown(T, "parked-1", claim.fence, "timeout")
    enqueue(engine, "swept-1", max_attempts=1)
    engine.claim(T, "swept-1", "w1", lease_ms=5_000)
    travel(10_000)
    assert engine.sweep().swept == 1  # the sweeper parks it: unknown
    for op in ("parked-1", "swept-1"):
        assert expiry_ms(engine, op) is None  # held: no expiry while parked
    # A replay of a parked operation gives its payload no expiry back.
    assert not engine.enqueue(T, "parked-1", "refund", C.hash, payload_json=C.body).created
    assert expiry_ms(engine, "parked-1") is None

    travel(120 * DAY)
    ttl_aws.reap_ttl()
    assert reads(engine, "parked-1") and reads(engine, "swept-1")

    resolved = engine.resolve(T, "parked-1", "succeeded", note="checked")
    assert expiry_ms(engine, "parked-1") == -(-(resolved.updated_at + RETENTION) // 1000) * 1000
    engine.resolve(T, "swept-1", "requeue", note="run it again")
    travel(40 * DAY)  # requeued: held still, until it ends
    claim = engine.claim(T, "swept-1", "w2")
    assert json.loads(engine.payload(claim)) == PAYLOAD
    ended = engine.complete(T, "swept-1", claim.fence, "ok").updated_at
    assert expiry_ms(engine, "swept-1") == -(-(ended + RETENTION) // 1000) * 1000

    travel(RETENTION + 4 * DAY)
    ttl_aws.reap_ttl()
    assert payload_item(engine, "parked-1") is None and payload_item(engine, "swept-1") is None


def test_an_operation_awaiting_approval_keeps_its_payload_through_its_window(world):
    make, clock, travel = world
    engine = make()
    created = enqueue(
        engine, "gated-1", approval_required=True, approval_valid_ms=30 * DAY, actor="alice"
    ).created_at
    deadline = created + 30 * DAY
    assert expiry_ms(engine, "gated-1") == deadline + RETENTION + PAYLOAD_EXPIRY_SLACK_MS
    enqueue(engine, "gated-2", approval_required=True, approval_valid_ms=DAY, actor="alice")
    travel(30 * DAY - HOUR)  # approved at the last hour of its window
    engine.approve(T, "gated-1", C.hash, "bob")
    assert engine.sweep().approvals_expired == 1  # gated-2: ended within its window's expiry
    assert expiry_ms(engine, "gated-2") == created + DAY + RETENTION + PAYLOAD_EXPIRY_SLACK_MS
    travel(3 * DAY)  # then a backlog: claimed three days after its approval
    claim = engine.claim(T, "gated-1", "w1")
    assert json.loads(engine.payload(claim)) == PAYLOAD
    ended = engine.complete(T, "gated-1", claim.fence, "ok").updated_at
    assert expiry_ms(engine, "gated-1") == -(-(ended + RETENTION) // 1000) * 1000
    travel(ended + RETENTION - 1 - clock())
    assert reads(engine, "gated-1")


def test_a_retry_due_past_the_slack_pushes_the_expiry_and_a_push_never_shortens_it(world):
    make, _clock, travel = world
    engine = make(retention=0)  # the payload goes at the end: only the slack covers a lifecycle
    created = enqueue(engine, "retry-1").created_at
    assert expiry_ms(engine, "retry-1") == created + PAYLOAD_EXPIRY_SLACK_MS
    travel(20 * HOUR)
    claim = engine.claim(T, "retry-1", "w1")
    retry = engine.fail(T, "retry-1", claim.fence, True, "busy", retry_after_ms=DAY)
    due = retry.updated_at + DAY  # past the slack: its payload must outlive the wait
    assert expiry_ms(engine, "retry-1") == due + PAYLOAD_EXPIRY_SLACK_MS
    travel(DAY)  # without the push it would have expired 20 hours ago
    claim = engine.claim(T, "retry-1", "w1")
    assert json.loads(engine.payload(claim)) == PAYLOAD
    engine.complete(T, "retry-1", claim.fence, "ok")
    # The end's push (end + retention 0) would be earlier: refused, the expiry stays.
    assert expiry_ms(engine, "retry-1") == due + PAYLOAD_EXPIRY_SLACK_MS
    # A replay of a live operation does not move its payload's expiry either.
    enqueue(engine, "live-1")
    before = expiry_ms(engine, "live-1")
    travel(HOUR)
    assert not engine.enqueue(T, "live-1", "refund", C.hash, payload_json=C.body).created
    assert expiry_ms(engine, "live-1") == before


def test_an_end_past_the_slack_pushes_the_expiry_to_the_end_plus_the_retention(world):
    make, _clock, travel = world
    engine = make()
    created = enqueue(engine, "late-1").created_at
    travel(3 * DAY)  # a backlog: claimed three days after its enqueue
    claim = engine.claim(T, "late-1", "w1")
    ended = engine.complete(T, "late-1", claim.fence, "ok").updated_at
    assert expiry_ms(engine, "late-1") == -(-(ended + RETENTION) // 1000) * 1000
    assert expiry_ms(engine, "late-1") > created + RETENTION + PAYLOAD_EXPIRY_SLACK_MS
    travel(RETENTION - 1)
    assert reads(engine, "late-1")
