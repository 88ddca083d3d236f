"""Each operation's history: what happened to it, in order, who did it and why.

Recorded from the table's stream, off the claim's critical path: every transition writes
``transition``, ``actor`` and ``seq`` (+1) on the operation item (see
:class:`~leasefence.model.Transition`), and the publisher function turns each stream record
into one entry here (:func:`entry_from`, :func:`record`). The engine writes nothing here on its
hot path; only an erasure resets the history at once (:meth:`Engine.erase`).

One item per operation, next to it in its tenant's partition (sort key
:func:`keys.history_id`: no operation id can take it and listings never meet it):

* ``created_at``: the operation's ``created_at``. An enqueue of the same id after its identity
  was deleted is a new operation and starts a new history.
* ``last_seq``: the ``seq`` of the newest entry. An entry is appended only when its ``seq`` is
  higher, so a stream record delivered again (retries, bisected batches) changes nothing.
* ``entries``: oldest first, at most :data:`MAX_ENTRIES`: beyond that the oldest entries after
  the first (the enqueue) are dropped and counted in ``dropped``, so the item stays under about
  10 KB however often an operation is retried or requeued.
* ``expires_at_epoch_s``: the operation's own TTL, copied once it ended. The history is kept as
  long as the operation's identity and goes with it (the publisher also deletes it when the
  operation item is deleted: TTL or tenant erasure).

An erasure replaces the history with a single ``erase`` entry: the reasons and notes it held go
with the operation's other free text.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from dataclasses import dataclass
from typing import Any

from leasefence import keys
from leasefence.errors import InvalidInput
from leasefence.model import State, Transition
from leasefence.schema import DUE_SK, TTL_ATTRIBUTE
from leasefence.store import ConditionFailed, Store

#: Entries one history keeps (the first, the enqueue, always stays).
MAX_ENTRIES = 50
#: A reason or note is cut to this many characters in an entry (the operation keeps the latest
#: one whole).
MAX_REASON = 256

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


def transition_of(new: dict[str, Any]) -> Transition:
    """The transition a write made, as history and events name it (a claim of a lapsed lease is
    a takeover)."""
    transition = Transition(new["transition"])
    if transition is Transition.CLAIM and new.get("claimed_from") == State.CLAIMED:
        return Transition.TAKEOVER
    return transition


def _text(value: Any) -> str | None:
    return value[:MAX_REASON] if isinstance(value, str) and value else None


def entry_from(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
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
        "actor": new.get("actor"),
    }
    if transition is Transition.TAKEOVER and old is not None:
        entry["previous_actor"] = old.get("lease_owner")
    if transition in OUTCOME_TRANSITIONS:
        entry["outcome_code"] = new.get("outcome_code")
    if transition in _REASON:
        entry["reason"] = _text(new.get("reason"))
    if transition in _NOTE:
        entry["reason"] = _text(new.get("resolution_note"))
    if transition in (Transition.RETRY, Transition.RETRY_LATER) and DUE_SK in new:
        entry["available_at"] = int(new[DUE_SK])
    return {k: v for k, v in entry.items() if v is not None}


_NAMES = {"#e": "entries", "#ls": "last_seq", "#c": "created_at"}


def _key(tenant_id: str, operation_id: str) -> dict[str, str]:
    return {"tenant_id": tenant_id, "operation_id": keys.history_id(operation_id)}


def record(store: Store, item: dict[str, Any], entry: dict[str, Any], reset: bool = False) -> bool:
    """Append ``entry`` to the history of the operation ``item`` (its image after the transition);
    ``reset``: replace the history with it (an erasure). Idempotent: an entry whose ``seq`` is not
    newer than the history's is not written again. True when something was written."""
    tenant_id, operation_id = item["tenant_id"], item["operation_id"]
    created_at, seq = int(item["created_at"]), int(entry["seq"])
    ttl = item.get(TTL_ATTRIBUTE)
    names = dict(_NAMES, **({"#ttl": TTL_ATTRIBUTE} if ttl is not None else {}))
    values: dict[str, Any] = {":c": created_at, ":s": seq}
    if ttl is not None:
        values[":ttl"] = int(ttl)
    if not reset and seq > 1:  # (the enqueue's entry starts the history: no append to try)
        try:
            store.update(
                _key(tenant_id, operation_id),
                "SET #e = list_append(#e, :e), #ls = :s"
                + (", #ttl = :ttl" if ttl is not None else ""),
                "#c = :c AND #ls < :s AND size(#e) < :max",
                names,
                {**values, ":e": [entry], ":max": MAX_ENTRIES},
                returns="NONE",
            )
            return True
        except ConditionFailed as refused:
            current = refused.item
        if current is not None and int(current.get("created_at", 0)) >= created_at:
            if int(current["created_at"]) > created_at or int(current["last_seq"]) >= seq:
                return False  # delivered again, or a late record of an earlier incarnation
            return _compact(store, current, entry, values, names)
    # A new history (the first entry, an erasure, or a new incarnation of the id).
    try:
        store.put(
            {
                "tenant_id": tenant_id,
                "operation_id": keys.history_id(operation_id),
                "created_at": created_at,
                "last_seq": seq,
                "entries": [entry],
                **({TTL_ATTRIBUTE: int(ttl)} if ttl is not None else {}),
            },
            "attribute_not_exists(#c) OR #c < :c OR (#c = :c AND #ls < :s)",
            {"#c": "created_at", "#ls": "last_seq"},
            {":c": created_at, ":s": seq},
        )
    except ConditionFailed:
        return False
    return True


def _compact(
    store: Store,
    current: dict[str, Any],
    entry: dict[str, Any],
    values: dict[str, Any],
    names: dict[str, str],
) -> bool:
    """The history is full: keep its first entry and the newest ones, count what was dropped.
    Pinned to the ``last_seq`` it read (a concurrent writer makes it a no-op)."""
    entries = current.get("entries") or []
    kept = (
        [*entries[:1], *entries[len(entries) - (MAX_ENTRIES - 2) :]]
        if len(entries) >= 2
        else entries
    )
    dropped = len(entries) - len(kept)
    try:
        store.update(
            {"tenant_id": current["tenant_id"], "operation_id": current["operation_id"]},
            "SET #e = :all, #ls = :s, dropped = if_not_exists(dropped, :zero) + :k"
            + (", #ttl = :ttl" if ":ttl" in values else ""),
            "#c = :c AND #ls = :last",
            names,
            {
                **values,
                ":all": [*kept, entry],
                ":zero": 0,
                ":k": dropped,
                ":last": int(current["last_seq"]),
            },
            returns="NONE",
        )
    except ConditionFailed:
        return False
    return True


def remove(store: Store, item: dict[str, Any]) -> None:
    """Delete the history of the operation ``item`` (it was deleted: TTL or tenant erasure); a
    history of a later incarnation of the id stays."""
    with contextlib.suppress(ConditionFailed):
        store.delete(
            _key(item["tenant_id"], item["operation_id"]),
            "#c <= :c",
            {"#c": "created_at"},
            {":c": int(item["created_at"])},
        )


@dataclass(frozen=True)
class HistoryPage:
    entries: list[dict[str, Any]]
    next_cursor: str | None
    #: Entries dropped to keep the history bounded (after the first: see :data:`MAX_ENTRIES`).
    dropped: int = 0


def read(
    store: Store,
    tenant_id: str,
    operation_id: str,
    created_at: int,
    limit: int = 50,
    cursor: str | None = None,
) -> HistoryPage:
    """One page of the history of the operation created at ``created_at``, oldest first, after
    the cursor (an earlier page's ``next_cursor``). One eventually consistent read: history
    trails the operation by the stream's lag anyway."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ENTRIES:
        raise InvalidInput(f"limit must be from 1 to {MAX_ENTRIES}")
    after = _decode_cursor(cursor) if cursor else 0
    item = store.get(_key(tenant_id, operation_id), consistent=False)
    if item is None or int(item.get("created_at", -1)) != created_at:
        return HistoryPage(entries=[], next_cursor=None)
    newer = [e for e in item.get("entries") or [] if int(e["seq"]) > after]
    page = newer[:limit]
    next_cursor = _encode_cursor(int(page[-1]["seq"])) if len(newer) > limit else None
    return HistoryPage(entries=page, next_cursor=next_cursor, dropped=int(item.get("dropped", 0)))


def _encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"s": seq}).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        seq = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))["s"]
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(seq)
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise InvalidInput("cursor is not valid") from error
    return seq
