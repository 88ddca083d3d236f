"""Identity is (tenant_id, operation_id): no choice of characters makes two identities collide."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasefence import NotFound, State
from leasefence.keys import due_partition, parse_due_partition, shard_of

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64

ids = st.text(alphabet=st.sampled_from("ab#:|/\\%0"), min_size=1, max_size=6)


@given(t1=ids, t2=ids, j1=ids, j2=ids, shard1=st.integers(0, 63), shard2=st.integers(0, 63))
def test_due_partition_encoding_is_unambiguous(t1, t2, j1, j2, shard1, shard2):
    assert parse_due_partition(due_partition(t1, shard1, j1)) == (t1, shard1, j1)
    if (t1, shard1, j1) != (t2, shard2, j2):
        assert due_partition(t1, shard1, j1) != due_partition(t2, shard2, j2)


def test_shard_hash_is_length_prefixed():
    # ("a#", "b") and ("a", "#b") concatenate to the same text; they must not be the same input.
    pairs = {shard_of(t, o, 2**31) for t, o in [("a#", "b"), ("a", "#b"), ("a#b", ""), ("", "a#b")]}
    assert len(pairs) == 4


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (("a#1", "x"), ("a", "1#x")),  # the index separator inside the ids
        (("a", "b#c"), ("a#b", "c")),
        (("t", "op"), ("t#", "op")),
        (("tenant|x", "1"), ("tenant", "x|1")),
    ],
)
def test_ids_containing_the_separator_are_distinct_identities(engine, first, second):
    engine.enqueue(*first, "refund", H1)
    engine.enqueue(*second, "refund", H2)  # a collision would be a payload conflict
    assert engine.get(*first).payload_hash == H1
    assert engine.get(*second).payload_hash == H2
    claim = engine.claim_next(first[0], "w1")
    assert (claim.tenant_id, claim.operation_id) == first
    assert engine.claim_next(first[0], "w1") is None
    assert engine.get(*second).state == State.QUEUED


def test_two_tenants_with_identical_operation_ids_have_no_cross_effects(engine, clock):
    """Design fault test 4: two tenants, identical operation ids."""
    engine.enqueue("acme", "refund-42", "refund", H1, max_attempts=1)
    engine.enqueue("globex", "refund-42", "refund", H2)
    acme = engine.claim_next("acme", "w1", lease_ms=1_000)
    assert acme.payload_hash == H1
    assert engine.get("globex", "refund-42").state == State.QUEUED
    assert engine.complete("acme", "refund-42", acme.fence, "done").state == State.SUCCEEDED
    globex = engine.claim_next("globex", "w2")
    assert (globex.fence, globex.payload_hash, globex.reconcile_required) == (1, H2, False)
    clock.advance(120_000)
    engine.sweep()
    assert engine.get("acme", "refund-42").state == State.SUCCEEDED
    assert engine.get("globex", "refund-42").state == State.CLAIMED
    assert [o.operation_id for o in engine.list("acme").operations] == ["refund-42"]
    with pytest.raises(NotFound):
        engine.get("initech", "refund-42")
