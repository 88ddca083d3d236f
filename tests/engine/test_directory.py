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


class Reads:
    """``client``, counting the directory's reads."""

    def __init__(self, client):
        self._client, self.directory = client, 0

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**request):
            if name == "get_item" and request["Key"]["operation_id"]["S"] == DIRECTORY_ID:
                self.directory += 1
            return method(**request)

        return call


def test_a_claim_that_finds_work_trusts_the_directory_an_earlier_claim_read(ddb, spec, clock):
    """A claim without ``job_types`` reads the tenant's directory once per DIRECTORY_CACHE_MS
    while it finds work; one that finds none reads it again before answering none, so a job type
    added meanwhile is searched at once."""
    from leasefence.limits import DIRECTORY_CACHE_MS

    setup = Engine(client=ddb, spec=spec, clock=clock)
    for i in range(4):
        setup.enqueue(T, f"r-{i}", "refund", H)
    counted = Reads(ddb)
    engine = Engine(client=counted, spec=spec, clock=clock, rng=random.Random(3))
    assert engine.claim_next(T, "w1").job_type == "refund"
    assert engine.claim_next(T, "w1").job_type == "refund"
    assert counted.directory == 1  # the second claim read none
    # A job type added while the known one has work waits for the cache's time, no longer.
    setup.enqueue(T, "e-1", "email", H)
    assert engine.claim_next(T, "w1").job_type == "refund"
    assert counted.directory == 1
    clock.advance(DIRECTORY_CACHE_MS)
    claimed = {engine.claim_next(T, "w1").job_type, engine.claim_next(T, "w1").job_type}
    assert claimed == {"refund", "email"} and counted.directory == 2
    # No work in the types known: read again before answering none; a type added since is found.
    setup.enqueue(T, "s-1", "sms", H)
    assert engine.claim_next(T, "w1").operation_id == "s-1"
    assert counted.directory == 3
    assert engine.claim_next(T, "w1") is None
    assert counted.directory == 4  # every answer of none read the directory first


def test_a_tenant_with_no_job_type_yet_is_read_every_time(ddb, spec, clock):
    """An empty directory is never trusted: the tenant's first enqueue is found by the next
    claim, whatever an earlier claim read."""
    counted = Reads(ddb)
    engine = Engine(client=counted, spec=spec, clock=clock, rng=random.Random(3))
    assert engine.claim_next(T, "w1") is None
    Engine(client=ddb, spec=spec, clock=clock).enqueue(T, "first", "refund", H)
    assert engine.claim_next(T, "w1").operation_id == "first"
    assert counted.directory == 2


def test_the_directory_is_read_again_after_a_tenant_erasure_and_on_a_clock_gone_back(ddb, spec, clock):
    """What a claim read of a directory is dropped when the same engine erases the tenant, and not
    trusted from a time the engine's clock has not reached."""
    setup = Engine(client=ddb, spec=spec, clock=clock)
    setup.enqueue(T, "r-1", "refund", H)
    setup.enqueue(T, "r-2", "refund", H)
    counted = Reads(ddb)
    engine = Engine(client=counted, spec=spec, clock=clock, rng=random.Random(3))
    clock.advance(10)
    assert engine.claim_next(T, "w1") is not None and counted.directory == 1
    clock.advance(-5)  # a clock that went back (an engine's clock moved by a test or a bench)
    assert engine.claim_next(T, "w1") is not None and counted.directory == 2
    clock.advance(5)
    assert T in engine._reads._directories
    engine.erase_tenant(T, limit=100, cursor=None)
    # The erased tenant's job-type names are not kept (white box: the cache itself).
    assert T not in engine._reads._directories
    assert engine.claim_next(T, "w1") is None  # both claimed: the erasure holds them
    assert counted.directory == 3  # read afresh, and trusted: no second read before none


def test_directories_past_their_time_are_not_kept(ddb, spec, clock):
    """The cache holds only directories within their time: reading one drops those past it."""
    from leasefence.limits import DIRECTORY_CACHE_MS

    setup = Engine(client=ddb, spec=spec, clock=clock)
    engine = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(3))
    for tenant in ("t1", "t2", "t3"):
        setup.enqueue(tenant, "op", "refund", H)
        engine.claim_next(tenant, "w1")
    assert list(engine._reads._directories) == ["t1", "t2", "t3"]
    clock.advance(DIRECTORY_CACHE_MS)
    setup.enqueue("t4", "op", "refund", H)
    engine.claim_next("t4", "w1")
    assert list(engine._reads._directories) == ["t4"]
