"""What a claim does with a due entry whose lease heartbeats extended, and after a lost race.

Requests are counted with the bench's meter (counts only), over the embedded endpoint."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine
from leasefence.engine import _claim as engine_module
from leasefence_tools.bench.meter import Meter
from leasefence.schema import DUE_SK, TableSpec

H = "sha256:" + "4" * 64
T = "tenant-a"


def raw(engine, op):
    return engine.store.get({"tenant_id": T, "operation_id": op})


@pytest.fixture
def meter(ddb):
    return Meter(ddb, units=False)


@pytest.fixture
def poller(ddb, spec, clock, meter):
    return Engine(client=meter.client(ddb), spec=spec, clock=clock, rng=random.Random(3))


def held_long(engine, op="op-1"):
    """Claimed with a 1 s lease that a heartbeat then extends to 60 s: the due entry stays at +1 s."""
    engine.enqueue(T, op, "refund", H)
    claim = engine.claim(T, op, "w1", lease_ms=1_000)
    engine.heartbeat(T, op, claim.fence, "w1", lease_ms=60_000)
    return claim


def polled(meter, poller, clock, advance_ms):
    clock.advance(advance_ms)
    meter.reset()
    with meter.phase("poll"):
        claim = poller.claim_next(T, "idle", lease_ms=30_000, job_types=["refund"])
    return claim, meter.usage("poll")


def test_a_live_claim_behind_its_entry_is_read_once_then_skipped_without_writes(
    engine, poller, meter, clock
):
    held_long(engine)
    filed_at = int(raw(engine, "op-1")[DUE_SK])
    claim, usage = polled(meter, poller, clock, 2_000)  # the entry says due since 1 s
    assert claim is None
    # the item, and the job type's due spread (issue 33)
    assert (usage.requests["get_item"], usage.requests["update_item"]) == (2, 0)
    claim, usage = polled(meter, poller, clock, 10_000)
    assert claim is None
    assert (usage.requests["query"], usage.requests["get_item"], usage.requests["update_item"]) == (
        4,
        1,
        0,
    )  # remembered: the idle poll is the spread's read and the shards' queries (no spread yet)
    assert int(raw(engine, "op-1")[DUE_SK]) == filed_at  # nothing was re-filed


def test_takeover_after_a_crash_waits_for_the_real_lease_not_for_the_remembered_one(
    engine, poller, meter, clock
):
    claim = held_long(engine)
    assert polled(meter, poller, clock, 2_000)[0] is None  # remembers the lease at +60 s
    clock.advance(50_000)
    lease = engine.heartbeat(T, "op-1", claim.fence, "w1")  # to +112 s; then the worker dies
    assert polled(meter, poller, clock, 10_000 - 1)[0] is None  # +61 s: remembered lease lapsed
    assert polled(meter, poller, clock, lease - clock() - 1)[0] is None  # 1 ms before the lease
    taken, _usage = polled(meter, poller, clock, 1)
    assert taken is not None and taken.takeover and taken.fence == claim.fence + 1
    assert clock() == lease


def test_live_claims_filling_a_page_are_refiled_and_the_work_behind_them_claimed(aws, ddb, clock):
    spec = aws.create_tables(TableSpec(table_name="claim-paths-one-shard", due_shards=1, operation_shards=(1,)))
    worker = Engine(client=ddb, spec=spec, clock=clock)
    for op in ("long-1", "long-2", "long-3"):
        held_long(worker, op)
    clock.advance(2_000)
    worker.enqueue(T, "fresh", "refund", H)  # due after the three lapsed entries
    poller = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(5), candidate_page=2)
    claim = poller.claim_next(T, "idle", job_types=["refund"])
    assert claim is not None and claim.operation_id == "fresh"
    refiled = [
        op
        for op in ("long-1", "long-2", "long-3")
        if raw(worker, op)[DUE_SK] == worker.get(T, op).lease_expires_at
    ]
    assert len(refiled) == 2  # the full first page; the second page gave a claim


def test_a_lost_race_sends_the_claimer_on_and_its_next_claims_read_larger_pages(
    aws, ddb, clock, monkeypatch
):
    monkeypatch.setattr(engine_module, "CONTENTION_MEMORY", 2)
    spec = aws.create_tables(TableSpec(table_name="claim-paths-race", due_shards=1, operation_shards=(1,)))
    limits = []
    rival = Engine(client=ddb, spec=spec, clock=clock)

    class Racing:
        """Records each query's limit; once armed, the rival claims what the next query returned."""

        armed = False

        def __getattr__(self, name):
            return getattr(ddb, name)

        def query(self, **kwargs):
            limits.append(kwargs["Limit"])
            answer = ddb.query(**kwargs)
            if self.armed:
                self.armed = False
                for item in answer.get("Items", []):
                    rival.claim(T, item["operation_id"]["S"], "rival")
            return answer

    racing = Racing()
    engine = Engine(
        client=racing,
        spec=spec,
        clock=clock,
        rng=random.Random(1),
        candidate_page=2,
        contended_page=5,
    )
    for i in range(10):
        engine.enqueue(T, f"op-{i:02d}", "refund", H)
    racing.armed = True
    # The page it read is taken before it writes: one lost race ends that read (the rest of the
    # page is stale); with no other partition, it reads the raced one again, a larger page now.
    claim = engine.claim_next(T, "w", job_types=["refund"])
    assert claim is not None and claim.worker_id == "w"
    assert limits == [2, 5]
    del limits[:]
    assert engine.claim_next(T, "w", job_types=["refund"]) is not None
    assert limits == [5]  # CONTENTION_MEMORY (2) claims after the lost race read 5 ...
    del limits[:]
    assert engine.claim_next(T, "w", job_types=["refund"]) is not None
    assert limits == [2]  # ... then the default page again
    assert engine.claim_next("tenant-b", "w", job_types=["refund"]) is None
    assert limits[-1] == 2  # other tenants never read more


def test_the_oldest_due_age_skips_live_claims_and_counts_lapsed_ones(engine, clock):
    held_long(engine)  # lease until +60 s, entry at +1 s
    filed_at = int(raw(engine, "op-1")[DUE_SK])
    clock.advance(2_000)
    assert engine.oldest_due_age_ms() == 0
    assert int(raw(engine, "op-1")[DUE_SK]) == filed_at  # skipped, not re-filed
    clock.advance(60_000)  # the worker died: its lease lapsed 2 s ago
    assert engine.oldest_due_age_ms() == 2_000
