"""moto's answers remembered: the same request against the same table gets the answer moto gave
the first time, and leaves the table as moto left it, without running moto again.

moto's DynamoDB is a deterministic function of the request's bytes and the table's items (no
clock, no randomness in an item request's answer), and a breadth-first search sends the same
request to the same table again and again: the sweep of the same items from states that differ
only in what a worker remembers, the history read of every new state, the same claim in sibling
states. Many requests are answered from here (``make modelcheck`` prints how many). The engine's
requests and their
answers are byte for byte what moto would give; ``World(memo=False)`` leaves it out, and a test
checks that a bound explores the same states either way
(``MemoClient.remember``).
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Protocol

from leasefence_tools.modelcheck.direct_client import DirectClient

#: Actions that only read: their answer is remembered, the table is not touched.
READS = frozenset({"GetItem", "Query", "Scan", "TransactGetItems", "BatchGetItem"})


class Table(Protocol):
    """What the memo needs of the table: its snapshot now, and a way back to one."""

    def current(self, changed: bool = False) -> tuple[bytes, ...]: ...

    def restore(self, saved: tuple[bytes, ...] | None) -> None: ...


class MemoClient(DirectClient):
    """A :class:`DirectClient` that remembers up to ``limit`` answers (compressed; the oldest
    forgotten first), each with the snapshot of the table the request left."""

    def __init__(self, client: Any, account: str, region: str, table: Table, limit: int) -> None:
        super().__init__(client, account, region)
        self._table, self._limit = table, limit
        self._answers: dict[bytes, tuple[int, bytes, tuple[bytes, ...] | None]] = {}
        self.hits = 0
        #: False: every request goes to moto (what the memo must be equivalent to).
        self.remember = True

    def forget(self) -> None:
        self._answers.clear()

    def send(self, operation: Any, body: bytes) -> tuple[int, bytes]:
        if not self.remember:
            return super().send(operation, body)
        before = self._table.current()
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
        if len(self._answers) >= self._limit:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = (status, zlib.compress(answer, 1), after)
        return status, answer
