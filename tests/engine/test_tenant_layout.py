"""The default write shard layout (no counts set): each tenant's counts recorded at its first
enqueue (:mod:`leasefence.engine._layout`). A new tenant gets 64 write shards; a tenant whose
operations an engine of one write shard put at the bare tenant id (every deployment before the
record) gets one, so the upgrade moves no key and adds no transaction; the record is one
conditional write, never changed, never erased, and cached by each engine."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from leasefence import Engine, NotFound, PayloadConflict, keys
from leasefence.engine._layout import COUNTS
from leasefence.schema import NEW_TENANT_WRITE_SHARDS, TableSpec
from leasefence.store import ConditionFailed

_tables = itertools.count()
HASH = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.fixture
def spec(aws):
    return aws.create_tables(TableSpec(table_name=f"layout-{next(_tables)}", sweep_shards=2))


def make_engine(ddb, spec, clock, seed=1):
    return Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(seed))


def recorded(ddb, spec, tenant):
    item = ddb.get_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": tenant}, "operation_id": {"S": keys.LAYOUT_ID}},
        ConsistentRead=True,
    ).get("Item")
    return None if item is None else [int(n["N"]) for n in item[COUNTS]["L"]]


def partitions_holding(ddb, spec):
    return Counter(
        i["tenant_id"]["S"]
        for i in ddb.scan(TableName=spec.table_name)["Items"]
        if i["operation_id"]["S"] >= keys.FIRST_OPERATION_ID
    )


def test_the_defaults_are_64_write_shards_for_a_new_tenant_and_64_due_shards(spec):
    assert spec.operation_shards is None and spec.due_shards == 64
    assert NEW_TENANT_WRITE_SHARDS == 64


def test_a_new_tenant_records_64_and_its_operations_spread_over_them(ddb, spec, clock):
    engine = make_engine(ddb, spec, clock)
    assert recorded(ddb, spec, "t") is None
    for i in range(200):
        engine.enqueue("t", f"op-{i}", "job", HASH)
    assert recorded(ddb, spec, "t") == [NEW_TENANT_WRITE_SHARDS]
    held = partitions_holding(ddb, spec)
    assert len(held) > 50 and max(held.values()) < 15  # spread, not one hot partition key
    assert all(keys.tenant_of(p) == "t" for p in held)
    # Found by id (one GetItem), listed (one page: every shard), counted, claimed, completed.
    assert engine.get("t", "op-7").state == "queued"
    page = engine.list("t", limit=500)
    assert sorted(o.operation_id for o in page.operations) == sorted(f"op-{i}" for i in range(200))
    assert page.next_cursor is None
    assert engine.state_counts("t").counts["queued"] == 200
    claim = engine.claim_next("t", "w")
    assert claim is not None
    assert engine.complete("t", claim.operation_id, claim.fence, "ok").state == "succeeded"
    # A replay is a replay, another payload a conflict: the key is the same for every engine.
    other = make_engine(ddb, spec, clock, seed=2)
    assert not other.enqueue("t", "op-3", "job", HASH).created
    with pytest.raises(PayloadConflict):
        other.enqueue("t", "op-3", "job", OTHER)


def test_a_tenant_with_operations_at_the_bare_id_records_one_and_keeps_them_where_they_are(
    ddb, spec, clock
):
    """The upgrade: an engine of one write shard (the setting every deployment had before)
    wrote the tenant's operations; the first enqueue of an engine with the default records 1,
    so a replay of an old identity is a replay (never a second item) and new ones go beside."""
    old = Engine(
        client=ddb,
        spec=TableSpec(**{**spec.__dict__, "operation_shards": (1,)}),
        clock=clock,
        rng=random.Random(3),
    )
    for i in range(5):
        old.enqueue("legacy", f"old-{i}", "job", HASH)
    new = make_engine(ddb, spec, clock)
    assert recorded(ddb, spec, "legacy") is None
    assert new.get("legacy", "old-2").state == "queued"
    # The read found operations at the bare id: it recorded what the first enqueue would have.
    assert recorded(ddb, spec, "legacy") == [1]
    assert not new.enqueue("legacy", "old-1", "job", HASH).created
    with pytest.raises(PayloadConflict):
        new.enqueue("legacy", "old-4", "job", OTHER)
    assert recorded(ddb, spec, "legacy") == [1]
    new.enqueue("legacy", "fresh", "job", HASH)
    assert set(partitions_holding(ddb, spec)) == {"legacy"}  # one partition key, as before
    assert len(new.list("legacy").operations) == 6


def legacy_engine(ddb, spec, clock):
    """An engine of one write shard: every deployment's before the recorded layout."""
    return Engine(
        client=ddb,
        spec=TableSpec(**{**spec.__dict__, "operation_shards": (1,)}),
        clock=clock,
        rng=random.Random(3),
    )


def layout_requests(engine):
    """The engine's requests for the layout from now on: the record's GetItems and UpdateItems
    (its key) and the queries of a tenant's bare partition (``_has_bare_operations``)."""
    sent = []

    def seen(params, model, **kw):
        key = params.get("Key") or params.get("Item") or {}
        if key.get("operation_id") == {"S": keys.LAYOUT_ID}:
            sent.append(model.name)
        elif model.name == "Query" and "IndexName" not in params:
            sent.append("Query")

    engine.store.client.meta.events.register("before-parameter-build.dynamodb.*", seen)
    return sent


def test_commands_by_id_of_an_upgraded_tenant_read_its_layout_once_per_engine(ddb, spec, clock):
    """A tenant of an upgraded deployment before its next enqueue: the first command records
    ``(1,)``; no later command of any engine queries the bare partition, and each engine reads
    the record once."""
    old = legacy_engine(ddb, spec, clock)
    for i in range(4):
        old.enqueue("upgraded", f"op-{i}", "job", HASH)
    first = make_engine(ddb, spec, clock)
    sent = layout_requests(first)
    for i in range(4):
        assert first.get("upgraded", f"op-{i}").state == "queued"
    claim = first.claim("upgraded", "op-1", "w")
    first.heartbeat("upgraded", "op-1", claim.fence, "w")
    first.complete("upgraded", "op-1", claim.fence, "done")
    assert sent == ["GetItem", "Query", "UpdateItem"]
    assert recorded(ddb, spec, "upgraded") == [1]
    second = make_engine(ddb, spec, clock, seed=2)
    sent = layout_requests(second)
    for i in range(4):
        second.get("upgraded", f"op-{i}")
    assert sent == ["GetItem"]


def test_a_brand_new_tenants_read_records_nothing_and_caches_nothing(ddb, spec, clock):
    """No operation anywhere: the decision could still change (an engine of one write shard,
    during a rolling upgrade, may put the tenant's first operation at the bare id), so a read
    neither records it nor caches it, and sees that operation once it is there."""
    engine = make_engine(ddb, spec, clock)
    sent = layout_requests(engine)
    for _ in range(2):
        with pytest.raises(NotFound):
            engine.get("brand-new", "op-1")
    assert sent == ["GetItem", "Query"] * 2
    assert recorded(ddb, spec, "brand-new") is None
    legacy_engine(ddb, spec, clock).enqueue("brand-new", "op-1", "job", HASH)
    assert engine.get("brand-new", "op-1").state == "queued"
    assert recorded(ddb, spec, "brand-new") == [1]


def test_a_read_and_an_enqueue_deciding_at_once_agree_through_one_conditional_write(
    ddb, spec, clock
):
    """A command that found operations at the bare id records with the enqueue's conditional
    put: whichever engine's put lands first decides for both, even where the other would have
    decided otherwise (each made to see what it would at another moment)."""
    old = legacy_engine(ddb, spec, clock)
    old.enqueue("mixed", "old-1", "job", HASH)
    reader, producer = make_engine(ddb, spec, clock), make_engine(ddb, spec, clock, seed=2)
    producer._ctx.layouts._has_bare_operations = lambda tenant: False  # it would choose 64
    assert reader.get("mixed", "old-1").state == "queued"  # records 1 first
    producer.enqueue("mixed", "new-1", "job", HASH)
    assert recorded(ddb, spec, "mixed") == [1]
    assert set(partitions_holding(ddb, spec)) == {"mixed"}
    assert reader.get("mixed", "new-1") and producer.get("mixed", "old-1")
    # The other order: the enqueue's record stands, and the read takes it from the refusal.
    old.enqueue("mixed-2", "old-1", "job", HASH)
    reader, producer = make_engine(ddb, spec, clock, seed=4), make_engine(ddb, spec, clock, seed=5)
    producer._ctx.layouts._has_bare_operations = lambda tenant: False
    producer.enqueue("mixed-2", "new-1", "job", HASH)
    assert recorded(ddb, spec, "mixed-2") == [NEW_TENANT_WRITE_SHARDS]
    assert reader._ctx.layouts.counts("mixed-2") == (NEW_TENANT_WRITE_SHARDS,)
    assert reader.get("mixed-2", "new-1").operation_id == "new-1"


def test_two_engines_deciding_at_once_agree_through_one_conditional_write(ddb, spec, clock):
    """The second engine's put of the record is refused and it takes the first's counts, even
    if it would have decided otherwise (here: made to see operations at the bare id)."""
    first, second = make_engine(ddb, spec, clock), make_engine(ddb, spec, clock, seed=2)
    second._ctx.layouts._has_bare_operations = lambda tenant: True  # it would choose 1
    first.enqueue("race", "a", "job", HASH)
    second.enqueue("race", "b", "job", HASH)
    assert recorded(ddb, spec, "race") == [NEW_TENANT_WRITE_SHARDS]
    assert second._ctx.layouts.counts("race") == (NEW_TENANT_WRITE_SHARDS,)
    assert first.get("race", "b").operation_id == "b" and second.get("race", "a")


def test_a_refused_record_with_no_item_in_the_answer_reads_it_back(ddb, spec, clock):
    engine = make_engine(ddb, spec, clock)
    make_engine(ddb, spec, clock, seed=2).enqueue("t2", "a", "job", HASH)
    layouts = engine._ctx.layouts
    real_get = engine.store.get
    calls = []

    def get(key, consistent=True):
        calls.append(key["operation_id"])
        return None if len(calls) == 1 else real_get(key, consistent)  # a stale first read

    engine.store.get = get
    engine.store.update = lambda *a, **k: (_ for _ in ()).throw(ConditionFailed(None))
    assert layouts.counts("t2", record=True) == (NEW_TENANT_WRITE_SHARDS,)
    assert calls == [keys.LAYOUT_ID, keys.LAYOUT_ID]


def test_an_engine_reads_the_record_once_per_tenant(ddb, spec, clock):
    engine = make_engine(ddb, spec, clock)
    sent = layout_requests(engine)
    engine.enqueue("t3", "a", "job", HASH)
    assert sent == ["GetItem", "Query", "UpdateItem"]
    sent.clear()
    for op in ("a", "b", "c"):
        engine.enqueue("t3", op, "job", HASH)
        engine.get("t3", op)
    assert sent == []


def test_a_tenant_erasure_keeps_only_the_record(ddb, spec, clock):
    engine = make_engine(ddb, spec, clock)
    for i in range(30):
        engine.enqueue("gone", f"op-{i}", "job", HASH)
    step = engine.erase_tenant("gone", limit=100)
    while not step.finished:
        clock.advance(step.wait_ms)
        step = engine.erase_tenant("gone", limit=100, cursor=step.next_cursor)
    left = [i["operation_id"]["S"] for i in ddb.scan(TableName=spec.table_name)["Items"]]
    assert left == [keys.LAYOUT_ID]
    # Enqueued again later: the same counts (no engine's cache can go stale).
    make_engine(ddb, spec, clock, seed=9).enqueue("gone", "op-1", "job", HASH)
    assert recorded(ddb, spec, "gone") == [NEW_TENANT_WRITE_SHARDS]
    assert engine.get("gone", "op-1").state == "queued"


def test_a_deployment_that_sets_its_counts_never_reads_or_writes_a_record(ddb, spec, clock):
    engine = Engine(
        client=ddb,
        spec=TableSpec(**{**spec.__dict__, "operation_shards": (16,)}),
        clock=clock,
        rng=random.Random(1),
    )
    engine.enqueue("set", "a", "job", HASH)
    assert recorded(ddb, spec, "set") is None


def test_a_new_job_type_starts_at_one_due_shard_so_a_lone_job_is_one_query_away(ddb, spec, clock):
    """A type new to the tenant's directory has no due entry anywhere: its hint item is written
    at the idle spread with the directory (without it, every claim would probe all 64 due
    shards of each such type until the spread settled)."""
    producer, claimer = make_engine(ddb, spec, clock), make_engine(ddb, spec, clock, seed=2)
    for job_type in ("alpha", "beta", "gamma"):
        producer.enqueue("types", f"{job_type}-1", job_type, HASH)
    queries = []
    claimer.store.client.meta.events.register(
        "before-parameter-build.dynamodb.Query",
        lambda params, **kw: queries.append(params.get("IndexName")),
    )
    claim = claimer.claim_next("types", "w", job_types=["beta"])
    assert claim is not None and claim.operation_id == "beta-1"
    assert queries.count("due") == 1
    queries.clear()
    assert claimer.claim_next("types", "w") is not None  # every type of the directory
    assert queries.count("due") <= 2
