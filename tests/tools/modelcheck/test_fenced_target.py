"""Kind ``f``: the real FencedTable as the class-B target, claims as the HTTP worker builds them.
The mutation ``http_claim_from_request`` (a cut lease with a class-B target over HTTP) is found
by ``python -m leasefence_tools.modelcheck --mutations`` at its bound (minutes of CPU: not in
``make test``); here its counterexample is replayed against the engine as it is and mutated."""

from __future__ import annotations

import pytest

from leasefence_tools.modelcheck import invariants
from leasefence_tools.modelcheck.mutations import LARGE_MUTATIONS
from leasefence_tools.modelcheck.protocol import apply, enqueue_all, initial_local, ops_view
from leasefence_tools.modelcheck.world import START_MS, World

MUTATION = next(m for m in LARGE_MUTATIONS if m.name == "http_claim_from_request")

#: w1 claims o1 (its lease as asked) and stalls past it; w2 takes o1 over (its lease cut from
#: 30 s to 10 s), raises and writes, completes, claims o2 and raises: with two entries the
#: target prunes o1's, and its horizon becomes o1's newest claim time; then the stale w1 raises.
TRACE = [
    ("claim", "w1", "o1", False),
    ("jump",),
    ("claim", "w2", "o1", False),
    ("raise", "w2"),
    ("write", "w2"),
    ("complete", "w2"),
    ("claim", "w2", "o2", False),
    ("raise", "w2"),
    ("raise", "w1"),
]


@pytest.fixture(scope="module")
def world():
    with World() as world:
        yield world


def _replay(world: World) -> tuple[dict, list[str]]:
    """Run :data:`TRACE`; the local state at its end and every safety invariant broken."""
    bound = MUTATION.bound
    world.restore(None)
    local = initial_local(bound)
    local["now"] = START_MS
    enqueue_all(world.engine(START_MS), bound, local)
    broken = []
    for step in TRACE:
        before = ops_view(world.items())
        seen = apply(world, local, step, local["now"])
        after = ops_view(world.items())
        for invariant in invariants.SAFETY:
            if (why := invariant(before, after, local, seen)) is not None:
                broken.append(f"{invariant.__name__}: {why}")
    return local, broken


def test_the_http_worker_states_the_granted_lease(world):
    local, broken = _replay(world)
    assert broken == []
    # w2 asked for 30 s and got 10 s: its claim says so, with the claim time the engine stated.
    expires, lease_ms, claimed_at = local["workers"]["w2"]["hold"]["claim"]
    assert lease_ms == 10_000 and claimed_at == expires - 10_000
    # The stale w1 was refused by the target (its hold dropped), after its lease lapsed.
    assert local["workers"]["w1"]["hold"] is None


def test_a_claim_built_from_the_lease_asked_for_lets_a_stale_write_in(world):
    with MUTATION.apply():
        local, broken = _replay(world)
    assert local["workers"]["w2"]["hold"]["claim"][1:] == [30_000, None]
    assert broken == ["only_the_holder_writes: o1: class-B write by fence 1 after fence 2"]
