"""Switching the identity retention to forever keeps every ended identity forever, also those that
ended while it was a window: the sweeper clears the TTLs they got, in bounded, resumable pages
(one conditional write per TTL), and a second pass after the switch's grace catches what functions
still running the old window set meanwhile. Checked over months on the embedded endpoint with
DynamoDB's TTL deletion emulated (fidelity)."""

from __future__ import annotations

import itertools
import random

import pytest

from tests.support.runtime import installed, local_environment
from leasefence import Engine, PayloadConflict, State, keys, settings
from leasefence.clock import ManualClock
from leasefence_tools.local.embedded import EmbeddedAws, Fidelity
from leasefence.schema import TTL_ATTRIBUTE, TableSpec

H = "sha256:" + "e" * 64
H2 = "sha256:" + "f" * 64
T = "acme"
MINUTE = 60_000
DAY = 86_400_000
_tables = itertools.count()


class Context:
    function_name = "leasefence-sweeper"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:leasefence-sweeper"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self):
        return 600_000


#: The embedded endpoint's clock and its TTL deletion (a day after the TTL time, at most).
pytestmark = pytest.mark.needs("embedded")


@pytest.fixture(scope="module")
def ttl_aws():
    """DynamoDB's TTL: an expired item is deleted within a day of its TTL (never before)."""
    with EmbeddedAws(fidelity=Fidelity(ttl_lag_ms=DAY, ttl_lag_min_ms=0, index_lag_ms=0)) as aws:
        yield aws


@pytest.fixture
def world(ttl_aws, monkeypatch):
    """A table, a manual clock that moves the endpoint's clock with it, and the sweeper function
    of a deployment whose identity retention is forever (its batches small: 3 items, 2 batches)."""
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "leasefence-tests")
    spec = ttl_aws.create_tables(TableSpec(table_name=f"retention-{next(_tables)}", due_shards=2, sweep_shards=2, operation_shards=(1,)))
    clock = ManualClock()
    ttl_aws.set_time(clock())

    def travel(ms):
        clock.advance(ms)
        ttl_aws.advance_time(ms)

    more = {"IDENTITY_RETENTION_DAYS": "forever", "SWEEP_BATCH": "3", "SWEEP_MAX_BATCHES": "2"}
    config = settings.Settings.from_env(local_environment(spec, ttl_aws.endpoint, **more))
    with installed(config) as rt:
        yield from _sweeper_world(spec, clock, travel, ttl_aws, rt)


def _sweeper_world(spec, clock, travel, ttl_aws, rt):
    rt.engine.clock = clock  # the deployed sweeper's engine, on the test's clock
    from functions.sweeper import handler

    window = Engine(
        client=ttl_aws.client(),
        spec=spec,
        clock=clock,
        rng=random.Random(1),
        identity_retention_ms=400 * DAY,
        payload_retention_ms=30 * DAY,
    )
    yield spec, clock, travel, window, rt.engine, lambda: handler.lambda_handler({}, Context())


def ended(engine, op, outcome="ok"):
    engine.enqueue(T, op, "refund", H)
    held = engine.claim(T, op, "w1", lease_ms=5_000)
    engine.complete(T, op, held.fence, outcome)


def items_with_ttl(engine):
    """(tenant, operation id) of every item of the table that carries a TTL."""
    pages = engine.store.client.get_paginator("scan").paginate(
        TableName=engine.spec.table_name,
        FilterExpression="attribute_exists(#t)",
        ExpressionAttributeNames={"#t": TTL_ATTRIBUTE},
    )
    return [(i["tenant_id"]["S"], i["operation_id"]["S"]) for page in pages for i in page["Items"]]


def test_switching_to_forever_clears_the_ttls_already_set_and_the_identities_outlive_the_old_window(world, ttl_aws):
    _spec, _clock, travel, window, forever, sweep = world
    # While the retention was 400 days: operations ended, one was erased, one still waits.
    for i in range(8):
        ended(window, f"op-{i}")
        travel(DAY)
    window.enqueue(T, "cancelled", "refund", H)
    window.cancel(T, "cancelled")
    window.erase(T, "op-3")  # (its history is in its item: no history item with a TTL of its own)
    window.enqueue(T, "live", "refund", H)
    late = window.enqueue(T, "late", "refund", H).operation
    held = window.claim(T, "late", "w9", lease_ms=900_000)
    assert len(items_with_ttl(window)) == 8 + 1
    travel(30 * DAY)

    # The deployment now keeps identities forever: the sweeper clears the TTLs, a bounded page
    # at a time (at most 2 batches of 3 items per run), resuming where the last run stopped.
    runs = []
    for _ in range(20):
        runs.append(sweep())
        travel(MINUTE)
        if runs[-1].get("ttl_state") == "waiting":
            break
    assert len(runs) >= 3 and all(run["ttl_pages"] <= 2 for run in runs)
    assert sum(run["ttls_cleared"] for run in runs) == 9
    assert items_with_ttl(window) == []
    # A function still running the old window ends an operation after the first pass went by...
    window.complete(T, "late", held.fence, "ok")
    assert items_with_ttl(window) == [(T, "late")]
    # ... and the second pass, which starts once the switch's grace has passed, clears it.
    travel(15 * MINUTE)
    for _ in range(20):
        result = sweep()
        travel(MINUTE)
        if result.get("ttl_state") == "done":
            break
    assert items_with_ttl(window) == []
    assert sweep()["ttl_state"] == "done" and sweep()["ttl_pages"] == 0  # done: nothing more to scan
    # (An engine left on the old window for good keeps setting TTLs: every engine must switch.)
    ended(window, "control", "left on the window")

    # Past the old window (400 days after the last end) and DynamoDB's TTL lag: nothing is gone
    # but the control, which shows that TTL deletion runs.
    travel(420 * DAY)
    ttl_aws.reap_ttl()
    assert forever.store.get({"tenant_id": T, "operation_id": "control"}) is None
    for i in range(8):
        assert forever.get(T, f"op-{i}").state is State.SUCCEEDED
    assert forever.get(T, "cancelled").state is State.CANCELLED
    assert forever.get(T, "late").fence == late.fence + 1
    assert not forever.enqueue(T, "op-0", "refund", H).created  # still a replay
    with pytest.raises(PayloadConflict):
        forever.enqueue(T, "op-1", "refund", H2)  # still a conflict
    assert forever.get(T, "live").state is State.QUEUED


def test_a_window_forgets_a_finished_clearing_so_switching_again_clears_again(world):
    _spec, _clock, travel, window, forever, _sweep = world
    ended(window, "a")
    for _ in range(10):
        if forever.clear_ttls(limit=10).state == "waiting":
            break
    travel(15 * MINUTE)
    assert forever.clear_ttls(limit=10).state == "done"
    assert items_with_ttl(window) == []
    # Back to a window: new ends get a TTL again; the sweeper of the window forgets the clearing.
    assert window.clear_ttls().state == "window"
    ended(window, "b")
    assert items_with_ttl(window) == [(T, "b")]
    # Forever once more: a new clearing starts.
    result = forever.clear_ttls(limit=10)
    assert result.state in ("clearing", "waiting") and result.cleared == 1
    assert items_with_ttl(window) == []


def test_switching_to_forever_leaves_the_claim_markers_their_own_day(world, ttl_aws):
    """A claim-next marker (a pointer for a resend of a claim request) is no identity: the
    clearing keeps its one-day TTL and does not count it, so no marker is kept forever."""
    _spec, _clock, travel, window, forever, _sweep = world
    ended(window, "ended")
    window.enqueue(T, "marked", "refund", H)
    assert window.claim_next(T, "w1", 60_000, claim_token="tok-1").operation_id == "marked"
    marker = keys.claim_marker_id("w1", "tok-1")
    assert sorted(items_with_ttl(window)) == [(T, marker), (T, "ended")]
    cleared = 0
    for _ in range(10):
        result = forever.clear_ttls(limit=10)
        cleared += result.cleared
        if result.state == "waiting":
            break
    assert cleared == 1 and items_with_ttl(window) == [(T, marker)]
    # A day and DynamoDB's TTL lag later the marker is gone; the identity stays.
    travel(2 * DAY + MINUTE)
    ttl_aws.reap_ttl()
    assert forever.store.get({"tenant_id": T, "operation_id": marker}) is None
    assert forever.get(T, "ended").state is State.SUCCEEDED
