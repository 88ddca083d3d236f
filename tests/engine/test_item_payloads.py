"""Payloads kept in DynamoDB (at most MAX_ITEM_PAYLOAD_BYTES of canonical JSON: in a payload item
of their own under layout 2, in the operation's item under layout 1), next to the S3-stored ones items written before kept (and larger ones still get):
the same hash check, replay and conflict, gone after the payload retention (layout 2: DynamoDB's
TTL, no purge; layout 1: a REMOVE, no S3 call), erasure, and never a payload byte in an index, an event, a history entry or a log line."""

from __future__ import annotations

import hashlib
import json
import logging
import random

import pytest

from leasefence import Engine, PayloadConflict, keys
from leasefence.engine import _payload_items as payload_items
from leasefence.errors import InvalidInput, NotFound, PayloadMissing
from leasefence.history import entry_from
from leasefence.limits import (
    MAX_CHECKPOINT_BYTES,
    MAX_ITEM_PAYLOAD_BYTES,
    MAX_PACKED_PAYLOAD_BYTES,
    MAX_TEXT_LENGTH,
)
from leasefence.payloads import PayloadStore, canonicalize, fits_in_item
from leasefence.schema import (
    DUE_INDEX,
    INDEX_PROJECTION,
    PURGE_INDEX,
    TTL_ATTRIBUTE,
    global_secondary_indexes,
)
from leasefence.streams import events
from leasefence.streams.records import Change
from leasefence_tools.bench.units import item_size
from tests.support.payload_items import body_of, noise

T = "acme"
DAY = 86_400_000
SECRET = "pii-4111-1111-1111-1111"


class NoS3:
    """A payload store whose every S3 call fails the test: the in-item path must make none."""

    def __getattr__(self, name):
        raise AssertionError(f"an S3 call ({name}) on the path of a payload kept in the item")


def make_engine(aws, spec, clock, bucket, s3=None, **options):
    store = PayloadStore(bucket, client=s3 if s3 is not None else aws.client("s3"))
    engine = Engine(
        client=aws.client(), spec=spec, clock=clock, rng=random.Random(3), payloads=store, **options
    )
    return engine, store


def enqueue_kept(engine, operation_id, payload, **kwargs):
    """What the API does for a payload of at most MAX_ITEM_PAYLOAD_BYTES."""
    canonical = canonicalize(payload)
    assert fits_in_item(canonical)
    return engine.enqueue(
        T, operation_id, "refund", canonical.hash, payload_json=canonical.body, **kwargs
    )


def enqueue_in_s3(engine, store, operation_id, payload):
    """What the API did before (and does for larger payloads): the object, then the item."""
    canonical = canonicalize(payload)
    stored = store.put(T, operation_id, canonical)
    return engine.enqueue(
        T, operation_id, "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True
    )


def raw(ddb, spec, operation_id):
    return ddb.get_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": operation_id}},
        ConsistentRead=True,
    ).get("Item")


def kept(ddb, spec, operation_id):
    """The texts of the operation's payload items (layout 2), none when it has none."""
    items = ddb.query(
        TableName=spec.table_name,
        ConsistentRead=True,
        KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
        ExpressionAttributeValues={":t": {"S": T}, ":p": {"S": keys.payload_prefix(operation_id)}},
    )["Items"]
    return [body_of(item).decode() for item in items]


def objects(aws, bucket):
    return aws.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0)


def test_a_small_payload_round_trips_through_the_item_with_no_s3_call(
    aws, ddb, spec, clock, bucket
):
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3())
    payload = {"card": SECRET, "cents": 1250, "note": "ü"}
    created = enqueue_kept(engine, "k-1", payload)
    assert created.created and created.operation.payload_state == "stored"
    assert created.operation.payload_ref is None and created.operation.payload_inline
    item = raw(ddb, spec, "k-1")
    # The bytes kept are the canonical JSON whose SHA-256 is payload_hash, as an S3 object's are.
    # Layout 2: in a payload item of its own, never in the operation item.
    assert [t.encode() for t in kept(ddb, spec, "k-1")] == [canonicalize(payload).body]
    assert "payload_json" not in item and item["lv"] == {"N": "2"}
    assert "payload_ref" not in item and item["payload_inline"] == {"BOOL": True}
    operation = engine.get(T, "k-1")
    assert json.loads(engine.payload(operation)) == payload
    claim = engine.claim_next(T, "w1")
    assert json.loads(engine.payload(claim)) == payload  # its payload item: no S3
    assert SECRET not in repr(claim) and SECRET not in repr(operation)
    assert objects(aws, bucket) == 0


def test_a_kept_payload_that_does_not_match_its_hash_is_missing_never_returned(
    aws, ddb, spec, clock, bucket
):
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3())
    enqueue_kept(engine, "k-2", {"x": 1})
    payload_key = keys.payload_id("k-2", canonicalize({"x": 1}).hash)
    ddb.update_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": payload_key}},
        UpdateExpression="SET payload_json = :j",
        ExpressionAttributeValues={":j": {"S": '{"x":2}'}},
    )
    with pytest.raises(PayloadMissing):
        engine.payload(engine.get(T, "k-2"))
    with pytest.raises(PayloadMissing):
        engine.payload(engine.claim_next(T, "w1"))


def test_a_claims_payload_is_read_eventually_consistent_and_read_again_when_that_shows_none(
    aws, ddb, spec, clock, bucket
):
    """A claim's payload item: one eventually consistent GetItem (half the units of a consistent
    one); a stale answer (the item missing, or an older life of its key, expired) is read again,
    consistently. The payload route (an operation, not a claim) reads consistently only."""
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3())
    payload = {"x": 1}
    enqueue_kept(engine, "e-1", payload)
    operation, claim = engine.get(T, "e-1"), engine.claim_next(T, "w1")
    payload_id = keys.payload_id("e-1", canonicalize(payload).hash)
    stale = {}  # what an eventually consistent read shows of a key; absent: the item as it is
    reads = []
    real_get = engine.store.get

    def get(key, consistent=True):
        reads.append(consistent)
        if not consistent and key["operation_id"] in stale:
            return stale[key["operation_id"]]
        return real_get(key, consistent)

    engine.store.get = get
    assert json.loads(engine.payload(claim)) == payload
    assert reads == [False]
    reads.clear()
    assert json.loads(engine.payload(operation)) == payload
    assert reads == [True]
    expired = {**real_get({"tenant_id": T, "operation_id": payload_id}), TTL_ATTRIBUTE: 1}
    for shown in (None, expired):
        stale[payload_id] = shown
        reads.clear()
        assert json.loads(engine.payload(claim)) == payload
        assert reads == [False, True]
    ddb.delete_item(
        TableName=spec.table_name, Key={"tenant_id": {"S": T}, "operation_id": {"S": payload_id}}
    )
    stale.clear()
    with pytest.raises(PayloadMissing):  # gone: the consistent read says so too
        engine.payload(claim)


def test_the_engine_keeps_only_checked_canonical_json_of_at_most_the_limit(engine):
    small = canonicalize({"a": 1})
    with pytest.raises(InvalidInput):  # not the bytes of that hash
        engine.enqueue(T, "v-1", "job", canonicalize({"a": 2}).hash, payload_json=small.body)
    with pytest.raises(InvalidInput):  # both forms at once
        engine.enqueue(T, "v-2", "job", small.hash, payload_ref="s3://x/y", payload_json=small.body)
    big = canonicalize({"p": noise(MAX_ITEM_PAYLOAD_BYTES + 400)})  # packs to over 1 KiB
    with pytest.raises(InvalidInput):
        engine.enqueue(T, "v-3", "job", big.hash, payload_json=big.body)
    longest = canonicalize({"p": "x" * (MAX_PACKED_PAYLOAD_BYTES - 7)})  # packs to a few bytes
    with pytest.raises(InvalidInput):
        engine.enqueue(T, "v-5", "job", longest.hash, payload_json=longest.body)
    with pytest.raises(InvalidInput):  # inline needs a ref or the bytes
        engine.enqueue(T, "v-4", "job", small.hash, payload_inline=True)
    assert engine.list(T, limit=10).operations == []


def test_the_thresholds_are_inclusive_and_packing_decides_between_them():
    """Canonical JSON of MAX_ITEM_PAYLOAD_BYTES is kept whatever it packs to; longer, up to
    MAX_PACKED_PAYLOAD_BYTES, only when it packs to MAX_ITEM_PAYLOAD_BYTES, and only by an engine
    that packs; longer than that, never (what a reader unpacks at most)."""
    # '{"p":"' + n characters + '"}' is n + 8 bytes of canonical JSON.
    at = canonicalize({"p": noise(MAX_ITEM_PAYLOAD_BYTES - 8)})
    over = canonicalize({"p": noise(MAX_ITEM_PAYLOAD_BYTES - 7)})
    assert (len(at.body), len(over.body)) == (MAX_ITEM_PAYLOAD_BYTES, MAX_ITEM_PAYLOAD_BYTES + 1)
    assert fits_in_item(at) and fits_in_item(at, packing=False)
    assert fits_in_item(over) and not fits_in_item(over, packing=False)  # packs to under 1 KiB
    assert not fits_in_item(canonicalize({"p": noise(1500)}))  # packs to over 1 KiB
    packs = canonicalize({"p": "x" * (MAX_PACKED_PAYLOAD_BYTES - 8)})
    beyond = canonicalize({"p": "x" * (MAX_PACKED_PAYLOAD_BYTES - 7)})
    assert (len(packs.body), len(beyond.body)) == (MAX_PACKED_PAYLOAD_BYTES, MAX_PACKED_PAYLOAD_BYTES + 1)
    assert fits_in_item(packs) and not fits_in_item(packs, packing=False)
    assert not fits_in_item(beyond)


def test_a_payload_of_up_to_8_kib_that_packs_to_1_kib_is_kept_packed_and_reads_back(
    aws, ddb, spec, clock, bucket
):
    """A 3 KiB payload that packs to a few hundred bytes is kept in its payload item (packed, no
    S3 call), claimed with it, and read back whole; an engine that does not pack refuses it in
    the item (it belongs in S3 there)."""
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3())
    value = {"lines": ["order 1042: 3 x widget, shipped to the warehouse"] * 64}
    canonical = canonicalize(value)
    assert MAX_ITEM_PAYLOAD_BYTES < len(canonical.body) <= MAX_PACKED_PAYLOAD_BYTES
    assert engine.keeps_in_item(canonical)
    enqueue_kept(engine, "big-1", value)
    raw = ddb.get_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": keys.payload_id("big-1", canonical.hash)}},
    )["Item"]
    assert "payload_z" in raw and "payload_json" not in raw and len(raw["payload_z"]["B"]) < 1024
    assert body_of(raw) == canonical.body
    claim = engine.claim_next(T, "w1", lease_ms=30_000)
    assert engine.payload(claim) == canonical.body
    text_only = Engine(client=ddb, spec=spec, clock=clock, pack_payloads=False)
    assert not text_only.keeps_in_item(canonical)
    with pytest.raises(InvalidInput):
        text_only.enqueue(T, "big-2", "job", canonical.hash, payload_json=canonical.body)


def test_a_replay_is_a_replay_and_another_payload_a_conflict_and_neither_writes(
    aws, ddb, spec, clock, bucket
):
    engine, store = make_engine(aws, spec, clock, bucket)
    enqueue_kept(engine, "r-1", {"x": 1})
    before = raw(ddb, spec, "r-1")
    replay = enqueue_kept(engine, "r-1", {"x": 1})
    assert not replay.created and replay.operation.payload_state == "stored"
    with pytest.raises(PayloadConflict):
        enqueue_kept(engine, "r-1", {"x": 2})
    with pytest.raises(PayloadConflict):  # the same id with a large payload (the API's S3 path)
        enqueue_in_s3(engine, store, "r-1", {"x": "y" * 2000})
    assert raw(ddb, spec, "r-1") == before  # immutable: written only by the enqueue's own put
    assert kept(ddb, spec, "r-1") == ['{"x":1}']  # the conflicts' payload items were dropped
    # An operation stored in S3 by the code before: a replay of it is a replay, whatever size.
    enqueue_in_s3(engine, store, "r-old", {"x": 1})
    assert not enqueue_kept(engine, "r-old", {"x": 1}).created
    assert "payload_json" not in raw(ddb, spec, "r-old") and kept(ddb, spec, "r-old") == []


def test_a_kept_payload_is_gone_after_its_retention_and_the_old_s3_objects_purged_as_before(
    aws, ddb, spec, clock, bucket
):
    engine, store = make_engine(aws, spec, clock, bucket, payload_retention_ms=30 * DAY)
    enqueue_kept(engine, "p-new", {"card": SECRET})
    enqueue_in_s3(engine, store, "p-old", {"card": SECRET})  # written by the code before
    enqueue_kept(engine, "p-live", {"still": "queued"})
    assert objects(aws, bucket) == 1
    for operation_id in ("p-new", "p-old"):
        claim = engine.claim(T, operation_id, "w1")
        engine.complete(T, operation_id, claim.fence, "ok")
    # Within the retention GET .../payload still answers (the contract keeps it 30 days).
    clock.advance(29 * DAY)
    assert engine.purge_payloads().purged == 0
    assert json.loads(engine.payload(engine.get(T, "p-new"))) == {"card": SECRET}
    assert json.loads(engine.payload(engine.get(T, "p-old"))) == {"card": SECRET}
    clock.advance(2 * DAY)
    # The old item's object is deleted by the purge; the payload item needs no purge: past its
    # operation's end + the retention it reads as purged, and DynamoDB's TTL deletes it.
    assert engine.purge_payloads().purged == 1
    assert engine.purge_payloads().purged == 0
    assert objects(aws, bucket) == 0
    item = raw(ddb, spec, "p-new")
    assert "purge_pk" not in item and "payload_purged_at" not in item
    for operation_id in ("p-new", "p-old"):
        operation = engine.get(T, operation_id)
        assert operation.payload_state == "purged"
        with pytest.raises(PayloadMissing):
            engine.payload(operation)
    assert engine.get(T, "p-live").payload_state == "stored"  # a live operation keeps it
    assert not enqueue_kept(engine, "p-new", {"card": SECRET}).created  # identity kept
    assert kept(ddb, spec, "p-new") == []  # and the payload is not kept again (the replay's
    # refused put dropped the item of its key, which TTL had not deleted yet)


def test_a_payload_item_expires_with_no_purge_and_no_payload_store(aws, ddb, spec, clock, bucket):
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3(), payload_retention_ms=0)
    enqueue_kept(engine, "n-1", {"x": 1})
    claim = engine.claim_next(T, "w1")
    engine.complete(T, "n-1", claim.fence, "ok")
    clock.advance(1)
    assert engine.purge_payloads().examined == 0  # nothing filed for the sweeper
    assert engine.get(T, "n-1").payload_state == "purged"
    with pytest.raises(PayloadMissing):
        engine.payload(engine.get(T, "n-1"))


def test_erasure_removes_the_kept_payload_in_its_own_write_and_leaves_nothing_for_the_sweeper(
    aws, ddb, spec, clock, bucket
):
    engine, store = make_engine(aws, spec, clock, bucket, s3=NoS3())
    enqueue_kept(engine, "e-1", {"card": SECRET})
    erased = engine.erase(T, "e-1")
    assert erased.payload_state == "erased"
    item = raw(ddb, spec, "e-1")
    assert kept(ddb, spec, "e-1") == [] and SECRET not in json.dumps(item)
    assert "purge_pk" not in item and "purge_at" not in item  # no purge index entry to write
    with pytest.raises(PayloadMissing):
        engine.payload(engine.get(T, "e-1"))
    claim = engine.claim_next(T, "w1")  # still claimable: the worker finds no payload (quarantine)
    with pytest.raises(PayloadMissing):
        engine.payload(claim)
    engine.complete(T, "e-1", claim.fence, "ok")
    assert "purge_pk" not in raw(ddb, spec, "e-1")  # its end files nothing for the sweeper either
    assert engine.erase(T, "e-1").erased_at == erased.erased_at  # erasing again is harmless
    assert not enqueue_kept(engine, "e-1", {"card": SECRET}).created  # a replay
    assert kept(ddb, spec, "e-1") == []  # and nothing is kept again
    with pytest.raises(PayloadConflict):
        enqueue_kept(engine, "e-1", {"card": "other"})


def test_an_old_s3_stored_item_still_reads_and_erases_as_before(aws, ddb, spec, clock, bucket):
    engine, store = make_engine(aws, spec, clock, bucket)
    enqueue_in_s3(engine, store, "o-1", {"x": 1})
    claim = engine.claim_next(T, "w1")
    assert claim.payload_json is None and json.loads(engine.payload(claim)) == {"x": 1}
    engine.quarantine(T, "o-1", claim.fence, "why")
    assert engine.erase(T, "o-1").payload_state == "erased"
    assert objects(aws, bucket) == 0
    engine.enqueue(T, "ext", "refund", "sha256:" + "1" * 64, payload_ref="s3://elsewhere/k")
    with pytest.raises(NotFound):
        engine.payload(engine.get(T, "ext"))


def test_tenant_erasure_deletes_kept_payloads_with_their_rows(aws, ddb, spec, clock, bucket):
    engine, store = make_engine(aws, spec, clock, bucket)
    enqueue_kept(engine, "t-1", {"card": SECRET})
    enqueue_in_s3(engine, store, "t-2", {"card": SECRET})
    totals = engine.erase_tenant(T, limit=100, cursor=None)
    while totals.next_cursor and not totals.wait_ms:
        totals = engine.erase_tenant(T, limit=100, cursor=totals.next_cursor)
    assert raw(ddb, spec, "t-1") is None and raw(ddb, spec, "t-2") is None
    assert objects(aws, bucket) == 0


def test_no_index_holds_the_payload(aws, ddb, spec, clock, bucket):
    assert "payload_json" not in INDEX_PROJECTION
    for index in global_secondary_indexes():
        assert "payload_json" not in index["Projection"].get("NonKeyAttributes", [])
    engine, _ = make_engine(aws, spec, clock, bucket, payload_retention_ms=0)
    enqueue_kept(engine, "i-1", {"card": SECRET})
    enqueue_kept(engine, "i-2", {"card": SECRET})
    claim = engine.claim(T, "i-2", "w1")
    engine.complete(T, "i-2", claim.fence, "ok")
    entries = ddb.scan(TableName=spec.table_name, IndexName=DUE_INDEX)["Items"]
    assert entries and SECRET not in json.dumps(entries)
    # A payload item expires by TTL: its operation never enters the purge index.
    assert ddb.scan(TableName=spec.table_name, IndexName=PURGE_INDEX)["Items"] == []


def test_the_item_stays_far_below_the_400_kb_limit_with_everything_at_its_maximum(
    aws, ddb, spec, clock, bucket
):
    """moto does not enforce DynamoDB's 400 KB item limit: the bound is checked here. The largest
    kept payload, a checkpoint and a reason at their maximum, ids of 256 characters."""
    engine, _ = make_engine(aws, spec, clock, bucket)
    tenant, op, job = "t" * 256, "o" * 256, "j" * 256
    canonical = canonicalize({"p": "\U0001f600" * 200 + "x" * (MAX_ITEM_PAYLOAD_BYTES - 8 - 800)})
    assert len(canonical.body) == MAX_ITEM_PAYLOAD_BYTES
    engine.enqueue(tenant, op, job, canonical.hash, payload_json=canonical.body, actor="a" * 256)
    claim = engine.claim(tenant, op, "w" * 256)
    engine.heartbeat(
        tenant, op, claim.fence, "w" * 256, checkpoint={"c": "x" * (MAX_CHECKPOINT_BYTES - 8)}
    )
    engine.fail(tenant, op, claim.fence, True, "r" * MAX_TEXT_LENGTH)
    item = ddb.get_item(
        TableName=spec.table_name,
        Key={"tenant_id": {"S": tenant}, "operation_id": {"S": op}},
        ConsistentRead=True,
    )["Item"]
    payload = ddb.get_item(
        TableName=spec.table_name,
        ConsistentRead=True,
        Key={
            "tenant_id": {"S": tenant},
            "operation_id": {"S": keys.payload_id(op, canonical.hash)},
        },
    )["Item"]
    assert body_of(payload) == canonical.body and "payload_json" not in item
    assert item_size(item) < 12 * 1024  # under 3% of DynamoDB's 400 KB


def test_no_event_history_entry_or_log_line_carries_the_payload(
    aws, ddb, spec, clock, bucket, caplog
):
    """The stream's images of the operation item never hold the payload (layout 2: its own item,
    which the stream functions never read as an operation); the outcome event and the history
    entry copy named fields only, and the engine logs none of it."""
    caplog.set_level(logging.DEBUG, logger="leasefence")
    engine, _ = make_engine(aws, spec, clock, bucket)
    images = []
    enqueue_kept(engine, "l-1", {"card": SECRET})
    images.append(raw(ddb, spec, "l-1"))
    claim = engine.claim_next(T, "w1")
    images.append(raw(ddb, spec, "l-1"))
    engine.fail(T, "l-1", claim.fence, True, "retry")
    images.append(raw(ddb, spec, "l-1"))
    clock.advance(DAY)
    claim = engine.claim_next(T, "w1")
    images.append(raw(ddb, spec, "l-1"))
    engine.complete(T, "l-1", claim.fence, "ok")
    images.append(raw(ddb, spec, "l-1"))
    engine.erase(T, "l-1")
    images.append(raw(ddb, spec, "l-1"))
    from leasefence.store import from_item

    plain = [from_item(i) for i in images]
    assert SECRET not in json.dumps(plain)  # layout 2: the payload is in its own item
    assert kept(ddb, spec, "l-1") == []  # erased
    (change,) = [
        Change(
            "INSERT", "1", T, keys.payload_id("l-1", "sha256:00"), None, {"payload_json": SECRET}
        )
    ]
    assert not change.is_operation and change.transition is None  # never read as an operation
    from leasefence.streams.filters import dispatch_filters, passes, publisher_filters

    image = {
        "tenant_id": {"S": T},
        "operation_id": {"S": change.operation_id},
        "payload_json": {"S": SECRET},
    }
    for name, old, new in (("INSERT", None, image), ("REMOVE", image, None)):
        record = {
            "eventName": name,
            "dynamodb": {
                "Keys": {k: image[k] for k in ("tenant_id", "operation_id")},
                **({"NewImage": new} if new else {}),
                **({"OldImage": old} if old else {}),
            },
        }
        assert not passes(dispatch_filters(), record) and not passes(publisher_filters(), record)
    # A packed payload item's record, as Lambda delivers it (binary values base64 in the JSON):
    # parsed, never an operation, never a transition (an unfiltered reader does not fail on it).
    import base64

    from leasefence.payloads import pack
    from leasefence.streams.records import parse

    bulky = canonicalize({"card": SECRET, "note": "n" * 400}).body
    packed = {**image, "payload_z": {"B": base64.b64encode(pack(bulky)).decode()}}
    del packed["payload_json"]
    for name, old, new in (("INSERT", None, packed), ("REMOVE", packed, None)):
        parsed = parse({
            "eventName": name,
            "dynamodb": {
                "Keys": {k: packed[k] for k in ("tenant_id", "operation_id")},
                "SequenceNumber": "7",
                **({"NewImage": new} if new else {}),
                **({"OldImage": old} if old else {}),
            },
        })  # fmt: skip
        assert not parsed.is_operation and parsed.transition is None
        assert bytes((parsed.new or parsed.old)["payload_z"]) == pack(bulky)
    for old, new in zip([None, *plain], plain, strict=False):
        change = Change("MODIFY" if old else "INSERT", "1", T, "l-1", old, new)
        assert SECRET not in json.dumps(entry_from(old, new))
        entry = events.entry(change, "bus")
        assert entry is None or SECRET not in json.dumps(entry, default=str)
    ours = [
        r for r in caplog.records if r.name.startswith("leasefence")
    ]  # botocore's DEBUG is not on
    logged = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in ours)
    assert ours and SECRET not in logged


def test_a_replay_racing_the_purge_or_the_erasure_leaves_no_payload_item(
    aws, ddb, spec, clock, bucket
):
    """Layout 2: the enqueue writes the payload item before the operation item's put; a refused
    put drops it unless the operation still refers to it (stored, within its retention). The
    erasure marks first, then deletes, so a replay landing between the mark and the delete, or
    after both, or after the retention (TTL's work, no purge), leaves nothing."""
    engine, _ = make_engine(aws, spec, clock, bucket, payload_retention_ms=0)
    enqueue_kept(engine, "race-purge", {"card": SECRET})
    claim = engine.claim(T, "race-purge", "w1")
    engine.complete(T, "race-purge", claim.fence, "ok")
    enqueue_kept(engine, "race-erase", {"card": SECRET})  # queued: erased while it waits
    clock.advance(1)
    assert engine.purge_payloads().examined == 0
    engine.erase(T, "race-erase")
    assert kept(ddb, spec, "race-erase") == []
    for operation_id in ("race-purge", "race-erase"):
        assert not enqueue_kept(engine, operation_id, {"card": SECRET}).created  # a replay
        assert kept(ddb, spec, operation_id) == []  # its payload item dropped: gone
    # The replay lands between the erasure's mark and its delete: the delete takes it.
    enqueue_kept(engine, "race-mid", {"card": SECRET})
    claim = engine.claim(T, "race-mid", "w1")
    engine.complete(T, "race-mid", claim.fence, "ok")
    real_delete_all = payload_items.delete_all

    def replay_then_delete(ctx, tenant_id, operation_id):
        assert not enqueue_kept(engine, operation_id, {"card": SECRET}).created
        return real_delete_all(ctx, tenant_id, operation_id)

    payload_items.delete_all = replay_then_delete
    try:
        assert engine.erase(T, "race-mid").payload_state == "erased"
    finally:
        payload_items.delete_all = real_delete_all
    assert kept(ddb, spec, "race-mid") == []


def test_the_payload_item_of_an_enqueue_that_crashed_before_its_operation_is_erased(
    aws, ddb, spec, clock, bucket
):
    """A crash between the payload item's put and the operation item's put leaves an orphan that
    no operation refers to: an erasure of that id finds it (and answers not found), a tenant's
    erasure deletes it with the tenant's rows, and an enqueue that does go through later with
    another payload is a new operation that reads its own payload."""
    engine, _ = make_engine(aws, spec, clock, bucket)
    orphan = canonicalize({"card": SECRET})
    engine.store.put_plain(
        {
            "tenant_id": T,
            "operation_id": keys.payload_id("crash-1", orphan.hash),
            "payload_json": orphan.body.decode(),
        }
    )
    engine.store.put_plain(
        {
            "tenant_id": T,
            "operation_id": keys.payload_id("crash-2", orphan.hash),
            "payload_json": orphan.body.decode(),
        }
    )
    assert engine.list(T, limit=10).operations == []  # listings never meet a payload item
    with pytest.raises(NotFound):
        engine.erase(T, "crash-1")
    assert kept(ddb, spec, "crash-1") == []
    enqueue_kept(engine, "crash-2", {"other": 1})
    claim = engine.claim_next(T, "w1")
    assert json.loads(engine.payload(claim)) == {"other": 1}
    assert len(kept(ddb, spec, "crash-2")) == 2  # the orphan, and its own
    engine.complete(T, "crash-2", claim.fence, "ok")
    engine.erase(T, "crash-2")
    assert kept(ddb, spec, "crash-2") == []  # the erasure of the operation takes the orphan too
    engine.store.put_plain(
        {
            "tenant_id": T,
            "operation_id": keys.payload_id("crash-3", orphan.hash),
            "payload_json": orphan.body.decode(),
        }
    )
    while not (step := engine.erase_tenant(T, limit=50)).finished:
        clock.advance(step.wait_ms)
        step = engine.erase_tenant(T, limit=50, cursor=step.next_cursor)
        if step.finished:
            break
    assert kept(ddb, spec, "crash-3") == []


# ------------------------------------------------------------------------- packed payload items


def bench_like_payload():
    """The bench's payload: 979 bytes of canonical JSON whose bulk is random bytes in base64 (it
    packs to about 3/4 and no further)."""
    from leasefence_tools.bench.payload import PAYLOAD

    return dict(PAYLOAD)


def payload_item(ddb, spec, operation_id, payload):
    return raw(ddb, spec, keys.payload_id(operation_id, canonicalize(payload).hash))


def test_a_payload_of_about_1_kb_is_kept_packed_and_each_of_its_writes_costs_one_unit(
    aws, spec, clock, bucket
):
    """A 979-byte canonical JSON kept as text makes a payload item of over 1 KB: 2 units at the
    enqueue and 2 at its expiry's write. Packed (raw DEFLATE, about 3/4 of it for base64 text)
    the item is under 1 KB: 1 unit each, and the claim, the payload route and the expiry read
    the same bytes as before."""
    from leasefence_tools.bench.meter import Meter

    meter = Meter(aws.client())
    engine = Engine(
        client=meter.client(aws.client()), spec=spec, clock=clock, rng=random.Random(3),
        payloads=PayloadStore(bucket, client=NoS3()), payload_retention_ms=DAY,
    )  # fmt: skip
    payload = bench_like_payload()
    body = canonicalize(payload).body
    assert len(body) == 979 and fits_in_item(canonicalize(payload))
    enqueue_kept(engine, "z-0", {"x": 1})  # the job type's first enqueue registers it
    with meter.phase("enqueue"):
        enqueue_kept(engine, "z-1", payload)
    stored = payload_item(aws.client(), spec, "z-1", payload)
    assert set(stored) == {"tenant_id", "operation_id", "payload_z"}
    assert item_size(stored) <= 1024 < item_size(stored) - len(stored["payload_z"]["B"]) + len(body)
    claim = engine.claim(T, "z-1", "w1")
    assert engine.payload(claim) == body and engine.payload(engine.get(T, "z-1")) == body
    with meter.phase("complete"):
        engine.complete(T, "z-1", claim.fence, "ok")
    expiring = payload_item(aws.client(), spec, "z-1", payload)
    assert int(expiring[TTL_ATTRIBUTE]["N"]) * 1000 >= clock() + DAY
    enqueue_calls = [c for c in meter.usage("enqueue").calls if c.op in ("put_item", "update_item")]
    complete_calls = [c for c in meter.usage("complete").calls if c.op == "update_item"]
    # enqueue: the payload item, then the operation item; complete: the operation, the expiry.
    assert [c.wcu - c.wcu_index for c in enqueue_calls] == [1, 1], [
        c.describe() for c in enqueue_calls
    ]
    assert [c.wcu - c.wcu_index for c in complete_calls] == [1, 1], [
        c.describe() for c in complete_calls
    ]


def test_a_short_payload_or_one_that_packs_no_shorter_is_kept_as_text():
    from leasefence.payloads import PACK_FROM_BYTES, pack

    short = canonicalize({"x": "y" * 100}).body
    assert len(short) < PACK_FROM_BYTES and pack(short) is None
    # At the threshold and above, bytes that deflate cannot shorten are not packed (JSON of 256
    # bytes or more always packs a little; random bytes do not, which is the branch).
    dense = random.Random(1).randbytes(400)
    assert pack(dense) is None
    assert pack(b"[" + b"1," * 200 + b"1]") is not None


def test_a_packed_payload_that_is_tampered_with_or_unpacks_too_far_is_missing(
    aws, ddb, spec, clock, bucket
):
    import zlib

    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3())
    payload = bench_like_payload()
    enqueue_kept(engine, "z-2", payload)
    key = {"tenant_id": {"S": T}, "operation_id": {"S": keys.payload_id("z-2", canonicalize(payload).hash)}}
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    other = canonicalize({**payload, "amount_cents": 1}).body  # another payload's bytes
    for value in (
        packer.compress(other) + packer.flush(),  # other bytes: the hash refuses them
        b"\xff\x00not deflate",
    ):
        ddb.update_item(
            TableName=spec.table_name, Key=key,
            UpdateExpression="SET payload_z = :z", ExpressionAttributeValues={":z": {"B": value}},
        )  # fmt: skip
        with pytest.raises(PayloadMissing):
            engine.payload(engine.get(T, "z-2"))
    # Bytes that unpack past the limit are refused even when they hash right: unpacking stops
    # at MAX_PACKED_PAYLOAD_BYTES + 1 (never more than a kept payload in memory).
    from leasefence.payloads import read_packed

    big = b" " * (MAX_PACKED_PAYLOAD_BYTES + 1)
    bomb = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed_big = bomb.compress(big) + bomb.flush()
    with pytest.raises(PayloadMissing):
        read_packed(packed_big, "sha256:" + hashlib.sha256(big).hexdigest())
    at_limit = b" " * MAX_PACKED_PAYLOAD_BYTES
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    packed_at = packer.compress(at_limit) + packer.flush()
    assert read_packed(packed_at, "sha256:" + hashlib.sha256(at_limit).hexdigest()) == at_limit


def test_a_payload_item_kept_as_text_before_packing_reads_and_a_rewrite_keeps_one_body(
    aws, ddb, spec, clock, bucket
):
    """An item written as text before packing existed (same key: the payload's hash) still
    reads; when its life is over (expired) and the id is enqueued again, the new write packs it
    and removes the text, so an item never holds both."""
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3(), payload_retention_ms=0)
    payload = bench_like_payload()
    body = canonicalize(payload).body
    key = keys.payload_id("z-3", canonicalize(payload).hash)
    ddb.put_item(
        TableName=spec.table_name,
        Item={"tenant_id": {"S": T}, "operation_id": {"S": key}, "payload_json": {"S": body.decode()},
              TTL_ATTRIBUTE: {"N": "1"}},
    )  # fmt: skip
    enqueue_kept(engine, "z-3", payload)  # an expired older life of the key: written again
    stored = raw(ddb, spec, key)
    assert "payload_json" not in stored and TTL_ATTRIBUTE not in stored
    assert body_of(stored) == body
    ddb.update_item(  # as a payload item written before packing holds it
        TableName=spec.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": key}},
        UpdateExpression="SET payload_json = :j REMOVE payload_z",
        ExpressionAttributeValues={":j": {"S": body.decode()}},
    )
    claim = engine.claim_next(T, "w1")
    assert engine.payload(claim) == body


def test_with_packing_off_the_payload_item_is_text_as_before_packing(aws, ddb, spec, clock, bucket):
    """``pack_payloads=False`` (``LEASEFENCE_PACK_PAYLOADS=false``, the construct's
    ``packPayloads``): what readers from before packing can read."""
    engine, _ = make_engine(aws, spec, clock, bucket, s3=NoS3(), pack_payloads=False)
    payload = bench_like_payload()
    enqueue_kept(engine, "z-4", payload)
    stored = payload_item(ddb, spec, "z-4", payload)
    assert "payload_z" not in stored and stored["payload_json"]["S"].encode() == canonicalize(payload).body
    assert engine.payload(engine.claim_next(T, "w1")) == canonicalize(payload).body
