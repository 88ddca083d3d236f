"""The history kept in the operation's own item, written by each transition's own conditional
write (leasefence.history): complete and in order after every transition with no publisher
running, the same entries the publisher made from the stream, bounded, erased, and merged with
the history item of an operation enqueued before."""

from __future__ import annotations

import itertools

from leasefence import history, keys
from leasefence.model import State
from leasefence.store import from_item
from leasefence_tools.bench import units as U

H = "sha256:" + "5" * 64
T = "tenant-h"


def raw(engine, op="op-1"):
    return engine.store.get({"tenant_id": T, "operation_id": op})


class Oracle:
    """What the publisher made of each transition from the stream record's two images
    (``history.entry_from``), step by step: the in-item history must answer exactly that."""

    def __init__(self, engine, op="op-1"):
        self.engine, self.op = engine, op
        self.expected: list[dict] = []
        self.image = None

    def step(self, action):
        result = action()
        new = raw(self.engine, self.op)
        if self.image is None or new["seq"] != self.image["seq"]:
            entry = history.entry_from(self.image, new)
            # An erasure replaces the history with its own entry.
            self.expected = [entry] if entry["transition"] == "erase" else [*self.expected, entry]
        self.image = new
        page = self.engine.history(T, self.op)  # no publisher ran: the item alone answers
        assert page.entries == self.expected and page.dropped == 0
        assert (
            self.engine.store.get({"tenant_id": T, "operation_id": keys.history_id(self.op)})
            is None
        )
        return result


def test_each_transition_writes_its_entry_with_it_complete_and_in_order(engine, clock):
    o = Oracle(engine)
    o.step(lambda: engine.enqueue(T, "op-1", "refund", H, actor="producer-1", max_attempts=3))
    claim = o.step(lambda: engine.claim(T, "op-1", "w1", lease_ms=1_000))
    o.step(lambda: engine.heartbeat(T, "op-1", claim.fence, "w1"))  # no transition, no entry
    o.step(lambda: engine.fail(T, "op-1", claim.fence, True, "flaky " * 60, retry_after_ms=0))
    claim = o.step(lambda: engine.claim(T, "op-1", "w2", lease_ms=1_000))
    clock.advance(1_000)
    claim = o.step(lambda: engine.claim_next(T, "rescuer", lease_ms=1_000))  # a takeover
    assert claim.takeover and o.expected[-1]["transition"] == "takeover"
    assert o.expected[-1]["previous_actor"] == "w2"
    o.step(lambda: engine.park_unknown(T, "op-1", claim.fence, "timeout at the provider"))
    o.step(lambda: engine.resolve(T, "op-1", "requeue", note="not sent", actor="ops-alice"))
    claim = o.step(lambda: engine.claim(T, "op-1", "w3", lease_ms=1_000))
    o.step(lambda: engine.fail(T, "op-1", claim.fence, True, "busy", retry_after_ms=5_000))
    clock.advance(5_000)
    claim = o.step(lambda: engine.claim(T, "op-1", "w4", lease_ms=1_000))
    o.step(lambda: engine.quarantine(T, "op-1", claim.fence, "cannot parse"))
    o.step(lambda: engine.resolve(T, "op-1", "succeeded", note="done by hand"))
    assert [e["transition"] for e in o.expected] == [
        "enqueue", "claim", "retry", "claim", "takeover", "unknown", "requeue", "claim",
        "retry_later", "claim", "quarantine", "resolve",
    ]  # fmt: skip
    assert len(o.expected[2]["reason"]) == history.MAX_REASON  # cut as before
    o.step(lambda: engine.erase(T, "op-1", actor="ops-bob"))
    assert [(e["transition"], e["seq"], e["state"]) for e in o.expected[-1:]] == [
        ("erase", 13, "succeeded")
    ]

    # The sweeper's park, a completion, a cancellation and a terminal failure.
    o = Oracle(engine, "op-2")
    o.step(lambda: engine.enqueue(T, "op-2", "refund", H, max_attempts=1))
    o.step(lambda: engine.claim(T, "op-2", "w1", lease_ms=1_000))
    clock.advance(1_000)
    o.step(lambda: engine.sweep())
    assert o.expected[-1]["transition"] == "sweep" and o.expected[-1]["state"] == "unknown"
    o = Oracle(engine, "op-3")
    o.step(lambda: engine.enqueue(T, "op-3", "refund", H))
    claim = o.step(lambda: engine.claim(T, "op-3", "w1"))
    o.step(lambda: engine.complete(T, "op-3", claim.fence, "refunded"))
    o.step(lambda: engine.complete(T, "op-3", claim.fence, "refunded"))  # a replay: no entry
    o = Oracle(engine, "op-4")
    o.step(lambda: engine.enqueue(T, "op-4", "refund", H))
    o.step(lambda: engine.cancel(T, "op-4", actor="producer-2"))
    o = Oracle(engine, "op-5")
    o.step(lambda: engine.enqueue(T, "op-5", "refund", H, max_attempts=1))
    claim = o.step(lambda: engine.claim(T, "op-5", "w1"))
    o.step(lambda: engine.fail(T, "op-5", claim.fence, True, "no attempts left"))
    assert o.expected[-1]["transition"] == "fail"


def test_the_entries_are_compact(engine):
    engine.enqueue(T, "op-1", "refund", H)
    claim = engine.claim(T, "op-1", "worker-0001", lease_ms=1_000)
    engine.complete(T, "op-1", claim.fence, "ok")
    item = engine.store.client.get_item(
        TableName=engine.store.table_name,
        Key={"tenant_id": {"S": T}, "operation_id": {"S": "op-1"}},
    )["Item"]
    # Three entries: about 30 bytes each (the worker id counted once).
    assert U.value_size(item["h"]) < 120, from_item({"h": item["h"]})


def _loop(engine, op, rounds, reason="timeout", worker="w", oracle=None):
    """Claims parked as unknown and requeued by an operator: three entries a round."""
    step = oracle.record if oracle is not None else (lambda action: action())
    for _ in range(rounds):
        claim = step(lambda: engine.claim(T, op, worker, lease_ms=1_000))
        step(lambda c=claim: engine.park_unknown(T, op, c.fence, reason))
        step(lambda: engine.resolve(T, op, "requeue", note=reason))


class Recorder(Oracle):
    def record(self, action):
        result = action()
        new = raw(self.engine, self.op)
        entry = history.entry_from(self.image, new)
        self.expected = [entry] if entry["transition"] == "erase" else [*self.expected, entry]
        self.image = new
        return result

    def shown(self):
        """What the API shows of it: the first entry and the newest, the rest counted."""
        bound = history.MAX_ENTRIES
        if len(self.expected) <= bound:
            return self.expected, 0
        return [self.expected[0], *self.expected[-(bound - 1) :]], len(self.expected) - bound


def test_a_long_requeue_loop_stays_bounded_and_compaction_changes_no_answer(engine):
    o = Recorder(engine)
    o.record(lambda: engine.enqueue(T, "op-1", "refund", H, max_attempts=1))
    _loop(engine, "op-1", 20, oracle=o)  # 61 entries, no publisher: the API shows the bound
    page = engine.history(T, "op-1")
    assert (page.entries, page.dropped) == o.shown() and page.dropped == 61 - history.MAX_ENTRIES
    item = raw(engine)
    assert len(item["h"]) == 61 > history.COMPACT_AT
    assert history.compact(engine.store, item)  # the publisher's write, on a record it got
    compacted = raw(engine)
    assert len(compacted["h"]) == history.MAX_ENTRIES
    assert compacted["hd"] == 61 - history.MAX_ENTRIES
    assert engine.history(T, "op-1") == page  # the same answer, entry for entry
    assert not history.compact(engine.store, item)  # the record delivered again: no write
    _loop(engine, "op-1", 5, oracle=o)  # later entries still derive seq, state, fence, actor
    after = engine.history(T, "op-1")
    assert (after.entries, after.dropped) == o.shown()
    assert after.entries[-3]["fence"] == 25 and after.entries[-1]["transition"] == "requeue"
    first = engine.history(T, "op-1", limit=10)
    rest = engine.history(T, "op-1", limit=50, cursor=first.next_cursor)
    assert first.entries + rest.entries == after.entries  # paging over a compacted history
    # Compacted twice: the first entry keeps its own seq, the dropped ones add up.
    _loop(engine, "op-1", 4, oracle=o)
    assert history.compact(engine.store, raw(engine))
    page = engine.history(T, "op-1")
    assert (page.entries, page.dropped) == o.shown() and raw(engine)["hd"] == page.dropped


def test_a_requeue_of_a_long_history_with_no_publisher_compacts_it_itself_and_succeeds(engine):
    """Issue 32, failure 2: on main 4f60178 a requeue was refused with 503 ("being compacted")
    once the history held 80 entries, and only the stream's publisher compacted: with no
    publisher the 503 never ended. Now the requeue compacts from its refusal's item and is
    taken; so is a claim, whose loops (retries, takeovers) also grow the history."""
    o = Recorder(engine)
    o.record(lambda: engine.enqueue(T, "op-1", "refund", H, max_attempts=1))
    _loop(engine, "op-1", 40, oracle=o)  # 121 entries written, every requeue taken
    item = raw(engine)
    assert item["state"] == State.QUEUED and item["hd"] > 0
    assert len(item["h"]) < history.HISTORY_ROOM
    page = engine.history(T, "op-1")
    assert (page.entries, page.dropped) == o.shown()  # compaction changed no answer
    # A claim makes room the same way: 60 retries of one budget, no publisher.
    o2 = Recorder(engine, "op-2")
    o2.record(lambda: engine.enqueue(T, "op-2", "refund", H, max_attempts=100))
    for _ in range(60):
        claim = o2.record(lambda: engine.claim(T, "op-2", "w", lease_ms=1_000))
        o2.record(lambda c=claim: engine.fail(T, "op-2", c.fence, True, "flaky", 0))
        assert len(raw(engine, "op-2")["h"]) <= history.HISTORY_ROOM + 2
    page = engine.history(T, "op-2")
    assert (page.entries, page.dropped) == o2.shown() and page.entries[-1]["attempt"] == 60


def test_a_requeue_whose_compaction_loses_a_race_still_succeeds(engine, monkeypatch):
    """The requeue's own compaction loses to a compaction made in between (the publisher's):
    its write is refused, the item shows the history with room, and the requeue goes on."""
    engine.enqueue(T, "op-1", "refund", H, max_attempts=1)
    _loop(engine, "op-1", 26)  # 79 entries
    claim = engine.claim(T, "op-1", "w", lease_ms=1_000)
    engine.park_unknown(T, "op-1", claim.fence, "timeout")
    assert len(raw(engine)["h"]) == 81 >= history.HISTORY_ROOM
    compact, lost = history.compact, []

    def racing(store, item, attempts=3):
        assert compact(store, raw(engine))  # the publisher's, just before this one
        lost.append(not compact(store, item, attempts))  # on the refused requeue's image
        return False

    monkeypatch.setattr(history, "compact", racing)
    assert engine.resolve(T, "op-1", "requeue").state == State.QUEUED
    assert lost == [True] and len(raw(engine)["h"]) == history.MAX_ENTRIES + 1


def test_an_erasure_replaces_the_history_in_the_item(engine, clock):
    engine.enqueue(T, "op-1", "refund", H, max_attempts=1)
    _loop(engine, "op-1", 25, "customer 4711 says: card stolen")
    assert history.compact(engine.store, raw(engine))
    claim = engine.claim(T, "op-1", "w9", lease_ms=1_000)
    engine.park_unknown(T, "op-1", claim.fence, "customer 4711 again")
    engine.erase(T, "op-1", actor="ops-erin")
    item = raw(engine)
    assert len(item["h"]) == 1 and "hd" not in item
    page = engine.history(T, "op-1")
    assert page.dropped == 0 and [
        (e["seq"], e["transition"], e["actor"], e["state"], e["previous_state"], e["fence"])
        for e in page.entries
    ] == [(item["seq"], "erase", "ops-erin", "unknown", "unknown", claim.fence)]
    assert "customer" not in str(item["h"])
    engine.resolve(T, "op-1", "requeue")
    claim = engine.claim(T, "op-1", "w10")
    entries = engine.history(T, "op-1").entries
    assert [(e["seq"] - item["seq"], e["transition"], e["previous_state"]) for e in entries] == [
        (0, "erase", "unknown"),
        (1, "requeue", "unknown"),
        (2, "claim", "queued"),
    ]
    assert entries[-1]["fence"] == claim.fence and entries[-1]["attempt"] == raw(engine)["attempts"]


def enqueue_before_upgrade(engine, op="op-1", **kwargs):
    """An operation as an engine before the in-item history enqueued it (no ``hv``, no ``h``),
    and its history item as the publisher wrote it from the enqueue's record."""
    engine.enqueue(T, op, "refund", H, **kwargs)
    engine.store.update(
        {"tenant_id": T, "operation_id": op}, "REMOVE #hv, #h", "attribute_exists(#hv)",
        {"#hv": "hv", "#h": "h"}, {},
    )  # fmt: skip
    enqueued = raw(engine, op)
    assert history.record(engine.store, enqueued, history.entry_from(None, enqueued))
    return enqueued


def test_an_operation_enqueued_before_reads_its_history_item_then_its_own_entries(engine, clock):
    enqueued = enqueue_before_upgrade(engine, actor="producer-1")
    claim = engine.claim(T, "op-1", "w1", lease_ms=1_000)
    claimed = raw(engine)
    engine.fail(T, "op-1", claim.fence, True, "flaky", retry_after_ms=0)
    retried = raw(engine)
    expected = [
        history.entry_from(None, enqueued),
        history.entry_from(enqueued, claimed),
        history.entry_from(claimed, retried),
    ]
    # Its history item holds the enqueue only (the publisher lags): the item tells the rest.
    assert engine.history(T, "op-1").entries == expected
    # The publisher catches up (records of an operation without ``hv``): nothing doubles.
    assert history.record(engine.store, claimed, expected[1])
    assert history.record(engine.store, retried, expected[2])
    assert engine.history(T, "op-1").entries == expected
    # Its erasure resets both.
    engine.erase(T, "op-1", actor="ops-1")
    entries = engine.history(T, "op-1").entries
    assert [(e["seq"], e["transition"]) for e in entries] == [(4, "erase")]
    stored = engine.store.get({"tenant_id": T, "operation_id": keys.history_id("op-1")})
    assert [e["transition"] for e in stored["entries"]] == ["erase"]


def test_a_long_history_enqueued_before_counts_what_it_dropped_once(engine):
    """Its history item dropped entries that the item still holds: shown once, counted once."""
    enqueued = enqueue_before_upgrade(engine, max_attempts=1)
    images = [enqueued]
    for _ in range(20):
        claim = engine.claim(T, "op-1", "w")
        images.append(raw(engine))
        engine.park_unknown(T, "op-1", claim.fence, "timeout")
        images.append(raw(engine))
        engine.resolve(T, "op-1", "requeue")
        images.append(raw(engine))
    for old, new in itertools.pairwise(images):  # the publisher, for an operation without hv
        assert history.record(engine.store, new, history.entry_from(old, new))
    stored = engine.store.get({"tenant_id": T, "operation_id": keys.history_id("op-1")})
    assert stored["dropped"] == 61 - history.MAX_ENTRIES
    page = engine.history(T, "op-1")
    assert page.dropped == 61 - history.MAX_ENTRIES
    assert [e["seq"] for e in page.entries] == [1, *range(61 - history.MAX_ENTRIES + 2, 62)]
    assert page.entries == [stored["entries"][0], *stored["entries"][1:]]


def test_an_entry_that_cannot_be_derived_yet_is_not_shown_with_its_fence_missing(engine):
    """An operation enqueued before, whose last transition by the code before is not in its
    history item yet (the publisher's lag at the upgrade, or its record in the failure bucket
    until the redrive): the entries its item records after it cannot derive the fence, attempt
    and previous state from it. They are left out until the history item has that entry (as the
    history trailed the stream before), never answered with those fields missing (the API's
    ``fence`` and ``attempt`` are integers)."""
    enqueued = enqueue_before_upgrade(engine, max_attempts=3)
    claim = engine.claim(T, "op-1", "w1", lease_ms=1_000)
    engine.store.update(
        {"tenant_id": T, "operation_id": "op-1"}, "REMOVE #h", "attribute_exists(#h)",
        {"#h": "h"}, {},
    )  # fmt: skip
    claimed = raw(engine)  # the claim, as the code before made it: no entry in the item
    engine.fail(T, "op-1", claim.fence, True, "flaky", retry_after_ms=0)
    retried = raw(engine)
    engine.claim(T, "op-1", "w2", lease_ms=1_000)
    claimed_again = raw(engine)
    page = engine.history(T, "op-1")
    for entry in page.entries:
        assert {"state", "fence", "attempt"} <= entry.keys(), entry
        assert "previous_state" in entry or entry["transition"] == "enqueue", entry
    assert [e["seq"] for e in page.entries] == [1, 4]
    # The publisher catches up: every entry, whole.
    for old, new in itertools.pairwise([enqueued, claimed, retried, claimed_again]):
        history.record(engine.store, new, history.entry_from(old, new))
    assert engine.history(T, "op-1").entries == [
        history.entry_from(old, new)
        for old, new in itertools.pairwise([None, enqueued, claimed, retried, claimed_again])
    ]
    # Its history item not written at all yet (the enqueue's own record still pending): nothing
    # to derive from, so nothing is shown yet (not an error).
    engine.enqueue(T, "op-2", "refund", H)
    engine.store.update(
        {"tenant_id": T, "operation_id": "op-2"}, "REMOVE #hv, #h", "attribute_exists(#hv)",
        {"#hv": "hv", "#h": "h"}, {},
    )  # fmt: skip
    engine.claim(T, "op-2", "w1")
    assert engine.history(T, "op-2") == history.HistoryPage(entries=[], next_cursor=None)


def test_an_ended_history_over_its_bytes_is_compacted_though_the_end_dropped_its_count(engine):
    """The end removes ``hb`` (only a claim's or a requeue's room check reads it); the
    publisher's compaction of the end's record still finds a history over its bytes (under its
    count) by measuring the list."""
    engine.enqueue(T, "op-1", "refund", H, max_attempts=1)
    _loop(engine, "op-1", 9, reason="€" * 256)  # about 1.6 KB a round: over 12 KiB, 27 entries
    claim = engine.claim(T, "op-1", "w", lease_ms=1_000)
    engine.complete(T, "op-1", claim.fence, "done")
    ended = raw(engine, "op-1")
    assert history.ITEM_BYTES not in ended and len(ended[history.ITEM_HISTORY]) < history.COMPACT_AT
    assert history.compact(engine.store, ended)
    compacted = raw(engine, "op-1")
    assert len(compacted[history.ITEM_HISTORY]) < len(ended[history.ITEM_HISTORY])
    assert engine.history(T, "op-1").entries[-1]["transition"] == "complete"
