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

Cost: the ordinary claim-next with a token writes the marker once (1 unit: the marker is about
150 bytes) and does not read it: a first send takes it to be absent, and the creating write's
condition (``attribute_not_exists``) refuses it where a marker is there after all (a resend), which
then reads it and goes on from what it says. A request that finds no work reads it before it
answers none (a resend's first request may have claimed). A take or a seal is 1 unit, a proven
re-point a transaction (2 units for the marker, 2 per KB of the candidate for its check). A
request that finds neither a marker nor work writes nothing.
"""

from __future__ import annotations

from typing import Any

from leasefence import keys
from leasefence.engine import _expr as x
from leasefence.engine import _rules as rules
from leasefence.engine._context import EngineContext, Key
from leasefence.limits import CLAIM_MARKER_TTL_MS
from leasefence.model import State
from leasefence.schema import TTL_ATTRIBUTE
from leasefence.store import ConditionFailed

#: A marker that names no candidate yet.
IS_FREE = "attribute_not_exists(claimed_op)"
#: The pair this request knows the marker by.
NAMES_PAIR = "claimed_op = :op AND claimed_fence = :cf"
#: Nobody took the pair over from its sole writer, nobody sealed it.
NOT_TAKEN = "attribute_not_exists(taken)"
NOT_SEALED = "attribute_not_exists(sealed)"
#: For the candidate's ``ConditionCheck`` (``:moved``: the fence a claim of the pair would give):
#: the pair's claim was never made and never can be.
PAIR_SPENT = (
    f"(#fence = :moved AND {x.IS_CLAIMED} AND claim_token <> :tok)"
    " OR (#fence = :cf AND #state IN (:succeeded, :failed_terminal, :cancelled))"
)
#: ``claimed_fence`` of a marker written before it existed (no operation has this fence).
NO_FENCE = -1

IN_PROGRESS = "a claim-next with this claim token is in progress: send it again"


class MarkerMoved(Exception):
    """The marker is not what this request knew it as: read it again and go on from there."""


class Marker:
    """One claim-next request's view of its token's marker."""

    def __init__(self, ctx: EngineContext, tenant_id: str, worker_id: str, token: str) -> None:
        self.ctx = ctx
        self.tenant_id = tenant_id
        self.worker_id = worker_id
        self.token = token
        self.key: Key = ctx.marker_key(tenant_id, keys.claim_marker_id(worker_id, token))
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
        self.sole, self.sealed = False, "sealed" in found
        if "claimed_op" not in found:
            self.pair = None
        else:
            self.pair = (found["claimed_op"], int(found.get("claimed_fence", NO_FENCE)))
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
            ":ttl": (self.ctx.clock() + CLAIM_MARKER_TTL_MS) // 1000,
        }
        update = "SET claimed_op = :new, claimed_fence = :nf, #ttl = :ttl REMOVE taken"
        names = {"#ttl": TTL_ATTRIBUTE, **x.STATE}
        try:
            if self.pair is None:
                self._update(update, f"{x.NOT_AN_OPERATION} AND {IS_FREE}", names, values)
            elif self.sole:
                values.update(self._pair_values())
                condition = f"{x.NOT_AN_OPERATION} AND {NAMES_PAIR} AND {NOT_TAKEN}"
                self._update(update, condition, names, values)
            else:
                self._prove_and_point(update, names, values)
        except ConditionFailed:
            raise MarkerMoved() from None
        self.pair, self.sole = pair, True

    def take(self) -> None:
        """Take the pair read over (this request sends its claim write too)."""
        self._mark("SET taken = :one", NOT_SEALED)
        self.sole = False

    def seal(self) -> None:
        """The token's claiming is over: no request with it claims again (a pair that stands is
        still answered while its claim holds). Taken too, so that its sole writer stops."""
        if self.pair is not None:
            self._mark("SET taken = :one, sealed = :one", None)
            self.sole, self.sealed = False, True

    # ------------------------------------------------------------------ writes

    def _mark(self, update: str, also: str | None) -> None:
        condition = NAMES_PAIR if also is None else f"{NAMES_PAIR} AND {also}"
        try:
            self._update(update, condition, {}, {":one": 1, **self._pair_values()})
        except ConditionFailed:
            raise MarkerMoved() from None

    def _pair_values(self) -> dict[str, Any]:
        assert self.pair is not None
        return {":op": self.pair[0], ":cf": self.pair[1]}

    def _update(
        self, update: str, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> None:
        self.ctx.store.update(self.key, update, condition, names, values, returns="NONE")

    def _prove_and_point(self, update: str, names: dict[str, str], values: dict[str, Any]) -> None:
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
        point = store.update_action(
            self.key,
            update,
            f"{x.NOT_AN_OPERATION} AND {NAMES_PAIR} AND {NOT_SEALED}",
            names,
            values | pair_values,
        )
        store.transact([check, point])
