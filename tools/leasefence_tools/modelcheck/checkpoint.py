"""A search saved to disk and taken up again: a bound too large for one sitting on a shared
machine is explored across several runs.

What is saved is everything the breadth-first search keeps (the visited states with their table
snapshots and local states, the parents for traces, the graph for liveness, the end states, the
frontier, the transitions counted) and the world's item pool the snapshots name, pickled into one
file written atomically (a temporary file, then a rename). Nothing else survives between runs:
moto's remembered answers and the symmetry's per-item cache are rebuilt as the search goes. A
file saved for another bound or another symmetry is refused.

A search is saved every :attr:`Checkpoint.every_s` seconds between two expansions, when it
stops at ``max_states``, when it ends (taken up then, it only says its result again), and when
:attr:`Checkpoint.stop` is set (the command sets it on SIGINT or SIGTERM) before the next
expansion; taken up again, it explores exactly what the single run would have explored (a test
compares states, transitions and verdict).
"""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Checkpoint:
    path: Path
    every_s: float = 300.0
    #: Set to stop the search at its next expansion (saved first).
    stop: bool = False
    saved_at: float = field(default_factory=time.perf_counter)

    def due(self) -> bool:
        return self.stop or time.perf_counter() - self.saved_at >= self.every_s

    def save(self, signature: Any, search: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        with partial.open("wb") as out:
            pickle.dump({"signature": signature, **search}, out, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(partial, self.path)
        self.saved_at = time.perf_counter()

    def load(self, signature: Any) -> dict[str, Any] | None:
        """The saved search, None when there is none; refused when saved for another bound."""
        if not self.path.exists():
            return None
        with self.path.open("rb") as source:
            search: dict[str, Any] = pickle.load(source)  # a file this module wrote
        if search.pop("signature") != signature:
            raise ValueError(
                f"{self.path} holds a search of another bound or symmetry: remove it, or name"
                " another file"
            )
        return search
