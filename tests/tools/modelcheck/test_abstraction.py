"""The abstract digest (histories read as their transitions, none once an operation ended): the
same verdicts as the exact digest, clean and for every mutation, with fewer states; and what it
leaves out is still checked."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from leasefence import history, keys
from leasefence_tools.modelcheck.__main__ import main
from leasefence_tools.modelcheck.abstraction import Markers, abstract_item, abstractable
from leasefence_tools.modelcheck.explorer import explore
from leasefence_tools.modelcheck.mutations import MUTATIONS
from leasefence_tools.modelcheck.protocol import Bound
from leasefence_tools.modelcheck.symmetry import NONE, OPS, Canon
from leasefence_tools.modelcheck.world import World

from tests.tools.modelcheck.test_modelcheck import CLEAN_STATES, TRACE_STEPS
from tests.tools.modelcheck.test_symmetry import _verdict

#: One class-B operation, one worker, two attempts, a clock jump, a lost answer, cancel.
ONE_OP = Bound(kinds=("b",), workers=1, attempts=2, requeues=0, erase=False)


@pytest.fixture(scope="module")
def world():
    with World() as world:
        yield world


def _entry(**fields: str) -> dict:
    return {"M": {k: ({"N": v} if v.isdigit() else {"S": v}) for k, v in fields.items()}}


def _item(state: str, entries: list[dict], hb: int = 120) -> bytes:
    item = {
        "operation_id": {"S": "o1"},
        "tenant_id": {"S": "t"},
        "state": {"S": state},
        "fence": {"N": "1"},
        history.ITEM_HISTORY: {"L": entries},
        history.ITEM_BYTES: {"N": str(hb)},
    }
    return json.dumps(item, sort_keys=True, separators=(",", ":")).encode()


def test_an_entry_is_read_as_its_transition_and_an_ended_history_not_at_all():
    by_w1 = [_entry(e="enqueue", a="producer", t="1"), _entry(e="claim", a="w1", t="1")]
    by_w2 = [_entry(e="enqueue", a="producer", t="1"), _entry(e="claim", a="w2", t="9")]
    swept = [_entry(e="enqueue", a="producer", t="1"), _entry(e="sweep", a="w2", t="9")]
    assert abstract_item(_item("claimed", by_w1)) == abstract_item(_item("claimed", by_w2, 130))
    assert abstract_item(_item("claimed", by_w1))[0] != abstract_item(_item("claimed", swept))[0]
    assert abstract_item(_item("claimed", by_w1))[1] is None
    # Ended: any history is the same, and the operation is named (its record is left out too).
    assert abstract_item(_item("succeeded", by_w1)) == abstract_item(_item("succeeded", swept))
    assert abstract_item(_item("succeeded", by_w1))[1] == "o1"
    # Everything else stays: another fence is another state.
    other = _item("claimed", by_w1).replace(b'"fence":{"N":"1"}', b'"fence":{"N":"2"}')
    assert abstract_item(other) != abstract_item(_item("claimed", by_w1))
    no_history = b'{"operation_id":{"S":"\\u0000job-types"}}'
    assert abstract_item(no_history) == (no_history, None)


def test_a_history_near_the_room_bound_stops_the_search():
    with pytest.raises(AssertionError, match="too near"):
        abstract_item(_item("claimed", [_entry(e="claim")], hb=history.HISTORY_ROOM_BYTES // 2))


def test_bounds_that_compact_keep_their_histories_whole():
    assert abstractable(ONE_OP)
    assert not abstractable(dataclasses.replace(ONE_OP, history_room=5))
    assert not abstractable(dataclasses.replace(ONE_OP, size_limits=1))
    with pytest.raises(ValueError, match="history room"):
        Canon(dataclasses.replace(ONE_OP, history_room=5), NONE, abstract=True)


#: Every mutation whose bound keeps histories short (the other two compact them).
ABSTRACTABLE = [m for m in MUTATIONS if abstractable(m.bound)]


@pytest.mark.parametrize("mutation", ABSTRACTABLE, ids=lambda m: m.name)
def test_the_abstract_search_reaches_the_same_verdicts(world, mutation):
    """The exact search's verdicts are pinned by ``test_modelcheck`` (clean: finished, every
    invariant held, no dead end, ``CLEAN_STATES``; mutated: the mutation's invariant broken,
    ``TRACE_STEPS`` long). The abstract search reaches the same ones with at most as many
    states, and a counterexample as short (breadth first, both shortest)."""
    abstract = explore(mutation.bound, world=world, abstract=True)
    assert _verdict(abstract) == (True, None, 0), abstract.summary()
    assert abstract.states <= CLEAN_STATES[mutation.name]
    with mutation.apply():
        abstract = explore(mutation.bound, world=world, abstract=True)
    assert _verdict(abstract) == (True, mutation.invariant, TRACE_STEPS[mutation.name]), (
        abstract.summary()
    )


def test_fewer_states_where_histories_differ_and_the_same_verdict_with_symmetry(world):
    """Fewer states, the same verdict, alone and with symmetry (two workers)."""
    exact = explore(ONE_OP, world=world)
    abstract = explore(ONE_OP, world=world, abstract=True)
    assert _verdict(exact) == _verdict(abstract) == (True, None, 0), abstract.summary()
    assert abstract.states < exact.states
    two = dataclasses.replace(ONE_OP, workers=2, lost_answers=0, cancel=False)
    reduced = explore(two, world=world, symmetry=OPS)
    both = explore(two, world=world, symmetry=OPS, abstract=True)
    assert _verdict(reduced) == _verdict(both) == (True, None, 0), both.summary()
    assert both.states < reduced.states


def test_a_wrong_history_of_an_ended_operation_is_caught(world, monkeypatch):
    """The history reader losing the last entry of an operation that ended: the abstract
    digest leaves ended histories out, and the check on every transition still finds it."""
    original = history.expand

    def expand(item, known=None):
        entries = original(item, known)
        ended = item.get("state") in ("succeeded", "cancelled", "failed_terminal")
        return entries[:-1] if ended and len(entries) > 1 else entries

    monkeypatch.setattr(history, "expand", expand)
    exact = explore(ONE_OP, world=world)
    abstract = explore(ONE_OP, world=world, abstract=True)
    assert _verdict(exact) == _verdict(abstract), abstract.summary()
    assert _verdict(abstract)[1] == "history_complete_and_in_order", abstract.summary()


def _marker(worker: str, token: str) -> bytes:
    item = {"operation_id": {"S": keys.claim_marker_id(worker, token)}, "tenant_id": {"S": "t"}}
    return json.dumps(item, sort_keys=True, separators=(",", ":")).encode()


def _claimed_by(token: str) -> bytes:
    return _item("claimed", [_entry(e="claim")]).replace(
        b'"fence"', b'"claim_token":{"S":"%s"},"fence"' % token.encode()
    )


def _renumbered(n: int, hold: dict | None, texts: list[bytes]) -> tuple:
    actors = {"workers": {"w1": {"n": n, "hold": hold}}}
    _, out = Markers(["w1"], 16).renumber(actors, [b"x"] * len(texts), list(texts))
    return actors["workers"]["w1"], out


def test_tokens_are_renumbered_in_order_and_dead_markers_left_out():
    # Tokens w1.3 (in an item) and the next, w1.5: w1.0 and w1.1; w1.0's marker is dead.
    state, texts = _renumbered(5, None, [_marker("w1", "w1.0"), _claimed_by("w1.3")])
    assert state == {"n": 1, "hold": None}
    assert texts == [_claimed_by("w1.0")]
    # The same up to numbering: one state.
    assert _renumbered(2, None, [_claimed_by("w1.1")]) == (state, texts)
    # A resend's token and its marker are live: renamed together, the marker's key with them.
    resend = {"resend": "claim_next", "op": None, "token": "w1.4", "got": None}
    state, texts = _renumbered(5, resend, [_marker("w1", "w1.4"), _claimed_by("w1.2")])
    assert state == {"n": 2, "hold": {**resend, "token": "w1.1"}}
    assert texts == [_marker("w1", "w1.1"), _claimed_by("w1.0")]
    # A refused claim whose answer was lost leaves its token unspent: the next one is it.
    lost = {"resend": "claim", "op": "o1", "token": "w1.3", "got": None}
    state, texts = _renumbered(3, lost, [_claimed_by("w1.1")])
    assert state == {"n": 1, "hold": {**lost, "token": "w1.1"}}
    assert texts == [_claimed_by("w1.0")]


def test_the_command_uses_the_abstract_digest_where_exact(capsys):
    quiet = ["--kinds", "b", "--workers", "1", "--attempts", "1", "--clock-jumps", "0"]
    quiet += ["--lost-answers", "0", "--requeues", "0", "--no-erase", "--no-cancel"]
    try:
        assert main(quiet) == 0
        out = capsys.readouterr().out
        assert "search finished" in out and "histories in the digest: transitions only" in out
        assert main([*quiet, "--exact-histories"]) == 0
        assert "histories in the digest: exact" in capsys.readouterr().out
    finally:
        logging.disable(logging.NOTSET)  # the command silences the engine's log lines
