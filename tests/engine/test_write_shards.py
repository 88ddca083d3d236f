"""Write shards of the base table (issue 33): an operation's partition key is its tenant's write
shard (``<tenant>\\t<n>``, shard 0 the bare tenant id), a hash of its identity modulo the
deployment's write count. Everything by id stays one ``GetItem``; listing, counting, a tenant's
erasure, the sweeper and the stream work across shards; growing the count moves no item."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from leasefence import Engine, PayloadConflict, keys
from leasefence.errors import InvalidInput, NotFound
from leasefence.payloads import canonicalize
from leasefence.schema import TableSpec
from leasefence.streams import filters, records
from leasefence.validation import validate_id

T = "acme"
H = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
_tables = itertools.count()


def make_spec(aws, counts):
    name = f"shards-{next(_tables)}-{random.getrandbits(32):08x}"
    return aws.create_tables(
        TableSpec(table_name=name, due_shards=2, sweep_shards=2, operation_shards=counts)
    )


def engine_for(ddb, spec, clock, counts=None):
    if counts is not None:  # the same table, another write-count setting
        spec = TableSpec(
            table_name=spec.table_name,
            due_shards=spec.due_shards,
            sweep_shards=spec.sweep_shards,
            operation_shards=counts,
        )
    return Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(7))


def partitions_holding(ddb, spec, operation_ids):
    """The partition key of each operation item in the table (a scan: what is really stored)."""
    found = {}
    for item in ddb.scan(TableName=spec.table_name)["Items"]:
        if item["operation_id"]["S"] in operation_ids:
            found[item["operation_id"]["S"]] = item["tenant_id"]["S"]
    return found


def listed(engine, tenant, limit, **kwargs):
    ids, cursor, pages = [], None, 0
    while True:
        page = engine.list(tenant, limit=limit, cursor=cursor, **kwargs)
        pages += 1
        assert len(page.operations) <= limit
        ids.extend(o.operation_id for o in page.operations)
        cursor = page.next_cursor
        if cursor is None:
            return ids, pages


@pytest.mark.parametrize("shards", [4, 16])
def test_a_lifecycle_across_write_shards_and_listing_and_counting_see_every_shard(
    aws, ddb, clock, shards
):
    spec = make_spec(aws, (shards,))
    engine = engine_for(ddb, spec, clock)
    ops = [f"op-{i:03d}" for i in range(48)]
    for op in ops:
        assert engine.enqueue(T, op, "refund", H).created
    stored = partitions_holding(ddb, spec, set(ops))
    assert set(stored) == set(ops)
    for op, partition in stored.items():
        assert partition == keys.operation_partition(T, op, shards)
        assert keys.tenant_of(partition) == T
    assert len(set(stored.values())) > shards // 2  # really spread, not one partition
    # Listing: pages of 7 walk every shard, each operation exactly once.
    ids, pages = listed(engine, T, 7)
    assert sorted(ids) == ops and len(ids) == len(ops) and pages >= len(ops) // 7
    counts = engine.state_counts(T).to_public()
    assert counts["counts"]["queued"] == 48 and counts["complete"]
    partial = engine.state_counts(T, limit=10).to_public()
    assert partial["examined"] == 10 and not partial["complete"]
    # Claimed (by claim-next, through the due index) and completed: every one, once.
    claimed = []
    while (claim := engine.claim_next(T, "w1", claim_token=f"tok-{len(claimed)}")) is not None:
        assert claim.tenant_id == T
        claimed.append(claim)
        engine.complete(T, claim.operation_id, claim.fence, "ok")
    assert sorted(c.operation_id for c in claimed) == ops
    assert all(engine.get(T, op).state == "succeeded" for op in ops)
    ids, _ = listed(engine, T, 50, state="succeeded")
    assert sorted(ids) == ops
    assert engine.enqueue(T, ops[5], "refund", H).created is False  # a replay, by its shard
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, ops[5], "refund", H2)


def test_a_resent_claim_next_finds_its_marker_in_the_marker_s_write_shard(aws, ddb, clock):
    spec = make_spec(aws, (16,))
    engine = engine_for(ddb, spec, clock)
    for i in range(5):
        engine.enqueue(T, f"op-{i}", "refund", H)
    first = engine.claim_next(T, "w1", claim_token="tok-1")
    again = engine.claim_next(T, "w1", claim_token="tok-1")
    assert again is not None and again.operation_id == first.operation_id
    assert again.fence == first.fence
    marker_id = keys.claim_marker_id("w1", "tok-1")
    marker = keys.claim_marker_key(T, marker_id, 16)
    assert ddb.get_item(TableName=spec.table_name, Key={k: {"S": v} for k, v in marker.items()})[
        "Item"
    ]


def test_a_tenant_s_erasure_reaches_every_write_shard(aws, ddb, clock):
    spec = make_spec(aws, (16,))
    engine = engine_for(ddb, spec, clock)
    other = "acme-2"
    for i in range(40):
        c = canonicalize({"n": i})
        engine.enqueue(T, f"op-{i}", "refund", c.hash, payload_json=c.body)
    engine.enqueue(other, "op-0", "refund", H)
    engine.claim_next(T, "w1", claim_token="tok")  # a claim marker in one of the shards
    engine.complete(T, *_claimed_fence(engine, T))
    step = engine.erase_tenant(T, limit=7)
    steps = 1
    while not step.finished:
        clock.advance(step.wait_ms)
        step = engine.erase_tenant(T, limit=7, cursor=step.next_cursor)
        steps += 1
    assert steps > 40 // 7  # bounded steps, resumed through shard-carrying cursors
    left = [i["tenant_id"]["S"] for i in ddb.scan(TableName=spec.table_name)["Items"]]
    assert all(keys.tenant_of(p) != T for p in left)
    assert engine.get(other, "op-0").state == "queued"  # the other tenant untouched


def _claimed_fence(engine, tenant):
    claimed = engine.list(tenant, state="claimed", limit=50).operations
    return claimed[0].operation_id, claimed[0].fence, "ok"


def test_growing_the_write_count_from_1_to_4_to_16_moves_nothing(aws, ddb, clock):
    spec = make_spec(aws, (1,))
    one = engine_for(ddb, spec, clock)
    four = engine_for(ddb, spec, clock, (4, 1))
    sixteen = engine_for(ddb, spec, clock, (16, 4, 1))
    made = {}
    for engine, name in ((one, "a"), (four, "b"), (sixteen, "c")):
        for i in range(12):
            op = f"{name}-{i}"
            c = canonicalize({"op": op})
            assert engine.enqueue(T, op, "refund", c.hash, payload_json=c.body).created
            made[op] = c
    stored = partitions_holding(ddb, spec, set(made))
    assert {keys.shard_in(p) for op, p in stored.items() if op.startswith("a")} == {0}
    assert {keys.shard_in(p) for op, p in stored.items() if op.startswith("b")} <= set(range(4))
    assert len({keys.shard_in(p) for op, p in stored.items() if op.startswith("c")}) > 4
    before = dict(stored)
    # Every operation is found by id, listed and replayed by the grown engine, wherever it is.
    for op, c in made.items():
        assert sixteen.get(T, op).operation_id == op
        assert not sixteen.enqueue(T, op, "refund", c.hash, payload_json=c.body).created
        with pytest.raises(PayloadConflict):
            sixteen.enqueue(T, op, "refund", H2)
    assert sorted(listed(sixteen, T, 5)[0]) == sorted(made)
    assert sixteen.state_counts(T).to_public()["counts"]["queued"] == 36
    # Claimed by id and completed by the grown engine, each where it was written.
    for op in made:
        claim = sixteen.claim(T, op, "w16")
        assert claim is not None
        clock.advance(10)
        assert sixteen.heartbeat(T, op, claim.fence, "w16") > claim.lease_expires_at
        sixteen.complete(T, op, claim.fence, "ok")
        assert sixteen.history(T, op).entries[-1]["transition"] == "complete"
        assert sixteen.payload(sixteen.get(T, op))  # read from its payload item, beside it
    assert partitions_holding(ddb, spec, set(made)) == before  # nothing moved
    with pytest.raises(NotFound):  # nowhere under any count: refused as before
        sixteen.complete(T, "never-enqueued", 1, "ok")
    # The one-shard engine still sees its own operations; it never wrote elsewhere.
    assert one.get(T, "a-3").state == "succeeded"


def test_a_shard_key_is_never_another_tenant_s_id_and_tenants_never_share_a_key(aws, ddb, clock):
    for n in (1, 5, 255):
        with pytest.raises(InvalidInput):
            validate_id("tenant_id", keys.shard_partition("a", n))
        assert keys.tenant_of(keys.shard_partition("a#1", n)) == "a#1"
        assert keys.shard_in(keys.shard_partition("a#1", n)) == n
    assert keys.shard_partition("a", 0) == "a"
    spec = make_spec(aws, (16,))
    engine = engine_for(ddb, spec, clock)
    for tenant in ("a", "a#1", "a#12", "ab"):
        for i in range(20):
            engine.enqueue(tenant, f"op-{i}", "refund", H if tenant == "a" else H2)
    for tenant in ("a", "a#1", "a#12", "ab"):
        ids, _ = listed(engine, tenant, 9)
        assert sorted(ids) == sorted(f"op-{i}" for i in range(20))
        assert {engine.get(tenant, f"op-{i}").payload_hash for i in range(20)} == {
            H if tenant == "a" else H2
        }
    tenants = Counter(
        keys.tenant_of(i["tenant_id"]["S"])
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"].startswith("op-")
    )
    assert tenants == dict.fromkeys(("a", "a#1", "a#12", "ab"), 20)


def test_a_listing_cursor_of_one_shard_reads_as_before_and_a_shard_cursor_resumes_there():
    from leasefence import cursor

    assert cursor.decode_listing_position(cursor.encode_operation_cursor("op-7")) == (0, "op-7")
    assert cursor.decode_listing_position(cursor.encode_listing_cursor(0, "op-7")) == (0, "op-7")
    assert cursor.decode_listing_position(cursor.encode_listing_cursor(12, "op-7")) == (12, "op-7")
    assert cursor.decode_listing_position(cursor.encode_listing_cursor(3, "")) == (3, "")


def test_the_worker_s_stream_filter_passes_its_tenant_s_shards_and_no_other_tenant():
    pattern = filters.dispatch_filters(["a"])

    def record(partition):
        image = {
            "tenant_id": {"S": partition},
            "operation_id": {"S": "op-1"},
            "state": {"S": "queued"},
            "transition": {"S": "enqueue"},
        }
        return {
            "eventName": "INSERT",
            "dynamodb": {
                "Keys": {"tenant_id": {"S": partition}, "operation_id": {"S": "op-1"}},
                "NewImage": image,
                "SequenceNumber": "1",
            },
        }

    for partition in ("a", keys.shard_partition("a", 3), keys.shard_partition("a", 15)):
        assert filters.passes(pattern, record(partition)), partition
    for partition in ("ab", "a#1", keys.shard_partition("ab", 3), keys.shard_partition("a#1", 2)):
        assert not filters.passes(pattern, record(partition)), partition


def test_a_stream_record_of_a_shard_names_the_tenant_and_keeps_the_item_s_key():
    partition = keys.shard_partition("acme", 9)
    image = {
        "tenant_id": {"S": partition},
        "operation_id": {"S": "op-1"},
        "job_type": {"S": "refund"},
        "state": {"S": "queued"},
        "fence": {"N": "0"},
        "attempts": {"N": "0"},
        "max_attempts": {"N": "3"},
        "created_at": {"N": "1"},
        "updated_at": {"N": "1"},
        "transition": {"S": "enqueue"},
        "seq": {"N": "1"},
    }
    change = records.parse(
        {
            "eventName": "INSERT",
            "dynamodb": {
                "Keys": {"tenant_id": {"S": partition}, "operation_id": {"S": "op-1"}},
                "NewImage": image,
                "SequenceNumber": "1",
            },
        }
    )
    assert change.tenant_id == "acme"
    assert change.key == {"tenant_id": partition, "operation_id": "op-1"}


def test_engines_of_both_growth_phases_side_by_side_never_make_two_items_of_one_identity(
    aws, ddb, clock
):
    """Growing in two deploys: ``1,16`` (writes at 1, checks 16) next to ``16,1`` (writes at 16,
    checks 1). Whichever enqueues an id first, the other answers a replay or a conflict."""
    spec = make_spec(aws, (1,))
    before = engine_for(ddb, spec, clock, (1, 16))
    after = engine_for(ddb, spec, clock, (16, 1))
    ids = [f"op-{i}" for i in range(24)]
    moved = [op for op in ids if keys.operation_partition(T, op, 16) != T]
    assert len(moved) > 12  # most ids have two different keys under the two counts
    for i, op in enumerate(ids):
        first, second = (before, after) if i % 2 else (after, before)
        assert first.enqueue(T, op, "refund", H).created
        assert not second.enqueue(T, op, "refund", H).created
        with pytest.raises(PayloadConflict):
            second.enqueue(T, op, "refund", H2)
        assert second.get(T, op).operation_id == op
    stored = [
        i["operation_id"]["S"]
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"].startswith("op-")
    ]
    assert sorted(stored) == sorted(ids)  # one item per identity
