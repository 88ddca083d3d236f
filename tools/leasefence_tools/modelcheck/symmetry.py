"""Symmetry reduction: states that differ only in which worker is which, or which of two
operations of the same kind is which, are one state for the visited set.

The workers of a bound are interchangeable (same steps, same budgets), and so are two
operations of the same kind (same class, attempts and budgets; payloads that differ only in the
operation's id). A state renamed by such a permutation behaves as the state does, renamed, so
the search needs only one state of each class (Ip and Dill's scalarsets, TLC's ``SYMMETRY``):
:class:`Canon` names a state by the smallest digest over every permutation of its ids, applied
to the table's items and the actors' local state alike.

Renaming is textual, over the canonical JSON: worker ids (``w1``), operation ids (``o1``, also
inside a payload item's key and in the ``payload_json`` text), and the values derived from them
by hashing: each payload's SHA-256 (``payload_hash`` and the payload item's key) and each claim
marker's key (:func:`leasefence.keys.claim_marker_id` of a worker and its token). An id is
renamed where it is not preceded by a letter and not followed by a digit (``w1`` in ``w1.0``,
``o1`` in ``\\u0002o1\\u0000``, never ``o12``).

What the engine does not treat alike: a claim-next takes the oldest due operation, and two
operations due at the same instant come back in the table's key order (moto's; DynamoDB leaves
the order of equal index keys unspecified). With operation symmetry, a state's class explores
one of those two orders; :data:`WORKERS_ONLY` keeps the exact reduction (workers only). Tests
compare verdicts with and without both.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence

from leasefence import keys
from leasefence.targets.fenced_table import ENTRY_PREFIX, fence_attribute
from leasefence_tools.modelcheck.abstraction import Markers, abstractable, abstracted
from leasefence_tools.modelcheck.protocol import TENANT, Bound, asked_lease, payload_of

#: Claim tokens a worker can reach (``w1.0`` ... ): more than any bound sends.
_TOKENS = 64

OPS = "ops"
WORKERS_ONLY = "workers"
NONE = "none"


def _permutations(names: Sequence[str]) -> list[dict[str, str]]:
    return [dict(zip(names, order, strict=True)) for order in itertools.permutations(names)]


def _op_permutations(bound: Bound) -> list[dict[str, str]]:
    """Every renaming of operations that keeps each one's kind."""
    groups: dict[str, list[str]] = {}
    for op, kind in bound.ops():
        groups.setdefault(kind, []).append(op)
    out: list[dict[str, str]] = [{}]
    for names in groups.values():
        out = [{**done, **more} for done in out for more in _permutations(names)]
    return out


class Canon:
    """The canonical digest of a state under the bound's symmetries (``mode``: :data:`OPS`,
    :data:`WORKERS_ONLY` or :data:`NONE`)."""

    def __init__(self, bound: Bound, mode: str = OPS, abstract: bool = False) -> None:
        if abstract and not abstractable(bound):
            raise ValueError(
                "histories are read whole at a bound with a history room or size limit"
            )
        self.mode = mode
        #: Histories read as their transitions (:mod:`.abstraction`).
        self.abstract = abstract
        #: Per item (the digest of its JSON), the abstract item's text and digest, and the
        #: operation's id when it ended.
        self._abstract: dict[bytes, tuple[bytes, bytes, str | None]] = {}
        self._markers = Markers([f"w{index + 1}" for index in range(bound.workers)], _TOKENS)
        # Workers that ask for the same lease are interchangeable (kind f: the first asks less).
        by_lease: dict[int, list[str]] = {}
        for index in range(bound.workers):
            by_lease.setdefault(asked_lease(bound, index), []).append(f"w{index + 1}")
        worker_maps: list[dict[str, str]] = [{}]
        if mode != NONE:
            for names in by_lease.values():
                worker_maps = [
                    {**done, **more} for done in worker_maps for more in _permutations(names)
                ]
        op_maps = _op_permutations(bound) if mode == OPS else [{}]
        self.renamings: list[dict[str, str]] = []
        for wmap, omap in itertools.product(worker_maps, op_maps):
            renaming = {**wmap, **omap}
            if all(k == v for k, v in renaming.items()):
                continue  # the identity is always taken
            self.renamings.append(self._derived(renaming))
        #: Per item (the digest of its JSON) and renaming, the digest of the renamed item: items
        #: are shared by many states, so each is renamed once.
        self._renamed: dict[tuple[bytes, int], bytes] = {}

    @staticmethod
    def _derived(renaming: dict[str, str]) -> dict[str, str]:
        """The renaming with the hashes derived from the renamed ids."""
        out = dict(renaming)
        for old, new in renaming.items():
            if old.startswith("o"):
                for other in (False, True):
                    out[payload_of(old, other)[1][7:]] = payload_of(new, other)[1][7:]
                start = len(ENTRY_PREFIX)
                out[fence_attribute(TENANT, old)[start:]] = fence_attribute(TENANT, new)[start:]
            else:
                for n in range(_TOKENS):
                    old_marker = keys.claim_marker_id(old, f"{old}.{n}")
                    new_marker = keys.claim_marker_id(new, f"{new}.{n}")
                    out[old_marker[len(keys.CLAIM_MARKER_PREFIX) :]] = new_marker[
                        len(keys.CLAIM_MARKER_PREFIX) :
                    ]
        return out

    def digest(self, local: bytes, names: Sequence[bytes], texts: Sequence[bytes]) -> bytes:
        """The smallest digest of the state over every renaming, the identity included: its
        items (``names``: the digest of each one's canonical JSON, ``texts``) in any order, and
        the local state's canonical JSON."""
        if self.abstract:
            local, names, texts = abstracted(self._abstract, local, names, texts, self._markers)
        best = _digest(local, list(names))
        for index, renaming in enumerate(self.renamings):

            def rename(match: re.Match[str], renaming: dict[str, str] = renaming) -> str:
                return renaming.get(match.group(0), match.group(0))

            renamed_local = json.dumps(
                json.loads(_NAMES.sub(rename, local.decode())),
                sort_keys=True,
                separators=(",", ":"),
            ).encode()
            renamed = []
            for name, text in zip(names, texts, strict=True):
                known = self._renamed.get((name, index))
                if known is None:
                    new_text = _NAMES.sub(rename, text.decode()).encode()
                    known = self._renamed[name, index] = _item_name(new_text)
                renamed.append(known)
            best = min(best, _digest(renamed_local, renamed))
        return best


#: What a renaming may change: a worker or operation id (not after a letter, not before a
#: digit) or a SHA-256 in hex (a payload's hash, also after the ``\\u0000`` in a payload item's
#: key; a claim marker's key), or the identity digest that names a class-B target's fence entry.
_NAMES = re.compile(
    r"(?<![A-Za-z])[ow][0-9]+(?![0-9])"
    r"|(?:(?<=\\u0000)|(?<![0-9a-f]))[0-9a-f]{64}(?![0-9a-f])"
    r"|(?<=lf_fence_)[0-9a-f]{40}"
)


def _item_name(text: bytes) -> bytes:
    return hashlib.blake2b(text, digest_size=16).digest()


def _digest(local: bytes, names: list[bytes]) -> bytes:
    return hashlib.blake2b(b"".join(sorted(names)) + local, digest_size=16).digest()
