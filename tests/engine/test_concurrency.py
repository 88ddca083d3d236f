"""Concurrency over the embedded (serialized) endpoint: real threads, real HTTP requests."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from leasefence import Engine, StaleFence, State
from leasefence_tools.local.embedded import EmbeddedAws
from leasefence.schema import TableSpec

H = "sha256:" + "3" * 64
T = "acme"
THREADS = 16
OPERATIONS = 500


def _race(worker, threads=THREADS):
    barrier = threading.Barrier(threads)

    def run(index):
        barrier.wait()
        return worker(index)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, range(threads)))


def _drain(engine, worker_id):
    claims = []
    while (claim := engine.claim_next(T, worker_id, lease_ms=60_000)) is not None:
        claims.append(claim)
    return claims


def test_sixteen_claimers_over_five_hundred_operations(own_endpoint, clock):
    aws = own_endpoint
    spec = aws.create_tables(TableSpec(table_name="claimers", due_shards=4, sweep_shards=2))
    engines = [Engine(client=aws.client(), spec=spec, clock=clock, rng=random.Random(i)) for i in range(THREADS)]
    for i in range(OPERATIONS):
        engines[0].enqueue(T, f"op-{i:04d}", "refund", H)

    # Round 1: every operation claimed exactly once, with fence 1.
    rounds = _race(lambda i: _drain(engines[i], f"w{i}"))
    claims = [c for batch in rounds for c in batch]
    assert Counter(c.operation_id for c in claims) == Counter({f"op-{i:04d}": 1 for i in range(OPERATIONS)})
    assert {c.fence for c in claims} == {1}
    assert sum(1 for batch in rounds if batch) > 1  # the work really was shared

    # Round 2: all leases lapse; a second race takes every one over exactly once, with fence 2.
    clock.advance(60_000)
    takeovers = [c for batch in _race(lambda i: _drain(engines[i], f"x{i}")) for c in batch]
    assert Counter(c.operation_id for c in takeovers) == Counter({f"op-{i:04d}": 1 for i in range(OPERATIONS)})
    assert {(c.fence, c.takeover, c.reconcile_required) for c in takeovers} == {(2, True, True)}

    # Round 3: stale (fence 1) and current (fence 2) holders race to complete: only fence 2 counts.
    holder = {c.operation_id: c for c in takeovers}
    ids = sorted(holder)

    def complete(i):
        outcome = Counter()
        for op in ids[i::THREADS // 2] if i < THREADS // 2 else ids[i - THREADS // 2 :: THREADS // 2]:
            fence = 1 if i < THREADS // 2 else holder[op].fence
            try:
                engines[i].complete(T, op, fence, f"by-fence-{fence}")
                outcome[fence] += 1
            except StaleFence:
                outcome[f"stale-{fence}"] += 1
        return outcome

    totals = sum(_race(complete), Counter())
    assert totals == Counter({2: OPERATIONS, "stale-1": OPERATIONS})
    final = [engines[0].get(T, op) for op in ids]
    assert {(o.state, o.fence, o.outcome_code) for o in final} == {(State.SUCCEEDED, 2, "by-fence-2")}


@pytest.mark.needs("embedded")  # the embedded endpoint's own atomicity
def test_embedded_endpoint_gives_one_winner_per_conditional_update_on_large_items():
    """The property the design notes found missing in plain moto: 16 threads racing one
    conditional update on each of 100 items with a few KB nested attribute, exactly one winner."""
    with EmbeddedAws() as server:
        client = server.client()
        client.create_table(
            TableName="race",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        blob = {"L": [{"M": {"k": {"S": f"value-{i}"}, "n": {"N": str(i)}}} for i in range(200)]}
        for i in range(100):
            client.put_item(TableName="race", Item={"pk": {"S": f"item-{i}"}, "version": {"N": "0"}, "blob": blob})
        clients = [server.client() for _ in range(THREADS)]

        def race(index):
            wins = []
            for i in range(100):
                try:
                    clients[index].update_item(
                        TableName="race",
                        Key={"pk": {"S": f"item-{i}"}},
                        UpdateExpression="SET version = version + :one, winner = :w",
                        ConditionExpression="version = :zero",
                        ExpressionAttributeValues={":one": {"N": "1"}, ":zero": {"N": "0"}, ":w": {"S": str(index)}},
                    )
                    wins.append(i)
                except clients[index].exceptions.ConditionalCheckFailedException:
                    pass
            return wins

        wins = Counter(i for batch in _race(race) for i in batch)
        assert wins == Counter({i: 1 for i in range(100)})
        versions = {
            client.get_item(TableName="race", Key={"pk": {"S": f"item-{i}"}})["Item"]["version"]["N"] for i in range(100)
        }
        assert versions == {"1"}
