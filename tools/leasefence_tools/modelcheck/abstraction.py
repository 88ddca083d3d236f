"""An abstract digest of a state, exact for what the model check holds the engine to: two
states that differ only in what no later step and no invariant reads are one state.

What is left out of a state's digest (:func:`abstracted`; ``explore(abstract=True)``, the
command's default where :func:`abstractable`):

- *The details of each history entry* (who, when, which fence, attempt, reason...): an entry is
  read as its transition (``e``, and ``q`` where a compaction stamped one). The engine writes
  the entries and reads them back only for the history reader, which the history invariant
  compares by transition (:func:`~leasefence_tools.modelcheck.invariants.history_complete_and_in_order`),
  and for a compaction, which the bound never reaches: a claim or requeue needs room by the list's
  count (kept) and its bytes (``hb``, left out), and :func:`abstract_item` stops the search if
  ``hb`` ever reaches half the room's bytes (:data:`~leasefence.limits.HISTORY_ROOM_BYTES`).
  Bounds with a small history room or an item put at the size limit compact, so their
  histories stay whole (:func:`abstractable`).
- *The history of an operation that ended* (succeeded, failed, cancelled), the item's list and
  the checker's record of it: no step appends to it any more (a final state has no transition
  out; the erasure replaces the list with its own entry, and the record with it), and nothing
  else reads it.

Everything else of every item (fence, attempts, state, tokens, lease, times, counters) and
every actor's local state stays in the digest, so two merged states take the same steps with
the same answers and the same invariants' verdicts, and reach end states alike (liveness).
What the digest leaves out is still checked: the explorer checks the history of every
operation a step changed on every transition, before it looks the state up
(:mod:`~leasefence_tools.modelcheck.explorer`), not only in new states. Tests compare the
verdicts with and without, clean and for every mutation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from leasefence import history
from leasefence.limits import HISTORY_ROOM_BYTES
from leasefence.model import State

if TYPE_CHECKING:
    from leasefence_tools.modelcheck.protocol import Bound

#: Per item (the digest of its canonical JSON): the abstract item's JSON and digest, and the
#: operation's id when it ended.
Cache = dict[bytes, tuple[bytes, bytes, str | None]]

_ENDED = {State.SUCCEEDED.value, State.FAILED_TERMINAL.value, State.CANCELLED.value}


def abstracted(
    cache: Cache,
    local: bytes,
    names: Sequence[bytes],
    texts: Sequence[bytes],
) -> tuple[bytes, list[bytes], list[bytes]]:
    """A state (the actors' local JSON, its items' digests and JSON) as the abstract digest
    reads it; ``cache`` keeps each item's abstract form (items are shared by many states)."""
    out_names, out_texts, ended = [], [], []
    for name, text in zip(names, texts, strict=True):
        known = cache.get(name)
        if known is None:
            new_text, op = abstract_item(text)
            known = cache[name] = (
                new_text,
                name if new_text == text else hashlib.blake2b(new_text, digest_size=16).digest(),
                op,
            )
        out_texts.append(known[0])
        out_names.append(known[1])
        if known[2] is not None:
            ended.append(known[2])
    if ended:
        actors = json.loads(local)
        for op in ended:
            actors["history"].pop(op, None)
        local = json.dumps(actors, sort_keys=True, separators=(",", ":")).encode()
    return local, out_names, out_texts


def abstractable(bound: Bound) -> bool:
    """Whether the abstract digest is exact at ``bound``: the engine reads a history's entries
    and bytes only to compact it, which a bound reaches only with a small history room
    (:attr:`Bound.history_room`) or an item put at the size limit."""
    return bound.history_room is None and not bound.size_limits


def abstract_item(text: bytes) -> tuple[bytes, str | None]:
    """An item's canonical JSON as the abstract digest reads it, and the operation's id when it
    is an operation that ended. Its history list (``h``) is read as the transitions it holds
    (each entry's ``e``, and ``q`` where a compaction stamped one), and left out once the
    operation ended; the list's bytes (``hb``) are left out (see above)."""
    attributes = json.loads(text)
    entries = attributes.get(history.ITEM_HISTORY)
    if entries is None:
        return text, None
    hb = int(attributes.get(history.ITEM_BYTES, {"N": "0"})["N"])
    if hb * 2 >= HISTORY_ROOM_BYTES:
        raise AssertionError(f"history of {hb} bytes: too near the room's bound to abstract")
    attributes.pop(history.ITEM_BYTES, None)
    state = attributes.get("state", {}).get("S")
    ended = state in _ENDED and "S" in attributes.get("operation_id", {})
    if ended:
        del attributes[history.ITEM_HISTORY]
    else:
        attributes[history.ITEM_HISTORY] = {
            "L": [
                {"M": {k: v for k, v in entry["M"].items() if k in ("e", "q")}}
                for entry in entries["L"]
            ]
        }
    text = json.dumps(attributes, sort_keys=True, separators=(",", ":")).encode()
    return text, attributes["operation_id"]["S"] if ended else None


_ENDED = {State.SUCCEEDED.value, State.FAILED_TERMINAL.value, State.CANCELLED.value}
