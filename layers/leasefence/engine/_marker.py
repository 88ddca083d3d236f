"""The claim-next marker: one claim token, one claim.

A claim-next request with a client claim token names, in the marker under that token
(:func:`keys.claim_marker_id`), the candidate it is about to claim and the fence it read there:
the *pair* ``(claimed_op, claimed_fence)``. A claim write with the token is pinned to that fence,
so the pair names the one claim the token can make while it stands. Who may change the marker is
decided by conditional writes on it, never by a read compared and then written:

* **created** (``attribute_not_exists(claimed_op)``) by a request that found none: it is then the
  pair's *sole writer*;
* **re-pointed by its sole writer** after its own claim write there was refused (the pair as it
  wrote it, neither taken nor sealed): no other request has a claim write of that pair in flight;
* **taken** by a resend that found the candidate still at the pair's fence and claimable: it sends
  the same claim write (same operation, fence and token: at most one of them commits, and both
  recognize it), and the sole writer can no longer re-point it;
* **re-pointed by anyone else** only in a ``TransactWriteItems`` whose ``ConditionCheck`` on the
  candidate proves that the pair can never make a claim and never made one (:data:`PAIR_SPENT`:
  another claimer's claim holds the fence the pair's claim would have given, or the candidate
  ended at the pair's fence);
* **sealed** by a request that answers no claim, or that finds the pair's claim possibly made and
  ended (the candidate moved past it and no condition can tell whose claim that was): from then on
  the token answers its pair's claim while it holds, else none.

A resend that finds the candidate at the pair's fence, not claimable and not ended (another
worker's live claim it meant to take over) cannot know whether the first request's write is still
in flight: it answers :class:`~leasefence.errors.Unavailable` ("in progress", retryable with the
same token), never another claim.

Where the marker lives (its *home*) follows from the request alone, so that every send of a
token finds it: its own item (:func:`keys.claim_marker_key`), or, for a request that names the
operation its worker closes in the same request (``after``: :class:`After`), that operation's
payload item (``mo`` its owner, a digest of the worker and the token; ``mc``, ``mf``, ``mt``,
``ms`` as ``claimed_op``, ``claimed_fence``, ``taken``, ``sealed``; ``mx`` its expiry), created
in the write that sets the item's expiry after the close (:mod:`._payload_items`: one unit for
both), or as an item of its own under that key when there is none. A payload item hosts one
token's marker: a claim with another token that names the same operation is refused
(:class:`~leasefence.errors.InvalidTransition`, nothing claimed), its resends alike.
Nothing deletes a payload item before its marker's expiry (a purge, an erasure or a dropped
replay empties it), so a resend never finds the home gone.

Cost: the ordinary claim-next with a token writes the marker once (1 unit: the marker is about
150 bytes) and does not read it: a first send takes it to be absent, and the creating write's
condition (``attribute_not_exists``) refuses it where a marker is there after all (a resend), which
then reads it and goes on from what it says. A request that finds no work reads it before it
answers none (a resend's first request may have claimed). A take or a seal is 1 unit, a proven
re-point a transaction (2 units for the marker, 2 per KB of the candidate for its check). A
request that finds neither a marker nor work writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from leasefence import keys
from leasefence.engine import _expr as x
from leasefence.engine import _payload_items as payload_items
from leasefence.engine import _rules as rules
from leasefence.engine._context import EngineContext, Key
from leasefence.engine._payload_items import MARKER_EXPIRY, MARKER_OWNER, Closed
from leasefence.errors import InvalidInput, InvalidTransition, NotFound
from leasefence.model import State
from leasefence.schema import TTL_ATTRIBUTE
from leasefence.store import ConditionFailed
from leasefence.validation import validate_id

#: A marker that names no candidate yet.
IS_FREE = "attribute_not_exists(#mc)"
#: The pair this request knows the marker by.
NAMES_PAIR = "#mc = :op AND #mf = :cf"
#: Nobody took the pair over from its sole writer, nobody sealed it.
NOT_TAKEN = "attribute_not_exists(#mt)"
NOT_SEALED = "attribute_not_exists(#ms)"
#: For the candidate's ``ConditionCheck`` (``:moved``: the fence a claim of the pair would give):
#: the pair's claim was never made and never can be.
PAIR_SPENT = (
    f"(#fence = :moved AND {x.IS_CLAIMED} AND claim_token <> :tok)"
    " OR (#fence = :cf AND #state IN (:succeeded, :failed_terminal, :cancelled))"
)
#: ``claimed_fence`` of a marker written before it existed (no operation has this fence).
NO_FENCE = -1

IN_PROGRESS = "a claim-next with this claim token is in progress: send it again"
ANOTHER_TOKEN = (
    "after: another claim token named this operation (one claim names each close): send this "
    "claim naming none, or another"
)

#: The marker's attributes in its own item, and in a payload item (next to the payload's).
OWN_NAMES = {
    "#mc": "claimed_op",
    "#mf": "claimed_fence",
    "#mt": "taken",
    "#ms": "sealed",
    "#mx": TTL_ATTRIBUTE,
}
SHARED_NAMES = {
    "#mc": "mc",
    "#mf": "mf",
    "#mt": "mt",
    "#ms": "ms",
    "#mx": MARKER_EXPIRY,
    "#mo": MARKER_OWNER,
}
#: A payload item holds this token's marker.
OWNED = "#mo = :me"
#: A payload item holds no marker whose expiry is still to come (``:now``: epoch s).
FREE_HERE = "(attribute_not_exists(#mo) OR #mx < :now)"


class MarkerMoved(Exception):
    """The marker is not what this request knew it as: read it again and go on from there."""


@dataclass
class After:
    """The home a claim-next's marker has in the payload item of the operation its request
    names (``after``), and that operation's close in the same request, if any, whose expiry the
    marker's creating write sets too (:class:`~leasefence.engine._payload_items.Closed`)."""

    key: Key
    closed: Closed | None = None

    def fold(self) -> Closed | None:
        """The close whose payload expiry is still to be written, if any."""
        return self.closed if self.closed is not None and self.closed.expiry_pending else None


def after_home(ctx: EngineContext, tenant_id: str, operation_id: str, token: str | None) -> After:
    """The marker's home of a claim-next that names ``operation_id`` as ``after``: that
    operation's payload item (its key from the item as this request's close of it left it, else
    as read), with that close's expiry to write, if pending."""
    validate_id("after", operation_id)
    if token is None:
        raise InvalidInput("after needs a claim_token (it names where the token's marker is)")
    round_ = payload_items.current_round()
    closed = round_.take(tenant_id, operation_id) if round_ is not None else None
    item = closed.item if closed is not None else ctx.find(tenant_id, operation_id)
    if item is None:
        raise NotFound("after: no operation of this tenant has this id")
    return After(keys.payload_key(item["tenant_id"], operation_id, item["payload_hash"]), closed)


def owner_of(marker_id: str) -> bytes:
    """What a payload item's ``mo`` holds for the marker ``marker_id``: 8 bytes of its digest
    (it tells apart the tokens that name one operation within a day: a collision is 2^-64)."""
    return hashlib.sha256(marker_id.encode()).digest()[:8]


class Marker:
    """One claim-next request's view of its token's marker."""

    def __init__(
        self,
        ctx: EngineContext,
        tenant_id: str,
        worker_id: str,
        token: str,
        after: After | None = None,
    ) -> None:
        self.ctx = ctx
        self.tenant_id = tenant_id
        self.worker_id = worker_id
        self.token = token
        marker_id = keys.claim_marker_id(worker_id, token)
        self.owner = owner_of(marker_id)
        self.after = after
        #: Whether the marker's home is a payload item (``after``), not an item of its own.
        self.shared = after is not None
        #: Where the marker is: its own item, or the payload item ``after`` names.
        self.key: Key = ctx.marker_key(tenant_id, marker_id) if after is None else after.key
        #: The pair as this request last knew it (read or written); None: none.
        self.pair: tuple[str, int] | None = None
        #: Whether this request wrote :attr:`pair` itself and nobody took it over since.
        self.sole = False
        #: Whether the marker was sealed when read.
        self.sealed = False

    def read(self) -> tuple[str, int] | None:
        """The pair the marker names now (strongly consistent); this request is not its writer.
        :attr:`sealed` says whether the token's claiming is over."""
        found = self.ctx.store.get(self.key) or {}
        names = self._names()
        self.sole, self.sealed = False, names["#ms"] in found
        if names["#mc"] not in found or (self.shared and not self._mine(found)):
            self.pair = None
        else:
            self.pair = (found[names["#mc"]], int(found.get(names["#mf"], NO_FENCE)))
        return self.pair

    def point(self, operation_id: str, fence: int) -> None:
        """Make the marker name ``(operation_id, fence)`` before a claim write pinned to that
        fence. Raises :class:`MarkerMoved` when the marker is not as this request knew it."""
        pair = (operation_id, fence)
        if pair == self.pair:
            return  # this request's pair already (as its writer, or as its taker)
        values: dict[str, Any] = {
            ":new": operation_id,
            ":nf": fence,
            ":mx": payload_items.marker_expiry(self.ctx),
        }
        # A marker item's expiry runs from each point; one in a payload item keeps the one it
        # was created with (the item's TTL is past it: written in the same write, never moved).
        update = (
            "SET #mc = :new, #mf = :nf" + ("" if self.shared else ", #mx = :mx") + " REMOVE #mt"
        )
        try:
            if self.pair is None:
                self._create(values)
            elif self.sole:
                values.update(self._pair_values())
                condition = f"{self._guard()} AND {NAMES_PAIR} AND {NOT_TAKEN}"
                self._update(update, condition, values, "NONE")
            else:
                self._prove_and_point(update, values)
        except ConditionFailed:
            raise MarkerMoved() from None
        self.pair, self.sole = pair, True

    def take(self) -> None:
        """Take the pair read over (this request sends its claim write too)."""
        self._mark("SET #mt = :one", NOT_SEALED)
        self.sole = False

    def seal(self) -> None:
        """The token's claiming is over: no request with it claims again (a pair that stands is
        still answered while its claim holds). Taken too, so that its sole writer stops."""
        if self.pair is not None:
            self._mark("SET #mt = :one, #ms = :one", None)
            self.sole, self.sealed = False, True

    # ------------------------------------------------------------------ writes

    def _names(self) -> dict[str, str]:
        return SHARED_NAMES if self.shared else OWN_NAMES

    def _mine(self, found: dict[str, Any]) -> bool:
        if MARKER_OWNER not in found:
            return False
        return bytes(getattr(found[MARKER_OWNER], "value", found[MARKER_OWNER])) == self.owner

    def _guard(self) -> str:
        """What the home must be for this token's marker: a payload item holding it, or an item
        of its own (never an operation)."""
        return OWNED if self.shared else x.NOT_AN_OPERATION

    def _create(self, values: dict[str, Any]) -> None:
        """The marker's first write, where there is none (refused: :class:`ConditionFailed`)."""
        if not self.shared:
            update = "SET #mc = :new, #mf = :nf, #mx = :mx REMOVE #mt"
            self._update(update, f"{x.NOT_AN_OPERATION} AND {IS_FREE}", values, "NONE")
            return
        assert self.after is not None
        closed = self.after.fold()
        # A payload item's marker, with its owner and expiry; one whose expiry passed is taken
        # over (its token's resends are over). In the same write: the item's TTL past the
        # marker's expiry (the close's own expiry when later, folded), or a TTL it has already
        # past it; an item without one (a live operation's) keeps none.
        base = "SET #mo = :me, #mc = :new, #mf = :nf, #mx = :mx REMOVE #mt, #ms"
        values[":now"] = self.ctx.clock() // 1000
        free = f"attribute_exists(operation_id) AND {FREE_HERE}"
        if closed is not None:
            values[":ttl"] = max(closed.expiry_s, values[":mx"])
            update = base.replace("SET ", "SET #ttl = :ttl, ", 1)
            condition = f"{free} AND (attribute_not_exists(#ttl) OR #ttl < :ttl)"
        else:
            update, condition = base, f"{free} AND (attribute_not_exists(#ttl) OR #ttl >= :mx)"
        try:
            self._update(update, condition, values, "NONE")
        except ConditionFailed as refused:
            old = refused.item
            if old is None:  # no payload item: the marker alone under its key, expiring with it
                shell = base.replace("SET ", "SET #ttl = :mx, ", 1)
                self._update(shell, "attribute_not_exists(operation_id)", values, "NONE")
                self._expiry_written(closed)  # (no payload item: no expiry to write)
                return
            if MARKER_OWNER in old and int(old.get(MARKER_EXPIRY, 0)) >= values[":now"]:
                if self._mine(old):
                    raise  # a resend: this token's marker is there already
                raise InvalidTransition(ANOTHER_TOKEN) from None
            if closed is not None:  # its TTL is as long already (a replay of the close wrote it)
                self._expiry_written(closed)
                self._create(values)
                return
            # A TTL earlier than the marker's expiry (the operation ended a while ago, or its
            # payload retention is short): moved to it in the marker's write.
            update = base.replace("SET ", "SET #ttl = :mx, ", 1)
            self._update(update, f"{free} AND #ttl < :mx", values, "NONE")
            return
        self._expiry_written(closed)

    def _expiry_written(self, closed: Closed | None) -> None:
        if closed is not None:
            closed.expiry_pending = False

    def _mark(self, update: str, also: str | None) -> None:
        condition = f"{self._guard()} AND {NAMES_PAIR}"
        if also is not None:
            condition += f" AND {also}"
        try:
            self._update(update, condition, {":one": 1, **self._pair_values()}, "NONE")
        except ConditionFailed:
            raise MarkerMoved() from None

    def _pair_values(self) -> dict[str, Any]:
        assert self.pair is not None
        return {":op": self.pair[0], ":cf": self.pair[1]}

    def _expression(
        self, update: str, condition: str, values: dict[str, Any]
    ) -> tuple[dict[str, str], dict[str, Any]]:
        """The names and values ``update`` and ``condition`` use (DynamoDB refuses unused ones)."""
        text = f"{update} {condition}"
        names = {**self._names(), "#ttl": TTL_ATTRIBUTE, **x.STATE}
        used_names = {k: v for k, v in names.items() if _uses(text, k)}
        values = {**values, ":me": self.owner}
        used_values = {k: v for k, v in values.items() if _uses(text, k)}
        return used_names, used_values

    def _update(
        self, update: str, condition: str, values: dict[str, Any], returns: str
    ) -> dict[str, Any] | None:
        names, used = self._expression(update, condition, values)
        return self.ctx.store.update(self.key, update, condition, names, used, returns=returns)

    def _prove_and_point(self, update: str, values: dict[str, Any]) -> None:
        """Re-point a pair this request did not write: one transaction, the candidate's check
        proving the pair spent (:data:`PAIR_SPENT`) with the marker's update."""
        assert self.pair is not None
        store, pair_values = self.ctx.store, self._pair_values()
        operation_id, fence = self.pair
        check = store.check_action(
            self.ctx.locate(self.tenant_id, operation_id),
            PAIR_SPENT,
            dict(x.STATE_FENCE),
            {
                ":cf": fence,
                ":moved": rules.claim_fence(fence, self.ctx.fence_floor),
                ":claimed": State.CLAIMED.value,
                ":tok": self.token,
                ":succeeded": State.SUCCEEDED.value,
                ":failed_terminal": State.FAILED_TERMINAL.value,
                ":cancelled": State.CANCELLED.value,
            },
        )
        condition = f"{self._guard()} AND {NAMES_PAIR} AND {NOT_SEALED}"
        names, used = self._expression(update, condition, values | pair_values)
        store.transact([check, store.update_action(self.key, update, condition, names, used)])


def _uses(text: str, placeholder: str) -> bool:
    """Whether ``text`` uses the name or value ``placeholder`` (``:op`` is not ``:one``)."""
    at = text.find(placeholder)
    while at != -1:
        end = at + len(placeholder)
        if end == len(text) or not (text[end].isalnum() or text[end] == "_"):
            return True
        at = text.find(placeholder, end)
    return False
