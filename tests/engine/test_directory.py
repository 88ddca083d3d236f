"""The tenant's job-type directory is bounded: every claim without ``job_types`` reads it (and
queries each of its types), so a new job type past the limit is refused with a clear 422 and
nothing is written; known types keep working, from any engine."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, NotFound
from leasefence.engine import MAX_JOB_TYPES
from leasefence.errors import InvalidInput
from leasefence.keys import DIRECTORY_ID

H = "sha256:" + "d" * 64
T = "acme"


def directory(engine):
    return engine.store.get({"tenant_id": T, "operation_id": DIRECTORY_ID})


def test_a_new_job_type_past_the_directory_limit_is_refused_and_writes_nothing(engine, ddb, spec, clock):
    for i in range(MAX_JOB_TYPES):
        engine.enqueue(T, f"op-{i}", f"type-{i:03d}", H)
    full = directory(engine)
    assert len(full["job_types"]) == MAX_JOB_TYPES
    with pytest.raises(InvalidInput) as refused:
        engine.enqueue(T, "op-new", "one-type-too-many", H)
    assert (refused.value.code, refused.value.status) == ("too_many_job_types", 422)
    assert str(MAX_JOB_TYPES) in refused.value.message
    with pytest.raises(NotFound):
        engine.get(T, "op-new")  # nothing was written
    assert directory(engine) == full
    # Known types keep working, also from an engine that never registered them.
    fresh = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(3))
    assert fresh.enqueue(T, "op-more", "type-007", H).created
    assert fresh.claim_next(T, "w1") is not None
    # Another tenant has its own directory.
    assert fresh.enqueue("other", "op-1", "one-type-too-many", H).created


def test_the_directory_limit_is_an_engine_setting(ddb, spec, clock):
    small = Engine(client=ddb, spec=spec, clock=clock, max_job_types=2)
    small.enqueue(T, "a", "alpha", H)
    small.enqueue(T, "b", "beta", H)
    small.enqueue(T, "b2", "beta", H)
    with pytest.raises(InvalidInput, match="2"):
        small.enqueue(T, "c", "gamma", H)
    assert sorted(small.job_types(T)) == ["alpha", "beta"]
