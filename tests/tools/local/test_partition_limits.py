"""DynamoDB's per-partition limits in the embedded endpoint (``Fidelity(partition_limits=True)``).

A hot partition key is throttled past its units in one second and served again the next; an
index partition is metered on its own; reads too; and a throttled store reaches the engine's and
the worker runtime's retries with no operation lost or finished twice.
"""

from __future__ import annotations

from collections import Counter

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from leasefence_tools.bench import compressed, report
from leasefence_tools.local.embedded import EmbeddedAws, Fidelity
from leasefence_tools.local.partitions import Charge, PartitionMeter

#: 1,000 / 200 = 5 write units and 3,000 / 200 = 15 read units per partition per second.
SCALE = 200
T0_MS = 1_800_000_000_000


def test_the_meter_refuses_past_the_limit_and_forgets_it_the_next_second():
    now = [100.0]
    meter = PartitionMeter(time_scale=SCALE, clock=lambda: now[0])
    hot = Charge("t", None, '{"S": "k"}', "Write", 1.0)
    for _ in range(5):
        assert meter.refusal([hot]) is None
        meter.charge([hot])
    assert meter.refusal([hot]) == hot
    assert meter.refusal([Charge("t", None, '{"S": "other"}', "Write", 1.0)]) is None
    assert meter.refusal([Charge("t", None, '{"S": "k"}', "Read", 1.0)]) is None
    now[0] += 0.999
    assert meter.refusal([hot]) == hot  # still the same second
    now[0] += 0.001
    assert meter.refusal([hot]) is None
    assert meter.stats["partition_throttled_by_reason"] == {
        "TableWriteKeyRangeThroughputExceeded": 2
    }
    # Each refusal counted in its window (the meter clock's whole second): both in second 100.
    assert meter.stats["partition_throttled_by_window"] == {"100": 2}
    # A charge that would pass the limit is refused once some of it is used, not on a fresh window.
    big = Charge("t", None, '{"S": "k"}', "Write", 7.0)
    assert meter.refusal([big]) is None
    meter.charge([big])
    assert meter.refusal([Charge("t", None, '{"S": "k"}', "Write", 1.0)]) is not None


def test_the_option_is_off_by_default_and_set_from_the_environment():
    assert Fidelity().partition_limits is False
    env = {
        "LEASEFENCE_FIDELITY": "1",
        "LEASEFENCE_FIDELITY_PARTITION_LIMITS": "1",
        "LEASEFENCE_FIDELITY_PARTITION_TIME_SCALE": "50",
    }
    assert Fidelity.from_env(env) == Fidelity(partition_limits=True, partition_time_scale=50.0)
    with pytest.raises(ValueError):
        Fidelity(partition_time_scale=0)


@pytest.fixture(scope="module")
def limited():
    aws = EmbeddedAws(
        fidelity=Fidelity(
            partition_limits=True, partition_time_scale=SCALE, ttl_deletion=False, index_lag_ms=0
        )
    ).start()
    try:
        yield aws
    finally:
        aws.stop()


def _table(aws, name):
    client = aws.client(config=Config(retries={"mode": "standard", "total_max_attempts": 1}))
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "g")
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_g",
                "KeySchema": [
                    {"AttributeName": "g", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )
    return client


def _put(client, table, pk, sk, g):
    client.put_item(
        TableName=table,
        Item={"pk": {"S": pk}, "sk": {"S": sk}, "g": {"S": g}, "x": {"S": "y" * 100}},
    )


def _throttle(call):
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response
    assert error["Error"]["Code"] == "ThrottlingException"
    assert "KeyRangeThroughputExceeded" in error["Error"]["Message"]
    return error["throttlingReasons"]


def test_a_hot_table_partition_is_throttled_within_the_second_and_served_the_next(limited):
    client = _table(limited, "hot_table")
    limited.set_time(T0_MS)
    for i in range(5):  # 1 write unit each (and one on its own index partition)
        _put(client, "hot_table", "hot", f"s{i}", f"g{i}")
    reasons = _throttle(lambda: _put(client, "hot_table", "hot", "s5", "g5"))
    assert [r["reason"] for r in reasons] == ["TableWriteKeyRangeThroughputExceeded"]
    assert reasons[0]["resource"].endswith(":table/hot_table")
    _put(client, "hot_table", "cold", "s5", "g5")  # another partition key: its own partition
    limited.advance_time(1000)
    _put(client, "hot_table", "hot", "s5", "g6")
    limited.advance_time(1000)
    items = client.query(
        TableName="hot_table",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "hot"}},
    )["Items"]
    assert sorted(i["sk"]["S"] for i in items) == ["s0", "s1", "s2", "s3", "s4", "s5"]
    assert [i["g"]["S"] for i in items if i["sk"]["S"] == "s5"] == [
        "g6"
    ]  # the refused put wrote nothing

    # A transaction on the hot partition is cancelled with a ThrottlingError reason, nothing applied.
    for i in range(5):
        _put(client, "hot_table", "hot", f"t{i}", f"h{i}")
    with pytest.raises(ClientError) as cancelled:
        client.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": "hot_table",
                        "Item": {"pk": {"S": "cold"}, "sk": {"S": "tx"}},
                    }
                },
                {
                    "Put": {
                        "TableName": "hot_table",
                        "Item": {"pk": {"S": "hot"}, "sk": {"S": "tx"}},
                    }
                },
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in cancelled.value.response["CancellationReasons"]] == [
        "None",
        "ThrottlingError",
    ]
    got = client.get_item(TableName="hot_table", Key={"pk": {"S": "cold"}, "sk": {"S": "tx"}})
    assert "Item" not in got


def test_an_index_partition_is_metered_on_its_own(limited):
    client = _table(limited, "hot_index")
    limited.set_time(T0_MS)
    for i in range(5):  # five table partitions, one index partition
        _put(client, "hot_index", f"p{i}", "s", "shared")
    reasons = _throttle(lambda: _put(client, "hot_index", "p5", "s", "shared"))
    assert [r["reason"] for r in reasons] == ["IndexWriteKeyRangeThroughputExceeded"]
    assert reasons[0]["resource"].endswith(":table/hot_index/index/by_g")
    _put(
        client, "hot_index", "p5", "s", "elsewhere"
    )  # the same table item shape, another index key
    # Moving an item's index key costs a delete on the old index partition and a put on the new.
    limited.advance_time(1000)
    for i in range(5):
        client.update_item(
            TableName="hot_index",
            Key={"pk": {"S": f"p{i}"}, "sk": {"S": "s"}},
            UpdateExpression="SET g = :g",
            ExpressionAttributeValues={":g": {"S": f"moved{i}"}},
        )
    # The five deletes from "shared" used its five units: a put into it is refused, a put into
    # a partition that only took one entry is not.
    reasons = _throttle(lambda: _put(client, "hot_index", "p6", "s", "shared"))
    assert [r["reason"] for r in reasons] == ["IndexWriteKeyRangeThroughputExceeded"]
    _put(client, "hot_index", "p6", "s", "moved0")


def test_a_provisioned_table_answers_provisioned_throughput_exceeded_and_deletes_count(limited):
    client = limited.client(config=Config(retries={"mode": "standard", "total_max_attempts": 1}))
    client.create_table(
        TableName="provisioned",
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 100, "WriteCapacityUnits": 100},
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
    )
    limited.set_time(T0_MS)
    client.put_item(TableName="provisioned", Item={"pk": {"S": "hot"}})
    for _ in range(4):  # a delete costs a unit even when there is nothing to delete
        client.delete_item(TableName="provisioned", Key={"pk": {"S": "hot"}})
    with pytest.raises(ClientError) as refused:
        client.delete_item(TableName="provisioned", Key={"pk": {"S": "hot"}})
    error = refused.value.response
    assert error["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert [r["reason"] for r in error["ThrottlingReasons"]] == [
        "TableWriteKeyRangeThroughputExceeded"
    ]


def test_reads_are_metered_per_partition_too(limited):
    client = _table(limited, "hot_reads")
    limited.set_time(T0_MS)
    _put(client, "hot_reads", "hot", "s", "shared")
    limited.advance_time(1000)
    key = {"pk": {"S": "hot"}, "sk": {"S": "s"}}
    for _ in range(15):  # strongly consistent, under 4 KB: 1 read unit each
        client.get_item(TableName="hot_reads", Key=key, ConsistentRead=True)
    reasons = _throttle(lambda: client.get_item(TableName="hot_reads", Key=key))
    assert [r["reason"] for r in reasons] == ["TableReadKeyRangeThroughputExceeded"]
    # The index partition has read nothing yet: 30 eventually consistent pages of half a unit.
    query = {
        "TableName": "hot_reads",
        "IndexName": "by_g",
        "KeyConditionExpression": "g = :g",
        "ExpressionAttributeValues": {":g": {"S": "shared"}},
    }
    for _ in range(30):
        assert len(client.query(**query)["Items"]) == 1
    reasons = _throttle(lambda: client.query(**query))
    assert [r["reason"] for r in reasons] == ["IndexReadKeyRangeThroughputExceeded"]
    limited.advance_time(1000)
    assert client.get_item(TableName="hot_reads", Key=key)["Item"]["pk"] == {"S": "hot"}
    stats = limited.fidelity_stats()["stats"]
    assert stats["partition_throttled_by_reason"]["TableReadKeyRangeThroughputExceeded"] >= 1


# ------------------------------------------------------------------ the throttle reaches the retries


def test_a_throttled_tenant_loses_no_write_and_finishes_every_operation_once():
    """One tenant's enqueues, claims and completions (the bench's compressed run) against limits
    scaled down by 200 with a meter clock ten times the wall (100 ms windows of 5 write units
    per partition: 50 a second), offered faster than that: many requests are throttled; with botocore's
    retries off, the producer's idempotent resend and the worker runtime's backoff carry every
    operation to ``succeeded`` exactly once, each under a fence that only rose."""
    result = compressed.run(
        rate=10_000, compression=20, operations=30, workers=4, speed=10, deadline_s=90
    )
    ledger = result["ledger"]
    ops = [f"op-{i:05d}" for i in range(30)]
    assert result["throttled_requests"] > 0, "the load never met the partition limit"
    assert result["succeeded"] == 30
    assert ledger.runs == Counter(dict.fromkeys(ops, 1))  # none lost, none run twice
    for op, seen in ledger.fences.items():
        assert seen == sorted(seen) and seen[0] >= 1, op
    print({k: v for k, v in result.items() if k != "ledger"})


def test_the_sharded_layout_runs_on_the_limited_endpoint_and_names_its_hot_partitions():
    """The compressed run with the engine's write shards (4) and due shards (4): every operation
    ends once, the layout is the one asked for, the items spread over the tenant's write shards,
    and each throttled request is counted under the partition it hit."""
    result = compressed.run(
        rate=10_000, compression=20, operations=20, workers=2, speed=10, deadline_s=90,
        operation_shards=4, due_shards=4,
    )
    assert result["layout"] == {"operation_shards": 4, "due_shards": 4}
    assert result["succeeded"] == 20
    assert result["ledger"].runs == Counter(dict.fromkeys((f"op-{i:05d}" for i in range(20)), 1))
    assert sum(result["throttled_by_partition"].values()) == result["throttled_requests"]
    assert result["meter_window_s"] == 0.1  # a meter clock ten times the wall
    print({k: v for k, v in result.items() if k != "ledger"})


def _run(throttled, window_s, operations=1_200, offered=10_000, shards=64):
    return {
        "layout": {"operation_shards": shards, "due_shards": shards},
        "compression": 500,
        "operations": operations,
        "meter_window_s": window_s,
        "rate_offered_equivalent_per_s": offered,
        "throttled_requests": throttled,
    }


def test_the_bench_judges_the_sharded_layout_by_its_exact_windows_when_it_has_them():
    """Issue 33's row ``compressed_10000_sharded_throttled``: with a run whose meter windows are the
    compression's length (each one second at the rate stood for) the sharded layout is judged by
    it, the 60-s windows' count shown beside it; without one, by the 60-s run, as before."""
    one = _run(22_798, 60, shards=1)
    runs = {"one_shard": one, "sharded": _run(42, 60), "sharded_exact": _run(0, 500, 10_000)}
    row = report.compressed_row(runs)
    assert (row["value"], row["met"]) == (0, True)
    assert "10,000 operations, 500-s windows" in row["result"]
    assert "60-s windows (stricter, noisier): 42 throttled" in row["result"]
    assert report.compressed_row({"one_shard": one, "sharded": _run(42, 60)})["met"] is False
    assert report.compressed_row({**runs, "sharded_exact": _run(3, 500, 10_000)})["met"] is False
    # The rate really offered counts: an exact run that offered too little judges nothing met.
    slow = {**runs, "sharded_exact": _run(0, 500, 10_000, offered=9_000)}
    assert report.compressed_row(slow)["met"] is False
    # Nor is it met when the one-shard layout did not throttle at the same load.
    assert report.compressed_row({**runs, "one_shard": _run(0, 60, shards=1)})["met"] is False


def test_a_long_run_gets_a_deadline_past_its_offering():
    assert compressed.deadline_for(1_200, 500) == compressed.DEFAULT_DEADLINE_S
    assert compressed.deadline_for(10_000, 500) == 900  # 500 s offered, 80% more
