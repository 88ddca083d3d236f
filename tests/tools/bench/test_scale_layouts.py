"""Issue 33's scale simulation: where a lifecycle's measured units land, and the highest rate
one tenant sustains with every partition (table and index) within DynamoDB's limits."""

from __future__ import annotations

import json
import random

from leasefence import Engine
from leasefence_tools.bench import scale_sim
from leasefence_tools.bench.meter import Meter
from leasefence_tools.bench.scale_sim import LifecycleLoad, layout_bound

H = "sha256:" + "2" * 64


def test_the_meter_records_where_each_unit_lands(aws, spec, clock):
    meter = Meter(aws.client(), units=True)
    engine = Engine(client=meter.client(aws.client()), spec=spec, clock=clock, rng=random.Random(5))
    engine.enqueue("acme", "op-0", "refund", H)  # the first of its type lists it (once)
    for phase, token in (("plain", None), ("token", "tok-1")):
        with meter.phase(phase):
            engine.enqueue("acme", f"op-{phase}", "refund", H)
            claim = engine.claim_next("acme", "w1", lease_ms=30_000, job_types=["refund"], claim_token=token)
            engine.complete("acme", claim.operation_id, claim.fence, "done")
    plain, token = (
        LifecycleLoad.from_partitions((p for c in meter.usage(phase).calls for p in c.partitions), 1)
        for phase in ("plain", "token")
    )
    queries = meter.usage("plain").requests["query"]
    # The item: put, claim update, complete update; the due index: put, delete + put, delete.
    assert plain.operation == {"Write": 3, "Read": 0}
    assert plain.due == {"Write": 4, "Read": 0.5 * queries}
    assert plain.tenant == {"Write": 0, "Read": 0} and plain.shared == {}
    # A claim token's marker is the tenant's own item: read strongly consistent, then written.
    assert token.tenant == {"Write": 1, "Read": 1}
    assert token.operation == plain.operation


def test_a_tenant_partition_caps_the_rate_whatever_the_shard_count():
    load = LifecycleLoad(operation={"Write": 5.0, "Read": 0.0})
    one = layout_bound(load, operation_shards=1, due_shards=1, seconds=50)
    assert 150 < one["bound_per_s"] <= 200 and one["binding"] == "table write"
    eight = layout_bound(load, operation_shards=8, due_shards=1, seconds=50)
    assert eight["bound_per_s"] > 6 * one["bound_per_s"]
    # One write unit per lifecycle on the tenant's own partition (shard 0 holds it too): no more
    # than 1,000 lifecycles/s, however many write shards.
    hot = LifecycleLoad(operation={"Write": 5.0, "Read": 0.0}, tenant={"Write": 1.0, "Read": 0.0})
    capped = layout_bound(hot, operation_shards=64, due_shards=1, seconds=50)
    assert capped["bound_per_s"] < 1000 and capped["binding"] == "table write"
    # The due index binds on its own shards.
    due = LifecycleLoad(due={"Write": 4.0, "Read": 0.5})
    assert layout_bound(due, operation_shards=1, due_shards=4, seconds=50)["binding"] == "due index write"


def test_the_command_reports_both_layouts(capsys):
    assert scale_sim.main(["--shards", "4", "--seconds", "20", "--operation-shards", "16", "--json"]) == 0
    layouts = json.loads(capsys.readouterr().out)["layouts"]
    assert layouts["one_shard"]["operation_shards"] == 1
    assert layouts["sharded"]["operation_shards"] == 16
    assert layouts["sharded"]["bound_per_s"] > 4 * layouts["one_shard"]["bound_per_s"]
    assert layouts["assumes"]["split_for_heat"] is False
