"""The metering client over the embedded endpoint: real engine requests, hand-checked units."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, StaleFence
from leasefence_tools.bench.harness import ServerProcess
from leasefence_tools.bench.meter import Meter
from leasefence_tools.bench.scale_sim import max_rate

H = "sha256:" + "1" * 64


@pytest.fixture
def metered(aws, spec, clock):
    meter = Meter(aws.client(), units=True)
    engine = Engine(client=meter.client(aws.client()), spec=spec, clock=clock, rng=random.Random(3))
    return meter, engine


def test_a_lifecycle_costs_seven_write_units(metered, clock):
    meter, engine = metered
    with meter.phase("first"):  # the first operation of a job type also lists the type (once)
        engine.enqueue("acme", "op-0", "refund", H)
    engine.complete("acme", "op-0", engine.claim("acme", "op-0", "w0").fence, "done")
    first = meter.usage("first")
    assert (first.wcu, first.wcu_index) == (4, 2)  # item + due put, directory item + its index entry
    with meter.phase("enqueue"):
        engine.enqueue("acme", "op-1", "refund", H)
    with meter.phase("claim"):  # a worker claims the job types it serves
        claim = engine.claim_next("acme", "w1", lease_ms=30_000, job_types=["refund"])
    with meter.phase("heartbeat"):
        engine.heartbeat("acme", "op-1", claim.fence, "w1")
    with meter.phase("complete"):
        engine.complete("acme", "op-1", claim.fence, "done")

    enqueue, claim_use, beat, complete = (meter.usage(p) for p in ("enqueue", "claim", "heartbeat", "complete"))
    assert (enqueue.wcu, enqueue.wcu_index, enqueue.rcu) == (2, 1, 0)  # item + due put
    assert (claim_use.wcu, claim_use.wcu_index) == (3, 2)  # item + due delete/put (due_at moves)
    assert claim_use.rcu == 0.5 * claim_use.requests["query"]  # one small page per shard probed
    assert (beat.wcu, beat.wcu_index) == (1, 0)  # heartbeats never touch an index
    assert (complete.wcu, complete.wcu_index) == (2, 1)  # item + due delete
    assert [c.op for c in complete.calls] == ["update_item"]


def test_a_refused_write_is_counted_and_costs_one_unit(metered, clock):
    meter, engine = metered
    engine.enqueue("acme", "op-2", "refund", H)
    claim = engine.claim_next("acme", "w1", lease_ms=30_000)
    engine.complete("acme", "op-2", claim.fence, "done")
    with meter.phase("stale"), pytest.raises(StaleFence):
        engine.complete("acme", "op-2", claim.fence + 1, "late")
    stale = meter.usage("stale")
    assert (stale.total_refused, stale.wcu) == (1, 1)


def test_count_only_mode_sends_no_extra_requests(aws, spec, clock):
    meter = Meter(aws.client(), units=False)
    engine = Engine(client=meter.client(aws.client()), spec=spec, clock=clock)
    engine.enqueue("acme", "op-2", "refund", H)  # the first of its type also lists the type
    with meter.phase("x"):
        engine.enqueue("acme", "op-3", "refund", H)
    usage = meter.usage("x")
    assert (usage.total_requests, usage.wcu) == (1, 0)


def test_accelerated_index_queries_answer_exactly_as_moto_does():
    with ServerProcess() as server:
        assert server.self_check(per_tenant=15) > 0


def test_scale_simulation_respects_the_partition_limit():
    # One shard, 4 write units per lifecycle: never above 1,000 / 4 lifecycles per second.
    assert 150 < max_rate(1, 4.0, 1000.0, seconds=50) <= 250


def test_the_catalogue_costs_one_cached_read(metered, clock):
    """An enqueue reads the job type's entry (and, for an uncatalogued type, the tenant's
    settings) once per engine per cache period, eventually consistent: 0.5 unit each; the due
    spread's hint the same way."""
    from leasefence.catalogue import CACHE_MS

    meter, engine = metered
    engine.catalogue.put("acme", "refund", {"target_class": "B", "max_attempts": 3})
    engine.enqueue("acme", "op-0", "misc", H)  # lists the types once (directory writes)
    engine.enqueue("acme", "op-1", "refund", H)
    clock.advance(CACHE_MS)  # both cached entries are stale now
    with meter.phase("catalogued"):
        engine.enqueue("acme", "op-2", "refund", H)
    with meter.phase("uncatalogued"):
        engine.enqueue("acme", "op-3", "misc", H)
    with meter.phase("cached"):
        engine.enqueue("acme", "op-4", "refund", H)
        engine.enqueue("acme", "op-5", "misc", H)
    catalogued, uncatalogued, cached = (meter.usage(p) for p in ("catalogued", "uncatalogued", "cached"))
    # each also reads its job type's due spread (0.5, cached 1 s: engine._spread)
    assert (catalogued.rcu, catalogued.wcu, catalogued.wcu_index) == (1.0, 2, 1)  # entry; item + due put
    assert (uncatalogued.rcu, uncatalogued.wcu) == (1.5, 2)  # no entry, so the settings too
    assert (cached.rcu, cached.wcu) == (0, 4)


def test_count_only_mode_still_gives_the_read_units_of_plain_reads(aws, spec, clock):
    meter = Meter(aws.client(), units=False)
    engine = Engine(client=meter.client(aws.client()), spec=spec, clock=clock)
    # nothing queued, and no due spread yet (its hint read, 0.5): one empty page per shard, 0.5 each
    with meter.phase("idle"):
        assert engine.claim_next("nobody", "w1", lease_ms=30_000, job_types=["refund"]) is None
    usage = meter.usage("idle")
    assert (usage.requests["query"], usage.rcu) == (spec.due_shards, 0.5 * spec.due_shards + 0.5)
    engine.enqueue("acme", "op-4", "refund", H)
    with meter.phase("get"):
        engine.get("acme", "op-4")  # strongly consistent: 1 unit up to 4 KB
    assert (meter.usage("get").total_requests, meter.usage("get").rcu) == (1, 1.0)
