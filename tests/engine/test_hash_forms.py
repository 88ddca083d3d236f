"""An operation whose payload hash is stored as its 32-byte digest (the form a later writer may
use: leasefence.hash_form) reads, replays, conflicts, is approved, claimed, ended, listed and
erased exactly as one stored as text; every answer carries the text form."""

from __future__ import annotations

import hashlib

import pytest

from leasefence import PayloadConflict, State, hash_form
from leasefence.errors import PayloadMismatch
from leasefence.payloads import canonicalize
from leasefence.store import from_item

T = "acme"
H = "sha256:" + "7" * 64
OTHER = "sha256:" + "8" * 64


GATED_HASH = canonicalize({"pay": 1}).hash


def stored_as_digest(engine, operation_id: str, text: str) -> None:
    """Rewrite the item's payload hash as its digest, as a writer of the digest form would."""
    item = engine.stored_item(T, operation_id)
    key = {"tenant_id": {"S": item["tenant_id"]}, "operation_id": {"S": operation_id}}
    table, client = engine.store.table_name, engine.store.client
    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET payload_hash = :b",
        ExpressionAttributeValues={":b": {"B": hash_form.as_digest(text)}},
    )
    raw = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
    assert raw["payload_hash"] == {"B": hash_form.as_digest(text)}  # 32 bytes, not 71


def test_the_forms_convert_both_ways():
    digest = hashlib.sha256(b"x").digest()
    text = "sha256:" + digest.hex()
    assert hash_form.as_digest(text) == digest
    assert hash_form.as_text(digest) == text
    assert hash_form.as_text(text) == text  # text stays text
    assert hash_form.as_text(b"short") == b"short"  # not a digest: left alone
    for bad in ("sha256:" + "A" * 64, "sha256:" + "a" * 63, "md5:" + "a" * 64):
        with pytest.raises(ValueError):
            hash_form.as_digest(bad)
    assert from_item({"payload_hash": {"B": digest}, "x": {"B": b"\x01"}}) == {
        "payload_hash": text,
        "x": from_item({"x": {"B": b"\x01"}})["x"],  # only the hash is converted
    }


def test_a_digest_hash_reads_replays_conflicts_and_ends_as_text(engine):
    engine.enqueue(T, "a", "refund", H, actor="producer")
    stored_as_digest(engine, "a", H)
    assert engine.get(T, "a").payload_hash == H
    # Same id, same hash: a replay; another hash: a conflict. Decided by the put's condition, the
    # answer read from its ALL_OLD item.
    again = engine.enqueue(T, "a", "refund", H, actor="producer")
    assert not again.created and again.operation.payload_hash == H
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "a", "refund", OTHER, actor="producer")
    claim = engine.claim_next(T, "w1")
    assert claim is not None and claim.operation_id == "a" and claim.payload_hash == H
    done = engine.complete(T, "a", claim.fence, "done")
    assert done.state is State.SUCCEEDED and done.payload_hash == H
    # A repeated completion is a replay (its refusal's ALL_OLD item read as text).
    assert engine.complete(T, "a", claim.fence, "done").payload_hash == H
    listed = [op for op in engine.list(T).operations if op.operation_id == "a"]
    assert [op.payload_hash for op in listed] == [H]
    assert engine.erase(T, "a", actor="ops").payload_hash == H


def test_an_approval_binds_either_form(engine):
    engine.catalogue.put(T, "payout", {"target_class": "C", "max_attempts": 2, "approval_required": True})
    stored = {"payload_ref": "stored/1", "payload_inline": True}
    engine.enqueue(T, "g", "payout", GATED_HASH, actor="producer", **stored)
    stored_as_digest(engine, "g", GATED_HASH)
    with pytest.raises(PayloadMismatch):  # other content than the stored one: refused
        engine.approve(T, "g", OTHER, actor="approver")
    approved = engine.approve(T, "g", GATED_HASH, actor="approver")
    assert approved.state is State.QUEUED and approved.payload_hash == GATED_HASH
    assert engine.approve(T, "g", GATED_HASH, actor="approver").state is State.QUEUED  # a replay
