"""Breadth-first search over every interleaving at a bound, with a visited set.

A state is the table's items and the actors' local states, known by their canonical digest
(:class:`~leasefence_tools.modelcheck.symmetry.Canon`: with symmetry reduction, the smallest over
the renamings of interchangeable workers and operations; with ``abstract``, of the state as
:mod:`~leasefence_tools.modelcheck.abstraction` reads it); a state seen before is not expanded
again (as TLC and stateright do). The search ends when no unexpanded state is left: every step
of every actor from every reachable state has been run against the engine. Every transition is
checked against the safety invariants (:data:`~leasefence_tools.modelcheck.invariants.SAFETY`)
and the history of every operation it changed against the engine's history reader; once done,
liveness: from every explored state some path in the explored graph leads to a state where
every operation has ended (:func:`dead_ends`).
"""

from __future__ import annotations

import json
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from leasefence import errors, history
from leasefence.model import Transition
from leasefence_tools.modelcheck import invariants
from leasefence_tools.modelcheck.abstraction import LEAVES_OUT
from leasefence_tools.modelcheck.checkpoint import Checkpoint
from leasefence_tools.modelcheck.protocol import (
    TENANT,
    Bound,
    apply,
    enabled,
    enqueue_all,
    initial_local,
    ops_view,
)
from leasefence_tools.modelcheck.small_history import small_history
from leasefence_tools.modelcheck.symmetry import NONE, Canon
from leasefence_tools.modelcheck.world import START_MS, Snapshot, World

K = TypeVar("K")


@dataclass
class Result:
    bound: Bound
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    #: This process's CPU time (on a shared machine, wall time says more about the others).
    cpu_seconds: float = 0.0
    finished: bool = False
    violation: str | None = None
    trace: list[str] = field(default_factory=list)
    dead_ends: int = 0

    @property
    def states_per_second(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        lines = [
            f"bound: {self.bound.describe()}",
            f"distinct states: {self.states}, transitions: {self.transitions},"
            f" {self.seconds:.1f} s ({self.states_per_second:.0f} states/s),"
            f" CPU {self.cpu_seconds:.1f} s",
        ]
        if self.violation is not None:
            lines.append(f"VIOLATION: {self.violation}")
            lines.append(f"counterexample ({len(self.trace)} steps):")
            lines.extend(f"  {index + 1}. {step}" for index, step in enumerate(self.trace))
        elif self.dead_ends:
            lines.append(f"LIVENESS: {self.dead_ends} state(s) from which no operation can end")
            lines.append(f"counterexample ({len(self.trace)} steps):")
            lines.extend(f"  {index + 1}. {step}" for index, step in enumerate(self.trace))
        elif not self.finished:
            lines.append(
                "search stopped before the end of the bound: every invariant held so far; NOT"
                " exhaustive, liveness not checked"
            )
        else:
            lines.append(
                "search finished: nothing left at the bound; every invariant held and every"
                " state has a way out"
            )
        return "\n".join(lines)


def _record_history(before: dict, after: dict, local: dict) -> None:
    """The transitions the checker saw commit, per operation, from the items' ``seq``."""
    for op, item in after.items():
        old_seq = before.get(op, {}).get("seq", 0)
        for _ in range(item.get("seq", 0) - old_seq):
            transition = item.get("transition")
            if transition == Transition.ERASE.value:
                local["history"][op] = [transition]
            else:
                local["history"].setdefault(op, []).append(transition)


def _read_history(engine: Any, op: str) -> list[str]:
    try:
        page = engine.history(TENANT, op, limit=history.MAX_ENTRIES)
    except errors.NotFound:
        return []
    return [
        Transition.CLAIM.value if entry["transition"] == "takeover" else entry["transition"]
        for entry in page.entries
    ]


def explore(
    bound: Bound,
    world: World | None = None,
    max_states: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    symmetry: str = NONE,
    checkpoint: Checkpoint | None = None,
    abstract: bool = False,
) -> Result:
    """Every interleaving at ``bound``; stops at the first violation (with its trace).
    ``progress`` is called with the distinct states and the states left to expand, every
    2,000 states. ``symmetry``: the ids renamed into one state
    (:mod:`~leasefence_tools.modelcheck.symmetry`; none by default). ``checkpoint``: the search
    taken up from its file when there is one, and saved to it as it goes
    (:mod:`~leasefence_tools.modelcheck.checkpoint`). ``abstract``: states merged by the abstract
    digest (:mod:`~leasefence_tools.modelcheck.abstraction`; exact at bounds it allows)."""
    own = world is None
    world = world or World()
    try:
        with small_history(bound.history_room):
            canon = Canon(bound, symmetry, abstract=abstract)
            return _explore(world, bound, max_states, progress, canon, checkpoint)
    finally:
        if own:
            world.close()


def _explore(
    world: World,
    bound: Bound,
    max_states: int | None,
    progress: Callable[[int, int], None] | None,
    canon: Canon,
    checkpoint: Checkpoint | None = None,
) -> Result:
    started = time.perf_counter(), time.process_time()
    result = Result(bound)
    world.restore(None)
    local = initial_local(bound)
    local["now"] = START_MS
    enqueue_all(world.engine(START_MS), bound, local)
    saved, items = world.capture()
    packed = _pack(local)
    root = canon.digest(packed, saved, world.texts)
    # Per state only what expanding it needs: its table snapshot and its actors' local state
    # (compressed canonical JSON); the graph as tuples of 16-byte digests.
    states: dict[bytes, tuple[Snapshot, bytes]] = {root: (saved, zlib.compress(packed, 1))}
    parents: dict[bytes, tuple[bytes, str] | None] = {root: None}
    edges: dict[bytes, tuple[bytes, ...]] = {}
    ends = {root} if invariants.is_end(ops_view(items)) else set()
    step_names: dict[str, str] = {}
    queue = deque([root])
    signature = (bound, canon.mode) + (LEAVES_OUT if canon.abstract else ())
    resumed = checkpoint.load(signature) if checkpoint is not None else None
    if resumed is not None:
        world.add_pool(resumed["pool"])
        states, parents, edges = resumed["states"], resumed["parents"], resumed["edges"]
        ends, step_names = resumed["ends"], resumed["step_names"]
        queue, result.transitions = deque(resumed["queue"]), resumed["transitions"]
        # The times count every run of the search, this one from where the last stopped.
        wall, cpu = resumed["seconds"]
        started = time.perf_counter() - wall, time.process_time() - cpu

    def save() -> None:
        assert checkpoint is not None
        search = {
            "states": states,
            "parents": parents,
            "edges": edges,
            "ends": ends,
            "step_names": step_names,
            "queue": list(queue),
            "transitions": result.transitions,
            "seconds": (time.perf_counter() - started[0], time.process_time() - started[1]),
            "pool": world.pool(),
        }
        checkpoint.save(signature, search)

    def trace_to(key: bytes) -> list[str]:
        steps = []
        while (parent := parents[key]) is not None:
            key, step = parent
            steps.append(step)
        return ["enqueue every operation", *reversed(steps)]

    while queue:
        if checkpoint is not None and checkpoint.due():
            save()
            if checkpoint.stop:
                return _done(result, states, started)
        key = queue.popleft()
        expanded = result.transitions
        saved, packed = states[key]
        raw = zlib.decompress(packed)
        local = json.loads(raw)
        world.restore(saved)
        before = ops_view(world.items())
        successors = set()
        for step in enabled(bound, local, before):
            world.restore(saved)
            after_local = json.loads(raw)  # a fresh copy (plain JSON: faster than deepcopy)
            seen = apply(world, after_local, step, local["now"])
            result.transitions += 1
            after_saved, items = world.capture()
            after = ops_view(items)
            _record_history(before, after, after_local)
            for invariant in invariants.SAFETY:
                broken = invariant(before, after, after_local, seen)
                if broken is not None:
                    result.violation = f"{invariant.__name__}: {broken}"
                    result.trace = [*trace_to(key), seen.step]
                    return _done(result, states, started)
            # The history of each operation this step changed (the others' items and records
            # are the parent's, checked when they last changed): on every transition, not only
            # into a new state, since an abstract digest (``abstract``) leaves out histories.
            changed = {op for op in {*before, *after} if before.get(op) != after.get(op)}
            if changed:
                engine = world.engine(after_local["now"])
                broken = invariants.history_complete_and_in_order(
                    before,
                    after,
                    after_local,
                    seen,
                    read=lambda op, engine=engine: _read_history(engine, op),
                    ops=changed,
                )
                if broken is not None:
                    result.violation = f"history_complete_and_in_order: {broken}"
                    result.trace = [*trace_to(key), seen.step]
                    return _done(result, states, started)
            after_packed = _pack(after_local)
            child = canon.digest(after_packed, after_saved, world.texts)
            successors.add(child)
            if child in states:
                continue
            states[child] = (after_saved, zlib.compress(after_packed, 1))
            parents[child] = (key, step_names.setdefault(seen.step, seen.step))
            if invariants.is_end(after):
                ends.add(child)
            queue.append(child)
            if progress is not None and len(states) % 2_000 == 0:
                progress(len(states), len(queue))
            if max_states is not None and len(states) >= max_states:
                # Taken up again, this state is expanded anew (its new successors are known).
                queue.appendleft(key)
                result.transitions = expanded
                if checkpoint is not None:
                    save()
                return _done(result, states, started)
        edges[key] = tuple(successors)
    if checkpoint is not None:
        save()
    result.finished = True
    stuck = dead_ends(edges, ends)
    result.dead_ends = len(stuck)
    if stuck:
        shortest = min(stuck, key=lambda k: len(trace_to(k)))
        result.trace = trace_to(shortest)
    return _done(result, states, started)


def _pack(local: dict[str, Any]) -> bytes:
    """The actors' local state as canonical JSON (what a state's digest covers)."""
    return json.dumps(local, sort_keys=True, separators=(",", ":")).encode()


def _done(result: Result, states: dict, started: tuple[float, float]) -> Result:
    result.states = len(states)
    result.seconds = time.perf_counter() - started[0]
    result.cpu_seconds = time.process_time() - started[1]
    return result


def dead_ends(edges: Mapping[K, Iterable[K]], ends: set[K]) -> set[K]:
    """The explored states from which no path in the explored graph reaches an end state: a
    refusal (or a fault) that leaves an operation with no way out."""
    reverse: dict[K, set[K]] = {}
    for source, targets in edges.items():
        for target in targets:
            reverse.setdefault(target, set()).add(source)
    alive, queue = set(ends), deque(ends)
    while queue:
        for source in reverse.get(queue.popleft(), ()):
            if source not in alive:
                alive.add(source)
                queue.append(source)
    return set(edges) - alive
