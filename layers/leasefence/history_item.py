"""The history item of an operation enqueued before its history moved into its item (see
:mod:`leasefence.history`): one item next to the operation in its tenant's partition (sort key
:func:`keys.history_id`), written by the publisher from the stream, one entry per record placed
by its ``seq``, and deleted by it when the operation item is deleted. Its fields:

* ``created_at``: the operation's ``created_at``. An enqueue of the same id after its identity
  was deleted is a new operation and starts a new history.
* ``entries``: oldest first (ordered by ``seq``), at most :data:`MAX_ENTRIES`: beyond that the
  oldest entries after the first (the enqueue) are dropped and counted in ``dropped``.
* ``last_seq``: the highest ``seq`` recorded, and ``v``: a version, +1 on every write. An entry
  is placed by its ``seq``, never discarded for being late: the newest is appended (the common
  case, one conditional update), a late one (a record retried after later ones, or redriven) is
  inserted where its ``seq`` belongs. Writing an entry whose ``seq`` is recorded already changes
  nothing, so a stream record delivered again (retries, bisected batches, a mapping replaying
  from ``TRIM_HORIZON``, a redrive) is harmless.
* ``expires_at_epoch_s``: the operation's own TTL, copied once it ended.

An erasure replaces it with a single ``erase`` entry, and an entry older than the erasure is
never inserted again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from leasefence import keys
from leasefence.limits import MAX_HISTORY_ENTRIES
from leasefence.model import Transition
from leasefence.schema import TTL_ATTRIBUTE
from leasefence.store import ConditionFailed, Store

#: Entries one history keeps (the first, the enqueue, always stays).
MAX_ENTRIES = MAX_HISTORY_ENTRIES

_NAMES = {"#e": "entries", "#ls": "last_seq", "#c": "created_at", "#v": "v"}
#: Read-modify-write attempts of one entry against concurrent writers of the same history (the
#: publisher and a redrive) before the record is given back to be retried.
_ATTEMPTS = 8


class HistoryContention(Exception):
    """The history kept changing under an insert: the record fails and is delivered again."""


def _key(partition: str, operation_id: str) -> dict[str, str]:
    """The history item of the operation whose item lives in ``partition`` (next to it)."""
    return {"tenant_id": partition, "operation_id": keys.history_id(operation_id)}


def record(
    store: Store, item: Mapping[str, Any], entry: dict[str, Any], reset: bool = False
) -> bool:
    """Record ``entry`` in the history of the operation ``item`` (its image after the transition),
    at the place of its ``seq``; ``reset``: replace the history with it (an erasure). Idempotent:
    an entry whose ``seq`` is recorded already is not written again. True when something was
    written."""
    tenant_id, operation_id = item["tenant_id"], item["operation_id"]
    created_at, seq = int(item["created_at"]), int(entry["seq"])
    ttl = item.get(TTL_ATTRIBUTE)
    names = dict(_NAMES, **({"#ttl": TTL_ATTRIBUTE} if ttl is not None else {}))
    values: dict[str, Any] = {":c": created_at, ":s": seq}
    if ttl is not None:
        values[":ttl"] = int(ttl)
    set_ttl = ", #ttl = :ttl" if ttl is not None else ""
    if reset:
        return _put_new(store, item, entry, ttl, replace_older_seq=True)
    current: dict[str, Any] | None = None
    if seq > 1:  # (the enqueue's entry starts the history: no append to try)
        try:
            # The common case, in stream order: the newest entry goes at the end.
            store.update(
                _key(tenant_id, operation_id),
                "SET #e = list_append(#e, :e), #ls = :s, #v = if_not_exists(#v, :zero) + :one"
                + set_ttl,
                "#c = :c AND #ls < :s AND size(#e) < :max",
                names,
                {**values, ":e": [entry], ":max": MAX_ENTRIES, ":zero": 0, ":one": 1},
                returns="NONE",
            )
            return True
        except ConditionFailed as refused:
            current = refused.item
    for _ in range(_ATTEMPTS):
        if current is None or int(current.get("created_at", 0)) < created_at:
            # A new history (the first entry, or a new incarnation of the id).
            try:
                _put_new(store, item, entry, ttl, replace_older_seq=False, strict=True)
                return True
            except ConditionFailed as refused:
                current = refused.item
                continue
        if int(current["created_at"]) > created_at:
            return False  # a late record of an earlier incarnation
        placed = _place(current, entry)
        if placed is None:
            return False  # recorded already (delivered again), or erased, or long dropped
        entries, dropped = placed
        # Pinned to the history it read: its incarnation, its newest seq (an erasure raises it)
        # and its version (a history written before versions: its length).
        version = current.get("v")
        pin = "#v = :v" if version is not None else "attribute_not_exists(#v) AND size(#e) = :n"
        update_values = {
            **values,
            ":all": entries,
            ":ls": max(int(current["last_seq"]), seq),
            ":last": int(current["last_seq"]),
            ":v1": int(version or 0) + 1,
        }
        if version is not None:
            update_values[":v"] = int(version)
        else:
            update_values[":n"] = len(current.get("entries") or [])
        update_values.pop(":s")
        if dropped:
            update_values[":d"] = dropped
        try:
            store.update(
                {"tenant_id": current["tenant_id"], "operation_id": current["operation_id"]},
                "SET #e = :all, #ls = :ls, #v = :v1"
                + (", dropped = :d" if dropped else "")
                + set_ttl,
                f"#c = :c AND #ls = :last AND {pin}",
                names,
                update_values,
                returns="NONE",
            )
            return True
        except ConditionFailed as refused:
            current = refused.item  # another writer came first: place it again in what it wrote
    raise HistoryContention(f"history of seq {seq} kept changing under {_ATTEMPTS} attempts")


def _put_new(
    store: Store,
    item: Mapping[str, Any],
    entry: dict[str, Any],
    ttl: Any,
    *,
    replace_older_seq: bool,
    strict: bool = False,
) -> bool:
    """A history holding only ``entry``: where there is none or one of an earlier incarnation;
    ``replace_older_seq`` (an erasure): also over this incarnation's history when every entry in
    it is older. ``strict``: a refusal raises :class:`ConditionFailed` (with the item) instead of
    answering False."""
    created_at, seq = int(item["created_at"]), int(entry["seq"])
    condition = "attribute_not_exists(#c) OR #c < :c"
    names = {"#c": "created_at"}
    values: dict[str, Any] = {":c": created_at}
    if replace_older_seq:
        condition += " OR (#c = :c AND #ls < :s)"
        names["#ls"] = "last_seq"
        values[":s"] = seq
    try:
        store.put(
            {
                "tenant_id": item["tenant_id"],
                "operation_id": keys.history_id(item["operation_id"]),
                "created_at": created_at,
                "last_seq": seq,
                "v": 1,
                "entries": [entry],
                **({TTL_ATTRIBUTE: int(ttl)} if ttl is not None else {}),
            },
            condition,
            names,
            values,
        )
    except ConditionFailed:
        if strict:
            raise
        return False
    return True


def _place(current: dict[str, Any], entry: dict[str, Any]) -> tuple[list[Any], int] | None:
    """The entries of the history ``current`` with ``entry`` in the place of its ``seq``, kept
    to :data:`MAX_ENTRIES` (the first and the newest), and the new ``dropped`` count; None when
    there is nothing to write: the ``seq`` is there already, it is older than an erasure that
    starts the history, or compaction has already dropped entries that old."""
    entries = list(current.get("entries") or [])
    seq = int(entry["seq"])
    if any(int(e["seq"]) == seq for e in entries):
        return None
    erased = bool(entries) and entries[0].get("transition") == Transition.ERASE.value
    if erased and seq < int(entries[0]["seq"]):
        return None  # an erased history never takes back what came before the erasure
    dropped = int(current.get("dropped", 0))
    if dropped and len(entries) >= 2 and int(entries[0]["seq"]) < seq < int(entries[1]["seq"]):
        return None  # as old as entries compaction dropped: it would be dropped at once
    merged = sorted([*entries, entry], key=lambda e: int(e["seq"]))
    if len(merged) > MAX_ENTRIES:
        kept = [merged[0], *merged[len(merged) - (MAX_ENTRIES - 1) :]]
        if entry not in kept:
            return None
        dropped += len(merged) - len(kept)
        merged = kept
    return merged, dropped


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
