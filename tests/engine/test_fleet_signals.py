"""The sweeper's fleet-wide signals: ``OldestDueAgeSeconds`` visits every tenant over successive
runs (each run bounded), and shadow tenants (``shadow:``) stay out of every fleet signal."""

from __future__ import annotations

import itertools
import random

import pytest

from leasefence import Engine, State, keys
from leasefence import engine as engine_module
from leasefence.schema import DUE_INDEX, TableSpec
from leasefence.shadow import EngineShadowStore, Shadow, shadow_tenant

H = "sha256:" + "5" * 64
_tables = itertools.count()


class Recording:
    """The DynamoDB client, recording each request (method and arguments)."""

    def __init__(self, client):
        self._client = client
        self.calls: list[tuple[str, dict]] = []

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if not callable(method):
            return method

        def call(**kwargs):
            self.calls.append((name, kwargs))
            return method(**kwargs)

        return call


@pytest.fixture
def fleet(aws, ddb, clock):
    """An engine over a table with one due shard (two requests per tenant and job type)."""
    spec = TableSpec(table_name=f"fleet-{next(_tables)}", due_shards=1, sweep_shards=2)
    spec = aws.create_tables(spec)
    recording = Recording(ddb)
    return Engine(client=recording, spec=spec, clock=clock, rng=random.Random(11)), recording


#: Requests per sample: the sweeper's default is 200; 30 keeps the test small (2 per tenant).
BUDGET = 30


def _sample(engine, recording):
    """One sweeper sample: (its figure, the requests it made, the tenants whose due work it read)."""
    del recording.calls[:]
    figure = engine.oldest_due_age_ms(max_queries=BUDGET)
    due = [kw for name, kw in recording.calls if name == "query" and kw.get("IndexName") == DUE_INDEX]
    seen = {kw["ExpressionAttributeValues"][":pk"]["S"].split("#", 1)[0] for kw in due}
    return figure, len(recording.calls), seen


def test_the_oldest_due_age_visits_every_tenant_over_successive_runs(fleet, clock):
    """More tenants than one run's budget can visit: successive runs resume where the last one
    stopped, so every tenant is visited, each run stays within its budget, and work due in any
    tenant is reported by every run from the first cycle that finds it until a cycle no longer
    does. (Before, every run read the same first directories: the others were never seen.)"""
    engine, recording = fleet
    tenants = [f"tenant-{i:03d}" for i in range(50)]
    for tenant in tenants:  # each tenant has a directory, and nothing due
        engine.enqueue(tenant, "op", "refund", H)
        claim = engine.claim(tenant, "op", "w", lease_ms=1_000)
        engine.complete(tenant, "op", claim.fence, "done")

    visited: set[str] = set()
    requests = []
    runs = 0
    while visited != set(tenants):
        runs += 1
        assert runs <= 6, f"{len(set(tenants) - visited)} of {len(tenants)} tenants never visited"
        figure, made, seen = _sample(engine, recording)
        assert figure == 0
        requests.append(made)
        visited |= seen
    assert runs >= 3  # 50 tenants at 2 requests each take several runs
    assert max(requests) <= BUDGET + 2, requests  # the budget, plus reading and writing the cursor

    # Work due in one tenant (wherever the cursor stands) is found within one cycle ...
    stuck = tenants[runs * 37 % len(tenants)]
    engine.enqueue(stuck, "stuck", "refund", H)
    clock.advance(600_000)
    figures = []
    for _run in range(2 * runs + 1):
        figures.append(_sample(engine, recording)[0])
        clock.advance(60_000)
    first = next(i for i, f in enumerate(figures) if f > 0)
    assert first <= runs
    # ... and every later run reports it (an alarm on the figure stays on, it does not flap).
    assert all(f >= 600_000 for f in figures[first:]), figures
    claim = engine.claim(stuck, "stuck", "w", lease_ms=1_000)
    engine.complete(stuck, "stuck", claim.fence, "done")
    figures = [_sample(engine, recording)[0] for _run in range(2 * runs + 1)]
    assert figures[-1] == 0, figures  # gone once a whole cycle no longer finds it


def test_a_cursor_at_an_erased_tenant_still_resumes(fleet, clock):
    engine, recording = fleet
    tenants = [f"tenant-{i:03d}" for i in range(30)]
    for tenant in tenants:
        engine.enqueue(tenant, "op", "refund", H)
    clock.advance(1_000)
    figure, _, seen = _sample(engine, recording)  # stops part-way (30 tenants, 2 requests each)
    assert figure == 1_000 and 0 < len(seen) < len(tenants)
    cursor = engine.store.get({"tenant_id": keys.FLEET_TENANT, "operation_id": keys.OLDEST_DUE_CURSOR_ID})
    erased = cursor["cursor"]["tenant_id"]
    assert erased in seen
    step = engine.erase_tenant(erased, limit=100)  # holds the tenant, deletes its rows
    clock.advance(engine_module.TENANT_ERASURE_SETTLE_MS + 1)
    for _step in range(5):
        if step.finished:
            break
        step = engine.erase_tenant(erased, limit=100, cursor=step.next_cursor)
    assert step.finished and engine.job_types(erased) == []  # its directory item is gone
    visited: set[str] = set()
    for _run in range(3):  # the rest of this cycle, then the next one from its start
        visited |= _sample(engine, recording)[2]
    assert visited == set(tenants) - {erased}


def test_a_queued_shadow_operation_is_not_overdue_work_of_the_fleet(engine, clock):
    """A shadow operation left queued (its wrapped call raised: it is never dispatched) does not
    keep OldestDueAgeSeconds up; real work of another tenant still shows."""
    store = EngineShadowStore(engine, "acme")  # in-process shadow mode
    shadow = Shadow(store, "refund", operation_id=lambda message: message["id"],
                    heartbeat_thread=False)

    def consume(_message):
        raise RuntimeError("the existing consumer failed this delivery")

    with pytest.raises(RuntimeError):
        shadow.wrap(consume)({"id": "r1"})
    assert shadow.stats["claims"] == 1 and shadow.stats["gaps"] == 0
    assert engine.get(shadow_tenant("acme"), "r1").state == State.QUEUED
    clock.advance(3_600_000)
    assert engine.oldest_due_age_ms() == 0
    engine.enqueue("acme", "real-1", "refund", H)
    clock.advance(5_000)
    assert engine.oldest_due_age_ms() == 5_000


def test_a_swept_shadow_operation_is_not_counted_as_the_fleets_unknown(engine, clock, events):
    """A shadow run record whose completion was lost ends ``unknown`` like any expired final
    attempt, but neither SweptToUnknown nor OldestUnknownAgeSeconds counts it."""
    shadow = shadow_tenant("acme")
    for tenant in (shadow, "acme"):
        engine.enqueue(tenant, "last", "refund", H, max_attempts=1)
        engine.claim(tenant, "last", "w", lease_ms=1_000)
    clock.advance(2_000)
    engine.sweep()
    assert engine.get(shadow, "last").state == State.UNKNOWN
    assert engine.get("acme", "last").state == State.UNKNOWN
    assert events.counts["SweptToUnknown"] == 1
    clock.advance(10_000)
    assert engine.oldest_parked_age_ms("unknown") == 10_000
    engine.resolve("acme", "last", "failed_terminal")
    assert engine.oldest_parked_age_ms("unknown") == 0


def test_a_call_that_reads_a_whole_cycle_reports_exactly_what_it_read(fleet, clock):
    """Mid-cycle calls carry the last complete cycle (a little stale); a call whose budget covers
    every tenant from the top (a small fleet, a large budget) reports only what it read."""
    engine, recording = fleet
    tenants = [f"tenant-{i:03d}" for i in range(24)]
    for tenant in tenants:
        engine.enqueue(tenant, "op", "refund", H)
    clock.advance(30_000)
    figures = [_sample(engine, recording)[0] for _run in range(3)]  # ~14 tenants per call
    assert figures == [30_000] * 3
    for tenant in tenants:
        claim = engine.claim(tenant, "op", "w", lease_ms=1_000)
        engine.complete(tenant, "op", claim.fence, "done")
    assert _sample(engine, recording)[0] == 30_000  # the last complete cycle, not read again yet
    assert engine.oldest_due_age_ms(max_queries=1_000) == 0  # the rest, then a whole cycle
    assert _sample(engine, recording)[0] == 0
