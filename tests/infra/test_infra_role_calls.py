"""The worker function's and the sweeper's roles grant every call their engine makes for a tenant
of an upgraded deployment: operations at the bare tenant id, no write shard record yet. Such a
tenant's first command by id queries its bare partition and records the layout
(``leasefence.engine._layout``); a role without that Query (or a record made with PutItem, which
neither role has) would be refused on AWS, where IAM is enforced and the local stack does not.
Each AWS call is recorded and checked against the actions the role grants on the table and on
each index."""

from __future__ import annotations

import random

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec
from leasefence_infra.sweeper import SWEEPER_INDEX_ACTIONS, SWEEPER_TABLE_ACTIONS
from leasefence_infra.worker import WORKER_DUE_INDEX_ACTIONS, WORKER_TABLE_ACTIONS


def recording(aws, calls: list[tuple[str, bool]]):
    """A DynamoDB client that records each call as (action, on an index)."""
    client = aws.client()

    def record(model, params, **_):
        calls.append((f"dynamodb:{model.name}", bool(params.get("IndexName"))))

    client.meta.events.register("before-call.dynamodb.*", record)
    return client


def upgraded_tenant(aws, name: str):
    """A table whose tenant ``acme`` has operations written by an engine of one write shard (a
    deployment from before the record), and a spec of today's default layout."""
    spec = TableSpec(table_name=name, due_shards=4, sweep_shards=2)  # write shards recorded
    aws.create_tables(spec)
    clock = ManualClock()
    old = Engine(client=aws.client(), spec=TableSpec(table_name=name, due_shards=4, sweep_shards=2,
                                                     operation_shards=(1,)), clock=clock, rng=random.Random(1))
    for op in ("op-1", "op-2"):
        old.enqueue("acme", op, "job", "sha256:" + "0" * 64, max_attempts=1)
    return spec, clock, old


def granted(table: tuple[str, ...], index: tuple[str, ...], calls: list[tuple[str, bool]]) -> set:
    return {(action, on_index) for action, on_index in calls
            if action not in (index if on_index else table)}


def test_the_worker_role_grants_what_an_upgraded_tenants_commands_call(aws) -> None:
    spec, clock, old = upgraded_tenant(aws, "roles-worker")
    claim = old.claim_next("acme", "w1", lease_ms=30_000)
    calls: list[tuple[str, bool]] = []
    worker = Engine(client=recording(aws, calls), spec=spec, clock=clock, rng=random.Random(2))
    worker.heartbeat("acme", claim.operation_id, claim.fence, "w1", lease_ms=30_000)
    worker.complete("acme", claim.operation_id, claim.fence, "ok")
    nxt = worker.claim_next("acme", "w1", lease_ms=30_000, job_types=["job"])
    assert nxt is not None and nxt.operation_id != claim.operation_id
    assert ("dynamodb:Query", False) in calls  # the layout decision was made here
    assert granted(WORKER_TABLE_ACTIONS, WORKER_DUE_INDEX_ACTIONS, calls) == set(), calls
    assert worker.get("acme", claim.operation_id).state.value == "succeeded"


def test_the_sweeper_role_grants_what_an_upgraded_tenants_park_calls(aws) -> None:
    spec, clock, old = upgraded_tenant(aws, "roles-sweeper")
    old.claim_next("acme", "w1", lease_ms=1_000)
    clock.advance(60_000)
    calls: list[tuple[str, bool]] = []
    sweeper = Engine(client=recording(aws, calls), spec=spec, clock=clock, rng=random.Random(3))
    assert sweeper.sweep(limit=10).swept == 1
    assert granted(SWEEPER_TABLE_ACTIONS, SWEEPER_INDEX_ACTIONS, calls) == set(), calls
