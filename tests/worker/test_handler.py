"""The handler-facing API: LostOwnership cannot be swallowed by a handler's ``except Exception:``,
the outcomes share one base, and the Handler protocol's hooks have defaults."""

from __future__ import annotations

import pytest

from leasefence import State
from leasefence.worker import (
    Ambiguous,
    EngineBackend,
    FunctionHandler,
    Handler,
    HandlerOutcome,
    Job,
    LostOwnership,
    Permanent,
    Reconciled,
    Retry,
    Uninterpretable,
    Worker,
)

H = "sha256:" + "6" * 64
T = "acme"


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


def make_worker(engine, handlers, events=None, lease_ms=1_000):
    return Worker(EngineBackend(engine, [T]), handlers, worker_id="w1", lease_ms=lease_ms,
                  heartbeat_interval_ms=50, idle_sleep_ms=20, events=events)


def test_a_handler_catching_exception_around_its_progress_still_stops(engine, clock):
    """Ownership is lost (another worker took over; the renewal the handler's progress asked for
    was refused). The handler wraps its progress call in ``except Exception:``, as handlers that
    log and carry on do: the order to stop passes through it, the code after it never runs, and
    the runtime makes no closing write."""
    events = Events()
    engine.enqueue(T, "op", "job", H)
    swallowed, effects = [], []

    def handler(job: Job) -> str:
        clock.advance(2_000)  # past the 1 s lease, before any renewal was asked for
        takeover = engine.claim_next(T, "w2", lease_ms=60_000)
        assert takeover is not None and takeover.fence == 2
        job.progress()  # not lost yet as far as this worker knows: its next renewal is refused
        assert job.cancelled.wait(10)
        for step in range(3):
            try:
                job.progress()
            except Exception:  # noqa: BLE001 - the handler bug this test is about
                swallowed.append(step)
            effects.append(step)  # a side effect a stale worker must not start
        return "finished"

    worker = make_worker(engine, {"job": FunctionHandler(handler)}, events=events)
    job = worker.process(engine.claim_next(T, "w1", lease_ms=1_000))

    assert swallowed == [] and effects == []
    assert job.cancelled.is_set() and not job.completed
    operation = engine.get(T, "op")
    assert operation.state is State.CLAIMED and operation.fence == 2  # w2's claim, untouched
    assert operation.outcome_code is None
    assert events["LostOwnership"] == 1 and events["AbandonedAfterLostOwnership"] == 1


def test_lost_ownership_is_not_an_exception_and_outcomes_share_one_base():
    assert issubclass(LostOwnership, BaseException) and not issubclass(LostOwnership, Exception)
    for outcome in (Retry, Permanent, Ambiguous, Uninterpretable):
        assert issubclass(outcome, HandlerOutcome) and issubclass(outcome, Exception)
    assert not issubclass(LostOwnership, HandlerOutcome)


@pytest.mark.parametrize(
    ("raised", "state"),
    [
        (Permanent("no such account"), State.FAILED_TERMINAL),
        (Ambiguous("timed out"), State.UNKNOWN),
        (Uninterpretable("garbled"), State.QUARANTINED),
    ],
)
def test_each_outcome_ends_the_operation_its_way(engine, raised, state):
    engine.enqueue(T, "op", "job", H)

    def handler(job: Job) -> str:
        raise raised

    assert make_worker(engine, {"job": FunctionHandler(handler)}).run_once()
    assert engine.get(T, "op").state is state


def test_the_protocols_hooks_have_defaults(engine, clock):
    """A Handler subclass that defines only ``run`` inherits the hooks; so does a plain object
    with only ``run`` (written before the protocol declared them): a claim that must reconcile
    is parked unknown, never run blind."""
    calls = []

    class OnlyRun(Handler):
        def run(self, job: Job) -> str:
            calls.append(job.operation_id)
            return "ok"

    class Plain:
        def run(self, job: Job) -> str:
            calls.append(job.operation_id)
            return "ok"

    for name, handler in (("sub", OnlyRun()), ("plain", Plain())):
        engine.enqueue(T, name, name, H, max_attempts=3)
        first = engine.claim(T, name, "w0", lease_ms=1_000)
        assert first is not None
        clock.advance(2_000)  # the first attempt lapsed: the next claim must reconcile
        worker = make_worker(engine, {name: handler})
        assert isinstance(worker.handlers[name], Handler)
        assert worker.run_once()
        operation = engine.get(T, name)
        assert operation.state is State.UNKNOWN, name
        assert operation.reason == "the handler has no way to reconcile"
    assert calls == []

    engine.enqueue(T, "fresh", "sub", H)
    assert make_worker(engine, {"sub": OnlyRun()}).run_once()
    assert engine.get(T, "fresh").outcome_code == "ok" and calls == ["fresh"]


def test_a_hook_a_handler_defines_is_called():
    seen = []

    class Reconciling(Handler):
        def run(self, job: Job) -> str:
            return "ok"

        def reconcile(self, job: Job) -> Reconciled:
            seen.append("reconcile")
            return Reconciled.done("was-done")

    assert Reconciling().reconcile(None).outcome_code == "was-done" and seen == ["reconcile"]
    assert Reconciling().on_claim(None) is None
