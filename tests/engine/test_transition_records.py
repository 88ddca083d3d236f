"""Every transition records on the item what it was, who made it and its sequence number, in its
one conditional write; and the history those records become (leasefence.history)."""

from __future__ import annotations

import pytest

from leasefence import InvalidInput, history
from leasefence.model import OPERATOR_ACTOR, SWEEPER_ACTOR
from leasefence.schema import TTL_ATTRIBUTE

H = "sha256:" + "3" * 64
T = "tenant-r"


class CountingClient:
    """The boto3 client, counting the calls the engine makes."""

    def __init__(self, client):
        self._client = client
        self.calls: list[str] = []

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr) or name.startswith("_") or name in ("exceptions", "meta"):
            return attr

        def call(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)

        return call


def raw(engine, op="op-1"):
    return engine.store.get({"tenant_id": T, "operation_id": op})


def mark(engine, op="op-1"):
    item = raw(engine, op)
    return item["transition"], item.get("actor"), item["seq"]


def test_each_transition_names_itself_and_its_actor_in_its_one_write(engine, clock):
    counting = CountingClient(engine.store.client)
    engine.store._client = counting

    def one_write(action):
        counting.calls.clear()
        result = action()
        writes = [
            c for c in counting.calls if c in ("update_item", "put_item", "transact_write_items")
        ]
        assert writes in (["update_item"], ["put_item"]), counting.calls
        return result

    engine.enqueue(T, "op-0", "refund", H)  # the job type's directory entry is written once, here
    one_write(lambda: engine.enqueue(T, "op-1", "refund", H, actor="producer-1"))
    assert mark(engine) == ("enqueue", "producer-1", 1)
    claim = one_write(lambda: engine.claim(T, "op-1", "w1", lease_ms=5_000))
    assert mark(engine) == ("claim", "w1", 2)
    engine.heartbeat(T, "op-1", claim.fence, "w1")
    assert mark(engine) == ("claim", "w1", 2)  # a heartbeat is no transition
    one_write(
        lambda: engine.fail(
            T, "op-1", claim.fence, retryable=True, reason="flaky", retry_after_ms=0
        )
    )
    assert mark(engine) == ("retry", "w1", 3)  # the holder's id stays: only the holder closes
    claim = engine.claim(T, "op-1", "w2", lease_ms=5_000)
    one_write(
        lambda: engine.fail(
            T, "op-1", claim.fence, retryable=True, reason="busy", retry_after_ms=2_000
        )
    )
    assert mark(engine) == ("retry_later", "w2", 5)
    clock.advance(2_000)
    claim = engine.claim(T, "op-1", "w3", lease_ms=5_000)
    one_write(lambda: engine.park_unknown(T, "op-1", claim.fence, "timeout at the provider"))
    assert mark(engine) == ("unknown", "w3", 7)
    one_write(lambda: engine.resolve(T, "op-1", "requeue", note="not sent", actor="ops-alice"))
    assert mark(engine) == ("requeue", "ops-alice", 8)
    claim = engine.claim(T, "op-1", "w4", lease_ms=5_000)
    one_write(lambda: engine.quarantine(T, "op-1", claim.fence, "cannot parse"))
    assert mark(engine) == ("quarantine", "w4", 10)
    one_write(lambda: engine.resolve(T, "op-1", "succeeded"))
    assert mark(engine) == ("resolve", OPERATOR_ACTOR, 11)
    engine.erase(T, "op-1", actor="ops-bob")
    assert mark(engine) == ("erase", "ops-bob", 12)

    engine.enqueue(T, "op-2", "refund", H)
    claim = engine.claim(T, "op-2", "w1", lease_ms=5_000)
    one_write(lambda: engine.complete(T, "op-2", claim.fence, "refunded"))
    assert mark(engine, "op-2") == ("complete", "w1", 3)
    assert (
        engine.complete(T, "op-2", claim.fence, "refunded").state == "succeeded"
    )  # a retry: no new write
    assert mark(engine, "op-2")[2] == 3


def test_takeover_sweep_and_terminal_failure(engine, clock):
    engine.enqueue(T, "op-1", "refund", H, max_attempts=2)
    engine.claim(T, "op-1", "zombie", lease_ms=1_000)
    clock.advance(1_000)
    claim = engine.claim_next(T, "rescuer", lease_ms=1_000)
    assert claim.takeover and mark(engine) == ("claim", "rescuer", 3)
    item = raw(engine)
    assert history.transition_of(item).value == "takeover"
    clock.advance(1_000)
    assert engine.sweep().swept == 1
    assert mark(engine) == ("sweep", SWEEPER_ACTOR, 4)

    engine.enqueue(T, "op-2", "refund", H, max_attempts=1)
    claim = engine.claim(T, "op-2", "w1", lease_ms=1_000)
    engine.fail(T, "op-2", claim.fence, retryable=True, reason="no attempts left")
    assert mark(engine, "op-2") == ("fail", "w1", 3)


def test_actor_is_validated(engine):
    with pytest.raises(InvalidInput):
        engine.enqueue(T, "op-1", "refund", H, actor="bad\x00actor")
    with pytest.raises(InvalidInput):
        engine.resolve(T, "op-1", "requeue", actor="")


# ------------------------------------------------- the history item of operations enqueued before
# the history moved into the operation's item (the publisher still writes it for them)


def enqueue_before_upgrade(engine, op="op-1", **kwargs):
    """An operation as an engine before the in-item history enqueued it: no ``hv``, no ``h``
    (its later transitions, made by this engine, append to ``h`` all the same)."""
    engine.enqueue(T, op, "refund", H, **kwargs)
    key = {"tenant_id": T, "operation_id": op}
    engine.store.update(key, "REMOVE #hv, #h", "attribute_exists(#hv)", {"#hv": "hv", "#h": "h"}, {})


def record(engine, old, op="op-1"):
    """Record the transition that turned ``old`` into the current item; returns the new image."""
    new = raw(engine, op)
    return new, history.record(engine.store, new, history.entry_from(old, new))


def test_history_is_idempotent_ordered_and_carries_the_ttl_once_ended(engine, clock):
    enqueue_before_upgrade(engine, actor="p")
    enqueued, written = record(engine, None)
    assert written
    claim = engine.claim(T, "op-1", "w1", lease_ms=5_000)
    claimed, _ = record(engine, enqueued)
    assert not history.record(
        engine.store, claimed, history.entry_from(enqueued, claimed)
    )  # delivered again
    assert not history.record(
        engine.store, enqueued, history.entry_from(None, enqueued)
    )  # an older one, late
    engine.complete(T, "op-1", claim.fence, "refunded")
    done, _ = record(engine, claimed)
    page = engine.history(T, "op-1")
    assert [
        (e["seq"], e["transition"], e.get("previous_state"), e["state"], e["fence"], e.get("actor"))
        for e in page.entries
    ] == [
        (1, "enqueue", None, "queued", 0, "p"),
        (2, "claim", "queued", "claimed", 1, "w1"),
        (3, "complete", "claimed", "succeeded", 1, "w1"),
    ]
    assert page.entries[2]["outcome_code"] == "refunded" and page.next_cursor is None
    stored = engine.store.get({"tenant_id": T, "operation_id": "\x01op-1"})
    assert stored[TTL_ATTRIBUTE] == done[TTL_ATTRIBUTE]  # kept as long as the identity
    first = engine.history(T, "op-1", limit=2)
    assert [e["seq"] for e in first.entries] == [1, 2]
    assert [
        e["seq"] for e in engine.history(T, "op-1", limit=2, cursor=first.next_cursor).entries
    ] == [3]
    with pytest.raises(InvalidInput):
        engine.history(T, "op-1", cursor="not-a-cursor")
    assert [o.operation_id for o in engine.list(T).operations] == ["op-1"]  # listings never meet it


def test_a_long_history_keeps_its_first_entry_and_the_newest(engine):
    enqueue_before_upgrade(engine)
    item = raw(engine)
    base = history.entry_from(None, item)
    for seq in range(1, history.MAX_ENTRIES + 11):
        assert history.record(engine.store, item, {**base, "seq": seq})
    page = engine.history(T, "op-1")
    seqs = [e["seq"] for e in page.entries]
    assert (
        len(seqs) == history.MAX_ENTRIES and seqs[0] == 1 and seqs[-1] == history.MAX_ENTRIES + 10
    )
    assert seqs[1:] == list(range(12, history.MAX_ENTRIES + 11)) and page.dropped == 10


def test_erasure_replaces_the_history_and_late_records_cannot_bring_it_back(engine):
    enqueue_before_upgrade(engine)
    enqueued, _ = record(engine, None)
    claim = engine.claim(T, "op-1", "w1", lease_ms=5_000)
    engine.park_unknown(T, "op-1", claim.fence, "customer 4711 says: card stolen")
    claimed = raw(engine)  # (the publisher lags: the claim and the park are not recorded yet)
    engine.erase(T, "op-1", actor="ops-erin")
    entries = engine.history(T, "op-1").entries
    assert [(e["transition"], e.get("actor"), e["state"]) for e in entries] == [
        ("erase", "ops-erin", "unknown")
    ]
    assert not history.record(engine.store, claimed, history.entry_from(enqueued, claimed))
    assert "reason" not in str(engine.history(T, "op-1").entries)


def test_a_new_incarnation_starts_a_new_history_and_removal_spares_it(engine, clock):
    enqueue_before_upgrade(engine)
    old, _ = record(engine, None)
    engine.store.delete(
        {"tenant_id": T, "operation_id": "op-1"}, "attribute_exists(#s)", {"#s": "state"}, {}
    )
    clock.advance(10)
    enqueue_before_upgrade(engine)  # the identity was gone: a new operation
    new, written = record(engine, None)
    assert written and new["created_at"] > old["created_at"]
    history.remove(engine.store, old)  # the old item's deletion, processed late
    assert [e["at"] for e in engine.history(T, "op-1").entries] == [new["created_at"]]


def test_a_late_entry_is_inserted_in_sequence_order_and_writing_it_again_changes_nothing(engine):
    """A record retried after later ones (or redriven) lands where its seq belongs: no
    high-water mark discards it."""
    enqueue_before_upgrade(engine)
    enqueued, _ = record(engine, None)
    claim = engine.claim(T, "op-1", "w1", lease_ms=5_000)
    claimed = raw(engine)
    engine.park_unknown(T, "op-1", claim.fence, "timeout at the provider")
    parked, _ = record(engine, claimed)  # seq 3 first: the claim's record failed
    engine.resolve(T, "op-1", "succeeded", actor="ops-1", note="provider says done")
    record(engine, parked)  # seq 4
    late = history.entry_from(enqueued, claimed)
    assert history.record(engine.store, claimed, late)  # the claim, late: inserted
    stored = engine.store.get({"tenant_id": T, "operation_id": "\x01op-1"})
    assert [e["seq"] for e in engine.history(T, "op-1").entries] == [1, 2, 3, 4]
    assert engine.history(T, "op-1").entries[1] == late and stored["last_seq"] == 4
    for seq_image in (claimed, parked, raw(engine)):  # every one delivered again
        assert not history.record(engine.store, seq_image, {**late, "seq": seq_image["seq"]})
    assert engine.store.get({"tenant_id": T, "operation_id": "\x01op-1"}) == stored


def test_a_history_begun_by_a_later_record_takes_the_enqueue_before_it(engine):
    enqueue_before_upgrade(engine)
    enqueued = raw(engine)
    engine.claim(T, "op-1", "w1", lease_ms=5_000)
    record(engine, enqueued)  # the claim's entry starts the history (the enqueue's record failed)
    assert history.record(engine.store, enqueued, history.entry_from(None, enqueued))
    assert [(e["seq"], e["transition"]) for e in engine.history(T, "op-1").entries] == [
        (1, "enqueue"),
        (2, "claim"),
    ]


def test_a_late_entry_in_a_full_history_keeps_the_first_and_the_newest(engine):
    enqueue_before_upgrade(engine)
    item = raw(engine)
    base = history.entry_from(None, item)
    newest = history.MAX_ENTRIES + 10
    for seq in [1, *range(3, newest + 1)]:  # seq 2 ... and one near the end are late
        if seq != newest - 5:
            history.record(engine.store, item, {**base, "seq": seq})
    assert history.record(engine.store, item, {**base, "seq": newest - 5})  # among the kept: in
    assert not history.record(engine.store, item, {**base, "seq": 2})  # older than what is kept
    page = engine.history(T, "op-1")
    seqs = [e["seq"] for e in page.entries]
    assert len(seqs) == history.MAX_ENTRIES and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert seqs[0] == 1 and seqs[-(history.MAX_ENTRIES - 1) :] == list(
        range(newest - history.MAX_ENTRIES + 2, newest + 1)
    )
    assert page.dropped == newest - history.MAX_ENTRIES - 1  # 2 never came, the rest were dropped
