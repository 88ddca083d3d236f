"""The engine's history bounds scaled down, so that a small bound reaches them.

The engine keeps an operation's history in its item and bounds it in entries: the API shows the
first and the newest (``MAX_ENTRIES``: 50), the compaction keeps as many once the list is past
``COMPACT_AT`` (60), and a claim or a requeue is refused until the list has fewer than
``HISTORY_ROOM`` entries (80), which the refused writer makes itself by compacting. At the model's
bounds an operation makes a handful of transitions, so those paths are never taken; with
``Bound(history_room=N)`` the three are set to ``N - 2``, ``N - 1`` and ``N`` (the same order)
for the search, and the history invariant expects what the API shows at that bound. This changes
numbers the engine reads, not its code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from leasefence import history
from leasefence.engine import _expr


@contextlib.contextmanager
def small_history(room: int | None) -> Iterator[None]:
    """Within: the history bounds at ``room`` (None: as they are)."""
    if room is None:
        yield
        return
    if room < 4:
        raise ValueError("a history room below 4 leaves no entry to compact")
    saved = (history.MAX_ENTRIES, history.COMPACT_AT, history.HISTORY_ROOM, _expr.HISTORY_ROOM)
    history.MAX_ENTRIES, history.COMPACT_AT = room - 2, room - 1
    history.HISTORY_ROOM = _expr.HISTORY_ROOM = room
    try:
        yield
    finally:
        history.MAX_ENTRIES, history.COMPACT_AT, history.HISTORY_ROOM, _expr.HISTORY_ROOM = saved


def shown(transitions: list[str]) -> list[str]:
    """The entries the history reader shows of these transitions: the first and the
    ``MAX_ENTRIES`` - 1 newest."""
    if len(transitions) <= history.MAX_ENTRIES:
        return transitions
    return [transitions[0], *transitions[len(transitions) - (history.MAX_ENTRIES - 1) :]]
