"""moto's answers remembered: the same request against the same table gets the answer moto gave
the first time, and leaves the table as moto left it, without running moto again.

moto's DynamoDB is a deterministic function of the request's bytes and the table's items (no
clock, no randomness in an item request's answer), and a breadth-first search sends the same
request to the same table again and again: the sweep of the same items from states that differ
only in what a worker remembers, the history read of every new state, the same claim in sibling
states. A request on one item (get, put, update, delete) is remembered by that item alone: moto's
answer and what it writes depend on the item under the request's key and nothing else (its
condition and update expressions read only that item; checked each time moto runs one), so the
same update of the same item is answered from here whatever the other items hold. Many requests
are answered from here (``make modelcheck`` prints how many). The engine's requests and their
answers are byte for byte what moto would give; ``World(memo=False)`` leaves it out, and a test
checks that a bound explores the same states either way (``MemoClient.remember``).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any, Protocol

from leasefence_tools.modelcheck.direct_client import DirectClient

#: Actions that only read: their answer is remembered, the table is not touched.
READS = frozenset({"GetItem", "Query", "Scan", "TransactGetItems", "BatchGetItem"})
#: Actions on the one item their request names: remembered by that item, not the whole table.
ONE_ITEM = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem"})


class Table(Protocol):
    """What the memo needs of the table: its snapshot now, and a way back to one."""

    def current(self, changed: bool = False) -> tuple[bytes, ...]: ...

    def restore(self, saved: tuple[bytes, ...] | None) -> None: ...

    def named(self, request: dict[str, Any], saved: tuple[bytes, ...]) -> bytes | None:
        """The name of the item ``request`` (a one-item request's JSON) is about in ``saved``."""
        ...

    def replaced(
        self, saved: tuple[bytes, ...], old: bytes | None, new: bytes | None
    ) -> tuple[bytes, ...]:
        """``saved`` with the item ``old`` replaced by ``new`` (None: absent), in key order."""
        ...


class MemoClient(DirectClient):
    """A :class:`DirectClient` that remembers up to ``limit`` answers (compressed; the oldest
    forgotten first), each with the snapshot of the table the request left."""

    def __init__(self, client: Any, account: str, region: str, table: Table, limit: int) -> None:
        super().__init__(client, account, region)
        self._table, self._limit = table, limit
        #: Per request: its status, its answer, and the table it left (a whole-table request:
        #: the snapshot; a one-item request: the item's names before and after; a read: None).
        self._answers: dict[bytes, tuple[int, bytes, Any]] = {}
        self.hits = 0
        #: False: every request goes to moto (what the memo must be equivalent to).
        self.remember = True

    def forget(self) -> None:
        self._answers.clear()

    def send(self, operation: Any, body: bytes) -> tuple[int, bytes]:
        if not self.remember:
            return super().send(operation, body)
        before = self._table.current()
        if operation.name in ONE_ITEM:
            return self._one_item(operation, body, before)
        key = hashlib.blake2b(operation.name.encode() + body + b"".join(before)).digest()
        known = self._answers.get(key)
        if known is not None:
            self.hits += 1
            status, packed, after = known
            if after is not None and after != before:
                self._table.restore(after)
            return status, zlib.decompress(packed)
        status, answer = super().send(operation, body)
        after = None if operation.name in READS else self._table.current(changed=True)
        self._keep(key, (status, zlib.compress(answer, 1), after))
        return status, answer

    def _one_item(
        self, operation: Any, body: bytes, before: tuple[bytes, ...]
    ) -> tuple[int, bytes]:
        """A request on one item, remembered by (request bytes, that item): the answer and the
        item it leaves (kept as ``(old, new)`` names; the rest of the table is untouched)."""
        request = json.loads(body)
        old = self._table.named(request, before)
        key = hashlib.blake2b(operation.name.encode() + body + b"\0" + (old or b"-")).digest()
        known = self._answers.get(key)
        if known is not None:
            self.hits += 1
            status, packed, change = known
            if change is not None and change[0] != change[1]:
                self._table.restore(self._table.replaced(before, *change))
            return status, zlib.decompress(packed)
        status, answer = super().send(operation, body)
        change = None
        if operation.name not in READS:
            after = self._table.current(changed=True)
            new = self._table.named(request, after)
            if after != self._table.replaced(before, old, new):
                raise AssertionError(f"{operation.name} changed items it does not name")
            change = (old, new)
        self._keep(key, (status, zlib.compress(answer, 1), change))
        return status, answer

    def _keep(self, key: bytes, known: tuple[int, bytes, Any]) -> None:
        if len(self._answers) >= self._limit:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = known
