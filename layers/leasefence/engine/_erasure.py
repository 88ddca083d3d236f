"""Payloads and erasure: reading an inline payload, purging it, erasing one operation's payload
and free text (its identity stays), and erasing a whole tenant in bounded, resumable steps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from leasefence import cursor as cursors
from leasefence import history, keys
from leasefence.catalogue import ERASING
from leasefence.engine import _expr as x
from leasefence.engine import _payload_items as payload_items
from leasefence.engine import _rules as rules
from leasefence.engine._context import EngineContext
from leasefence.engine._enqueue import Enqueuer
from leasefence.engine._reads import Reads
from leasefence.errors import InvalidTransition, NotFound, PayloadMissing, Unavailable
from leasefence.item_budget import history_bytes
from leasefence.limits import MAX_STEP_ITEMS, TENANT_ERASURE_SETTLE_MS
from leasefence.metrics import Metric
from leasefence.model import (
    OPERATOR_ACTOR,
    TERMINAL_STATES,
    Claim,
    Operation,
    State,
    TenantErasure,
    Transition,
)
from leasefence.payloads import read_kept
from leasefence.privacy import keyed_hash
from leasefence.schema import (
    DUE_HOME,
    LAYOUT,
    MAX_OPERATION_SHARDS,
    PURGE_PK,
    PURGE_SK,
    OperationItem,
)
from leasefence.store import ConditionFailed, Item
from leasefence.validation import is_int, validate_actor, validate_id, validate_limit

#: A tenant's own items its erasure keeps: the settings item (deleted last, it holds the
#: erasure) and the recorded write shard counts (no data of the tenant's; never changed, since
#: engines cache them for their life: :mod:`leasefence.engine._layout`).
_KEPT_TENANT_ITEMS = frozenset({keys.SETTINGS_ID, keys.LAYOUT_ID})

log = logging.getLogger("leasefence.engine")

#: The phases of a tenant erasure, in order (see :meth:`Eraser.erase_tenant`).
ERASURE_PHASES = ("rows", "objects", "tenant")


def kept_in_item(item: Mapping[str, Any]) -> bool:
    """Whether the operation's stored payload is (or was, until purged or erased) kept in its
    item (``payload_json``, layout 1) rather than in S3 or in a payload item (layout 2): an
    inline payload without a ``payload_ref``, written before layout 2."""
    return "payload_json" in item or (
        bool(item.get("payload_inline"))
        and not item.get("payload_ref")
        and not payload_items.in_payload_item(item)
    )


#: What the slimming write removes from an ended operation's item once its history retention
#: (the payload retention: one knob) is over; see :func:`purge_one` for the decision on every
#: attribute. ``h``/``hd``: the history list and its dropped count.
SLIMMED_AWAY = ("#h_", "#hd_", "reason", "intent", *x.LIVE_ONLY)


def slims(item: OperationItem) -> bool:
    """Whether the purge of ``item`` also slims it: an ended operation (a final state: nothing
    but an erasure changes it again) that no erasure touched (an erasure files an S3-stored
    payload for purge at once, long before the history retention is over; its history is then
    the erasure's single entry anyway)."""
    return item.get("state") in {s.value for s in TERMINAL_STATES} and "erased_at" not in item


def purge_one(ctx: EngineContext, item: OperationItem) -> bool:
    """Purge one operation's stored payload: **mark first, then delete.** A payload kept in the
    item goes with the marking write itself (``REMOVE payload_json``, no S3 call). An S3 object
    is deleted only after the write that marks the payload purged (``payload_purged_at``), and
    the operation leaves the purge index only after the deletion, in a second write (pinned to
    the purge time). So a replay of the operation's enqueue that lands at any moment finds the
    payload either still stored (its object is then the one this purge deletes) or already
    marked (the enqueue route then deletes the object it wrote), and a crash or a failed
    deletion leaves the operation in the purge index, marked: the next pass deletes again
    (deleting twice is harmless) and removes the entry. Issue 32: the purge deleted first and
    marked after, and a replay in between left an object that nothing deleted.

    **The slim ended record** (issue 24). When the operation has ended (:func:`slims`), the same
    conditional write also slims the item to what the identity guarantees need for the rest of
    the identity window: the history's retention is the payload's (``payload_retention_ms``, one
    knob; the purge runs at end + that retention). The write is pinned to the purge time, the
    state and ``seq`` it read: an erasure (the only transition an ended operation accepts; a
    tenant erasure deletes the item, and a pinned update never recreates one) in between wins,
    and this write changes nothing. ``seq`` is not raised (no transition: no event, no history
    entry; the publisher's filters see a purge), the TTL (identity retention, or none: forever)
    is not touched. Per attribute:

    Kept (the contract's operation object, replay and conflict, fences, erasure, retention):
    ``tenant_id``, ``operation_id`` (keys); ``payload_hash`` (same id + same hash = replay, other
    hash = 409 conflict); ``job_type``, ``state``, ``fence``, ``attempts``, ``max_attempts``,
    ``target_class``, ``payload_ref``, ``outcome_code``, ``created_at``, ``updated_at`` (the
    operation object; ``fence`` also keeps fences from being handed out again: a terminal
    operation is never claimed); ``closed_fence``, ``closed_by`` (the same fence repeating the
    same completion or failure answers 200 again); ``transition``, ``actor``, ``resolved_as``,
    ``resolve_token``, ``resolution_note`` (an operator's resolution repeated is a replay: the
    tokenless one compares the note; at most 1024 characters, on resolved operations only);
    ``approved_by``, ``approved_at``, ``approval_expires_at``, ``enqueued_by`` (an approval
    repeated is a replay; the approval gate's facts); ``job_type_version``; ``payload_inline``,
    ``payload_purged_at``, ``erased_at`` (``payload_state``); ``seq`` (the transition counter: a
    later erasure's entry is numbered after it); ``hv`` (no history item: an erasure must not
    write one); the TTL (``expires_at_epoch_s``).

    Removed: ``h``, ``hd`` (the history, past its retention); ``reason`` (free text: the latest
    failure, park or rejection reason; no replay reads it); ``checkpoint``, ``intent`` (the
    handler's and a class-D holder's notes for a later claim: a final state is never claimed
    again; the completion already dropped the checkpoint); ``claimed_at``, ``claimed_from``,
    ``lease_ms``, ``lease_default_ms``, ``lease_max_ms``, ``traceparent``, ``tracestate``,
    ``attempt_budget``, the due home (what only a live operation needs; items ended before their
    end dropped them may carry them);
    ``payload_json`` (the purge itself).

    Set: ``hx``, when the history expired (ms): ``GET .../history`` answers an empty page and
    ``history_expired_at``. Operations by reference (a caller's ``payload_ref``) have no purge
    entry and are not slimmed (docs/performance.md says why); nor have those whose payload is in a
    payload item (layout 2): DynamoDB's TTL deletes it, and their readers show them slimmed
    (:func:`leasefence.engine._payload_items.as_read`)."""
    elsewhere = not kept_in_item(item)  # in S3, or in a payload item (layout 2)
    if item.get("payload_ref") and ctx.payloads is None:
        raise Unavailable("no payload store configured: cannot purge payloads")
    if "payload_purged_at" not in item and not _mark_purged(ctx, item, keep_filed=elsewhere):
        return False
    if not elsewhere:
        return True  # the marking write took the payload and the index entry with it
    if item.get("payload_ref"):
        ctx.payloads.delete(item["payload_ref"])
    elif payload_items.in_payload_item(item):
        payload_items.delete_all(ctx, item["tenant_id"], item["operation_id"])
    # Deleted: the operation leaves the purge index (pinned to the purge time it was filed at).
    try:
        ctx.store.update(
            keys.item_key(item),
            "REMOVE #ppk, #pat",
            f"{x.PURGE_TIME_UNCHANGED} AND attribute_exists(payload_purged_at)",
            {"#ppk": PURGE_PK, "#pat": PURGE_SK},
            {":pat": int(item[PURGE_SK])},
            returns="NONE",
        )
    except ConditionFailed:
        return False
    return True


def _mark_purged(ctx: EngineContext, item: OperationItem, keep_filed: bool) -> bool:
    """The purge's marking write (see :func:`purge_one`): the payload is purged from now on, the
    item slimmed when its operation ended; ``keep_filed``: it stays in the purge index until its
    object is deleted."""
    now = ctx.clock()
    expr = x.Expr({"#pat": PURGE_SK})
    expr.value({":now": now, ":pat": int(item[PURGE_SK])})
    expr.set("payload_purged_at = :now").remove("payload_json")
    if not keep_filed:
        expr.name({"#ppk": PURGE_PK}).remove("#ppk", "#pat")
    condition = x.PURGE_TIME_UNCHANGED
    if slims(item):
        expr.name(x.STATE).name({"#seq": "seq", "#hx_": history.ITEM_HISTORY_EXPIRED})
        expr.name({"#h_": history.ITEM_HISTORY, "#hd_": history.ITEM_DROPPED, "#home_": DUE_HOME})
        expr.name({"#hb_": history.ITEM_BYTES})
        expr.value({":e_state": item["state"]}).set("#hx_ = :now").remove(*SLIMMED_AWAY)
        condition += " AND #state = :e_state AND "
        if "seq" in item:
            expr.values[":e_seq"] = int(item["seq"])
            condition += "#seq = :e_seq"
        else:  # an item written before seq was kept
            condition += "attribute_not_exists(#seq)"
    try:
        ctx.store.update(keys.item_key(item), *expr.write(condition), returns="NONE")
    except ConditionFailed:
        return False
    return True


def erase_write(
    current: OperationItem, actor: str | None, now: int, purge_pk: str | None = None
) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """The erasure's update, pinned to the state class (not claimed) and to the intent and
    checkpoint it was computed from. ``purge_pk``: the operation's payload is an S3 object this
    deployment stored; it is filed for deletion now (purged already or not: a replay that raced
    its purge may have written it again), and stays filed until it is deleted."""
    expr = x.Expr(x.OPERATION_ID, x.STATE, {"#pat": PURGE_SK}, x.TRANSITION_NAMES, x.ACTOR)
    expr.value(
        {
            ":now": now,
            ":claimed": State.CLAIMED.value,
            ":tr": Transition.ERASE.value,
            ":actor": actor,
            ":one": 1,
        }
    )
    expr.set("erased_at = if_not_exists(erased_at, :now)", "updated_at = :now")
    if kept_in_item(current):
        # The payload goes with this write: nothing for the sweeper to do, so the operation
        # leaves (or never enters) the purge index instead of being filed there for "now".
        expr.name({"#ppk": PURGE_PK}).set(
            "payload_purged_at = if_not_exists(payload_purged_at, :now)"
        )
        expr.remove("payload_json", "#ppk", "#pat")
    else:
        expr.set("#pat = :now")
        if purge_pk is not None:
            expr.name({"#ppk": PURGE_PK}).value({":ppk": purge_pk}).set("#ppk = :ppk")
    expr.set("#tr = :tr", "#actor = :actor").remove("reason", "resolution_note", "checkpoint")
    # The history becomes the erasure's own entry (the reasons and notes it held are free text),
    # pinned to the state, fence and attempts it records (the condition below).
    entry = history.compact_entry(
        Transition.ERASE,
        now,
        actor=actor,
        state=current["state"],
        fence=int(current["fence"]),
        attempts=int(current["attempts"]),
    )
    expr.name({"#h_": history.ITEM_HISTORY, "#hd_": history.ITEM_DROPPED, "#fence": "fence"})
    expr.name({"#hb_": history.ITEM_BYTES}).value({":hb": history_bytes([entry])})
    expr.value({":h_entry": [entry], ":e_state": current["state"]})
    expr.value({":e_fence": int(current["fence"]), ":e_attempts": int(current["attempts"])})
    expr.set("#h_ = :h_entry", "#hb_ = :hb").remove("#hd_")
    kept = rules.erased_intent(current)
    if kept is None:
        expr.remove("intent")
    else:
        expr.values[":intent"] = kept
        expr.set("intent = :intent")
    condition = f"{x.EXISTS} AND {x.NOT_CLAIMED}"
    condition += " AND #state = :e_state AND #fence = :e_fence AND attempts = :e_attempts"
    for name in ("intent", "checkpoint"):
        same, values = x.unchanged(name, current)
        condition += f" AND {same}"
        expr.value(values)
    return expr.add("#seq :one").write(condition)


def _encode_erasure_cursor(phase: str, position: str, held: bool = False, shard: int = 0) -> str:
    """Where the next step starts: the phase, the position in it (rows: in write shard
    ``shard``), and (rows) whether this pass over the rows left a claimed one alone so far."""
    fields: dict[str, Any] = {"p": phase, "at": position}
    if held:
        fields["h"] = 1
    if shard:
        fields["s"] = shard
    return cursors.encode(fields)


def _decode_erasure_cursor(cursor: str | None) -> tuple[str, str | None, bool, int]:
    if not cursor:
        return "rows", None, False, 0
    fields = cursors.decode(cursor, ("p", "at"))
    phase, position, held = fields["p"], fields["at"], fields.get("h", 0)
    shard = fields.get("s", 0)
    if (
        phase not in ERASURE_PHASES
        or not isinstance(position, str)
        or held not in (0, 1)
        or not is_int(shard)
        or not 0 <= shard < MAX_OPERATION_SHARDS
    ):
        raise cursors.invalid()
    return phase, position, bool(held), shard


class Eraser:
    def __init__(self, ctx: EngineContext, reads: Reads, enqueuer: Enqueuer) -> None:
        self.ctx = ctx
        self.reads = reads
        self.enqueuer = enqueuer

    # ------------------------------------------------------------------ inline payloads

    def inline(self, tenant_id: str, operation_id: str, operation: Operation | Claim) -> bool:
        if operation.payload_inline:
            return True
        # Items written before the flag existed: a ref this store would have written is ours.
        owns = getattr(self.ctx.payloads, "owns", None)
        return bool(
            owns and owns(tenant_id, operation_id, operation.payload_hash, operation.payload_ref)
        )

    def payload(self, operation: Operation | Claim) -> bytes:
        if not self.inline(operation.tenant_id, operation.operation_id, operation):
            raise NotFound("this operation has no inline payload")
        if isinstance(operation, Operation) and operation.payload_state in ("purged", "erased"):
            raise PayloadMissing(f"the payload was {operation.payload_state}")
        if operation.payload_json is not None:
            return read_kept(operation.payload_json, operation.payload_hash)
        if operation.payload_ref is None and operation.layout >= LAYOUT:  # in a payload item
            partition = self.ctx.locate(operation.tenant_id, operation.operation_id)["tenant_id"]
            return payload_items.read(
                self.ctx,
                partition,
                operation.operation_id,
                operation.payload_hash,
                claimed=isinstance(operation, Claim),
            )
        if operation.payload_ref is None:  # kept in the item, and no longer there
            raise PayloadMissing("the payload was purged or erased")
        if self.ctx.payloads is None:
            raise PayloadMissing("this engine has no payload store configured")
        assert operation.payload_ref is not None
        payload: bytes = self.ctx.payloads.read(operation.payload_ref, operation.payload_hash)
        return payload

    # ------------------------------------------------------------------ one operation

    def erase(self, tenant_id: str, operation_id: str, actor: str | None) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        ctx = self.ctx
        current = ctx.find(tenant_id, operation_id)
        key = keys.item_key(current) if current is not None else ctx.key(tenant_id, operation_id)
        item: OperationItem | None = None
        for _ in range(3):
            if current is None:
                # No operation, but maybe the payload item of an enqueue that crashed before it
                # (in any partition the operation could have had).
                for candidate in ctx.candidates(tenant_id, operation_id):
                    payload_items.delete_all(ctx, candidate["tenant_id"], operation_id)
                raise NotFound("operation not found")
            stored = self.inline(tenant_id, operation_id, Operation.from_item(current))
            purge_pk = ctx.purge_pk(tenant_id, operation_id) if stored else None
            try:
                item = ctx.store.update_operation(
                    key, *erase_write(current, actor, ctx.clock(), purge_pk)
                )
                break
            except ConditionFailed as refused:
                current = refused.operation
                if current is not None and current.get("state") == State.CLAIMED:
                    raise InvalidTransition(
                        "a claimed operation cannot be erased until it leaves claimed"
                    ) from None
        else:
            raise Unavailable("the operation kept changing while it was erased; erase it again")
        assert item is not None
        ctx.count(Metric.ERASURES)
        tag = ctx.tag(tenant_id, operation_id)
        log.info("erased", extra={"op": tag})
        if not history.in_item(item):
            # An operation enqueued before its history moved into its item: its history item.
            try:
                history.record(ctx.store, item, history.entry_from(None, item), reset=True)
            except Unavailable:
                log.warning("history not reset yet; the publisher will", extra={"op": tag})
        operation = Operation.from_item(item)
        if self.inline(tenant_id, operation_id, operation):
            # Purged before or not: an object a replay wrote again since is deleted too.
            try:
                purge_one(ctx, item)
            except Unavailable:
                log.warning("erased payload not deleted yet; the sweeper will", extra={"op": tag})
            else:
                operation = self.reads.get(tenant_id, operation_id)
        return operation

    # ------------------------------------------------------------------ a whole tenant

    def erase_tenant(self, tenant_id: str, limit: int, cursor: str | None) -> TenantErasure:
        validate_id("tenant_id", tenant_id)
        validate_limit(limit, MAX_STEP_ITEMS)
        ctx = self.ctx
        result = TenantErasure()
        phase, position, held_before, shard = _decode_erasure_cursor(cursor)
        since = self.hold_tenant(tenant_id)
        self.enqueuer.forget_tenant(tenant_id)  # its directory is about to go
        self.reads.forget(tenant_id)  # and what a claim read of it
        ctx.catalogue.forget(tenant_id)  # its catalogue goes with its rows
        if phase == "rows":
            resume = self.erase_rows(tenant_id, limit, position, held_before, shard, result)
            if resume is not None:
                result.next_cursor = resume
                return self.step(result)
            held_before = held_before or result.held > 0
            phase, position = "objects", None
        if self.tenant_rows_left(tenant_id):
            # This pass left claimed rows alone: run it again once they ended. Otherwise rows
            # were enqueued after the pass went by (admitted just before the hold): another pass.
            if not held_before:
                result.next_cursor = _encode_erasure_cursor("rows", "")
            return self.step(result)
        if phase == "objects":
            if ctx.payloads is not None:
                deleted, token = ctx.payloads.delete_tenant_objects(
                    tenant_id, limit=limit, token=position or None
                )
                result.payloads_deleted += deleted
                if token is not None:
                    result.next_cursor = _encode_erasure_cursor("objects", token)
                    return self.step(result)
            phase = "tenant"
        wait = since + TENANT_ERASURE_SETTLE_MS - ctx.clock()
        if wait > 0:
            result.wait_ms = wait
            result.next_cursor = _encode_erasure_cursor("tenant", "")
            return self.step(result)
        if self.tenant_rows_left(tenant_id):
            result.next_cursor = _encode_erasure_cursor("rows", "")
            return self.step(result)
        self.erase_tenant_items(tenant_id, since, result)
        return self.step(result)

    def step(self, result: TenantErasure) -> TenantErasure:
        self.ctx.count(Metric.TENANT_ERASURE_STEPS)
        return result

    def erase_rows(
        self,
        tenant_id: str,
        limit: int,
        position: str | None,
        held_before: bool,
        shard: int,
        result: TenantErasure,
    ) -> str | None:
        """One step of the rows phase: every write shard in turn from ``shard``, at most
        ``limit`` rows and ``limit`` queries. The cursor to resume with, or None: all read."""
        ctx = self.ctx
        partitions, budget = ctx.partitions(tenant_id), limit
        while shard < len(partitions):
            partition = partitions[shard]
            page = ctx.store.query(
                # Operations, payload items and histories; the tenant's own items (directory,
                # catalogue, settings, claim markers: sort keys before HISTORY_PREFIX) go last.
                KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                values={":t": partition, ":first": keys.HISTORY_PREFIX},
                ConsistentRead=True,
                Limit=budget,
                start={"tenant_id": partition, "operation_id": position}
                if position and position >= keys.HISTORY_PREFIX
                else None,
            )
            for item in page.items:
                self.erase_row(item, result)
            held_before = held_before or result.held > 0
            budget -= max(1, len(page.items))
            if page.last_key is not None:
                position = page.last_key["operation_id"]
            else:
                shard, position = shard + 1, ""
            if budget <= 0 and shard < len(partitions):
                return _encode_erasure_cursor("rows", position or "", held_before, shard)
        return None

    def hold_tenant(self, tenant_id: str) -> int:
        """Hold the tenant for its erasure (one conditional write on its settings item: the
        first start is kept, read from the refusal on a later step) and mark its catalogue
        entries. Returns when the erasure started (ms)."""
        ctx = self.ctx
        now = ctx.clock()
        try:
            ctx.store.update(
                keys.tenant_key(tenant_id, keys.SETTINGS_ID),
                "SET #erasing = :now",
                "attribute_not_exists(#erasing)",
                {"#erasing": ERASING},
                {":now": now},
                returns="NONE",
            )
            since = now
            log.info("tenant held for erasure", extra={"tenant": keyed_hash(tenant_id)})
        except ConditionFailed as refused:
            since = int((refused.item or {})[ERASING])
        ctx.catalogue.hold(tenant_id, since)
        return since

    def tenant_rows_left(self, tenant_id: str) -> bool:
        """Whether any operation, payload item or history of the tenant is left (one consistent
        read per write shard, until one has some)."""
        return any(
            self.ctx.store.query(
                KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                values={":t": partition, ":first": keys.HISTORY_PREFIX},
                ConsistentRead=True,
                Limit=1,
            ).items
            for partition in self.ctx.partitions(tenant_id)
        )

    def erase_tenant_items(self, tenant_id: str, since: int, result: TenantErasure) -> None:
        """The tenant's own items (job-type directory, catalogue entries, claim markers in every
        write shard, then the settings item that holds it), each deleted once: the erasure is
        finished."""
        ctx = self.ctx
        for partition in ctx.partitions(tenant_id):
            start = None
            while True:
                page = ctx.store.query(
                    KeyConditionExpression="tenant_id = :t AND operation_id < :first",
                    values={":t": partition, ":first": keys.HISTORY_PREFIX},
                    ConsistentRead=True,
                    start=start,
                )
                for item in page.items:
                    if partition == tenant_id and item["operation_id"] in _KEPT_TENANT_ITEMS:
                        continue
                    try:
                        ctx.store.delete(
                            keys.item_key(item),
                            "attribute_exists(#k)",
                            {"#k": "operation_id"},
                            {},
                        )
                        result.rows_deleted += 1
                    except ConditionFailed:
                        pass  # another step deleted it first
                if page.last_key is None:
                    break
                start = page.last_key
        try:
            ctx.store.delete(
                keys.tenant_key(tenant_id, keys.SETTINGS_ID),
                "#erasing = :since",
                {"#erasing": ERASING},
                {":since": since},
            )
            result.rows_deleted += 1
        except ConditionFailed:
            pass  # another step finished first
        result.finished = True
        ctx.catalogue.forget(tenant_id)
        log.info("tenant erased", extra={"tenant": keyed_hash(tenant_id)})

    def erase_row(self, item: Item, result: TenantErasure) -> None:
        if item.get("state") == State.CLAIMED:
            result.held += 1
            return
        ctx = self.ctx
        payloads = ctx.payloads
        stored = item.get("payload_inline") or (
            item.get("payload_ref")
            and payloads is not None
            and payloads.owns(
                keys.tenant_of(item["tenant_id"]),
                item["operation_id"],
                item.get("payload_hash", ""),
                item["payload_ref"],
            )
        )
        if stored and "payload_purged_at" not in item:
            # A payload kept in the item, or in a payload item (a row of this same pass), goes
            # with the rows' deletion.
            if item.get("payload_ref"):
                if payloads is None:
                    raise Unavailable("no payload store configured: cannot erase payloads")
                payloads.delete(item["payload_ref"])
            result.payloads_deleted += 1
        try:
            ctx.store.delete(
                # The row's own key (an operation, its history or its payload item).
                keys.item_key(item),
                f"{x.NOT_AN_OPERATION} OR {x.NOT_CLAIMED}",
                dict(x.STATE),
                {":claimed": State.CLAIMED.value},
            )
        except ConditionFailed:
            result.held += 1
            return
        result.rows_deleted += 1
