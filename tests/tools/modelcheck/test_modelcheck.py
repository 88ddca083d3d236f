"""The model check: each re-introduced protocol bug is found at its bound, the engine as it is
passes the same bounds with every state explored, and how much is explored is pinned."""

from __future__ import annotations

import dataclasses

import pytest
from moto.dynamodb.models.dynamo_type import Item

from leasefence import errors
from leasefence.engine import _claim
from leasefence.schema import PARTITION_KEY, SORT_KEY
from leasefence_tools.modelcheck.checkpoint import Checkpoint
from leasefence_tools.modelcheck.explorer import dead_ends, explore
from leasefence_tools.modelcheck.mutations import MUTATIONS
from leasefence_tools.modelcheck.world import World

#: Distinct states of the engine as it is at each mutation's bound (stateright's
#: ``generated_count`` idea): a change in how much is explored shows here as a diff.
CLEAN_STATES = {
    "cancel_after_attempt": 16,
    "erasure_forgets_intent": 134,  # 135 before an ended item dropped claimed_at (two merged)
    "approval_by_reference": 1,
    "claim_token_without_marker": 163,
    "unconditional_marker": 1120,
    "erasure_deletes_the_marker": 679,
    "no_inline_compaction": 22,
    "no_room_for_size": 43,
}
#: The counterexample's length (steps, the enqueues first) each mutation is found with.
TRACE_STEPS = {
    "cancel_after_attempt": 4,
    "erasure_forgets_intent": 12,
    "approval_by_reference": 2,
    "claim_token_without_marker": 3,
    "unconditional_marker": 6,
    "erasure_deletes_the_marker": 5,
    "no_inline_compaction": 5,
    "no_room_for_size": 7,
}


@pytest.fixture(scope="module")
def world():
    with World() as world:
        yield world


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_the_engine_passes_every_interleaving_at_the_bound(world, mutation):
    result = explore(mutation.bound, world=world)
    assert result.finished, result.summary()
    assert result.violation is None and result.dead_ends == 0, result.summary()
    assert result.states == CLEAN_STATES[mutation.name]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_reintroduced_bug_is_found(world, mutation):
    with mutation.apply():
        result = explore(mutation.bound, world=world)
    if mutation.invariant == "liveness":
        assert result.finished and result.dead_ends > 0, result.summary()
    else:
        assert result.violation is not None, result.summary()
        assert result.violation.startswith(mutation.invariant + ":"), result.summary()
    assert len(result.trace) == TRACE_STEPS[mutation.name], result.summary()


def test_a_state_with_no_way_out_is_a_dead_end():
    edges = {"a": {"b", "c"}, "b": {"end"}, "c": {"c"}, "end": set()}
    assert dead_ends(edges, {"end"}) == {"c"}


def test_remembered_answers_explore_what_moto_answers(world):
    """The memo of moto's answers changes nothing: the same bound, every request sent to moto,
    explores the same states and transitions."""
    mutation = next(m for m in MUTATIONS if m.name == "claim_token_without_marker")
    bound = mutation.bound
    remembered = explore(bound, world=world)
    world.client.remember = False
    try:
        sent = explore(bound, world=world)
    finally:
        world.client.remember = True
    assert world.client.hits > 0
    assert (sent.states, sent.transitions) == (remembered.states, remembered.transitions)
    assert sent.states == CLEAN_STATES[mutation.name]


def test_a_claim_next_resent_while_it_runs_claims_once_issue_33(world):
    """Issue 33 (found by this model check on the engine before the fix, 7 steps): a claim-next
    resent with its token while the first request still ran claimed a second operation. The
    marker now decides by conditional writes which claim the token makes: at the same bound
    (``unconditional_marker``'s) the engine holds with every state explored
    (:func:`test_the_engine_passes_every_interleaving_at_the_bound`), and the unconditional marker
    re-introduced is found: the resend claims one operation, the first the other. A first send
    does not read its marker (the marker's creating write is conditional), so with the
    unconditional write re-introduced even a resend after the first request ended claims another:
    6 steps, the first request's writes before the resend."""
    mutation = next(m for m in MUTATIONS if m.name == "unconditional_marker")
    assert mutation.bound.inflight == 1
    with mutation.apply():
        result = explore(mutation.bound, world=world)
    assert result.violation is not None and "resend w1" in result.trace, result.summary()
    assert "both claimed under token w1.0" in result.violation, result.summary()
    resend = result.trace.index("resend w1")
    assert sum("in flight: sends UpdateItem" in step for step in result.trace[:resend]) == 2


def test_a_claim_next_naming_a_close_resent_while_it_runs_claims_once(world):
    """Issue 33's bound with every claim-next naming o1 (``after``): the token's marker lives in
    o1's payload item, created, taken and sealed there; every interleaving of the first request's
    store requests with its resend holds, with every state explored and a way out of each."""
    mutation = next(m for m in MUTATIONS if m.name == "unconditional_marker")
    result = explore(dataclasses.replace(mutation.bound, after=True), world=world)
    assert result.finished, result.summary()
    assert result.violation is None and result.dead_ends == 0, result.summary()
    assert result.states == 1462


def test_the_world_keeps_binary_attributes_as_moto_does(world):
    """A binary attribute (a claim marker's owner in a payload item) comes back from a snapshot
    as the bytes moto holds, not as their base64 text: a condition on it compares alike."""
    world.restore(None)
    key = {PARTITION_KEY: {"S": "t"}, SORT_KEY: {"S": "x"}}
    world.client.put_item(TableName=world.spec.table_name, Item={**key, "mo": {"B": b"\x00owner"}})
    saved, _ = world.capture()
    world.client.delete_item(TableName=world.spec.table_name, Key=key)
    world.capture()
    world.restore(saved)  # (rebuilt from the snapshot's JSON)
    world.client.update_item(
        TableName=world.spec.table_name,
        Key=key,
        UpdateExpression="SET n = :one",
        ConditionExpression="mo = :me",
        ExpressionAttributeValues={":one": {"N": "1"}, ":me": {"B": b"\x00owner"}},
    )
    world.restore(None)


@pytest.mark.parametrize(
    ("error", "stops"),
    [
        (errors.LeaseFenceError("store error ValidationException"), True),
        (errors.StoreMisconfigured("operations table not found"), True),
        (errors.Unavailable("store busy, retry"), False),
    ],
    ids=["untranslated store refusal", "misconfigured store", "transient"],
)
def test_an_internal_error_stops_the_search_a_refusal_does_not(world, monkeypatch, error, stops):
    # A claim write the store refuses as malformed used to read as "no claim" to the model's
    # actors, hiding the engine's bug; now only the protocol's refusals are refusals.
    def refused(*_args, **_kwargs):
        raise error

    monkeypatch.setattr(_claim.Claimer, "try_claim", refused)
    bound = MUTATIONS[0].bound  # any bound with a claim
    if stops:
        with pytest.raises(type(error)):
            explore(bound, world=world)
    else:
        assert explore(bound, world=world).finished


def test_the_search_leaves_moto_no_item_to_keep(world):
    """moto tracks every item it builds (for its dashboard); the world lets go of them at each
    restore, so what the search keeps grows with its states, not with its steps (before: about
    60 KB per explored state)."""
    result = explore(MUTATIONS[3].bound, world=world)
    assert result.transitions > 500
    assert len(Item.instances_tracked) < 50


def test_a_request_on_one_item_is_remembered_by_that_item_alone(world):
    """The same update of one item, the other items different, is answered from the memo and
    leaves the table as moto leaves it."""

    def key(name):
        return {PARTITION_KEY: {"S": f"memo#{name}"}, SORT_KEY: {"S": "x"}}

    def update(name):
        world.client.update_item(
            TableName=world.spec.table_name,
            Key=key(name),
            UpdateExpression="ADD n :one",
            ConditionExpression="attribute_not_exists(done)",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def put(name, value):
        item = {**key(name), "v": {"S": value}}
        world.client.put_item(TableName=world.spec.table_name, Item=item)

    world.restore(None)
    put("a", "first")
    put("b", "first")
    both_first = world.current(changed=True)
    update("a")
    sent = world.items()
    world.restore(both_first)
    put("b", "second")  # another table, the same item a
    hits = world.client.hits
    update("a")
    assert world.client.hits == hits + 1
    remembered = world.items()
    assert [item for item in remembered if item[PARTITION_KEY]["S"] == "memo#a"] == [
        item for item in sent if item[PARTITION_KEY]["S"] == "memo#a"
    ]
    assert {item[PARTITION_KEY]["S"]: item.get("v") for item in remembered} == {
        "memo#a": {"S": "first"},
        "memo#b": {"S": "second"},
    }
    world.restore(None)


def test_a_search_taken_up_from_its_checkpoint_explores_what_one_run_does(world, tmp_path):
    """Stopped twice (at a state count, then by its stop flag) and taken up from its file each
    time, the search ends with the states, transitions and verdict of one run; a file saved
    for another bound is refused."""
    bound = MUTATIONS[3].bound
    whole = explore(bound, world=world)
    checkpoint = Checkpoint(tmp_path / "search.pickle")
    first = explore(bound, world=world, max_states=60, checkpoint=checkpoint)
    assert (first.finished, first.states) == (False, 60)
    checkpoint.stop = True
    second = explore(bound, world=world, checkpoint=checkpoint)
    assert (second.finished, second.states) == (False, 60)
    checkpoint.stop = False
    last = explore(bound, world=world, checkpoint=checkpoint)
    assert (last.finished, last.states, last.transitions) == (
        True,
        whole.states,
        whole.transitions,
    )
    assert (last.violation, last.dead_ends) == (whole.violation, whole.dead_ends) == (None, 0)
    mutated = Checkpoint(tmp_path / "mutated.pickle")
    with MUTATIONS[3].apply():  # found after 12 states in one run
        stopped = explore(bound, world=world, max_states=6, checkpoint=mutated)
        caught = explore(bound, world=world, checkpoint=mutated)
    assert stopped.violation is None and not stopped.finished
    assert caught.violation is not None and caught.violation.startswith(MUTATIONS[3].invariant)
    with pytest.raises(ValueError, match="another bound"):
        explore(MUTATIONS[0].bound, world=world, checkpoint=checkpoint)
