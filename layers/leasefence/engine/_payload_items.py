"""Payload items (layout 2): a stored payload of up to 1 KiB in an item of its own, next to its
operation, so that the operation item stays under 1 KB and each of its writes costs one unit.

* **Written before the operation item**, by the enqueue (an unconditional put: the sort key holds
  the payload's hash, :func:`leasefence.keys.payload_id`, so two writes of one key write the same
  bytes and a different payload never lands on a live operation's item). The operation item's
  conditional put then decides, alone, whether this is a new operation, a replay or a conflict.
* **Kept only when its operation refers to it.** An enqueue refused by the operation item's put
  drops the payload item it wrote unless the existing operation is of layout 2, has the same
  hash and its payload was neither purged nor erased (:func:`keeps`). With the purge and the
  erasure marking the operation first and deleting after, every interleaving of a replay with a
  purge or an erasure leaves no payload item behind. A crash between the two writes leaves an
  orphan that no operation refers to: an erasure of that operation id and a tenant's erasure
  find it (:func:`delete_all`: every payload item under the operation's prefix).
* **Packed when that is shorter** (:func:`leasefence.payloads.pack`: raw DEFLATE of the canonical
  JSON, from 256 bytes on), as ``payload_z`` instead of the text ``payload_json``: a 1 KB JSON
  payload usually fits an item of under 1 KB packed, so its two writes (this one and the expiry's)
  cost one unit each instead of two. A reader takes either; the hash checks the unpacked bytes.
  Readers from before packing (main b4a2cfb and earlier) read text only: an engine made with
  ``pack_payloads=False`` (``LEASEFENCE_PACK_PAYLOADS=false``) writes text until none is left.
* **Read** by :func:`read`, checked against the operation's hash like an S3 object: with a
  strongly consistent ``GetItem`` (the payload route), or, for a claim just made (the claim
  answer, the worker runtime), an eventually consistent one first (half the read units) and the
  consistent one only when that shows no usable item. An eventually consistent read may miss a
  recent write or show an item as it was a moment before, never other bytes: the key holds the
  payload's hash and the body is checked against it. A claimed operation's item was written
  before the operation itself (so before the claim), so a stale read can only show it missing,
  or expired (an older life of the same key, ended and since written again without expiry):
  both go to the consistent read. What it may still show is an item deleted a moment ago (an
  erasure of the claimed operation racing the claim), which a consistent read just before the
  delete would show too.
* **Deleted by DynamoDB's TTL, not by a purge pass** (issue 32, step 4). While its operation is
  live (queued however long, claimed, retrying, parked, awaiting approval) the item has no TTL:
  nothing can delete a payload an operation may still run with, whatever the sweeper does. The
  write that ends the operation is followed by one write on the payload item (:func:`after_end`)
  that sets the table's TTL attribute to the end + the payload retention, conditional on the
  item being there and never shortening a TTL it has (a replay of the ending command writes it
  again: a crash between the two writes is mended by the client's retry). The operation gets no
  purge index entry. TTL deletes late (days): every reader treats an item past its expiry as
  gone (:func:`read`), and an ended operation past its payload retention reads as its purge
  would have left it (:func:`as_read`).
* **A claim marker's home** (:mod:`leasefence.engine._marker`): a claim-next that names the
  operation its worker closes in the same request (``after``) keeps its token's marker in that
  operation's payload item (``mo``, ``mc``, ``mf``, ``mt``, ``ms``, ``mx``: about 60 bytes), in
  the write that sets the item's expiry (the write a round's close makes anyway), or in an item
  of its own under that key when there is no payload item (a *shell*). Until the marker's expiry
  (``mx``) nothing deletes the item: its TTL is never set before ``mx``, and a purge, an erasure
  or a dropped replay removes the payload but keeps the item (:func:`_delete_unless_marked`).
  In a round (:func:`closing_round`) the expiry of an operation its finish ended waits for the
  claims, which fold it into their marker's write; what no claim took is written when the round
  ends.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from leasefence import history, keys
from leasefence.engine._context import EngineContext
from leasefence.errors import PayloadMissing, Unavailable
from leasefence.limits import CLAIM_MARKER_TTL_MS
from leasefence.model import TERMINAL_STATES
from leasefence.payloads import read_kept, read_packed
from leasefence.schema import (
    LAYOUT,
    LAYOUT_ATTRIBUTE,
    PAYLOAD_BODY,
    PAYLOAD_PACKED,
    PURGE_PK,
    PURGE_SK,
    TTL_ATTRIBUTE,
)
from leasefence.store import ConditionFailed

_ENDED = frozenset(s.value for s in TERMINAL_STATES)

log = logging.getLogger("leasefence.engine")
#: What an ended operation's reader no longer shows once its payload retention is over: the
#: history and the free text that the purge's slimming write removes
#: (:data:`leasefence.engine._erasure.SLIMMED_AWAY`).
_HIDDEN = frozenset(
    {
        history.ITEM_HISTORY,
        history.ITEM_DROPPED,
        history.ITEM_BYTES,
        "reason",
        "checkpoint",
        "intent",
    }
)


def in_payload_item(item: Mapping[str, Any]) -> bool:
    """Whether the operation's stored payload lives (or lived, until purged or erased) in a
    payload item: an inline payload without a ``payload_ref``, written under layout 2."""
    return (
        int(item.get(LAYOUT_ATTRIBUTE, 1)) >= LAYOUT
        and bool(item.get("payload_inline"))
        and not item.get("payload_ref")
    )


def _epoch_s(ms: int) -> int:
    """A time in ms as the TTL attribute holds it (epoch seconds, rounded up: never earlier)."""
    return -(-ms // 1000)


def write(
    ctx: EngineContext,
    partition: str,
    operation_id: str,
    payload_hash: str,
    text: str,
    packed: bytes | None,
) -> bool:
    """Write the payload item in the operation's partition (``partition``: its write shard), before
    the operation item's put (see the module's docstring), with no TTL, unless one of this key is
    already there and not expired: the same bytes (the key holds their hash), whose life this
    write must not change (an ended operation's expires at its end + the retention). It keeps
    ``packed`` (:func:`leasefence.payloads.packed_form`, as the enqueue checked it) or, when
    None, ``text``. False: it was there."""
    key = keys.payload_key(partition, operation_id, payload_hash)
    body, value, other = (
        (PAYLOAD_BODY, text, PAYLOAD_PACKED)
        if packed is None
        else (PAYLOAD_PACKED, packed, PAYLOAD_BODY)
    )
    try:
        ctx.store.update(
            key,
            f"SET {body} = :body REMOVE #ttl, {other}",
            "attribute_not_exists(operation_id) OR #ttl <= :now",
            {"#ttl": TTL_ATTRIBUTE},
            {":body": value, ":now": ctx.clock() // 1000},
            returns="NONE",
        )
    except ConditionFailed:
        return False
    return True


def retention_over(item: Mapping[str, Any], now: int) -> bool:
    """Whether ``item`` is an ended operation of a payload item, neither purged nor erased by a
    write, whose payload retention is over (``purge_at``, its end + the retention, passed): its
    payload item is gone or expired, and its history and free text read as expired."""
    return (
        in_payload_item(item)
        and item.get("state") in _ENDED
        and PURGE_PK not in item
        and PURGE_SK in item
        and int(item[PURGE_SK]) <= now
        and "payload_purged_at" not in item
        and "erased_at" not in item
        and history.ITEM_HISTORY_EXPIRED not in item
    )


def as_read(item: Mapping[str, Any], now: int) -> Mapping[str, Any]:
    """The item as its readers see it: once :func:`retention_over`, as the purge's slimming write
    would have left it (payload purged and history expired at ``purge_at``, no free text), though
    the bytes stay until TTL deletes the item (the identity retention) or an erasure."""
    if not retention_over(item, now):
        return item
    over = int(item[PURGE_SK])
    kept = {k: v for k, v in item.items() if k not in _HIDDEN}
    return {**kept, "payload_purged_at": over, history.ITEM_HISTORY_EXPIRED: over}


def keeps(existing: Mapping[str, Any], payload_hash: str, now: int) -> bool:
    """Whether an operation item that refused an enqueue refers to the payload item that enqueue
    wrote (same layout-2 payload, still stored and within its retention): only then does the
    item stay."""
    return (
        in_payload_item(existing)
        and existing.get("payload_hash") == payload_hash
        and "payload_purged_at" not in existing
        and "erased_at" not in existing
        and not retention_over(existing, now)
    )


def hold(ctx: EngineContext, item: Mapping[str, Any]) -> None:
    """A new operation found its payload item there already (same bytes: an earlier enqueue's
    that crashed before its operation, or an ended one's kept until its TTL): it keeps it for as
    long as it is live, so a TTL it may have is removed."""
    key = keys.payload_key(item["tenant_id"], item["operation_id"], item["payload_hash"])
    with contextlib.suppress(ConditionFailed):  # gone meanwhile: nothing to keep
        ctx.store.update(
            key,
            "REMOVE #ttl",
            "attribute_exists(operation_id)",
            {"#ttl": TTL_ATTRIBUTE},
            {},
            returns="NONE",
        )


_Item = TypeVar("_Item", bound=Mapping[str, Any])

#: A claim marker kept in a payload item (:mod:`leasefence.engine._marker`): its owner (a digest
#: of the worker and the claim token) and its expiry (epoch s), past which nothing needs it.
MARKER_OWNER = "mo"
MARKER_EXPIRY = "mx"


@dataclass
class Closed:
    """An operation a round's finish closed (or replayed): as the write left it, and whether its
    payload item's expiry is still to be written (it ended, and no claim's marker wrote it)."""

    ctx: EngineContext
    item: Mapping[str, Any]
    expiry_pending: bool

    @property
    def expiry_s(self) -> int:
        """The expiry its end sets on its payload item (epoch s)."""
        return end_expiry_s(self.ctx, self.item)


@dataclass
class Round:
    """The closes of one request (``POST /v1/batch/work``), by (tenant, operation id), and the
    operations whose expiry failed to be written when it ended (:func:`closing_round`)."""

    closed: dict[tuple[str, str], Closed] = field(default_factory=dict)
    unwritten: set[str] = field(default_factory=set)

    def take(self, tenant_id: str, operation_id: str) -> Closed | None:
        return self.closed.get((tenant_id, operation_id))


_ROUND: ContextVar[Round | None] = ContextVar("leasefence_round", default=None)


@contextlib.contextmanager
def closing_round() -> Iterator[Round]:
    """Within: a close's payload expiry (:func:`after_close`) waits, so that a claim of the same
    request that names the operation (``after``) writes it together with its marker. On leaving,
    the expiries no claim wrote are written; those that failed (the store unavailable) are in
    :attr:`Round.unwritten` (the close is to be sent again: its replay writes it)."""
    round_ = Round()
    token = _ROUND.set(round_)
    try:
        yield round_
    finally:
        _ROUND.reset(token)
        for closed in round_.closed.values():
            if closed.expiry_pending:
                try:
                    after_end(closed.ctx, closed.item)
                except Exception:
                    log.warning("payload expiry not written", exc_info=True)
                    round_.unwritten.add(str(closed.item["operation_id"]))


def current_round() -> Round | None:
    """The round this request runs in (:func:`closing_round`), if any."""
    return _ROUND.get()


def after_close(ctx: EngineContext, item: _Item) -> _Item:
    """After a command's write (or its replay): one that ended the operation sets its payload's
    expiry (:func:`after_end`; a requeued or parked one's stays without one until it ends), at
    once or, in a round (:func:`closing_round`), with a claim's marker or when the round ends.
    Returns ``item``."""
    ended = item.get("state") in _ENDED
    round_ = _ROUND.get()
    if round_ is not None:
        pending = ended and in_payload_item(item) and "erased_at" not in item
        tenant = keys.tenant_of(item["tenant_id"])
        round_.closed[(tenant, item["operation_id"])] = Closed(ctx, item, pending)
        return item
    if ended:
        after_end(ctx, item)
    return item


#: Tries of the expiry's write after an end (a transient store failure tried again at once).
EXPIRY_TRIES = 3


def after_end(ctx: EngineContext, item: Mapping[str, Any]) -> None:
    """After the write that ended the operation (or its replay): its payload item expires at the
    end + the payload retention (or a claim marker's expiry, when later). One conditional write:
    only on an item that is there (never recreating one an erasure deleted) and never shortening
    a TTL it has."""
    if not in_payload_item(item) or "erased_at" in item:
        return
    until = end_expiry_s(ctx, item)
    key = keys.payload_key(item["tenant_id"], item["operation_id"], item["payload_hash"])
    for attempt in range(1, EXPIRY_TRIES + 1):
        try:
            expire(ctx, key, until)
            return
        except Unavailable:
            # The same write again (it only ever sets this end's expiry): the ending write is
            # done, and a caller that never resends (the sweeper ending an approval) would
            # otherwise leave the payload item without an expiry.
            if attempt == EXPIRY_TRIES:
                raise


def end_expiry_s(ctx: EngineContext, item: Mapping[str, Any]) -> int:
    """The expiry an ended operation's payload item gets (epoch s): its end + the retention."""
    return _epoch_s(int(item["updated_at"]) + ctx.payload_retention_ms)


def expire(ctx: EngineContext, key: Mapping[str, str], until_s: int) -> None:
    """Set the payload item's TTL to ``until_s``, or to its claim marker's expiry when that is
    later; never shortened, never on an item that is not there."""
    keeps = "attribute_exists(operation_id) AND (attribute_not_exists(#ttl) OR #ttl < :ttl)"
    names = {"#ttl": TTL_ATTRIBUTE, "#mx": MARKER_EXPIRY}
    try:
        ctx.store.update(
            key,
            "SET #ttl = :ttl",
            f"{keeps} AND (attribute_not_exists(#mx) OR #mx <= :ttl)",
            names,
            {":ttl": until_s},
            returns="NONE",
        )
    except ConditionFailed as refused:
        old = refused.item
        if old is None or MARKER_EXPIRY not in old or int(old[MARKER_EXPIRY]) <= until_s:
            return  # set already (a replay), or gone
        expire(ctx, key, int(old[MARKER_EXPIRY]))  # the same write, to the marker's expiry


def marker_expiry(ctx: EngineContext) -> int:
    """A claim marker written now expires at this epoch second."""
    return _epoch_s(ctx.clock() + CLAIM_MARKER_TTL_MS)


def drop(ctx: EngineContext, partition: str, operation_id: str, payload_hash: str) -> None:
    """Delete one payload item (harmless when already gone; a claim marker's stays, emptied)."""
    _delete_unless_marked(ctx, keys.payload_key(partition, operation_id, payload_hash))


def delete_all(ctx: EngineContext, partition: str, operation_id: str) -> int:
    """Delete every payload item of the operation in ``partition`` (its own and any orphan): one
    query of its prefix and a delete each (an item holding a live claim marker is emptied of its
    payload instead). Returns how many it deleted or emptied."""
    prefix = keys.payload_prefix(operation_id)
    deleted, start = 0, None
    while True:
        page = ctx.store.query(
            KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
            values={":t": partition, ":p": prefix},
            ProjectionExpression="tenant_id, operation_id",
            ConsistentRead=True,
            start=start,
        )
        for found in page.items:
            _delete_unless_marked(
                ctx, {"tenant_id": found["tenant_id"], "operation_id": found["operation_id"]}
            )
            deleted += 1
        if page.last_key is None:
            return deleted
        start = page.last_key


def _delete_unless_marked(ctx: EngineContext, key: Mapping[str, str]) -> None:
    """Delete a payload item, unless it holds a claim marker that has not expired: then its
    payload goes and the item stays until the marker's expiry (its TTL set to it when it has
    none; one it has is past it already: nothing sets one earlier). Conditional writes only; an
    item gone meanwhile is left gone."""
    names = {"#mo": MARKER_OWNER, "#mx": MARKER_EXPIRY}
    for _ in range(EXPIRY_TRIES):
        try:
            ctx.store.delete(
                key,
                "attribute_not_exists(#mo) OR #mx <= :now",
                names,
                {":now": ctx.clock() // 1000},
            )
            return
        except ConditionFailed as refused:
            if refused.item is None:
                return
            mx = int(refused.item[MARKER_EXPIRY])
        try:
            ctx.store.update(
                key,
                f"REMOVE {PAYLOAD_BODY}, {PAYLOAD_PACKED} SET #ttl = if_not_exists(#ttl, :mx)",
                "#mx = :mx",
                {"#mx": MARKER_EXPIRY, "#ttl": TTL_ATTRIBUTE},
                {":mx": mx},
                returns="NONE",
            )
            return
        except ConditionFailed:
            continue  # the marker moved meanwhile: look again
    raise Unavailable("a claim marker in the payload item kept moving: try again")


def read(
    ctx: EngineContext,
    partition: str,
    operation_id: str,
    payload_hash: str,
    claimed: bool = False,
) -> bytes:
    """The payload an operation of layout 2 (in ``partition``) refers to, checked against its
    hash; :class:`PayloadMissing` when its item is gone (purged, erased) or does not match.
    ``claimed``: for a claim just made, an eventually consistent read first (see the module's
    text)."""
    key = keys.payload_key(partition, operation_id, payload_hash)
    if claimed:
        with contextlib.suppress(PayloadMissing):
            return _kept(ctx, ctx.store.get(key, consistent=False), payload_hash)
    return _kept(ctx, ctx.store.get(key), payload_hash)


def _kept(ctx: EngineContext, found: Mapping[str, Any] | None, payload_hash: str) -> bytes:
    """The payload a payload item as read holds (:func:`read`)."""
    if found is None or (PAYLOAD_BODY not in found and PAYLOAD_PACKED not in found):
        raise PayloadMissing("the payload was purged or erased")
    if TTL_ATTRIBUTE in found and int(found[TTL_ATTRIBUTE]) * 1000 <= ctx.clock():
        # Expired: TTL deletes it some time later (days); it is gone from now on.
        raise PayloadMissing("the payload's retention is over")
    return stored_body(found, payload_hash)


def stored_body(found: Mapping[str, Any], payload_hash: str) -> bytes:
    """The canonical JSON a payload item as read holds, text or packed, checked against the hash
    (expiry aside: for tools and tests that look at items as they are). An item can hold both
    (a writer from before packing rewrote an expired packed item as text, keeping the packed
    form): either that matches the hash is the payload."""
    if PAYLOAD_PACKED in found:
        try:
            return read_packed(_bytes(found[PAYLOAD_PACKED]), payload_hash)
        except PayloadMissing:
            if PAYLOAD_BODY not in found:
                raise
    return read_kept(str(found[PAYLOAD_BODY]), payload_hash)


def _bytes(value: Any) -> bytes:
    """A binary attribute as the store reads it (boto3's ``Binary``) or as bytes; any other
    value is not a packed payload (:class:`PayloadMissing`, as for bytes that do not match)."""
    try:
        return bytes(getattr(value, "value", value))
    except (TypeError, ValueError):
        raise PayloadMissing("the stored payload is not packed bytes") from None
