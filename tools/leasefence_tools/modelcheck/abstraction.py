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

- *Claim tokens' numbers, and claim markers no request will read again* (:class:`Markers`): a
  worker's tokens are renumbered in their order among those the state still names, and a
  marker whose token no resend holds is left out.

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
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from leasefence import history, keys
from leasefence.limits import HISTORY_ROOM_BYTES
from leasefence.model import State
from leasefence_tools.modelcheck.world import canonical

if TYPE_CHECKING:
    from leasefence_tools.modelcheck.protocol import Bound

#: What the abstract digest leaves out, as a checkpoint's signature names it (a search saved
#: with another abstract digest is not taken up).
LEAVES_OUT = ("history details", "ended histories", "token numbers", "dead markers")

#: Per item (the digest of its canonical JSON): the abstract item's JSON and digest, and the
#: operation's id when it ended.
Cache = dict[bytes, tuple[bytes, bytes, str | None]]

_ENDED = {State.SUCCEEDED.value, State.FAILED_TERMINAL.value, State.CANCELLED.value}


def abstracted(
    cache: Cache,
    local: bytes,
    names: Sequence[bytes],
    texts: Sequence[bytes],
    markers: Markers,
) -> tuple[bytes, list[bytes], list[bytes]]:
    """A state (the actors' local JSON, its items' digests and JSON) as the abstract digest
    reads it; ``cache`` keeps each item's abstract form (items are shared by many states)."""
    out_names, out_texts, ended = [], [], []
    for name, text in zip(names, texts, strict=True):
        known = cache.get(name)
        if known is None:
            new_text, op = abstract_item(text)
            known = cache[name] = (new_text, _name(new_text) if new_text != text else name, op)
        out_texts.append(known[0])
        out_names.append(known[1])
        if known[2] is not None:
            ended.append(known[2])
    actors = json.loads(local)
    for op in ended:
        actors["history"].pop(op, None)
    if not actors.get("inflight"):
        out_names, out_texts = markers.renumber(actors, out_names, out_texts)
    local = json.dumps(actors, sort_keys=True, separators=(",", ":")).encode()
    return local, out_names, out_texts


#: A worker's claim token as JSON text (``"w1.3"``: worker ``w1``, its fourth token).
_TOKEN = re.compile(rb'"(w[0-9]+)\.([0-9]+)"')


class Markers:
    """Claim tokens renumbered, per worker, in the order of their numbers among the tokens the
    state still refers to; claim markers no request will read again left out.

    A worker's tokens are ``w1.0``, ``w1.1``..., one per claim request, never sent again except
    by a resend of the request whose answer was lost (the worker's ``hold`` names its token),
    every one sent at most the worker's next (``n``).
    The engine compares tokens only for equality (an item's ``claim_token`` with the token a
    request sends; a claim-next marker's key is a hash of worker and token), and so does the
    one-claim-per-token invariant; a token after the next is one nobody has seen. So a state
    whose tokens (the next one among them) are renamed one to one, keeping their order, behaves
    as the state does.
    A marker whose token is not a resend its worker holds is never read again (only that
    worker sends that token, and it sends a new one), so it is left out. States with a call in
    flight (``inflight``: its recorded answers hold tokens and markers' keys as text) keep
    theirs."""

    def __init__(self, workers: Sequence[str], tokens: int) -> None:
        #: A marker's id (after its prefix) -> its worker and token number.
        self._ids = {
            _marker_id(worker, n): (worker, n) for worker in workers for n in range(tokens)
        }

    def renumber(
        self, actors: dict, names: list[bytes], texts: list[bytes]
    ) -> tuple[list[bytes], list[bytes]]:
        live = {
            hold["token"]
            for state in actors["workers"].values()
            if (hold := state["hold"]) is not None and "token" in hold
        }
        kept: list[tuple[bytes, bytes, tuple[str, int] | None]] = []
        used: dict[str, set[int]] = {}
        for name, text in zip(names, texts, strict=True):
            marker = self._marker(text)
            if marker is not None and f"{marker[0]}.{marker[1]}" not in live:
                continue  # nobody will send its token again
            if marker is not None:
                used.setdefault(marker[0], set()).add(marker[1])
            for worker, n in _TOKEN.findall(text):
                used.setdefault(worker.decode(), set()).add(int(n))
            kept.append((name, text, marker))
        for token in live:
            worker, n = token.split(".")
            used.setdefault(worker, set()).add(int(n))
        # The next token too: every token sent so far is at most it (a claim refused with its
        # answer lost leaves it unspent, and its resend may make a claim with it).
        for worker, state in actors["workers"].items():
            used.setdefault(worker, set()).add(state["n"])
        order = {worker: {n: i for i, n in enumerate(sorted(ns))} for worker, ns in used.items()}
        for worker, state in actors["workers"].items():
            state["n"] = order[worker][state["n"]]
            hold = state["hold"]
            if hold is not None and "token" in hold:
                hold["token"] = f"{worker}.{order[worker][int(hold['token'].split('.')[1])]}"

        def renamed(match: re.Match[bytes]) -> bytes:
            worker = match.group(1).decode()
            return b'"%s.%d"' % (match.group(1), order[worker][int(match.group(2))])

        out_names, out_texts = [], []
        for name, text, marker in kept:
            new = _TOKEN.sub(renamed, text)
            if marker is not None:
                worker, n = marker
                new = new.replace(
                    _marker_id(worker, n).encode(),
                    _marker_id(worker, order[worker][n]).encode(),
                )
            out_names.append(name if new == text else _name(new))
            out_texts.append(new)
        return out_names, out_texts

    def _marker(self, text: bytes) -> tuple[str, int] | None:
        start = text.find(_MARKER_TEXT)
        if start < 0:
            return None
        start += len(_MARKER_TEXT)
        return self._ids.get(text[start : start + 64].decode())


#: A claim marker's id as it starts in an item's canonical JSON.
_MARKER_TEXT = json.dumps(keys.CLAIM_MARKER_PREFIX).encode()[1:-1]


def _marker_id(worker: str, n: int) -> str:
    return keys.claim_marker_id(worker, f"{worker}.{n}")[len(keys.CLAIM_MARKER_PREFIX) :]


def _name(text: bytes) -> bytes:
    return hashlib.blake2b(text, digest_size=16).digest()


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
    text = canonical(attributes)
    return text, attributes["operation_id"]["S"] if ended else None


_ENDED = {State.SUCCEEDED.value, State.FAILED_TERMINAL.value, State.CANCELLED.value}
