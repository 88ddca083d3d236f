"""The release record test of layout 2: the items main 4f60178 wrote (layout 1, recorded by
``releases/record_layout1.py`` with 4f60178's own engine: payloads kept in the operation item, a
purge index entry, no payload item, no ``lv``) are replayed, claimed, completed, resolved,
approved, listed, read, purged and erased by this code, next to operations it enqueues itself
under layout 2. Nothing is moved or rewritten by the upgrade: shard 0 of the operation partition
is the bare tenant id, where 4f60178 put every item. Each test runs three times: with the default
(no counts set: the tenant's counts recorded at its first enqueue after the upgrade, one write
shard since its operations are at the bare id: :mod:`leasefence.engine._layout`), with one write
shard set, and with the deployment grown to 16 write shards at the upgrade
(``operation_shards=(16, 1)``: new operations spread over 16, the old ones found where the one
shard put them)."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from leasefence import Engine, PayloadConflict, keys
from leasefence.errors import PayloadMissing
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import TableSpec

RECORD = json.loads((Path(__file__).parent / "releases" / "layout1-4f60178.json").read_text())
T = "release-tenant"
DAY = 86_400_000
PAYLOADS = {
    "op-queued": {"order": "q", "cents": 100},
    "op-claimed": {"order": "c", "cents": 200},
    "op-unknown": {"order": "u", "cents": 300},
    "op-succeeded": {"order": "s", "cents": 400},
    "op-failed": {"order": "f", "cents": 500},
    "op-approval": {"order": "a", "cents": 600},
}


_tables = itertools.count()


@pytest.fixture(
    params=[None, (1,), (16, 1)],
    ids=["recorded-layout-default", "one-write-shard", "grown-to-16-write-shards"],
)
def spec(request, aws):
    name = f"release-{next(_tables)}-{random.getrandbits(32):08x}"
    return aws.create_tables(
        TableSpec(table_name=name, due_shards=4, sweep_shards=2, operation_shards=request.param)
    )


@pytest.fixture
def engine(aws, ddb, spec, clock):
    aws.client("s3").create_bucket(Bucket="release-payloads")
    for key, body in RECORD["objects"].items():
        aws.client("s3").put_object(Bucket="release-payloads", Key=key, Body=body.encode())
    for item in RECORD["items"]:
        ddb.put_item(TableName=spec.table_name, Item=item)
    clock.advance(RECORD["clock"] - clock())
    store = PayloadStore("release-payloads", secret=b"release", client=aws.client("s3"))
    return Engine(
        client=ddb,
        spec=spec,
        clock=clock,
        rng=random.Random(5),
        payloads=store,
        payload_retention_ms=30 * DAY,
    )


def kept(engine, ddb, spec, operation_id):
    """Every payload item of the operation, in whichever of the tenant's write shards."""
    return [
        item
        for partition in engine.partitions(T)
        for item in ddb.query(
            TableName=spec.table_name,
            ConsistentRead=True,
            KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
            ExpressionAttributeValues={
                ":t": {"S": partition},
                ":p": {"S": keys.payload_prefix(operation_id)},
            },
        )["Items"]
    ]


def test_the_record_is_layout_1_at_the_keys_layout_2_derives():
    operations = [i for i in RECORD["items"] if "state" in i]
    assert len(operations) == 8 and not any("lv" in i for i in operations)
    assert (
        sum("payload_json" in i for i in operations) == 6
        and sum("purge_pk" in i for i in operations) == 7
    )
    for item in operations:  # shard 0 is the bare tenant id: nothing moves
        op = item["operation_id"]["S"]
        assert keys.operation_key(T, op) == {
            "tenant_id": item["tenant_id"]["S"],
            "operation_id": op,
        }


def test_old_operations_are_replayed_read_and_driven_to_their_end_by_the_new_code(
    engine, ddb, spec, clock
):
    for op, payload in PAYLOADS.items():
        c = canonicalize(payload)
        assert not engine.enqueue(T, op, "refund", c.hash, payload_json=c.body).created  # a replay
        with pytest.raises(PayloadConflict):
            engine.enqueue(
                T,
                op,
                "refund",
                canonicalize({"other": op}).hash,
                payload_json=canonicalize({"other": op}).body,
            )
        assert (
            kept(engine, ddb, spec, op) == []
        )  # neither left a payload item beside a layout-1 item
        assert json.loads(engine.payload(engine.get(T, op))) == payload
    listed = engine.list(T, limit=50).operations
    assert [o.operation_id for o in listed] == sorted(
        i["operation_id"]["S"] for i in RECORD["items"] if "state" in i
    )
    assert {o.layout for o in listed} == {1}
    # Queued: claimed, its payload read from the old item, completed.
    claim = engine.claim(T, "op-queued", "w-new")
    assert json.loads(engine.payload(claim)) == PAYLOADS["op-queued"]
    assert engine.complete(T, "op-queued", claim.fence, "ok").state == "succeeded"
    # Claimed by the old code: its holder completes under its fence.
    old = engine.get(T, "op-claimed")
    assert engine.complete(T, "op-claimed", old.fence, "ok").state == "succeeded"
    # Parked unknown: resolved by an operator.
    assert engine.resolve(T, "op-unknown", "succeeded", note="checked").state == "succeeded"
    # Awaiting approval: approved, claimed, completed.
    engine.approve(T, "op-approval", canonicalize(PAYLOADS["op-approval"]).hash, "approver")
    claim = engine.claim(T, "op-approval", "w-new")
    assert json.loads(engine.payload(claim)) == PAYLOADS["op-approval"]
    engine.complete(T, "op-approval", claim.fence, "ok")
    # In S3: claimed and read from its object.
    claim = engine.claim(T, "op-s3", "w-new")
    assert json.loads(engine.payload(claim))["order"] == "big"
    engine.complete(T, "op-s3", claim.fence, "ok")
    for op in ("op-queued", "op-claimed", "op-unknown", "op-approval", "op-s3", "op-failed"):
        entries = engine.history(T, op).entries
        assert entries[0]["transition"] == "enqueue" and entries == sorted(
            entries, key=lambda e: e["seq"]
        )
    # A new operation beside them is layout 2: its payload in a payload item.
    c = canonicalize({"order": "new"})
    assert (
        engine.enqueue(T, "op-fresh", "refund", c.hash, payload_json=c.body).operation.layout == 2
    )
    assert len(kept(engine, ddb, spec, "op-fresh")) == 1
    new_partition = kept(engine, ddb, spec, "op-fresh")[0]["tenant_id"]["S"]
    # With no counts set, the tenant's first enqueue after the upgrade recorded one write shard:
    # its operations were at the bare id already, so no key of it ever changes.
    write_count = (spec.operation_shards or (1,))[0]
    assert new_partition == keys.operation_partition(T, "op-fresh", write_count)
    layout = ddb.get_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": keys.LAYOUT_ID}},
    ).get("Item")
    assert (layout is not None) == (spec.operation_shards is None)
    if layout is not None:
        assert layout["write_shards"] == {"L": [{"N": "1"}]}
    assert engine.get(T, "op-fresh").tenant_id == T
    assert len(engine.list(T, limit=50).operations) == 9
    # Erased: the old item's kept payload goes with the erasure's write.
    assert engine.erase(T, "op-succeeded").payload_state == "erased"
    with pytest.raises(PayloadMissing):
        engine.payload(engine.get(T, "op-succeeded"))
    # The old purge index entries are honoured: every ended payload purged after its retention.
    clock.advance(31 * DAY)
    engine.purge_payloads()
    for op in ("op-queued", "op-claimed", "op-unknown", "op-approval", "op-s3", "op-failed"):
        assert engine.get(T, op).payload_state == "purged", op
    assert not any(
        "payload_json" in i
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"] != keys.payload_id("op-fresh", c.hash)
    )


def test_a_whole_tenant_of_both_layouts_is_erased(engine, ddb, spec, clock, aws):
    c = canonicalize({"order": "new"})
    engine.enqueue(T, "op-fresh", "refund", c.hash, payload_json=c.body)
    engine.complete(T, "op-claimed", engine.get(T, "op-claimed").fence, "ok")
    step = engine.erase_tenant(T, limit=50)
    while not step.finished:
        clock.advance(step.wait_ms)
        step = engine.erase_tenant(T, limit=50, cursor=step.next_cursor)
    # Nothing of the tenant's is left but its recorded write shard counts (with none set): no
    # data of the tenant's, kept so that no engine's cached counts ever go stale.
    left = [i["operation_id"]["S"] for i in ddb.scan(TableName=spec.table_name)["Items"]]
    assert left == ([keys.LAYOUT_ID] if spec.operation_shards is None else [])
    assert aws.client("s3").list_objects_v2(Bucket="release-payloads").get("KeyCount", 0) == 0


def test_beside_the_old_purge_path_a_layout_2_payload_expires_by_ttl(engine, ddb, spec, clock):
    """The old operations keep their purge entries and are purged by the sweeper; operations
    enqueued by this code under layout 2 get none: their payload items get the table's TTL when
    they end (end + retention), and they read as purged once that passed."""
    c = canonicalize({"order": "new"})
    engine.enqueue(T, "op-new", "refund", c.hash, payload_json=c.body)
    claim = engine.claim(T, "op-new", "w-new")
    assert json.loads(engine.payload(claim)) == {"order": "new"}
    ended = engine.complete(T, "op-new", claim.fence, "ok").updated_at
    item = next(
        i
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"] == "op-new"
    )
    assert "purge_pk" not in item and item["lv"] == {"N": "2"}
    (payload_item,) = kept(engine, ddb, spec, "op-new")
    assert "expires_at_epoch_s" in payload_item
    claim = engine.claim(T, "op-queued", "w-new")  # an old one ends beside it: purge entry kept
    engine.complete(T, "op-queued", claim.fence, "ok")
    old = next(
        i
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"] == "op-queued"
    )
    assert "purge_pk" in old
    clock.advance(ended + 30 * DAY - clock())
    purged = engine.purge_payloads()
    assert purged.purged >= 1 and engine.get(T, "op-queued").payload_state == "purged"
    new = engine.get(T, "op-new")
    assert (
        new.payload_state == "purged" and engine.history(T, "op-new").expired_at == ended + 30 * DAY
    )
    with pytest.raises(PayloadMissing):
        engine.payload(new)
    assert "payload_purged_at" not in next(
        i
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"] == "op-new"
    )  # no write: the reader knows
