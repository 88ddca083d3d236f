"""Group commit: calls from several threads gathered into one batch request.

The first caller of a batch leads it: it waits ``window_s`` for others to join (up to ``limit``
items), then sends them all with one call of ``send`` and hands each member its own result.
Callers that come while a batch is being sent start the next one. A failure of the request
itself (``send`` raising, say :class:`~leasefence.errors.Unavailable`) is raised to every member
of that batch; an item's own refusal is in its result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Batch(Generic[T, R]):
    def __init__(self) -> None:
        self.items: list[T] = []
        self.bounds: list[tuple[float | None, float | None]] = []
        self.results: Sequence[R] = ()
        self.error: BaseException | None = None
        self.done = threading.Event()


class Coalescer(Generic[T, R]):
    """``send(items, deadline, try_timeout)`` answers one result per item, in order; each
    caller's ``deadline`` (a :func:`time.monotonic` instant) and ``try_timeout`` bound the
    request of its batch (the earliest and the shortest of its members)."""

    def __init__(
        self,
        send: Callable[[list[T], float | None, float | None], Sequence[R]],
        limit: int,
        window_s: float = 0.0,
    ) -> None:
        self._send = send
        self._limit = limit
        self._window_s = window_s
        self._open: _Batch[T, R] | None = None
        self._lock = threading.Lock()

    def submit(self, item: T, deadline: float | None = None, try_timeout: float | None = None) -> R:
        return self.submit_all([item], deadline, try_timeout)[0]

    def submit_all(
        self, items: Sequence[T], deadline: float | None = None, try_timeout: float | None = None
    ) -> list[R]:
        """Several items of one caller, in order, in the same batch (the next one's when the open
        batch has no room for them all: never split, unless they are more than ``limit``)."""
        joined: list[tuple[_Batch[T, R], int, bool]] = []
        with self._lock:
            batch = self._open
            if batch is not None and len(batch.items) + len(items) > self._limit:
                batch = None  # no room: this caller starts the next one, the open one goes
            for item in items:
                leader = batch is None
                if batch is None:
                    batch = self._open = _Batch()
                joined.append((batch, len(batch.items), leader))
                batch.items.append(item)
                batch.bounds.append((deadline, try_timeout))
                if len(batch.items) >= self._limit:
                    self._open = batch = None  # full: the next item or caller starts another
        for batch, _index, leader in joined:
            if leader:
                self._lead(batch)
            else:
                batch.done.wait()
        results = []
        for batch, index, _leader in joined:
            if batch.error is not None:
                raise batch.error
            results.append(batch.results[index])
        return results

    def _lead(self, batch: _Batch[T, R]) -> None:
        if self._window_s > 0:
            time.sleep(self._window_s)
        with self._lock:
            if self._open is batch:
                self._open = None
        deadlines = [d for d, _ in batch.bounds if d is not None]
        timeouts = [t for _, t in batch.bounds if t is not None]
        try:
            batch.results = self._send(
                batch.items, min(deadlines, default=None), min(timeouts, default=None)
            )
        except BaseException as error:  # noqa: BLE001 - every member raises it
            batch.error = error
        finally:
            batch.done.set()
