"""schema.OperationItem names every attribute the engine writes on an operation item, with the
type it is written with: a lifecycle through every transition, read back from the table."""

from __future__ import annotations

import random
import typing

from leasefence import history, schema
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import OPERATION_ATTRIBUTES, OperationItem
from leasefence.tracecontext import TraceContext

T = "acme"
H = "sha256:" + "7" * 64
ENTRY = {"target_class": "B", "max_attempts": 3, "lease_seconds": 30, "max_lease_seconds": 120}
GATED = {"target_class": "C", "max_attempts": 2, "approval_required": True}
TRACE = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=value")


def _operations(engine) -> list[dict]:
    items, start = [], None
    while True:
        page = engine.store.scan(start=start)
        items += [i for i in page.items if "payload_hash" in i and "state" in i]
        if page.last_key is None:
            return items
        start = page.last_key


def _plain(hint) -> tuple[type, ...]:
    """The runtime types a TypedDict field's hint allows (``int | None`` -> (int, NoneType))."""
    if typing.get_origin(hint) is list:  # list[dict[str, Any]] -> list
        return (list,)
    args = typing.get_args(hint)
    return tuple(a for a in args) if args else (hint,)


def test_the_item_type_names_every_attribute_the_engine_writes(aws, engine, clock):
    bucket = f"operation-item-{random.getrandbits(32):08x}"
    aws.client("s3").create_bucket(Bucket=bucket)
    engine.payloads = PayloadStore(bucket, client=aws.client("s3"))
    engine.catalogue.put(T, "refund", ENTRY)
    engine.catalogue.put(T, "payout", GATED)
    seen: list[dict] = []

    def snap(operation_id):
        seen.append(engine.store.get({"tenant_id": T, "operation_id": operation_id}))

    # Claim, heartbeat with a checkpoint and an intent, a retryable failure, a takeover, complete.
    engine.enqueue(T, "a", "refund", H, actor="producer")
    first = engine.claim(T, "a", "w1", claim_token="tok-1")
    engine.heartbeat(T, "a", first.fence, "w1", lease_ms=60_000, checkpoint={"step": 1}, intent="call")
    snap("a")
    engine.fail(T, "a", first.fence, retryable=True, reason="busy", retry_after_ms=0)
    second = engine.claim(T, "a", "w2")
    clock.advance(200_000)
    third = engine.claim(T, "a", "w3")  # a takeover
    assert third.fence == second.fence + 1
    snap("a")
    engine.complete(T, "a", third.fence, "done")
    snap("a")
    # The last attempt lapses: the sweeper parks it; an operator requeues, it is quarantined,
    # then resolved.
    engine.enqueue(T, "b", "other", H, max_attempts=1)
    claim = engine.claim(T, "b", "w1", lease_ms=1_000)
    snap("b")
    clock.advance(2_000)
    assert engine.sweep().swept == 1
    snap("b")
    engine.resolve(T, "b", "requeue", note="try again", request_token="r-1")
    snap("b")
    again = engine.claim(T, "b", "w1")
    engine.quarantine(T, "b", again.fence, "garbled")
    engine.resolve(T, "b", "failed_terminal", note="gave up")
    snap("b")
    # The approval gate, inline payloads, erasure, purge.
    canonical = canonicalize({"payout": 1})
    for name in ("c", "d"):
        ref = engine.payloads.put(T, name, canonical).ref
        engine.enqueue(T, name, "payout", canonical.hash, payload_ref=ref, payload_inline=True, actor="producer")
    snap("c")
    engine.approve(T, "c", canonical.hash, actor="approver")
    snap("c")
    engine.reject(T, "d", actor="approver", note="no")
    engine.erase(T, "d")
    snap("d")
    # A producer's trace context (issue 36) is kept with the operation.
    context = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=value")
    engine.enqueue(T, "e", "other", H, trace_context=context)
    snap("e")  # (the end drops it: only a claim hands it on)
    engine.cancel(T, "e")
    snap("e")
    kept = canonicalize({"kept": 1})  # a payload kept in the item
    engine.enqueue(T, "f", "other", kept.hash, payload_json=kept.body)
    snap("f")
    # A history compacted past its bound (the publisher's write: leasefence.history).
    engine.enqueue(T, "g", "other", H, max_attempts=1)
    for _ in range(history.COMPACT_AT // 3 + 1):
        claim = engine.claim(T, "g", "w1")
        engine.park_unknown(T, "g", claim.fence, "timeout")
        engine.resolve(T, "g", "requeue")
    assert history.compact(engine.store, engine.store.get({"tenant_id": T, "operation_id": "g"}))
    snap("g")
    seen += _operations(engine)

    hints = typing.get_type_hints(OperationItem)
    assert set(hints) == OPERATION_ATTRIBUTES
    written = set().union(*seen)
    assert written - OPERATION_ATTRIBUTES == set(), "declare the new attribute in schema.OperationItem"
    for item in seen:
        for name, value in item.items():
            assert isinstance(value, _plain(hints[name])), (name, value)
    # The lifecycle reached everything the type declares (so the checks above mean something).
    # ``payload_json`` is written by layout 1 only (main 4f60178 and before): the release record
    # test (tests/engine/test_layout_release.py) writes and reads such items.
    assert OPERATION_ATTRIBUTES - written == {"payload_json"}


def test_the_index_attributes_are_the_schemas_constants():
    for name in (schema.DUE_PK, schema.DUE_SK, schema.SWEEP_PK, schema.SWEEP_SK, schema.PARKED_PK,
                 schema.PARKED_SK, schema.PURGE_PK, schema.PURGE_SK, schema.DUE_HOME,
                 schema.TTL_ATTRIBUTE, *schema.INDEX_PROJECTION):
        assert name in OPERATION_ATTRIBUTES, name


#: What only a live operation needs: every write that ends one removes it (the ended item stays
#: for the identity retention, 400 days by default, and is billed for every byte it keeps).
LIVE_ONLY = (
    "checkpoint",
    "lease_ms",
    "lease_default_ms",
    "lease_max_ms",
    "claimed_from",
    "claimed_at",
    "traceparent",
    "tracestate",
    "attempt_budget",
    schema.DUE_HOME,
    "hb",
)


def test_every_end_drops_what_only_a_live_operation_needs(engine):
    engine.catalogue.put(T, "refund", ENTRY)
    ends = {
        "completed": lambda op, fence: engine.complete(T, op, fence, "done"),
        "failed": lambda op, fence: engine.fail(T, op, fence, retryable=False, reason="no"),
        "resolved": lambda op, fence: engine.resolve(
            T, op, "succeeded", note="ok", actor="ops",
            expected_fence=engine.park_unknown(T, op, fence, "lost").fence,
        ),
        "quarantined": lambda op, fence: engine.resolve(
            T, op, "failed_terminal", note="bad", actor="ops",
            expected_fence=engine.quarantine(T, op, fence, "unreadable").fence,
        ),
    }  # fmt: skip
    for name, end in ends.items():
        engine.enqueue(T, name, "refund", H, actor="producer", trace_context=TRACE)
        claim = engine.claim(T, name, "w1", claim_token=f"tok-{name}")
        engine.heartbeat(T, name, claim.fence, "w1", checkpoint={"step": 1})
        live = engine.store.get({"tenant_id": T, "operation_id": name})
        # What the end must drop is there (hb: the history's byte count).
        assert set(LIVE_ONLY) - {"checkpoint", "attempt_budget"} <= set(live), name
        end(name, claim.fence)
        item = engine.store.get({"tenant_id": T, "operation_id": name})
        assert item["state"] in ("succeeded", "failed_terminal"), name
        assert not set(LIVE_ONLY) & set(item), (name, set(LIVE_ONLY) & set(item))


def test_an_operator_end_before_any_claim_drops_them_too(engine):
    engine.catalogue.put(T, "refund", ENTRY)
    engine.catalogue.put(T, "payout", GATED)
    engine.enqueue(T, "cancelled", "refund", H, actor="producer", trace_context=TRACE)
    stored = {"payload_ref": "stored/1", "payload_inline": True}  # the gate binds a stored one
    engine.enqueue(T, "rejected", "payout", H, actor="producer", trace_context=TRACE, **stored)
    for name in ("cancelled", "rejected"):
        live = engine.store.get({"tenant_id": T, "operation_id": name})
        what = {"lease_default_ms", "lease_max_ms", "hb", "traceparent", "tracestate"}
        assert what <= set(live), name
    engine.cancel(T, "cancelled", actor="ops")
    engine.reject(T, "rejected", actor="approver", note="no")
    for name in ("cancelled", "rejected"):
        item = engine.store.get({"tenant_id": T, "operation_id": name})
        assert item["state"] in ("cancelled", "failed_terminal"), name
        assert not set(LIVE_ONLY) & set(item), (name, set(LIVE_ONLY) & set(item))
        assert engine.history(T, name).entries[-1]["transition"] in ("cancel", "reject"), name
