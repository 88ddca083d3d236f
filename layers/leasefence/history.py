"""Each operation's history: what happened to it, in order, who did it and why.

**Kept in the operation's own item, written by the transition's own conditional write.** Every
transition's update appends one compact entry to the item's list :data:`ITEM_HISTORY` (``h``)
in the same ``UpdateItem`` that changes the state, raises ``seq`` and names the ``transition``
and ``actor`` (the enqueue's ``PutItem`` starts the list; see
:meth:`leasefence.engine._expr.Expr.history`). So the history commits with the transition: it can
have no gap and no entry out of order, it is there as soon as the transition's answer is, and it
costs no write of its own (only the bytes it adds to the item). Heartbeats are no transition and
add nothing. The history is stored with the operation, and **kept for the payload retention
after its end** (one knob, 30 days by default): the payload purge's conditional write then
removes the list and sets :data:`ITEM_HISTORY_EXPIRED` (``hx``, when), and the operation's slim
record stays for the rest of its identity window (:func:`leasefence.engine._erasure.purge_one`).
A slimmed operation's history reads as an empty page with ``expired_at`` (only an erasure, the
one transition an ended operation accepts, appends an entry after it). An operation whose payload
is in a payload item (layout 2) has no purge: its reader shows it slimmed from ``purge_at`` on,
with no write (:func:`leasefence.engine._payload_items.as_read`).

A compact entry (:func:`compact_entry`) holds what the write knows: ``e`` the transition, ``t``
the time (ms), and when the write sets them ``a`` the actor, ``s`` the state (left out where
the transition implies it, :data:`_IMPLIED_STATE`), ``f`` the fence and ``n`` the attempts (a
claim, the enqueue, an erasure), ``o`` the outcome code, ``r`` the reason or note (cut to
:data:`MAX_REASON` characters, as the entries of the history item were, and to
:data:`MAX_REASON_BYTES` bytes), ``d`` when a retry is
claimable again. The actor and the outcome code are stored through
:func:`leasefence.stored.stored_id`: an id of more than
:data:`~leasefence.limits.MAX_ENTRY_ID_BYTES` bytes (only ids of more than 64 characters outside
ASCII) is cut, with a marker and a digest of the whole id, so every entry is bounded in bytes
whatever the script of the ids. What a write does not know, the entry before it tells (:func:`expand`): the
fence and attempts change only by a claim, the actor stays the claim's through a holder's
closing command, the previous state is the entry before's state, a claim from ``claimed`` is a
takeover of that entry's actor. The ``seq`` of an entry is derived: every transition raises
``seq`` by one and appends exactly one entry, so the last entry's is the item's ``seq`` and each
one before it one less, except where an entry carries its own (``q``: the first entry kept by a
compaction).

**Bounded.** The API shows at most :data:`MAX_ENTRIES`: the first entry (the enqueue, or an
erasure) and the newest, the others counted in ``dropped``. The writes that start a loop of the
operation (a claim or takeover, an operator's requeue: every loop passes one) are conditional on
the list holding fewer than :data:`HISTORY_ROOM` entries; one refused for that compacts the list
itself, from the refusal's item (:func:`make_room`, one write conditional on the ``seq`` it saw),
and is sent again. Between two such writes an operation adds at most three entries (the loop's
write, its closing transition, an operator's final resolution), so the list never holds more
than :data:`HISTORY_ROOM` + 2 entries, each bounded in bytes: the bound in bytes of the list and
of the whole item is computed from the limits (:mod:`leasefence.item_budget`) and asserted by a
test with 4-byte characters in every id and every free-text field at its maximum. Nothing
depends on the publisher for it. With outcome events on, the publisher compacts sooner, so that
the list usually stays short (each KB of it costs a write unit on every write; without events its
mapping passes it none of these records: :func:`leasefence.streams.filters.publisher_filters`):
it receives every outcome record
(every loop of an operation passes one: a retry, a park, a requeue, a takeover all publish an
event, so no more than two entries are added between two records it sees) and rewrites the list once it holds more than
:data:`COMPACT_AT` entries, keeping the first and the :data:`MAX_ENTRIES` - 1 newest (stamped with
what :func:`expand` derived, so nothing is lost by dropping the entries before them) and adding
the rest to ``hd`` (:data:`ITEM_DROPPED`). Its write is conditional on the ``seq`` it saw, so it
never races a transition: a transition in between wins, and the refusal (which shows the item as
it is) is compacted in turn. An erasure replaces the list with its single ``erase`` entry.

**Items written before** (no :data:`ITEM_HISTORY_MARK` ``hv``, set by every enqueue since) keep
their history item as before, next to the operation in its tenant's partition (sort key
:func:`keys.history_id`): the publisher still writes their entries there from the stream
(:func:`entry_from`, :func:`record`) and deletes it when the operation item is deleted; the
reader merges it with the entries their transitions appended to the item since (:func:`read`).
That history item is :mod:`leasefence.history_item`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leasefence.cursor import decode_history_cursor, encode_history_cursor
from leasefence.errors import InvalidInput
from leasefence.history_item import (  # noqa: F401 (the publisher's and erasure's, re-exported)
    HistoryContention,
    _key,
    record,
    remove,
)
from leasefence.item_budget import history_bytes
from leasefence.limits import (
    HISTORY_COMPACT_AT_BYTES,
    HISTORY_KEEP_BYTES,
    HISTORY_ROOM,
    HISTORY_ROOM_BYTES,
    MAX_ENTRY_TEXT_BYTES,
    MAX_ENTRY_TEXT_LENGTH,
    MAX_HISTORY_ENTRIES,
)
from leasefence.model import TERMINAL_STATES, State, Transition
from leasefence.schema import DUE_SK, OperationItem
from leasefence.store import ConditionFailed, Key, Store
from leasefence.stored import cut_bytes, stored_id

#: Entries one history keeps (the first, the enqueue, always stays).
MAX_ENTRIES = MAX_HISTORY_ENTRIES
#: A reason or note is cut to this many characters in an entry (the operation keeps the latest
#: one whole).
MAX_REASON = MAX_ENTRY_TEXT_LENGTH

#: Transitions whose entry carries the operation's ``reason`` / ``outcome_code`` / operator note.
_REASON = frozenset(
    {
        Transition.FAIL,
        Transition.RETRY,
        Transition.RETRY_LATER,
        Transition.UNKNOWN,
        Transition.QUARANTINE,
        Transition.SWEEP,
        Transition.REJECT,
        Transition.APPROVAL_EXPIRE,
    }
)
#: Transitions whose history entry and outcome event carry the operation's outcome code.
OUTCOME_TRANSITIONS = frozenset(
    {
        Transition.COMPLETE,
        Transition.RESOLVE,
        Transition.REJECT,
        Transition.APPROVAL_EXPIRE,
        Transition.CANCEL,
    }
)
_NOTE = frozenset({Transition.RESOLVE, Transition.REQUEUE})


def transition_of(new: Mapping[str, Any]) -> Transition:
    """The transition a write made, as history and events name it (a claim of a lapsed lease is
    a takeover)."""
    transition = Transition(new["transition"])
    if transition is Transition.CLAIM and new.get("claimed_from") == State.CLAIMED:
        return Transition.TAKEOVER
    return transition


def _text(value: Any) -> str | None:
    return value[:MAX_REASON] if isinstance(value, str) and value else None


def _id(value: Any) -> str | None:
    """An id (actor, outcome code) as an entry stores it (:func:`leasefence.stored.stored_id`)."""
    return stored_id(value) if isinstance(value, str) else None


def entry_from(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """The history entry for one transition, from the operation item before and after it (plain
    values, as :func:`leasefence.store.from_item` gives them). ``old`` None: an enqueue, or the
    engine recording its own erasure (which keeps the state)."""
    transition = transition_of(new)
    entry: dict[str, Any] = {
        "seq": int(new["seq"]),
        "at": int(new["updated_at"]),
        "transition": transition.value,
        "previous_state": (old or {}).get("state")
        if transition is not Transition.ERASE
        else new["state"],
        "state": new["state"],
        "fence": int(new["fence"]),
        "attempt": int(new["attempts"]),
        "actor": _id(new.get("actor")),
    }
    if transition is Transition.TAKEOVER and old is not None:
        entry["previous_actor"] = _id(old.get("lease_owner"))
    if transition in OUTCOME_TRANSITIONS:
        entry["outcome_code"] = _id(new.get("outcome_code"))
    if transition in _REASON:
        entry["reason"] = _text(new.get("reason"))
    if transition in _NOTE:
        entry["reason"] = _text(new.get("resolution_note"))
    if transition in (Transition.RETRY, Transition.RETRY_LATER) and DUE_SK in new:
        entry["available_at"] = int(new[DUE_SK])
    return {k: v for k, v in entry.items() if v is not None}


# ------------------------------------------------------------------ the history in the item

#: The operation item's list of compact entries, and the count of entries compaction dropped.
ITEM_HISTORY = "h"
ITEM_DROPPED = "hd"
#: When the history expired (ms): set by the payload purge's write, which slims an ended
#: operation's item once its history retention (the payload retention) is over and removes
#: :data:`ITEM_HISTORY` and :data:`ITEM_DROPPED` (:func:`leasefence.engine._erasure.purge_one`).
ITEM_HISTORY_EXPIRED = "hx"
#: Set (1) by every enqueue whose operation keeps its history in its item only; an item without
#: it was written before and has a history item too (the publisher keeps writing that one).
ITEM_HISTORY_MARK = "hv"
#: The publisher compacts the list once it holds more entries than this (then it holds
#: :data:`MAX_ENTRIES`): a little slack, so one compaction serves several loops.
COMPACT_AT = MAX_ENTRIES + 10
#: The list's bytes (:func:`leasefence.item_budget.history_bytes`), kept by every write that
#: changes it: set by the enqueue, a compaction and an erasure, raised by each entry's own write.
#: An item enqueued before it existed counts only the entries appended since (its list stays
#: bounded by its count, :data:`HISTORY_ROOM`, as before) until its first compaction writes the
#: exact figure; for every item enqueued since, ``hb`` is the list's size while the operation
#: lives (the write that ends it removes ``hb``; a compaction after that writes it again).
ITEM_BYTES = "hb"
#: A reason or note in an entry in the item is also cut to this many bytes (UTF-8; whole
#: characters): 256 characters of any script up to three bytes each fit.
MAX_REASON_BYTES = MAX_ENTRY_TEXT_BYTES

#: The state a transition always leads to (its entry leaves ``s`` out).
_IMPLIED_STATE: dict[str, str] = {
    Transition.CLAIM.value: State.CLAIMED.value,
    Transition.COMPLETE.value: State.SUCCEEDED.value,
    Transition.FAIL.value: State.FAILED_TERMINAL.value,
    Transition.RETRY.value: State.QUEUED.value,
    Transition.RETRY_LATER.value: State.QUEUED.value,
    Transition.UNKNOWN.value: State.UNKNOWN.value,
    Transition.QUARANTINE.value: State.QUARANTINED.value,
    Transition.SWEEP.value: State.UNKNOWN.value,
    Transition.REQUEUE.value: State.QUEUED.value,
    Transition.APPROVE.value: State.QUEUED.value,
    Transition.REJECT.value: State.FAILED_TERMINAL.value,
    Transition.APPROVAL_EXPIRE.value: State.FAILED_TERMINAL.value,
    Transition.CANCEL.value: State.CANCELLED.value,
}
#: Compact name -> the public entry's field (besides ``e``, ``t`` and ``q``).
_FIELDS = {
    "s": "state",
    "f": "fence",
    "n": "attempt",
    "a": "actor",
    "o": "outcome_code",
    "r": "reason",
    "d": "available_at",
    "p": "previous_state",
    "pa": "previous_actor",
}


def in_item(item: Mapping[str, Any]) -> bool:
    """Whether the operation ``item`` keeps its history in the item only (no history item)."""
    return ITEM_HISTORY_MARK in item


def compact_entry(
    transition: Transition,
    at: int,
    *,
    actor: str | None = None,
    state: State | str | None = None,
    fence: int | None = None,
    attempts: int | None = None,
    outcome_code: str | None = None,
    reason: str | None = None,
    available_at: int | None = None,
) -> dict[str, Any]:
    """The entry a transition's own write appends to the item's history: what that write knows
    (see the module's docstring; the rest is derived from the entry before it)."""
    entry: dict[str, Any] = {"e": transition.value, "t": int(at)}
    state_value = None if state is None else State(state).value
    if state_value is not None and _IMPLIED_STATE.get(transition.value) != state_value:
        entry["s"] = state_value
    optional = {
        "a": _id(actor),
        "f": fence,
        "n": attempts,
        "o": _id(outcome_code) if transition in OUTCOME_TRANSITIONS else None,
        "r": _bytes_cut(_text(reason)) if transition in _REASON or transition in _NOTE else None,
        "d": available_at if transition in (Transition.RETRY, Transition.RETRY_LATER) else None,
    }
    entry.update({k: v for k, v in optional.items() if v is not None})
    return entry


def start(item: OperationItem, now: int, actor: str | None) -> None:
    """An enqueue's item starts its history: the mark (:data:`ITEM_HISTORY_MARK`) and the
    enqueue's own entry, written by the enqueue's own put."""
    item["hv"] = 1
    item["h"] = [
        compact_entry(
            Transition.ENQUEUE, now, actor=actor, state=item["state"], fence=0, attempts=0
        )
    ]
    item["hb"] = history_bytes(item["h"])


def _bytes_cut(text: str | None) -> str | None:
    return None if text is None else cut_bytes(text, MAX_REASON_BYTES)


def _expand_one(
    compact: Mapping[str, Any], seq: int, before: Mapping[str, Any] | None
) -> dict[str, Any]:
    """One public entry from its compact form and the public entry before it (None: unknown)."""
    prev = before or {}
    transition = str(compact["e"])
    state = compact.get("s") or _IMPLIED_STATE.get(transition) or prev.get("state")
    erase = transition == Transition.ERASE.value
    previous_state = state if erase else compact.get("p", prev.get("state"))
    entry: dict[str, Any] = {
        "seq": seq,
        "at": int(compact["t"]),
        "transition": transition,
        "previous_state": previous_state,
        "state": state,
        "fence": compact.get("f", prev.get("fence")),
        "attempt": compact.get("n", prev.get("attempt")),
        "actor": compact.get("a", prev.get("actor")),
    }
    if transition == Transition.CLAIM.value and previous_state == State.CLAIMED.value:
        transition = entry["transition"] = Transition.TAKEOVER.value
    if transition == Transition.TAKEOVER.value:
        entry["previous_actor"] = compact.get("pa", prev.get("actor"))
    for short in ("o", "r", "d"):
        if short in compact:
            entry[_FIELDS[short]] = compact[short]
    for name in ("fence", "attempt", "available_at"):
        if entry.get(name) is not None:
            entry[name] = int(entry[name])
    return {k: v for k, v in entry.items() if v is not None}


def _seqs(compacts: list[Mapping[str, Any]], last_seq: int) -> list[int]:
    """The ``seq`` of each compact entry: the last one's is the item's, each one before it one
    less, unless it carries its own (``q``)."""
    seqs = [0] * len(compacts)
    following = last_seq + 1
    for i in range(len(compacts) - 1, -1, -1):
        q = compacts[i].get("q")
        seqs[i] = int(q) if q is not None else following - 1
        following = seqs[i]
    return seqs


def expand(
    item: Mapping[str, Any], known: Mapping[int, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The public entries of the history in the operation ``item``, oldest first. ``known``:
    entries by ``seq`` recorded elsewhere (a history item written before), which tell what an
    in-item entry cannot (the entry before the first one in the item)."""
    compacts = list(item.get(ITEM_HISTORY) or [])
    if not compacts:
        return []
    seqs = _seqs(compacts, int(item["seq"]))
    known = known or {}
    out: list[dict[str, Any]] = []
    before: Mapping[str, Any] | None = None
    for i, compact in enumerate(compacts):
        if i == 0 or seqs[i] != seqs[i - 1] + 1:
            before = known.get(seqs[i] - 1)  # a gap: what compaction stamped tells the rest
        entry = _expand_one(compact, seqs[i], before)
        out.append(entry)
        before = known.get(seqs[i], entry)
    return out


def _derived(entry: Mapping[str, Any]) -> bool:
    """Whether an expanded entry is whole: an in-item entry whose entry before is unknown (an
    operation enqueued before, whose history item lacks it) has no fence, attempt or previous
    state to show."""
    return (
        "fence" in entry
        and "attempt" in entry
        and ("previous_state" in entry or entry["transition"] == Transition.ENQUEUE.value)
    )


def _to_compact(entry: Mapping[str, Any], with_seq: bool) -> dict[str, Any]:
    """A public entry written back whole in compact form (compaction stamps the entries that
    the dropped ones would have explained)."""
    compact: dict[str, Any] = {"e": entry["transition"], "t": int(entry["at"])}
    for short, name in _FIELDS.items():
        if entry.get(name) is not None:
            compact[short] = entry[name]
    if with_seq:
        compact["q"] = int(entry["seq"])
    return compact


def compact(store: Store, item: Mapping[str, Any], attempts: int = 3) -> bool:
    """Compact the history in the operation ``item`` (an image of it: a stream record's) when it
    holds more than :data:`COMPACT_AT` entries: the first and the :data:`MAX_ENTRIES` - 1 newest
    stay, the others are counted in ``hd``. One write conditional on the list the image shows
    (its ``seq`` and ``hd``): a transition since wins, and the refusal shows the item as it is
    now, compacted in turn (at most ``attempts`` writes). True when it wrote."""
    current: Mapping[str, Any] | None = item
    for _ in range(attempts):
        if current is None or not _over(current, COMPACT_AT, HISTORY_COMPACT_AT_BYTES):
            return False
        try:
            _compact_write(store, current)
        except ConditionFailed as refused:
            if refused.item is None or refused.item.get("created_at") != item.get("created_at"):
                return False  # deleted, or another incarnation of the id: not this history
            current = refused.item
            continue
        return True
    return False


def needs_room(item: Mapping[str, Any] | None) -> bool:
    """Whether a claim, a takeover or a requeue of ``item`` (as read, or as its refusal showed
    it) is refused until the history is compacted (:data:`HISTORY_ROOM`)."""
    return item is not None and _over(item, HISTORY_ROOM - 1, HISTORY_ROOM_BYTES - 1)


_ENDED = frozenset(s.value for s in TERMINAL_STATES)


def _over(item: Mapping[str, Any], entries: int, size: int) -> bool:
    """Whether the list holds more than ``entries`` entries or more than ``size`` bytes (``hb``;
    measured on the list for an ended item, whose end removed ``hb``; an item enqueued before
    ``hb`` existed counts as before: its list is bounded by its count)."""
    listed = item.get(ITEM_HISTORY)
    if not listed:
        return False
    counted = item.get(ITEM_BYTES)
    if counted is None and item.get("state") in _ENDED:
        counted = history_bytes(listed)
    return len(listed) > entries or int(counted or 0) > size


def make_room(store: Store, item: Mapping[str, Any]) -> bool:
    """Compact the history of ``item`` for the write that needs room (a claim or requeue refused
    by :data:`HISTORY_ROOM`, or any update refused for the item's size): the same compaction as
    the publisher's (:func:`compact`), made by the writer itself, so no write waits on the
    stream. True when the list was compacted (by this call, or by someone else since the image:
    the writer then simply tries again)."""
    if compact(store, item):
        return True
    current = store.get(_operation_key(item))
    return current is not None and not needs_room(current)


def make_room_at(store: Store, key: Key) -> bool:
    """:func:`make_room` for the operation under ``key`` (read once, strongly consistent): the
    engine's answer to an update refused for the item's size
    (:attr:`leasefence.store.Store.make_room`)."""
    item = store.get(key)
    return item is not None and compact(store, item)


def _operation_key(item: Mapping[str, Any]) -> Key:
    return {"tenant_id": item["tenant_id"], "operation_id": item["operation_id"]}


def _compact_write(store: Store, item: Mapping[str, Any]) -> None:
    compacts = list(item.get(ITEM_HISTORY) or [])
    entries = expand(item)
    first = _to_compact(entries[0], with_seq=True)
    # The first entry and the newest that fit both bounds: at most MAX_ENTRIES in all and
    # HISTORY_KEEP_BYTES (the entry at ``tail`` stamped with what the dropped ones told).
    kept, tail = [first], 1
    for tail in range(max(1, len(compacts) - (MAX_ENTRIES - 1)), len(compacts)):
        kept = [first, _to_compact(entries[tail], with_seq=False), *compacts[tail + 1 :]]
        if history_bytes(kept) <= HISTORY_KEEP_BYTES:
            break
    seen = item.get(ITEM_DROPPED)
    values = {":h": kept, ":seq": int(item["seq"]), ":c": int(item["created_at"])}
    values[":hb"] = history_bytes(kept)
    values[":d"] = int(seen or 0) + tail - 1
    # Pinned to the list the image shows: its seq (no transition since) and its dropped count
    # (not compacted since: a record delivered again writes nothing).
    unchanged = "attribute_not_exists(#hd)" if seen is None else "#hd = :hd"
    if seen is not None:
        values[":hd"] = int(seen)
    store.update(
        _operation_key(item),
        "SET #h = :h, #hd = :d, #hb = :hb",
        # Never onto a slimmed item (its history expired: a late record must not bring it back).
        f"#seq = :seq AND #c = :c AND {unchanged} AND attribute_not_exists(#hx)",
        {
            "#h": ITEM_HISTORY,
            "#hd": ITEM_DROPPED,
            "#hb": ITEM_BYTES,
            "#seq": "seq",
            "#c": "created_at",
            "#hx": ITEM_HISTORY_EXPIRED,
        },
        values,
        returns="NONE",
    )


def _bounded(entries: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The entries the API shows: the first and the :data:`MAX_ENTRIES` - 1 newest, and how many
    fell out between."""
    if len(entries) <= MAX_ENTRIES:
        return entries, 0
    kept = [entries[0], *entries[len(entries) - (MAX_ENTRIES - 1) :]]
    return kept, len(entries) - len(kept)


@dataclass(frozen=True)
class HistoryPage:
    entries: list[dict[str, Any]]
    next_cursor: str | None
    #: Entries dropped to keep the history bounded (after the first: see :data:`MAX_ENTRIES`).
    dropped: int = 0
    #: When the history expired (ms; None: it did not): the entries before then are gone.
    expired_at: int | None = None


def read(
    store: Store,
    partition: str,
    operation_id: str,
    created_at: int,
    limit: int = 50,
    cursor: str | None = None,
    item: Mapping[str, Any] | None = None,
) -> HistoryPage:
    """One page of the history of the operation created at ``created_at`` (its item in
    ``partition``: the tenant's write shard it lives in), oldest first, after
    the cursor (an earlier page's ``next_cursor``). ``item``: the operation item as read (its
    in-item history); the history item written before is read (one eventually consistent read)
    only when the item has none of its own (:func:`in_item`), or no item is given."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ENTRIES:
        raise InvalidInput(f"limit must be from 1 to {MAX_ENTRIES}")
    after = decode_history_cursor(cursor) if cursor else 0
    legacy: list[dict[str, Any]] = []
    dropped = 0
    expired = None if item is None else item.get(ITEM_HISTORY_EXPIRED)
    if expired is None and (item is None or not in_item(item)):
        stored = store.get(_key(partition, operation_id), consistent=False)
        if stored is not None and int(stored.get("created_at", -1)) == created_at:
            legacy = list(stored.get("entries") or [])
            dropped = int(stored.get("dropped", 0))
    entries = legacy
    own: list[dict[str, Any]] = []
    if item is not None and int(item.get("created_at", -1)) == created_at:
        known = {int(e["seq"]): e for e in legacy}
        own = expand(item, known)
        if own and own[0]["transition"] == Transition.ERASE.value:
            # An erasure starts the history: nothing older stays (in either place).
            known = {seq: e for seq, e in known.items() if seq >= own[0]["seq"]}
        for entry in own:
            if _derived(entry):
                known.setdefault(int(entry["seq"]), entry)
            # else: after a transition of the code before that its history item does not hold
            # yet (the publisher's lag, a record awaiting its redrive): shown once it does.
        entries = [known[seq] for seq in sorted(known)]
    entries, overflow = _bounded(entries)
    if own and entries:
        # Gapless but for what was dropped (compaction, the bound above, the history item's own
        # compaction): what is missing between the first entry and the newest.
        dropped = int(entries[-1]["seq"]) - int(entries[0]["seq"]) + 1 - len(entries)
    else:
        dropped += overflow
    newer = [e for e in entries if int(e["seq"]) > after]
    page = newer[:limit]
    next_cursor = encode_history_cursor(int(page[-1]["seq"])) if len(newer) > limit else None
    return HistoryPage(
        entries=page,
        next_cursor=next_cursor,
        dropped=dropped,
        expired_at=None if expired is None else int(expired),
    )
