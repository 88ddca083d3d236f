"""Symmetry reduction: a state renamed by a permutation of workers (or of operations of one kind)
is the same state for the visited set, and the reduced search reaches the same verdicts with
fewer states."""

from __future__ import annotations

import dataclasses

import pytest

from leasefence_tools.modelcheck.explorer import _pack, explore
from leasefence_tools.modelcheck.mutations import MUTATIONS
from leasefence_tools.modelcheck.protocol import Bound, apply, enqueue_all, initial_local
from leasefence_tools.modelcheck.symmetry import NONE, OPS, WORKERS_ONLY, Canon
from leasefence_tools.modelcheck.world import START_MS, World

from tests.tools.modelcheck.test_modelcheck import CLEAN_STATES

TWO_BY_TWO = Bound(kinds=("b", "b"), workers=2, attempts=3)


@pytest.fixture(scope="module")
def world():
    with World() as world:
        yield world


def _after(world: World, steps: list[tuple], bound: Bound = TWO_BY_TWO) -> tuple:
    """The state (local JSON, item names, item texts) after the enqueues and ``steps``."""
    world.restore(None)
    local = initial_local(bound)
    local["now"] = START_MS
    enqueue_all(world.engine(START_MS), bound, local)
    world.capture()
    for step in steps:
        apply(world, local, step, local["now"])
        world.capture()
    saved, _ = world.capture()
    return _pack(local), saved, list(world.texts)


@pytest.mark.parametrize(
    ("steps", "swapped", "same_under"),
    [
        # A claim by the other worker: its token, lease owner and history entry renamed.
        ([("claim", "w1", "o1", False)], [("claim", "w2", "o1", False)], WORKERS_ONLY),
        # A claim-next whose answer is lost: its claim marker's key is a hash of worker and token.
        ([("claim_next", "w1", None, True)], [("claim_next", "w2", None, True)], WORKERS_ONLY),
        # The other operation: its id, its payload item's key and its payload's hash renamed.
        ([("claim", "w1", "o1", False)], [("claim", "w1", "o2", False)], OPS),
        # Both at once, through a requeue (the resolve token names the operation).
        (
            [("claim", "w1", "o1", False), ("fail", "w1"), ("claim", "w2", "o2", False)],
            [("claim", "w2", "o2", False), ("fail", "w2"), ("claim", "w1", "o1", False)],
            OPS,
        ),
    ],
)
def test_a_renamed_state_is_one_state(world, steps, swapped, same_under):
    first = _after(world, steps)
    second = _after(world, swapped)
    assert Canon(TWO_BY_TWO, NONE).digest(*first) != Canon(TWO_BY_TWO, NONE).digest(*second)
    assert Canon(TWO_BY_TWO, same_under).digest(*first) == Canon(TWO_BY_TWO, same_under).digest(
        *second
    )
    if same_under == OPS:
        assert Canon(TWO_BY_TWO, WORKERS_ONLY).digest(*first) != Canon(
            TWO_BY_TWO, WORKERS_ONLY
        ).digest(*second)


def test_states_that_differ_are_not_merged(world):
    """A renaming never merges states that differ in more than names: one worker claimed, or
    both did."""
    canon = Canon(TWO_BY_TWO, OPS)
    one = _after(world, [("claim", "w1", "o1", False)])
    both = _after(world, [("claim", "w1", "o1", False), ("claim", "w2", "o2", False)])
    lost = _after(world, [("claim", "w1", "o1", True)])
    assert len({canon.digest(*one), canon.digest(*both), canon.digest(*lost)}) == 3


def _verdict(result) -> tuple:
    """What a search concluded: finished, the invariant broken (or liveness), the
    counterexample's length (a breadth-first search finds a shortest one)."""
    broken = result.violation.split(":")[0] if result.violation else None
    if result.dead_ends:
        broken = "liveness"
    return result.finished or broken is not None, broken, len(result.trace)


#: Each mutation's bound, with two workers where that stays cheap (something to rename): the
#: claim-token bound has two class-B operations already.
REDUCED = [
    ("cancel_after_attempt", 2, OPS),
    ("cancel_after_attempt", 2, WORKERS_ONLY),
    ("approval_by_reference", 2, OPS),
    ("claim_token_without_marker", 1, OPS),
    ("no_inline_compaction", 1, OPS),
    ("no_room_for_size", 1, OPS),
]


@pytest.mark.parametrize(("name", "workers", "symmetry"), REDUCED)
def test_the_reduced_search_reaches_the_same_verdicts(world, name, workers, symmetry):
    """The engine as it is passes the reduced search, with fewer states than the exact search
    when there is something to rename (as many when not); the mutated engine is caught by the
    same invariant with a counterexample as short as the exact search's."""
    mutation = next(m for m in MUTATIONS if m.name == name)
    bound = dataclasses.replace(mutation.bound, workers=workers)
    exact = explore(bound, world=world)
    reduced = explore(bound, world=world, symmetry=symmetry)
    assert _verdict(exact) == _verdict(reduced) == (True, None, 0), reduced.summary()
    if workers > 1 or len(set(bound.kinds)) < len(bound.kinds):
        assert reduced.states < exact.states or exact.states == 1  # one state: nothing to merge
    else:
        assert reduced.states == exact.states
    with mutation.apply():
        exact = explore(bound, world=world)
        reduced = explore(bound, world=world, symmetry=symmetry)
    assert _verdict(exact) == _verdict(reduced), reduced.summary()
    assert _verdict(reduced)[1] == mutation.invariant, reduced.summary()


def test_one_worker_one_kind_is_left_as_is(world):
    """Nothing to rename: the reduced search is the exact one."""
    mutation = next(m for m in MUTATIONS if m.name == "cancel_after_attempt")
    reduced = explore(mutation.bound, world=world, symmetry=OPS)
    assert reduced.states == CLEAN_STATES[mutation.name]
