"""A store that refuses a conditional write without the item (no
``ReturnValuesOnConditionCheckFailure``: dynalite, a proxy that drops it) gets the same answers
as DynamoDB: the store reads the refused item back once, consistently, and the engine decides
from it. On main 4f60178 the enqueue cases leaked the internal ``ConditionFailed`` (a 500 through
the API) and the others answered 404 ``not_found`` for an item the refusal proved to exist.

Each case runs on the embedded endpoint behind a client that strips the item from every refusal
(:class:`~leasefence_tools.testing.faults.ItemlessRefusals`), and on dynalite."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, PayloadConflict, StaleFence, State
from leasefence.errors import AlreadyAttempted, TargetRefused
from leasefence.schema import TableSpec, create_table
from leasefence.store import ConditionFailed
from leasefence_tools.testing.faults import ItemlessRefusals
from tests.support import endpoints

T = "tenant-r"
H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64


def enqueue_replay(engine, _clock):
    first = engine.enqueue(T, "op", "refund", H1).operation
    again = engine.enqueue(T, "op", "refund", H1)
    assert not again.created and again.operation == first


def payload_conflict(engine, _clock):
    engine.enqueue(T, "op", "refund", H1)
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "op", "refund", H2)


def _taken_over(engine, clock):
    engine.enqueue(T, "op", "refund", H1)
    first = engine.claim(T, "op", "w1", lease_ms=1_000)
    clock.advance(1_000)
    second = engine.claim(T, "op", "w2", lease_ms=1_000)
    assert second.takeover and second.fence == first.fence + 1
    return first, second


def stale_heartbeat(engine, clock):
    first, second = _taken_over(engine, clock)
    with pytest.raises(StaleFence) as refused:
        engine.heartbeat(T, "op", first.fence, "w1")
    assert refused.value.details == {"current_fence": second.fence, "state": "claimed"}


def stale_complete(engine, clock):
    first, second = _taken_over(engine, clock)
    with pytest.raises(StaleFence) as refused:
        engine.complete(T, "op", first.fence, "done")
    assert refused.value.details == {"current_fence": second.fence, "state": "claimed"}


def completion_replay(engine, _clock):
    engine.enqueue(T, "op", "refund", H1)
    held = engine.claim(T, "op", "w1", lease_ms=1_000)
    done = engine.complete(T, "op", held.fence, "done")
    assert engine.complete(T, "op", held.fence, "done") == done  # the answer was lost: a replay


def cancel_after_attempt(engine, _clock):
    engine.enqueue(T, "op", "refund", H1)
    held = engine.claim(T, "op", "w1", lease_ms=1_000)
    engine.fail(T, "op", held.fence, retryable=True, reason="timeout", retry_after_ms=0)
    with pytest.raises(AlreadyAttempted) as refused:
        engine.cancel(T, "op", actor="producer-1")
    assert refused.value.details["attempts"] == 1


def resolve_replay(engine, _clock):
    engine.enqueue(T, "op", "refund", H1)
    held = engine.claim(T, "op", "w1", lease_ms=1_000)
    engine.park_unknown(T, "op", held.fence, "no answer")
    done = engine.resolve(T, "op", "succeeded", note="ledger checked", actor="op-1")
    replay = engine.resolve(T, "op", "succeeded", note="ledger checked", actor="op-1")
    assert replay == done and replay.state == State.SUCCEEDED


CASES = [
    enqueue_replay,
    payload_conflict,
    stale_heartbeat,
    stale_complete,
    completion_replay,
    cancel_after_attempt,
    resolve_replay,
]


@pytest.fixture(scope="module")
def dynalite_endpoint():
    with endpoints.dynalite(create_ms=0) as endpoint:
        yield endpoint


_tables = iter(range(1_000_000))


@pytest.fixture(params=["stripped", "dynalite"])
def itemless(request, aws, clock):
    """An engine on a store whose refusals come without the item, and a check to run after."""
    if request.param == "stripped":
        client = ItemlessRefusals(aws.client())
        spec = aws.create_tables(TableSpec(table_name=f"itemless-{next(_tables)}", due_shards=1))
    else:
        client = endpoints.client(request.getfixturevalue("dynalite_endpoint"))
        spec = TableSpec(table_name=f"itemless-{next(_tables)}", due_shards=1)
        create_table(client, spec, ttl=False)
    yield Engine(client=client, spec=spec, clock=clock, rng=random.Random(2))
    if isinstance(client, ItemlessRefusals):
        assert client.refusals >= 1  # the case went through a refusal (without its item)


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_a_refusal_without_the_item_gets_the_answer_the_item_gives(itemless, clock, case):
    case(itemless, clock)


def test_a_refusal_of_an_absent_item_reads_once_and_stays_not_found(aws, clock):
    """On DynamoDB a refusal without an item means there is none: the one read finds none."""
    client = ItemlessRefusals(aws.client())
    spec = aws.create_tables(TableSpec(table_name=f"itemless-{next(_tables)}", due_shards=1))
    engine = Engine(client=client, spec=spec, clock=clock)
    with pytest.raises(ConditionFailed) as refused:
        engine.store.update(
            {"tenant_id": T, "operation_id": "none"},
            "SET #s = :s",
            "attribute_exists(#s)",
            {"#s": "state"},
            {":s": "queued"},
        )
    assert refused.value.item is None


@pytest.mark.needs("transactions")
def test_a_cancelled_transaction_without_its_items_gets_the_answers_they_give(aws, clock):
    """Class A: the refused actions of a cancelled transaction are read back the same way (the
    operation's item from the operations table, a business item from its own table)."""
    client = ItemlessRefusals(aws.client())
    spec = aws.create_tables(TableSpec(table_name=f"itemless-{next(_tables)}", due_shards=1))
    engine = Engine(client=client, spec=spec, clock=clock, rng=random.Random(2))
    business = {
        "TableName": spec.table_name,
        "Key": {"tenant_id": {"S": "books"}, "operation_id": {"S": "a-1"}},
    }
    paid = {
        "Update": {
            **business,
            "UpdateExpression": "SET paid = :t",
            "ExpressionAttributeValues": {":t": {"BOOL": True}},
        }
    }
    first, second = _taken_over(engine, clock)
    with pytest.raises(StaleFence) as refused:
        engine.complete_with(T, "op", first.fence, "done", [paid])
    assert refused.value.details == {"current_fence": second.fence, "state": "claimed"}
    done = engine.complete_with(T, "op", second.fence, "done", [paid])
    assert engine.complete_with(T, "op", second.fence, "done", [paid]) == done  # a replay
    engine.enqueue(T, "op-2", "refund", H1)
    held = engine.claim(T, "op-2", "w1", lease_ms=1_000)
    guarded = {"Update": {**paid["Update"], "ConditionExpression": "attribute_not_exists(paid)"}}
    with pytest.raises(TargetRefused) as target:
        engine.complete_with(T, "op-2", held.fence, "done", [guarded])
    assert target.value.details["write_index"] == 0
    assert client.refusals == 3
