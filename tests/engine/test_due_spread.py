"""The due spread (issue 33): at idle a lone job is in due shard 0 and one query finds it,
whatever the deployment's due shard count; a job in a shard above a fallen spread is still found
within the bound; the spread rises under contention and falls at idle; claimers never
double-claim while it moves.

Requests are counted with the bench's meter (counts only), over the embedded endpoint."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from leasefence import Engine, keys
from leasefence.engine._spread import Hint, hint_item
from leasefence.errors import Unavailable
from leasefence.limits import (
    SPREAD_CACHE_MS,
    SPREAD_CLAIM_CACHE_MS,
    SPREAD_FULL_PROBE_MS,
    SPREAD_GRACE_MS,
    SPREAD_IDLE_MS,
    SPREAD_SHARD_RATE,
)
from leasefence.schema import DUE_PK, TableSpec
from leasefence_tools.bench.meter import Meter
from leasefence_tools.testing.faults import THROTTLE, FaultyClient

H = "sha256:" + "5" * 64
T = "tenant-s"
JOB = "refund"
SHARDS = 64


@pytest.fixture
def wide(aws):
    name = f"spread-{random.getrandbits(32):08x}"
    return aws.create_tables(TableSpec(table_name=name, due_shards=SHARDS, sweep_shards=2, operation_shards=(1,)))


@pytest.fixture
def meter(ddb):
    return Meter(ddb, units=False)


def engine_on(client, spec, clock, seed=1):
    return Engine(client=client, spec=spec, clock=clock, rng=random.Random(seed))


def set_hint(engine, spread, previous, changed_at, version=1):
    engine.store.put_plain(hint_item(T, JOB, Hint(spread, previous, changed_at, version)))


def hint(engine):
    return engine.store.get(keys.tenant_key(T, keys.spread_id(JOB)))


def due_shard(engine, op):
    return keys.parse_due_partition(engine.store.get({"tenant_id": T, "operation_id": op})[DUE_PK])[
        1
    ]


def high_shard_op(spread):
    """An operation id whose shard under ``spread`` is not 0."""
    return next(
        f"op-{i}" for i in range(1000) if keys.shard_of(T, f"op-{i}", spread) >= spread // 2
    )


def poll(meter, engine):
    meter.reset()
    with meter.phase("poll"):
        claim = engine.claim_next(T, "w", lease_ms=30_000, job_types=[JOB])
    return claim, meter.usage("poll").requests


def test_a_lone_job_at_idle_is_in_shard_zero_and_one_query_claims_it(ddb, wide, clock, meter):
    producer = engine_on(ddb, wide, clock)
    claimer = engine_on(meter.client(ddb), wide, clock, seed=2)
    # A pair without a hint probes every shard, as before (entries of before may be anywhere);
    # idle for a minute, its spread falls to 1, and after the grace one query is an idle poll.
    assert poll(meter, claimer)[1]["query"] == SHARDS
    clock.advance(SPREAD_IDLE_MS)
    # every shard, then the check that shards 1 to 63 hold no entry at all: it falls
    assert poll(meter, claimer)[1]["query"] == 2 * SHARDS - 1
    assert int(hint(producer)["spread"]) == 1
    clock.advance(SPREAD_GRACE_MS)
    assert poll(meter, claimer)[1]["query"] == 1  # an idle poll: one query, not 64
    producer.enqueue(T, "lone", JOB, H)
    assert due_shard(producer, "lone") == 0
    claim, requests = poll(meter, claimer)
    assert claim is not None and claim.operation_id == "lone"
    assert requests["query"] == 1


def test_a_job_in_a_shard_above_a_fallen_spread_is_found_within_the_full_probe_period(
    ddb, wide, clock, meter
):
    producer = engine_on(ddb, wide, clock)
    claimer = engine_on(meter.client(ddb), wide, clock, seed=2)
    set_hint(producer, SHARDS, 1, clock() - SPREAD_GRACE_MS)
    op = high_shard_op(SHARDS)
    producer.enqueue(T, op, JOB, H)  # with the spread of 64 it read
    assert due_shard(producer, op) >= SHARDS // 2
    # The spread fell to 1 long ago (an enqueue delayed past the grace): claimers probe shard 0.
    set_hint(producer, 1, SHARDS, clock() - SPREAD_GRACE_MS, version=2)
    claim, requests = poll(meter, claimer)
    assert claim is None and requests["query"] == 1
    found_at = None
    for _ in range(SPREAD_FULL_PROBE_MS // 15_000 + 1):  # an idle worker's polls, 15 s apart
        clock.advance(15_000)
        claim, requests = poll(meter, claimer)
        if claim is not None:
            found_at = clock()
            break
        assert requests["query"] == 1
    assert claim is not None and claim.operation_id == op
    assert requests["query"] <= SHARDS  # the full probe
    assert found_at is not None


def test_within_the_grace_claimers_probe_up_to_the_spread_before_the_fall(ddb, wide, clock, meter):
    producer = engine_on(ddb, wide, clock)
    claimer = engine_on(meter.client(ddb), wide, clock, seed=2)
    set_hint(producer, SHARDS, 1, clock() - SPREAD_GRACE_MS)
    op = high_shard_op(SHARDS)
    producer.enqueue(T, op, JOB, H)
    set_hint(producer, 1, SHARDS, clock(), version=2)  # just fell: the producer's cache was stale
    claim, _ = poll(meter, claimer)
    assert claim is not None and claim.operation_id == op


def test_the_spread_rises_with_one_engine_s_rate_and_falls_to_one_at_idle(ddb, wide, clock):
    producer = engine_on(ddb, wide, clock)
    set_hint(producer, 1, 1, clock() - SPREAD_GRACE_MS)
    for i in range(120):  # 120 in one second from one engine: more than one shard is meant for
        producer.enqueue(T, f"burst-{i}", JOB, H)
    raised = hint(producer)
    assert raised is not None and int(raised["spread"]) >= 2
    clock.advance(SPREAD_CACHE_MS)
    later = [f"later-{i}" for i in range(20)]
    for op in later:
        producer.enqueue(T, op, JOB, H)
    assert {due_shard(producer, op) for op in later} - {0}  # new ones spread wider
    claimer = engine_on(ddb, wide, clock, seed=3)
    drained = 0
    while (claim := claimer.claim_next(T, "w", lease_ms=600_000, job_types=[JOB])) is not None:
        drained += 1
        claimer.complete(T, claim.operation_id, claim.fence, "done")
    assert drained == 140  # every one found, in whatever shard
    clock.advance(SPREAD_IDLE_MS + SPREAD_GRACE_MS)
    assert claimer.claim_next(T, "w", job_types=[JOB]) is None  # idle since the drain
    fallen = hint(producer)
    assert (int(fallen["spread"]), int(fallen["previous"])) == (1, int(raised["spread"]))
    clock.advance(SPREAD_GRACE_MS)
    producer.enqueue(T, "after", JOB, H)
    assert due_shard(producer, "after") == 0


def test_claimers_racing_while_the_spread_moves_never_claim_one_job_twice(own_endpoint, clock):
    aws = own_endpoint
    spec = aws.create_tables(TableSpec(table_name="spread-race", due_shards=16, sweep_shards=2, operation_shards=(1,)))
    engines = [engine_on(aws.client(), spec, clock, seed=i) for i in range(8)]
    ops = [f"op-{i:03d}" for i in range(120)]
    set_hint(engines[0], 1, 1, clock() - SPREAD_GRACE_MS)
    for op in ops[:60]:
        engines[0].enqueue(T, op, JOB, H)
    barrier = threading.Barrier(len(engines))

    def drain(i):
        barrier.wait()
        claims = []
        if i == 0:  # a producer that keeps enqueuing while the others claim and the spread rises
            for op in ops[60:]:
                engines[0].enqueue(T, op, JOB, H)
        while (
            claim := engines[i].claim_next(T, f"w{i}", lease_ms=600_000, job_types=[JOB])
        ) is not None:
            claims.append(claim.operation_id)
        return claims

    with ThreadPoolExecutor(len(engines)) as pool:
        claimed = [op for batch in pool.map(drain, range(len(engines))) for op in batch]
    # A job enqueued after its claimers' cached spread was read is found by a poll after the
    # claim's cache period.
    clock.advance(SPREAD_CLAIM_CACHE_MS)
    claimed += [op for e in engines for op in iter(lambda e=e: _next(e), None)]
    assert Counter(claimed) == Counter(dict.fromkeys(ops, 1))


def _next(engine):
    claim = engine.claim_next(T, "late", lease_ms=600_000, job_types=[JOB])
    return None if claim is None else claim.operation_id


def test_a_throttled_claim_query_or_enqueue_doubles_the_spread(ddb, wide, clock):
    faulty = FaultyClient(ddb)
    engine = engine_on(faulty, wide, clock)
    engine.enqueue(T, "listed", JOB, H)  # the type in the directory: the faults below hit the claim and the put
    clock.advance(SPREAD_CACHE_MS)  # past the engine's cached hint: it reads the one set below
    set_hint(engine, 2, 2, clock() - SPREAD_GRACE_MS)
    faulty.fail_next("query", THROTTLE)
    with pytest.raises(Unavailable):
        engine.claim_next(T, "w", job_types=[JOB])
    assert (int(hint(engine)["spread"]), int(hint(engine)["version"])) == (4, 2)
    clock.advance(SPREAD_CACHE_MS)
    faulty.fail_next("put_item", THROTTLE)
    with pytest.raises(Unavailable):
        engine.enqueue(T, "throttled", JOB, H)
    assert int(hint(engine)["spread"]) == 8


def test_the_spread_never_falls_under_a_claimed_job_so_its_takeover_is_not_delayed(aws, clock):
    spec = aws.create_tables(
        TableSpec(table_name=f"spread-{random.getrandbits(32):08x}", due_shards=8, sweep_shards=2, operation_shards=(1,))
    )
    engine = engine_on(aws.client(), spec, clock)
    poller = engine_on(aws.client(), spec, clock, seed=4)
    set_hint(engine, 8, 8, clock() - SPREAD_GRACE_MS)
    op = high_shard_op(8)
    engine.enqueue(T, op, JOB, H)
    lease = 2 * (SPREAD_IDLE_MS + SPREAD_GRACE_MS)
    claim = engine.claim(T, op, "crashed", lease_ms=lease)
    crashed_at = clock()
    while (taken := poller.claim_next(T, "w", job_types=[JOB])) is None:  # an idle worker's polls
        assert clock() - crashed_at <= lease + 15_000
        clock.advance(15_000)
    assert (taken.operation_id, taken.takeover, taken.fence) == (op, True, claim.fence + 1)
    assert int(hint(engine)["spread"]) == 8  # the claimed job's entry kept it from falling
    # Done, the high shards are empty: the next idle period lowers it.
    poller.complete(T, op, taken.fence, "done")
    for _ in range(3):
        clock.advance(SPREAD_IDLE_MS)
        assert poller.claim_next(T, "w", job_types=[JOB]) is None
    assert int(hint(engine)["spread"]) == 1


def test_an_engine_s_spread_shard_rate_sets_the_rate_at_which_it_widens(ddb, wide, clock):
    """A run against partition limits divided by N (the bench's compressed runs) divides the
    engine's per-shard rate by N: the spread widens at the rate the run stands for, not after
    throttles. 6 enqueues in one second at 2 a shard widen it; at the default (100) the same 6
    leave it at 1."""
    for rate, widened in ((2, True), (SPREAD_SHARD_RATE, False)):
        engine = Engine(client=ddb, spec=wide, clock=clock, rng=random.Random(1),
                        spread_shard_rate=rate)  # fmt: skip
        set_hint(engine, 1, 1, clock() - SPREAD_GRACE_MS)
        for i in range(6):
            engine.enqueue(T, f"rate-{rate}-{i}", JOB, H)
        assert (int(hint(engine)["spread"]) > 1) is widened, rate
        clock.advance(SPREAD_GRACE_MS)
    with pytest.raises(ValueError):
        Engine(client=ddb, spec=wide, spread_shard_rate=0)
