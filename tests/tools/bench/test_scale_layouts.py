"""Issue 33's scale simulation: where a lifecycle's measured units land, and the highest rate
one tenant sustains with every partition (table and index) within DynamoDB's limits."""

from __future__ import annotations

import dataclasses
import json
import random

from leasefence import Engine, keys
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
    # A claim token's marker: written (a first send does not read it), on a write shard of its own.
    assert token.marker == {"Write": 1, "Read": 0}
    assert token.operation == plain.operation and token.tenant == {"Write": 0, "Read": 0}


def test_each_bucket_is_where_the_keys_functions_place_the_item(aws, spec, clock):
    """The simulation's buckets follow leasefence.keys: with 16 write shards every table unit of a
    lifecycle lands on the partition the bucket's key function gives (operation, marker, tenant)."""
    sharded = dataclasses.replace(spec, operation_shards=(16,))
    meter = Meter(aws.client(), units=True)
    engine = Engine(client=meter.client(aws.client()), spec=sharded, clock=clock, rng=random.Random(5))
    seen = set()
    for i in range(12):
        op, token = f"op-{i + 1}", f"tok-{i}"
        with meter.phase(op):
            engine.enqueue("acme", op, "refund", H)
            claim = engine.claim_next("acme", "w1", lease_ms=30_000, job_types=["refund"], claim_token=token)
            assert claim is not None and claim.operation_id == op
            engine.complete("acme", op, claim.fence, "done")
        for p in (p for c in meter.usage(op).calls for p in c.partitions if p.index is None):
            sort = p.sort_key["S"]
            where = {
                "operation": keys.operation_partition("acme", op, 16),
                "marker": keys.claim_marker_key("acme", sort, 16)["tenant_id"],
                "tenant": keys.tenant_key("acme", sort)["tenant_id"],
            }[scale_sim.placement(sort)]
            assert p.partition == {"S": where}
            seen.add((scale_sim.placement(sort), where))
    # Operations and markers really spread over the write shards (not all on shard 0).
    assert len({w for kind, w in seen if kind == "operation"}) > 4
    assert len({w for kind, w in seen if kind == "marker"}) > 4


def test_markers_spread_over_the_write_shards():
    """One read and one write unit per lifecycle on the marker's own shard: spread like the
    operations (the bare partition would cap the rate near 1,000/s whatever the shard count)."""
    load = LifecycleLoad(operation={"Write": 3.0, "Read": 0.0}, marker={"Write": 1.0, "Read": 1.0})
    sharded = layout_bound(load, operation_shards=32, due_shards=1, seconds=50)
    assert sharded["bound_per_s"] > 5000 and sharded["binding"] == "table write"


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
