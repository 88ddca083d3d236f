"""The worker runtime: progress-tied heartbeats, lost-ownership mode, reconcile, shutdown."""

from __future__ import annotations

import threading
import time

import pytest

from leasefence import State
from leasefence.worker import (
    EngineBackend,
    FunctionHandler,
    LostOwnership,
    Reconciled,
    Retry,
    Uninterpretable,
    Worker,
)

H = "sha256:" + "5" * 64
T = "acme"


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


def make_worker(engine, handlers, name="w1", lease_ms=1_000, interval_ms=50, events=None, tenants=(T,)):
    return Worker(
        EngineBackend(engine, list(tenants)),
        handlers,
        worker_id=name,
        lease_ms=lease_ms,
        heartbeat_interval_ms=interval_ms,
        idle_sleep_ms=20,
        events=events,
    )


def test_handler_outcome_completes_the_operation(engine):
    engine.enqueue(T, "op", "email", H)
    worker = make_worker(engine, {"email": FunctionHandler(lambda job: f"sent-under-{job.fence}")})
    assert worker.run_once()
    assert engine.get(T, "op").outcome_code == "sent-under-1"
    assert not worker.run_once()


def test_progress_renews_the_lease_and_a_stuck_handler_lets_it_lapse(engine, clock):
    events = Events()
    engine.enqueue(T, "busy", "job", H)
    engine.enqueue(T, "stuck", "job", H)
    seen_leases = []

    seen_checkpoints = []

    def busy(job):
        for step in range(6):
            clock.advance(100)
            job.progress(checkpoint={"step": step})
            time.sleep(0.06)
        deadline = time.monotonic() + 5
        while engine.get(T, job.operation_id).checkpoint != {"step": 5} and time.monotonic() < deadline:
            time.sleep(0.01)
        seen_leases.append(engine.get(T, job.operation_id).lease_expires_at)
        seen_checkpoints.append(engine.get(T, job.operation_id).checkpoint)
        return "done"

    # The stuck and lapsing handlers wait for what the heartbeat thread reports instead of
    # sleeping a fixed time: on a loaded machine a fixed sleep raced the 1 s lease (a slow
    # heartbeat thread saw too few ticks, or the lease ran out before a 0.4 s sleep ended).
    quiet = Events()

    def stuck(job):
        # No progress (blocked on a dead connection) until three renewals were skipped.
        _wait_until(lambda: quiet.get("HeartbeatsSkippedNoProgress", 0) >= 3)
        seen_leases.append(engine.get(T, job.operation_id).lease_expires_at)
        return "done"

    busy_worker = make_worker(engine, {"job": FunctionHandler(busy)}, events=events)
    busy_worker.process(engine.claim(T, "busy", "w1", lease_ms=1_000))
    assert events.get("Heartbeats", 0) >= 2
    assert seen_leases[0] > clock() - 600 + 1_000  # renewed after the claim
    assert seen_checkpoints == [{"step": 5}]
    assert engine.get(T, "busy").checkpoint is None  # an ended operation keeps no checkpoint

    stuck_worker = make_worker(engine, {"job": FunctionHandler(stuck)}, events=quiet)
    # A lease far longer than the handler's few skipped ticks, however loaded the machine.
    claim = engine.claim(T, "stuck", "w1", lease_ms=30_000)
    stuck_worker.process(claim)
    assert quiet.get("Heartbeats", 0) == 0 and quiet["HeartbeatsSkippedNoProgress"] >= 3
    assert seen_leases[1] == claim.lease_expires_at  # never extended
    assert "StalledClaims" not in quiet  # stuck, but its lease has not run out yet

    stalled = Events()
    engine.enqueue(T, "stalled", "job", H)
    observed: dict[str, float] = {}

    def lapsing_handler(job):
        # No progress until the stall was reported, then three more skipped ticks: a second
        # report would come in those.
        _wait_until(lambda: "StalledClaims" in stalled)
        observed["stalled_after_s"] = time.monotonic() - claimed_at
        skipped = stalled.get("HeartbeatsSkippedNoProgress", 0)
        _wait_until(lambda: stalled.get("HeartbeatsSkippedNoProgress", 0) >= skipped + 3)
        return "done"

    lapsing = make_worker(engine, {"job": FunctionHandler(lapsing_handler)}, events=stalled)
    claimed_at = time.monotonic()
    lapsing.process(engine.claim(T, "stalled", "w1", lease_ms=1_000))
    assert stalled["StalledClaims"] == 1  # reported once when the lease ran out without progress
    assert observed["stalled_after_s"] >= 1.0  # not before the lease (1 s) ran out
    assert stalled.get("Heartbeats", 0) == 0


def _wait_until(condition, limit_s: float = 30.0) -> None:
    """Poll ``condition`` (a handler blocked on something that never answers, until then)."""
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_lost_ownership_stops_the_next_guarded_call(engine, clock):
    """A heartbeat refused mid-run cancels the job: no new side effect, no closing write."""
    events = Events()
    engine.enqueue(T, "op", "job", H)
    effects = []
    took_over = threading.Event()

    def handler(job):
        for step in range(100):
            job.guard()
            effects.append(step)
            if step == 2:
                # Past the lease; a renewal racing this may push it once more (no progress
                # follows, so at most once): then the second step past it takes over.
                for _ in range(2):
                    clock.advance(1_000)
                    grant = engine.claim_next(T, "w2", lease_ms=60_000)
                    if grant is not None:
                        break
                assert grant is not None and grant.fence == 2
                took_over.set()
            job.progress()
            time.sleep(0.03)
        return "finished"  # pragma: no cover - must not be reached

    worker = make_worker(engine, {"job": FunctionHandler(handler)}, events=events)
    job = worker.process(engine.claim_next(T, "w1", lease_ms=1_000))
    assert took_over.is_set() and job.cancelled.is_set()
    assert len(effects) <= 5  # stopped within a heartbeat interval or two
    op = engine.get(T, "op")
    assert (op.state, op.fence, op.lease_owner) == (State.CLAIMED, 2, "w2")  # no "last commit"
    assert events["LostOwnership"] == 1 and events["AbandonedAfterLostOwnership"] == 1
    with pytest.raises(LostOwnership):
        job.guard()


def test_renewals_follow_the_granted_lease_when_the_catalogue_cuts_it(engine, clock):
    """The worker asks for 60 s and would renew every 20 s; the job type's max_lease_seconds
    grants 1 s. The job renews within the granted lease (at least three times per lease), so a
    healthy job keeps its claim: no takeover, completed under its own fence."""
    engine.catalogue.put(T, "short", {"target_class": "C", "lease_seconds": 1, "max_lease_seconds": 1})
    engine.enqueue(T, "op", "short", H)
    events = Events()
    competitors = []

    def handler(job):
        assert job.claim.lease_ms == 1_000  # granted, not the 60 s asked for
        for step in range(3):
            job.progress()
            _wait_until(lambda done=step: events.get("Heartbeats", 0) > done, limit_s=3.0)
            clock.advance(600)  # 1.8 s of lease time in all: past the 1 s granted without renewals
            competitors.append(engine.claim_next(T, "w2", lease_ms=60_000))
        return "done"

    worker = Worker(EngineBackend(engine, [T]), {"short": FunctionHandler(handler)}, worker_id="w1",
                    lease_ms=60_000, idle_sleep_ms=20, events=events)
    assert worker.heartbeat_interval_ms == 20_000
    assert worker.run_once()
    assert competitors == [None, None, None]  # never lapsed: nobody could take it over
    assert events.get("Heartbeats", 0) >= 3 and "StalledClaims" not in events
    op = engine.get(T, "op")
    assert (op.state, op.fence, op.attempts, op.outcome_code) == (State.SUCCEEDED, 1, 1, "done")


@pytest.mark.parametrize(
    ("found", "expected_state", "ran"),
    [
        (Reconciled.done("already-refunded"), State.SUCCEEDED, False),
        (Reconciled.not_done(), State.SUCCEEDED, True),
        (Reconciled.unknown("provider has no lookup"), State.UNKNOWN, False),
    ],
)
def test_reconcile_decides_before_acting(engine, clock, found, expected_state, ran):
    engine.enqueue(T, "op", "job", H)
    engine.claim_next(T, "w0", lease_ms=1_000)
    clock.advance(1_000)  # the first holder vanished
    runs = []
    handler = FunctionHandler(lambda job: runs.append(job.fence) or "acted", reconcile_fn=lambda job: found)
    worker = make_worker(engine, {"job": handler})
    assert worker.run_once()
    op = engine.get(T, "op")
    assert op.state == expected_state and bool(runs) == ran
    if found.kind == "done":
        assert op.outcome_code == "already-refunded"


def test_first_attempt_does_not_reconcile(engine):
    engine.enqueue(T, "op", "job", H)
    handler = FunctionHandler(lambda job: "acted", reconcile_fn=lambda job: pytest.fail("no reconcile on attempt 1"))
    make_worker(engine, {"job": handler}).run_once()
    assert engine.get(T, "op").state == State.SUCCEEDED


def test_handler_signals_map_to_transitions(engine):
    engine.enqueue(T, "retry", "retry", H, max_attempts=2)
    engine.enqueue(T, "junk", "junk", H)
    engine.enqueue(T, "orphan", "nobody-handles-this", H)

    def junk(job):
        raise Uninterpretable("payload is not a refund")

    worker = make_worker(
        engine,
        {"retry": FunctionHandler(lambda job: (_ for _ in ()).throw(Retry("busy", retry_after_ms=0))),
         "junk": FunctionHandler(junk)},
    )
    worker.run_once(), worker.run_once()
    assert engine.get(T, "retry").state == State.QUEUED
    assert engine.get(T, "junk").state == State.QUARANTINED
    # A claim for a type the worker does not handle is never made (it claims only its types).
    assert engine.get(T, "orphan").state == State.QUEUED


def test_unexpected_handler_error_on_class_d_parks_as_unknown(engine):
    engine.enqueue(T, "sms", "sms", H, target_class="D")

    def boom(job):
        raise RuntimeError("socket closed mid-call")

    make_worker(engine, {"sms": FunctionHandler(boom)}).run_once()
    assert engine.get(T, "sms").state == State.UNKNOWN


def test_graceful_stop_finishes_the_job_in_flight_and_claims_no_more(engine):
    for i in range(3):
        engine.enqueue(T, f"op-{i}", "job", H)
    started = threading.Event()

    def slow(job):
        started.set()
        time.sleep(0.2)
        job.progress()
        return "ok"

    worker = make_worker(engine, {"job": FunctionHandler(slow)})
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(5)
    worker.stop()
    thread.join(5)
    assert not thread.is_alive()
    states = sorted(engine.get(T, f"op-{i}").state for i in range(3))
    assert states == [State.QUEUED, State.QUEUED, State.SUCCEEDED]


def test_shutdown_grace_cancels_a_job_that_will_not_finish(engine):
    engine.enqueue(T, "op", "job", H)
    effects = []
    started = threading.Event()

    def endless(job):
        started.set()
        while True:
            job.guard()
            effects.append(1)
            time.sleep(0.01)

    worker = make_worker(engine, {"job": FunctionHandler(endless)})
    worker.shutdown_grace_ms = 100
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.wait(5)
    worker.shutdown()
    thread.join(5)
    assert not thread.is_alive()
    count = len(effects)
    time.sleep(0.05)
    assert len(effects) == count
    assert engine.get(T, "op").state == State.CLAIMED  # left to lapse; the next claim reconciles


def test_a_fleet_round_robins_its_tenants(engine):
    for i in range(20):
        engine.enqueue("big", f"op-{i}", "job", H)
    engine.enqueue("small", "op-0", "job", H)
    order = []
    worker = make_worker(engine, {"job": FunctionHandler(lambda job: order.append(job.tenant_id) or "ok")},
                         tenants=("big", "small"))
    for _ in range(3):
        worker.run_once()
    assert "small" in order[:2]
