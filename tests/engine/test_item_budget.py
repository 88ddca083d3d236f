"""The operation item's byte budget (leasefence.item_budget): computed from the limits, and no
sequence of commands makes an item larger, with 4-byte characters in every id and every free-text
field at its maximum, every write succeeding (the embedded endpoint, like DynamoDB, refuses an
item over 400 KB and a key over its limit).

Issue 32, failure 1 ("stuck for size"): on main 4f60178, 256-emoji worker ids with no publisher
made the 54th attempt's ``fail`` refused for size, and everything after it (complete, takeover,
park, erase) too."""

from __future__ import annotations

import pytest

from leasefence import history, item_budget, keys
from leasefence.errors import ItemTooLarge
from leasefence.limits import (
    HISTORY_ROOM_BYTES,
    MAX_CHECKPOINT_BYTES,
    MAX_ID_LENGTH,
    MAX_ITEM_PAYLOAD_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    MAX_STORE_ITEM_BYTES,
    MAX_TEXT_LENGTH,
)
from leasefence.model import TERMINAL_STATES
from leasefence.payloads import canonicalize
from leasefence.schema import OPERATION_ATTRIBUTES
from leasefence.stored import CUT_MARK, stored_id
from leasefence.tracecontext import MAX_TRACESTATE_BYTES, TraceContext
from leasefence_tools.bench import units as U
from tests.support.payload_items import body_of


def wide(n: int, length: int = MAX_ID_LENGTH) -> str:
    """``length`` characters of four bytes each (emoji), one distinct string per ``n``."""
    return chr(0x1F600 + n) * length


TENANT, OP, JOB = wide(0), wide(1), wide(2)
PRODUCER, APPROVER, OPERATOR = wide(3), wide(4), wide(5)
WORKERS = [wide(6), wide(7)]
TEXT = wide(8, MAX_TEXT_LENGTH)  # a reason or a note: 1,024 characters, 4 KiB
INTENT = wide(9)
#: The final states: their items have no history byte count (the end removes it).
ENDED = {s.value for s in TERMINAL_STATES}
#: The producer's trace context at its largest: a traceparent, a tracestate of 512 characters.
TRACE = TraceContext(
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "k=" + "v" * (MAX_TRACESTATE_BYTES - 2),
)


class Meter:
    """Every item the commands produce, measured as DynamoDB measures it."""

    def __init__(self, engine, tenant, op):
        self.engine, self.key = engine, {"tenant_id": {"S": tenant}, "operation_id": {"S": op}}
        self.largest = 0
        self.longest = 0
        self.longest_bytes = 0
        self.seen: set[str] = set()

    def __call__(self, action):
        result = action()
        item = self.engine.store.client.get_item(
            TableName=self.engine.store.table_name, Key=self.key, ConsistentRead=True
        )["Item"]
        size = U.item_size(item)
        assert size <= item_budget.max_item_bytes()
        # DynamoDB's key limits, for the table's keys and every index's (moto checks them on a
        # put only: an update that files the item in an index would pass here, not there).
        for name in ("tenant_id", "due_pk", "sweep_pk", "parked_pk", "purge_pk"):
            assert U.value_size(item.get(name, {"S": ""})) <= MAX_PARTITION_KEY_BYTES, name
        assert U.value_size(item["operation_id"]) <= MAX_SORT_KEY_BYTES
        for name, value in item.items():
            if name != history.ITEM_HISTORY:
                assert U.value_size(value) <= item_budget.ATTRIBUTE_BYTES[name], name
        entries = item.get(history.ITEM_HISTORY, {"L": []})["L"]
        assert len(entries) <= item_budget.max_history_entries()
        assert U.value_size({"L": entries}) <= item_budget.max_history_bytes()
        # hb is the list's size, as the bench's meter measures it (an ended item has none: only
        # a claim's or a requeue's room check reads it)
        if entries and item["state"]["S"] not in ENDED:
            assert int(item["hb"]["N"]) == U.value_size({"L": entries}) - 3
            self.longest_bytes = max(self.longest_bytes, int(item["hb"]["N"]))
        for entry in entries:
            assert U.value_size(entry) <= item_budget.max_entry_bytes()
            assert set(entry["M"]) <= set(item_budget.ENTRY_FIELD_BYTES)
        self.largest = max(self.largest, size)
        self.longest = max(self.longest, len(entries))
        self.seen |= set(item)
        return result


def test_the_computed_largest_item_fits_the_store_and_budgets_every_attribute():
    assert item_budget.max_item_bytes() <= MAX_STORE_ITEM_BYTES
    assert item_budget.max_item_bytes() <= 64 * 1024  # issue 32's target (about 57 KB)
    assert OPERATION_ATTRIBUTES - {history.ITEM_HISTORY} <= set(item_budget.ATTRIBUTE_BYTES)
    # An entry's ids are cut where they would pass their bound; those that fit stay whole.
    assert stored_id("w" * 256) == "w" * 256 and stored_id(wide(0, 64)) == wide(0, 64)
    cut = stored_id(WORKERS[0])
    assert len(cut.encode()) <= 256 and CUT_MARK in cut and cut != stored_id(WORKERS[1])


def test_many_attempts_with_4_byte_ids_and_the_largest_fields_no_publisher_every_write_succeeds(
    engine, clock
):
    kept = canonicalize({"p": wide(10, 200) + "x" * (MAX_ITEM_PAYLOAD_BYTES - 8 - 800)})
    assert len(kept.body) == MAX_ITEM_PAYLOAD_BYTES
    step = Meter(engine, TENANT, OP)
    step(
        lambda: engine.enqueue(
            TENANT, OP, JOB, kept.hash, payload_json=kept.body, actor=PRODUCER,
            max_attempts=100, approval_required=True, trace_context=TRACE,
        )
    )  # fmt: skip
    step(lambda: engine.approve(TENANT, OP, kept.hash, APPROVER))
    checkpoint = {"c": "x" * (MAX_CHECKPOINT_BYTES - 8)}
    for loop, attempts in enumerate((100, 20)):  # the whole budget, parked, requeued; again
        for attempt in range(attempts):
            worker = WORKERS[attempt % 2]
            claim = step(
                lambda w=worker, a=attempt: engine.claim(
                    TENANT, OP, w, lease_ms=1_000, claim_token=wide(11 + a % 2)
                )
            )
            step(
                lambda c=claim, w=worker: engine.heartbeat(
                    TENANT, OP, c.fence, w, checkpoint=checkpoint, intent=INTENT
                )
            )
            if attempt == attempts - 1:
                step(lambda c=claim: engine.park_unknown(TENANT, OP, c.fence, TEXT))
            elif attempt % 10 == 9:
                clock.advance(1_001)  # the lease lapses: the next claim is a takeover
            else:
                step(lambda c=claim: engine.fail(TENANT, OP, c.fence, True, TEXT, 0))
        if loop == 0:
            step(
                lambda: engine.resolve(
                    TENANT, OP, "requeue", note=TEXT, actor=OPERATOR, request_token=wide(13)
                )
            )
    step(
        lambda: engine.resolve(
            TENANT, OP, "failed_terminal", note=TEXT, actor=OPERATOR, request_token=wide(14)
        )
    )
    step(lambda: engine.erase(TENANT, OP, actor=OPERATOR))
    assert engine.get(TENANT, OP).state == "failed_terminal"
    # The list was compacted by the claims themselves (no publisher ran) and stayed bounded.
    # With 4-byte ids the bytes bind first (an entry is up to 1.7 KB): the list reached its room.
    assert step.longest_bytes >= HISTORY_ROOM_BYTES - item_budget.max_entry_bytes()
    # Another operation ends by its completion, with the longest outcome code.
    done = Meter(engine, TENANT, wide(15))
    done(lambda: engine.enqueue(TENANT, wide(15), JOB, kept.hash, payload_json=kept.body))
    claim = done(lambda: engine.claim(TENANT, wide(15), WORKERS[0]))
    done(lambda: engine.complete(TENANT, wide(15), claim.fence, wide(16)))
    # Every attribute the budget names was met (the ones of a slimmed or by-reference item aside).
    assert set(item_budget.ATTRIBUTE_BYTES) - step.seen - done.seen <= {
        "payload_ref", "payload_inline", "hx", "expires_at_epoch_s", "job_type_version",
        "lease_default_ms", "lease_max_ms", "sweep_pk", "sweep_at", "purge_pk",
        "payload_json",  # layout 1 only: layout 2 keeps it in the payload item, measured here
    }  # fmt: skip
    payload_key = keys.payload_id(wide(15), kept.hash)
    assert len(payload_key.encode()) <= MAX_SORT_KEY_BYTES
    payload_item = engine.store.client.get_item(
        TableName=engine.store.table_name,
        Key={"tenant_id": {"S": TENANT}, "operation_id": {"S": payload_key}},
        ConsistentRead=True,
    )["Item"]
    assert body_of(payload_item) == kept.body
    assert U.item_size(payload_item) <= item_budget.max_payload_item_bytes()
    print(f"largest item {step.largest} bytes, computed bound {item_budget.max_item_bytes()}")


def test_keys_stay_within_dynamodb_key_limits_for_ids_of_any_script(engine):
    """A due partition of a 1 KiB tenant and a 1 KiB job type, a history item's and a catalogue
    entry's sort key: each fits (a digest of the id where it would not), and the ones that fit
    are the keys written before."""
    due = keys.due_partition(TENANT, 3, JOB)
    assert len(due.encode()) <= MAX_PARTITION_KEY_BYTES and due != keys.due_partition(TENANT, 3, OP)
    assert keys.due_partition("t#1", 3, "refund") == "t\\#1#3#refund"  # unchanged
    for key in (keys.history_id(OP), keys.catalogue_id(JOB)):
        assert len(key.encode()) <= MAX_SORT_KEY_BYTES
    assert keys.history_id("op-1") == "\x01op-1"
    assert keys.catalogue_id("refund") == "\x00job-type:refund"
    # Such an operation is claimed from its partition like any other.
    engine.enqueue(TENANT, OP, JOB, "sha256:" + "5" * 64)
    assert engine.claim_next(TENANT, WORKERS[0]).operation_id == OP


def test_an_update_refused_for_size_compacts_the_history_and_is_sent_again(engine):
    """The way out if a write is ever refused for size all the same: the store reports it once
    (ItemTooLarge), the engine compacts the history from the item and sends it again."""
    engine.enqueue("t", "op-1", "refund", "sha256:" + "5" * 64, max_attempts=100)
    for _ in range(35):  # 71 entries: past the publisher's compaction threshold, short of room
        claim = engine.claim("t", "op-1", "w", lease_ms=1_000)
        engine.fail("t", "op-1", claim.fence, True, "flaky", 0)
    assert len(engine.store.get({"tenant_id": "t", "operation_id": "op-1"})["h"]) == 71
    client = engine.store.client
    refusals = []

    class TooLargeOnce:
        def __getattr__(self, name):
            return getattr(client, name)

        def update_item(self, **kwargs):
            if not refusals and "lease_owner" in kwargs["UpdateExpression"]:
                refusals.append(kwargs)
                from botocore.exceptions import ClientError

                raise ClientError(
                    {"Error": {"Code": "ValidationException",
                               "Message": "Item size has exceeded the maximum allowed size"}},
                    "UpdateItem",
                )  # fmt: skip
            return client.update_item(**kwargs)

    engine.store._client = TooLargeOnce()
    claim = engine.claim("t", "op-1", "w", lease_ms=1_000)
    assert refusals and claim.attempts == 36
    assert len(engine.store.get({"tenant_id": "t", "operation_id": "op-1"})["h"]) == (
        history.MAX_ENTRIES + 1
    )
    # Nothing to compact: the refusal is reported as it is (a clear 4xx, never a 5xx).
    engine.fail("t", "op-1", claim.fence, True, "flaky", 0)
    engine.store.make_room = lambda _key: False
    refusals.clear()
    with pytest.raises(ItemTooLarge):
        engine.claim("t", "op-1", "w", lease_ms=1_000)
