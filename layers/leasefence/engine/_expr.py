"""Update and condition expressions for the engine's writes, built from named parts.

Every guard is composed from the named condition fragments below, so a transition's condition
reads as a sentence (the Powertools idempotency layer's ``_put_record`` does the same)::

    claim_condition = f"{FENCE_UNCHANGED} AND {COUNTERS_UNCHANGED} AND ({QUEUED_AND_DUE} OR {LEASE_LAPSED})"

A fragment names its placeholders by convention (``#state``, ``#fence``, ``:f``, ``:now``,
``:claimed`` ...); the write that uses it binds them on its :class:`Expr`. Updates are built on an
:class:`Expr` (names, values, ``SET``, ``REMOVE``, ``ADD``) and rendered once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from leasefence import hash_form
from leasefence.history import ITEM_BYTES, ITEM_HISTORY
from leasefence.item_budget import history_bytes
from leasefence.limits import HISTORY_ROOM, HISTORY_ROOM_BYTES, PURGE_BEFORE_TTL_MS
from leasefence.model import State, Transition
from leasefence.schema import DUE_HOME, PURGE_SK, TTL_ATTRIBUTE

# ------------------------------------------------------------------ placeholders

#: Attribute names that are DynamoDB reserved words, or that read better as placeholders.
#: A conditional update's arguments: ``(update, condition, names, values)``.
Write = tuple[str, str, dict[str, str], dict[str, Any]]

STATE_FENCE = {"#state": "state", "#fence": "fence"}
STATE = {"#state": "state"}
#: What every transition writes besides its own changes: its name, who made it, and ``seq`` + 1
#: (see :class:`~leasefence.model.Transition`; the stream carries them to history and events).
TRANSITION_NAMES = {"#tr": "transition", "#seq": "seq"}
ACTOR = {"#actor": "actor"}
OPERATION_ID = {"#op": "operation_id"}

# ------------------------------------------------------------------ named condition fragments

#: No item under this key yet (a put-if-absent).
IS_NEW = "attribute_not_exists(#op)"
#: The item's history has room for a write that starts a loop: a claim, a takeover, an operator's
#: requeue (:data:`~leasefence.limits.HISTORY_ROOM`; ``#h_``: the history list, ``:h_room``: that
#: count; bound by :meth:`Expr.history_room`).
HISTORY_HAS_ROOM = (
    "(attribute_not_exists(#h_) OR (size(#h_) < :h_room"
    " AND (attribute_not_exists(#hb_) OR #hb_ < :hb_room)))"
)
#: The history's byte count raised by the entry a write appends (``:hb_n``: its bytes).
HISTORY_COUNTED = "#hb_ = if_not_exists(#hb_, :hb_zero) + :hb_n"
#: What only a live operation needs, removed by every write that ends one (and by the slimming
#: of one that ended before): see :meth:`Expr.end_of_life`. ``#home_``: the due home, ``#hb_``:
#: the history's byte count.
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
    "#home_",
    "#hb_",
)
#: An item under this key exists (an update never creates one).
EXISTS = "attribute_exists(#op)"
#: Not an operation item (a claim-next marker is written under its own key, never onto one).
NOT_AN_OPERATION = "attribute_not_exists(#state)"

IS_CLAIMED = "#state = :claimed"
NOT_CLAIMED = "#state <> :claimed"
IS_AWAITING_APPROVAL = "#state = :awaiting"
IS_PARKED = "#state IN (:unknown, :quarantined)"

#: The fence the writer read (claims, repairs, the sweeper) or holds (fenced commands).
FENCE_UNCHANGED = "#fence = :f"
FENCE_HELD = FENCE_UNCHANGED
HELD_BY_WORKER = "lease_owner = :w"
CLAIM_TOKEN_MATCHES = "claim_token = :tok"
#: The attempt counters the claimer read.
COUNTERS_UNCHANGED = "attempts = :a AND max_attempts = :m"
ATTEMPTS_LEFT = "attempts < max_attempts"
NO_ATTEMPTS_LEFT = "attempts >= max_attempts"
#: Neither claimed nor attempted, ever (a cancel must not skip a reconcile).
NEVER_ATTEMPTED = "attempts = :zero AND #fence = :zero"

QUEUED_AND_DUE = "(#state = :queued AND #due <= :now)"
LEASE_EXPIRED = "lease_expires_at <= :now"
LEASE_LAPSED = f"({IS_CLAIMED} AND {LEASE_EXPIRED})"
LEASE_AT_LEAST = "lease_expires_at >= :lease"
#: The lease asked for is within the job type's maximum (when its entry set one).
LEASE_ALLOWED = "(attribute_not_exists(lease_max_ms) OR lease_max_ms >= :lease)"
#: Still filed in the index whose partition key ``#pk`` names.
IN_INDEX = "attribute_exists(#pk)"

#: The item's payload hash is ``:h`` (text) or ``:h_digest`` (the same as 32 bytes): either
#: stored form (:func:`leasefence.hash_form.condition_values` binds both).
SAME_PAYLOAD = hash_form.SAME
APPROVAL_WINDOW_OPEN = "approval_expires_at > :now"
APPROVAL_WINDOW_CLOSED = "approval_expires_at <= :now"
NOT_SELF_APPROVAL = "(attribute_not_exists(enqueued_by) OR enqueued_by <> :actor)"
#: The stored payload is still there: neither erased nor purged (an approval releases bytes).
PAYLOAD_KEPT = "attribute_not_exists(erased_at) AND attribute_not_exists(payload_purged_at)"
#: The request token ``:tok`` is not the one the item carries (``#rtok``): not applied yet.
NOT_THIS_REQUEST = "(attribute_not_exists(#rtok) OR #rtok <> :tok)"
PURGE_TIME_UNCHANGED = "#pat = :pat"

#: The tenant's job-type directory may take this type (``#set``: its set of types).
DIRECTORY_NEW = "attribute_not_exists(#set)"
TYPE_LISTED = "contains(#set, :type)"
DIRECTORY_HAS_ROOM = "size(#set) < :cap"


def job_type_in(types: Iterable[str]) -> tuple[str, dict[str, str]]:
    """``job_type IN (...)`` for the types asked for, and its values (``:jt0`` ...)."""
    values = {f":jt{i}": t for i, t in enumerate(types)}
    return f"job_type IN ({', '.join(values)})", values


def in_states(states: Iterable[State]) -> tuple[str, dict[str, str]]:
    """``#state IN (...)`` for ``states``, and its values (``:src0`` ...)."""
    values = {f":src{i}": state.value for i, state in enumerate(states)}
    return f"#state IN ({', '.join(values)})", values


def unchanged(name: str, item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``name`` is what ``item`` shows: equal to it, or still absent."""
    if name in item:
        return f"{name} = :was_{name}", {f":was_{name}": item[name]}
    return f"attribute_not_exists({name})", {}


# ------------------------------------------------------------------ the builder


class Expr:
    """One update expression with its names and values: ``SET``, ``REMOVE`` and ``ADD`` clauses in
    the order they were added, rendered once by :meth:`render`."""

    def __init__(self, *names: Mapping[str, str], values: Mapping[str, Any] | None = None) -> None:
        self.names: dict[str, str] = {}
        for group in names:
            self.names.update(group)
        self.values: dict[str, Any] = dict(values or {})
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.adds: list[str] = []

    def name(self, names: Mapping[str, str]) -> Expr:
        self.names.update(names)
        return self

    def value(self, values: Mapping[str, Any]) -> Expr:
        self.values.update(values)
        return self

    def set(self, *clauses: str) -> Expr:
        self.sets.extend(clauses)
        return self

    def remove(self, *attributes: str) -> Expr:
        self.removes.extend(attributes)
        return self

    def add(self, *clauses: str) -> Expr:
        self.adds.extend(clauses)
        return self

    def transition(self, transition: Transition) -> Expr:
        """Name the transition (``#tr = :tr``, set here) and count it (``ADD #seq :one``)."""
        self.names.update(TRANSITION_NAMES)
        self.values.update({":tr": transition.value, ":one": 1})
        return self.set("#tr = :tr").add("#seq :one")

    def history(self, entry: Mapping[str, Any]) -> Expr:
        """Append the transition's own history entry (:func:`leasefence.history.compact_entry`)
        to the item's list, in this same write: the history commits with the transition, so it
        has no gap and no entry out of order (:mod:`leasefence.history`)."""
        self.names.update({"#h_": ITEM_HISTORY, "#hb_": ITEM_BYTES})
        self.values.update({":h_entry": [dict(entry)], ":h_none": []})
        self.values.update({":hb_n": history_bytes([entry]), ":hb_zero": 0})
        return self.set(HISTORY_COUNTED).set(
            "#h_ = list_append(if_not_exists(#h_, :h_none), :h_entry)"
        )

    def history_room(self) -> str:
        """The condition that the history has room (:data:`HISTORY_HAS_ROOM`), its names and
        values bound here; a write refused by it makes room first
        (:func:`leasefence.history.make_room`) and is sent again."""
        self.names.update({"#h_": ITEM_HISTORY, "#hb_": ITEM_BYTES})
        self.values.update({":h_room": HISTORY_ROOM, ":hb_room": HISTORY_ROOM_BYTES})
        return HISTORY_HAS_ROOM

    def end_of_life(
        self, now: int, identity_retention_ms: int | None, payload_retention_ms: int
    ) -> Expr:
        """What every transition into a final state adds: the identity's retention (TTL, unless
        kept forever), the payload's purge time, and dropping what only a live operation needs."""
        if identity_retention_ms is not None:
            # Never before the payload's purge, with a margin for a sweeper that is behind: an
            # item that TTL deleted first would take its purge index entry with it, and leave
            # its S3 object behind for good.
            kept = max(identity_retention_ms, payload_retention_ms + PURGE_BEFORE_TTL_MS)
            self.names["#ttl"] = TTL_ATTRIBUTE
            self.values[":ttl"] = (now + kept) // 1000
            self.set("#ttl = :ttl")
        self.names["#pat_"] = PURGE_SK
        self.values[":purge"] = now + payload_retention_ms
        self.set("#pat_ = :purge")
        # Compact: what only a live operation needs goes (the identity, fences, state, outcome and
        # the closing fence stay, about 0.5 KB). An ended item keeps every byte for the identity
        # retention (400 days by default: about $0.0055 per million lifecycles a byte, storage
        # and backup), and a final state is never claimed again, so nothing reads these after
        # the end: the claim's time and origin, the lease and the job type's lease bounds
        # (copied from the catalogue at enqueue), the producer's trace context (handed on by
        # claims only: 55 bytes and up to 512 more), the attempt budget, the due home, and the
        # history's byte count (only a claim's or a requeue's room check reads it; a later
        # compaction or erasure writes it again).
        self.names["#home_"] = DUE_HOME
        self._uncount_history()
        return self.remove(*LIVE_ONLY)

    def _uncount_history(self) -> None:
        """Drop :meth:`history`'s count of the entry's bytes (the end removes ``hb``): one
        attribute cannot be set and removed by the same write."""
        self.names["#hb_"] = ITEM_BYTES
        if HISTORY_COUNTED in self.sets:
            self.sets.remove(HISTORY_COUNTED)
            del self.values[":hb_n"], self.values[":hb_zero"]

    def render(self) -> str:
        """``SET ... REMOVE ... ADD ...`` (empty sections left out)."""
        parts = []
        for keyword, clauses in (("SET", self.sets), ("REMOVE", self.removes), ("ADD", self.adds)):
            if clauses:
                parts.append(f"{keyword} {', '.join(clauses)}")
        return " ".join(parts)

    def write(self, condition: str) -> Write:
        """``(update, condition, names, values)``: the arguments of a conditional update."""
        return self.render(), condition, self.names, self.values
