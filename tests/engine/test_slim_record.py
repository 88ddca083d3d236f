"""The slim ended record (issue 24): the payload purge's one conditional write also slims an
ended operation to what its identity guarantees need (the history kept for the payload
retention, then gone), and every replay, conflict and erasure still answers as before.

The purge (and so the slimming write) runs for payloads stored in S3 and for items of layout 1;
a payload item of layout 2 expires by DynamoDB's TTL and its operation reads as slim without a
write (tests/engine/test_payload_ttl.py)."""

from __future__ import annotations

import json
import random

import pytest

from leasefence import Engine, PayloadConflict, StaleFence, history, keys
from leasefence.engine._erasure import purge_one
from leasefence.payloads import PayloadStore, canonicalize

T = "acme"
DAY = 86_400_000
RETENTION = 30 * DAY
REMOVED = ("h", "hd", "reason", "checkpoint", "intent", "claimed_at", "payload_json")
KEPT = (
    "tenant_id", "operation_id", "job_type", "state", "fence", "attempts", "max_attempts",
    "target_class", "payload_hash", "outcome_code", "created_at", "updated_at", "closed_fence",
    "closed_by", "transition", "actor", "seq", "hv", "payload_inline", "expires_at_epoch_s",
)  # fmt: skip


@pytest.fixture
def bucket(aws):
    name = f"slim-{random.getrandbits(32):08x}"
    aws.client("s3").create_bucket(Bucket=name)
    return name


def make(aws, spec, clock, bucket, **options):
    store = PayloadStore(bucket, client=aws.client("s3"))
    options.setdefault("payload_retention_ms", RETENTION)
    engine = Engine(client=aws.client(), spec=spec, clock=clock, rng=random.Random(5), payloads=store, **options)
    return engine, store


def raw(engine, op):
    return engine.store.get({"tenant_id": T, "operation_id": op})


def enqueue_kept(engine, op, payload, **kwargs):
    """A payload the deployment stores in S3 (the purge deletes it, and slims the item)."""
    canonical = canonicalize(payload)
    stored = engine._ctx.payloads.put(T, op, canonical)
    return engine.enqueue(
        T, op, "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True, **kwargs
    )


def ended(engine, op, payload=None, reason=None):
    """Enqueued with a kept payload, claimed, given a checkpoint and an intent, then completed
    (or failed terminally with ``reason``)."""
    enqueue_kept(engine, op, payload or {"card": "4111"})
    claim = engine.claim(T, op, "w1")
    engine.heartbeat(T, op, claim.fence, "w1", checkpoint={"step": 2}, intent="charge card")
    if reason is None:
        engine.complete(T, op, claim.fence, "ok")
    else:
        engine.fail(T, op, claim.fence, False, reason)
    return claim


def test_the_purge_slims_an_ended_operation_in_its_one_write(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    claim = ended(engine, "s-1")
    before = raw(engine, "s-1")
    operation = engine.get(T, "s-1")
    clock.advance(RETENTION - 1)
    assert engine.purge_payloads().purged == 0
    assert len(engine.history(T, "s-1").entries) == 3  # within the retention: whole
    clock.advance(1)
    assert engine.purge_payloads().purged == 1
    item = raw(engine, "s-1")
    for name in REMOVED:
        assert name not in item, name
    for name in KEPT:
        assert item[name] == before[name], name
    assert item[history.ITEM_HISTORY_EXPIRED] == clock() == item["payload_purged_at"]
    assert "purge_pk" not in item and "purge_at" not in item
    slim = engine.get(T, "s-1")
    assert slim.payload_state == "purged" and slim.intent is None and slim.checkpoint is None
    for field in ("state", "fence", "attempts", "outcome_code", "payload_hash", "created_at", "updated_at"):
        assert getattr(slim, field) == getattr(operation, field), field
    # The history expired: an empty page that says when.
    page = engine.history(T, "s-1")
    assert page.entries == [] and page.expired_at == clock() and page.next_cursor is None
    # Replay and conflict answer as before; the same completion again is a replay; no fence
    # is handed out again.
    replay = enqueue_kept(engine, "s-1", {"card": "4111"})
    assert not replay.created and replay.operation == slim
    with pytest.raises(PayloadConflict):
        enqueue_kept(engine, "s-1", {"card": "other"})
    assert engine.complete(T, "s-1", claim.fence, "ok") == slim
    with pytest.raises(StaleFence):
        engine.complete(T, "s-1", claim.fence, "other")
    assert engine.claim_next(T, "w2") is None
    assert raw(engine, "s-1") == item  # none of that wrote anything
    # Purged once: a second run finds nothing.
    assert engine.purge_payloads().purged == 0


def test_a_failure_reason_goes_and_its_replay_still_answers(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    claim = ended(engine, "f-1", reason="card declined: " + "x" * 200)
    assert raw(engine, "f-1")["reason"].startswith("card declined")
    clock.advance(RETENTION)
    assert engine.purge_payloads().purged == 1
    operation = engine.get(T, "f-1")
    assert operation.state == "failed_terminal" and operation.reason is None
    assert engine.fail(T, "f-1", claim.fence, False, "again") == operation  # a replay


def test_a_resolution_repeated_after_slimming_is_still_a_replay(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    enqueue_kept(engine, "r-1", {"x": 1})
    claim = engine.claim(T, "r-1", "w1")
    engine.park_unknown(T, "r-1", claim.fence, "timeout")
    resolved = engine.resolve(T, "r-1", "succeeded", note="checked the ledger", actor="ops-1")
    clock.advance(RETENTION)
    assert engine.purge_payloads().purged == 1
    assert "h" not in raw(engine, "r-1")
    again = engine.resolve(T, "r-1", "succeeded", note="checked the ledger", actor="ops-1")
    assert again.state == resolved.state and again.fence == resolved.fence


def test_erasure_after_slimming_adds_its_entry_and_keeps_the_identity(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    ended(engine, "e-1")
    clock.advance(RETENTION)
    engine.purge_payloads()
    expired = clock()
    clock.advance(5)
    erased = engine.erase(T, "e-1", actor="ops-1")
    assert erased.payload_state == "erased" and erased.fence == 1
    page = engine.history(T, "e-1")
    assert [e["transition"] for e in page.entries] == ["erase"] and page.expired_at == expired
    assert page.entries[0]["seq"] == 4
    assert not enqueue_kept(engine, "e-1", {"card": "4111"}).created
    assert engine.store.get({"tenant_id": T, "operation_id": keys.history_id("e-1")}) is None


def test_an_erasure_between_the_purge_read_and_its_write_wins(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    ended(engine, "race-1")
    clock.advance(RETENTION)
    seen = raw(engine, "race-1")  # what the purge run read
    engine.erase(T, "race-1", actor="ops-1")  # removes the kept payload and the purge entry
    erased = raw(engine, "race-1")
    # Even were the purge time unchanged (an S3 payload's erasure files it for "now"), the
    # state and seq pin refuse the slimming write.
    engine.store.update(
        {"tenant_id": T, "operation_id": "race-1"}, "SET purge_at = :p", "attribute_exists(seq)",
        {}, {":p": seen["purge_at"]},
    )  # fmt: skip
    assert purge_one(engine._ctx, seen) is False
    item = raw(engine, "race-1")
    assert "hx" not in item and [e["e"] for e in item["h"]] == ["erase"]
    assert item["seq"] == erased["seq"]


def test_an_erased_live_operation_is_purged_but_not_slimmed(aws, spec, clock, bucket):
    engine, store = make(aws, spec, clock, bucket)
    canonical = canonicalize({"big": "x"})
    stored = store.put(T, "live-1", canonical)
    engine.enqueue(T, "live-1", "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True)
    engine.erase(T, "live-1", actor="ops-1")  # an S3 payload: purged with the erasure at once
    item = raw(engine, "live-1")
    assert "payload_purged_at" in item and "purge_pk" not in item
    assert "hx" not in item and item["h"] and item["state"] == "queued"
    assert engine.history(T, "live-1").expired_at is None


def test_a_payload_by_reference_is_not_visited_and_keeps_its_history(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    engine.enqueue(T, "ref-1", "refund", "sha256:" + "a" * 64, payload_ref="s3://callers/obj")
    claim = engine.claim(T, "ref-1", "w1")
    engine.complete(T, "ref-1", claim.fence, "ok")
    clock.advance(RETENTION + DAY)
    assert engine.purge_payloads().examined == 0
    assert len(engine.history(T, "ref-1").entries) == 3


def test_an_item_written_before_slims_and_stops_reading_its_history_item(aws, spec, clock, bucket):
    engine, store = make(aws, spec, clock, bucket)
    canonical = canonicalize({"old": True})
    stored = store.put(T, "old-1", canonical)
    engine.enqueue(T, "old-1", "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True)
    engine.store.update(
        {"tenant_id": T, "operation_id": "old-1"}, "REMOVE #hv, #h", "attribute_exists(#hv)",
        {"#hv": "hv", "#h": "h"}, {},
    )  # fmt: skip
    enqueued = raw(engine, "old-1")
    assert history.record(engine.store, enqueued, history.entry_from(None, enqueued))
    claim = engine.claim(T, "old-1", "w1")
    engine.complete(T, "old-1", claim.fence, "ok")
    assert [e["transition"] for e in engine.history(T, "old-1").entries] == ["enqueue", "claim", "complete"]
    clock.advance(RETENTION)
    assert engine.purge_payloads().purged == 1
    assert aws.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    item = raw(engine, "old-1")
    assert "h" not in item and "hv" not in item and item["hx"] == clock()
    page = engine.history(T, "old-1")
    assert page.entries == [] and page.expired_at == clock()
    assert not engine.enqueue(T, "old-1", "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True).created


def test_forever_identity_retention_stays_forever(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket, identity_retention_ms=None)
    ended(engine, "ever-1")
    clock.advance(RETENTION)
    assert engine.purge_payloads().purged == 1
    item = raw(engine, "ever-1")
    assert "expires_at_epoch_s" not in item and "hx" in item


def test_a_late_compaction_never_brings_an_expired_history_back(aws, spec, clock, bucket):
    engine, _ = make(aws, spec, clock, bucket)
    ended(engine, "late-1")
    image = dict(raw(engine, "late-1"))
    clock.advance(RETENTION)
    engine.purge_payloads()
    # A publisher far behind compacts from an old record (a long list, as its image showed).
    image["h"] = [image["h"][0]] * (history.COMPACT_AT + 1) + image["h"][1:]
    image["seq"] = len(image["h"])
    engine.store.update(
        {"tenant_id": T, "operation_id": "late-1"}, "SET seq = :s", "attribute_exists(seq)",
        {}, {":s": image["seq"]},
    )  # fmt: skip
    assert history.compact(engine.store, image) is False
    assert "h" not in raw(engine, "late-1")


def test_the_slim_item_is_small(aws, spec, clock, bucket):
    from leasefence_tools.bench.units import item_size

    def wire():
        key = {"tenant_id": {"S": T}, "operation_id": {"S": "size-1"}}
        return aws.client().get_item(TableName=spec.table_name, Key=key, ConsistentRead=True)["Item"]

    engine, _ = make(aws, spec, clock, bucket)
    ended(engine, "size-1", payload={"p": "x" * 900}, reason=None)
    before = item_size(wire())
    clock.advance(RETENTION)
    engine.purge_payloads()
    after = item_size(wire())
    assert after < 520 < before, (before, after)  # (its S3 reference included: about 90 bytes)
    assert json.dumps(raw(engine, "size-1"), default=str).count("charge card") == 0
