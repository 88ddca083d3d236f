"""The operation item's byte budget, computed from the limits: the largest item that any sequence
of commands can produce.

DynamoDB measures an item in bytes (UTF-8 for strings; a write that would make it larger than
:data:`~leasefence.limits.MAX_STORE_ITEM_BYTES` is refused, and every write costs a unit per KB of
it), while ids and free text are accepted by their length in characters. This module turns each
attribute the engine may store (:data:`~leasefence.schema.OPERATION_ATTRIBUTES`, and the history's
expiry mark) into its largest value in bytes, from the limits in :mod:`leasefence.limits`:

* an id of 256 characters is at most 1 KiB (four bytes a character);
* free text (a reason, a note, a payload reference) of 1,024 characters at most 4 KiB;
* the checkpoint is limited in bytes already, the intent is the JSON of a fence and an id (each
  character escaped at worst as ``\\ud83d\\ude00``, twelve bytes);
* index keys are at most DynamoDB's key limits (:func:`leasefence.keys.fit_key`);
* the history list holds at most :func:`max_history_entries` entries, each at most
  :func:`max_entry_bytes` (its ids cut by :func:`leasefence.stored.stored_id`, its reason by
  bytes: :mod:`leasefence.history`).

:func:`max_item_bytes` adds them up. A test drives an operation through the heaviest commands with
4-byte characters in every id and every free-text field at its maximum, checks that every write
succeeds and that no item it produces is larger (``tests/engine/test_item_budget.py``), and that
every attribute an item carries is budgeted here: a field added to the item later must be added to
:data:`ATTRIBUTE_BYTES`, and fit the same budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from leasefence.limits import (
    HISTORY_ROOM,
    HISTORY_ROOM_BYTES,
    MAX_CHECKPOINT_BYTES,
    MAX_ENTRY_ID_BYTES,
    MAX_ENTRY_TEXT_BYTES,
    MAX_ID_BYTES,
    MAX_ID_LENGTH,
    MAX_ITEM_PAYLOAD_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    MAX_TEXT_BYTES,
)
from leasefence.model import Resolution, State, TargetClass, Transition
from leasefence.schema import MAX_OPERATION_SHARDS, PAYLOAD_BODY
from leasefence.tracecontext import MAX_TRACESTATE_BYTES, TRACEPARENT_BYTES

#: A number's size at most (DynamoDB: about one byte per two significant digits, plus one).
NUMBER_BYTES = 21
#: A boolean's size.
BOOL_BYTES = 1
#: What a list or a map costs beyond its elements, and each element beyond its value.
CONTAINER_BYTES = 3
ELEMENT_BYTES = 1
#: The longest JSON escape of one character (a character outside the BMP as two ``\\uXXXX``).
JSON_CHAR_BYTES = 12

_STATE_BYTES = max(len(s.value) for s in State)
_TRANSITION_BYTES = max(len(t.value) for t in Transition)
#: Small keys and codes the engine makes itself: an index partition (``quarantined#<shard>``,
#: ``purge#<shard>``), a target class, a closing command's name, a resolution
#: (``resolved:failed_terminal`` as an outcome code is an id, budgeted as one).
_SHORT_BYTES = 64
_INTENT_BYTES = len('{"fence":,"what":""}') + NUMBER_BYTES + JSON_CHAR_BYTES * MAX_ID_LENGTH
_HASH_BYTES = len("sha256:") + 64

#: Per attribute of the operation item, its largest value in bytes (see the module's docstring).
ATTRIBUTE_BYTES: dict[str, int] = {
    # identity
    # the partition key: the tenant id and its write shard (a tab and up to three digits)
    "tenant_id": MAX_ID_BYTES + len(f"\t{MAX_OPERATION_SHARDS - 1}"),
    "operation_id": MAX_ID_BYTES,
    "job_type": MAX_ID_BYTES,
    "target_class": max(len(c.value) for c in TargetClass),
    "payload_hash": _HASH_BYTES,
    "payload_ref": MAX_TEXT_BYTES,
    "payload_inline": BOOL_BYTES,
    "payload_json": MAX_ITEM_PAYLOAD_BYTES,  # layout 1 only (layout 2: the payload item)
    "lv": NUMBER_BYTES,
    "job_type_version": NUMBER_BYTES,
    "created_at": NUMBER_BYTES,
    # the producer's trace context (:mod:`leasefence.tracecontext`: validated and bounded)
    "traceparent": TRACEPARENT_BYTES,
    "tracestate": MAX_TRACESTATE_BYTES,
    # state and fences
    "state": _STATE_BYTES,
    "fence": NUMBER_BYTES,
    "attempts": NUMBER_BYTES,
    "max_attempts": NUMBER_BYTES,
    "attempt_budget": NUMBER_BYTES,
    "updated_at": NUMBER_BYTES,
    "transition": _TRANSITION_BYTES,
    "actor": MAX_ID_BYTES,
    "seq": NUMBER_BYTES,
    # the sparse indexes
    "due_home": MAX_PARTITION_KEY_BYTES,
    "due_pk": MAX_PARTITION_KEY_BYTES,
    "due_at": NUMBER_BYTES,
    "sweep_pk": _SHORT_BYTES,
    "sweep_at": NUMBER_BYTES,
    "parked_pk": _SHORT_BYTES,
    "parked_at": NUMBER_BYTES,
    "purge_pk": _SHORT_BYTES,
    "purge_at": NUMBER_BYTES,
    "expires_at_epoch_s": NUMBER_BYTES,
    # the claim
    "lease_owner": MAX_ID_BYTES,
    "lease_expires_at": NUMBER_BYTES,
    "lease_ms": NUMBER_BYTES,
    "lease_default_ms": NUMBER_BYTES,
    "lease_max_ms": NUMBER_BYTES,
    "claimed_at": NUMBER_BYTES,
    "claimed_from": _STATE_BYTES,
    "claim_token": MAX_ID_BYTES,
    "checkpoint": MAX_CHECKPOINT_BYTES,
    "intent": _INTENT_BYTES,
    "requeued": BOOL_BYTES,
    # how it ended (or was parked)
    "closed_fence": NUMBER_BYTES,
    "closed_by": _SHORT_BYTES,
    "outcome_code": MAX_ID_BYTES,
    "reason": MAX_TEXT_BYTES,
    # the approval gate
    "enqueued_by": MAX_ID_BYTES,
    "approval_expires_at": NUMBER_BYTES,
    "approved_by": MAX_ID_BYTES,
    "approved_at": NUMBER_BYTES,
    # operator decisions, payload retention, erasure
    "resolution_note": MAX_TEXT_BYTES,
    "resolved_as": max(len(r.value) for r in Resolution),
    "resolve_token": MAX_ID_BYTES,
    "payload_purged_at": NUMBER_BYTES,
    "erased_at": NUMBER_BYTES,
    # the history: its list is :func:`max_history_bytes` (computed below), its counters
    "hd": NUMBER_BYTES,
    "hv": NUMBER_BYTES,
    "hx": NUMBER_BYTES,
    "hb": NUMBER_BYTES,
}

#: A history entry's fields (:func:`leasefence.history.compact_entry` and the stamped entries
#: of a compaction), each at its largest.
ENTRY_FIELD_BYTES: dict[str, int] = {
    "e": _TRANSITION_BYTES,
    "t": NUMBER_BYTES,
    "q": NUMBER_BYTES,
    "s": _STATE_BYTES,
    "p": _STATE_BYTES,
    "f": NUMBER_BYTES,
    "n": NUMBER_BYTES,
    "d": NUMBER_BYTES,
    "a": MAX_ENTRY_ID_BYTES,
    "pa": MAX_ENTRY_ID_BYTES,
    "o": MAX_ENTRY_ID_BYTES,
    "r": MAX_ENTRY_TEXT_BYTES,
}


def max_entry_bytes() -> int:
    """The largest history entry (a map with every field at its largest)."""
    return CONTAINER_BYTES + sum(
        ELEMENT_BYTES + len(name) + size for name, size in ENTRY_FIELD_BYTES.items()
    )


def max_history_entries() -> int:
    """The most entries the list in the item ever holds: a claim, a takeover or a requeue needs
    fewer than :data:`~leasefence.limits.HISTORY_ROOM` (it compacts first otherwise); after it, at
    most its own entry, one closing transition (a completion, a failure, a retry, a park) and an
    operator's final resolution are added before the next one (an erasure replaces the list)."""
    return HISTORY_ROOM + 2


def max_history_bytes() -> int:
    """The history list at its largest: bounded by its count (:func:`max_history_entries`) and by
    its bytes. A write that starts a loop needs ``hb`` (the list's bytes, an upper bound: see
    :func:`leasefence.history.start`) under :data:`~leasefence.limits.HISTORY_ROOM_BYTES`; after
    it at most three entries are added before the next such write (as for the count)."""
    by_count = max_history_entries() * (ELEMENT_BYTES + max_entry_bytes())
    by_bytes = HISTORY_ROOM_BYTES - 1 + 3 * (ELEMENT_BYTES + max_entry_bytes())
    return CONTAINER_BYTES + min(by_count, by_bytes)


def value_bytes(value: Any) -> int:
    """DynamoDB's size of one value as the engine writes it (a string, a number, a boolean, a
    list or a map of them): what :mod:`leasefence_tools.bench.units` measures on the wire."""
    if value is None or isinstance(value, bool):
        return BOOL_BYTES
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, (int, Decimal)):
        digits = "".join(map(str, Decimal(value).as_tuple().digits)).strip("0")
        return (max(len(digits), 1) + 1) // 2 + 1
    if isinstance(value, list):
        return CONTAINER_BYTES + sum(ELEMENT_BYTES + value_bytes(v) for v in value)
    if isinstance(value, dict):
        return CONTAINER_BYTES + sum(
            ELEMENT_BYTES + len(k.encode()) + value_bytes(v) for k, v in value.items()
        )
    raise TypeError(f"not a value the engine stores: {type(value).__name__}")


def history_bytes(entries: Sequence[Mapping[str, Any]]) -> int:
    """What ``hb`` counts for these entries: each entry and its element byte (the list's own
    container aside)."""
    return sum(ELEMENT_BYTES + value_bytes(dict(e)) for e in entries)


def max_item_bytes() -> int:
    """The largest operation item any sequence of commands can produce, in DynamoDB's measure
    (attribute names and values); a test keeps it below
    :data:`~leasefence.limits.MAX_STORE_ITEM_BYTES`."""
    fields = sum(len(name) + size for name, size in ATTRIBUTE_BYTES.items())
    return fields + len("h") + max_history_bytes()


def max_payload_item_bytes() -> int:
    """The largest payload item (layout 2: :mod:`leasefence.engine._payload_items`): its keys at
    DynamoDB's key limits (:func:`leasefence.keys.payload_id` fits the sort key) and the payload's
    canonical JSON at :data:`~leasefence.limits.MAX_ITEM_PAYLOAD_BYTES` as text (kept packed only
    when that is shorter, under a shorter name: :func:`leasefence.payloads.pack`)."""
    return (
        len("tenant_id")
        + MAX_PARTITION_KEY_BYTES
        + len("operation_id")
        + MAX_SORT_KEY_BYTES
        + len(PAYLOAD_BODY)
        + MAX_ITEM_PAYLOAD_BYTES
    )
