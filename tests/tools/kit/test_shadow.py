"""Shadow mode beside an at-least-once consumer: a simulated SQS-like queue that redelivers after
its visibility timeout, with slow and frozen handlers. The report must name exactly the
executions the simulation ran twice, and shadow mode must change nothing on the wrapped path,
with leasefence up, down, or not answering.

Time is the engine's manual clock. Consumers (and their heartbeat threads) are threads, but a
scheduler lets exactly one run at a time and moves the clock to the next wake-up, so overlapping
executions are simulated deterministically, without sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from leasefence_tools.local.tokens import mint
from leasefence_tools.kit.shadow_report import build_report
from leasefence.shadow import (
    RUN_PREFIX,
    SHADOW_TOKEN_SCOPES,
    EngineShadowStore,
    Shadow,
    api_store,
    shadow_tenant,
)
from leasefence.limits import CATALOGUE_CACHE_MS
from leasefence.worker import EngineBackend, FunctionHandler, Worker

VISIBILITY_MS = 30_000
LEASE_S = 20
POLL_MS = 1_000
HEARTBEAT_MS = LEASE_S * 1000 // 3


class Scheduler:
    """Deterministic time for threads: one runs at a time, until it sleeps or ends; then the clock
    jumps to the earliest wake-up (ties in the order they were scheduled)."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self._wakeups: list[tuple[int, int, threading.Event]] = []
        self._order = itertools.count()
        self._parked = threading.Semaphore(0)
        self.errors: list[BaseException] = []

    def _at(self, when: int) -> threading.Event:
        go = threading.Event()
        heapq.heappush(self._wakeups, (when, next(self._order), go))
        return go

    def sleep(self, ms: int) -> None:
        """From a task: give the turn back, and wait until ``ms`` of simulated time passed."""
        go = self._at(self.clock() + ms)
        self._parked.release()
        go.wait()

    def spawn(self, task: Callable[[], None]) -> None:
        go = self._at(self.clock())

        def body() -> None:
            go.wait()
            try:
                task()
            except BaseException as error:  # the test fails on it, the scheduler goes on
                self.errors.append(error)
            finally:
                self._parked.release()

        threading.Thread(target=body, daemon=True).start()

    def run(self) -> None:
        while self._wakeups:
            when, _, go = heapq.heappop(self._wakeups)
            if when > self.clock():
                self.clock.advance(when - self.clock())
            go.set()
            assert self._parked.acquire(timeout=60), "a simulated thread never gave the turn back"
        assert not self.errors, self.errors


@dataclass
class Behaviour:
    work_ms: int = 2_000
    freeze_ms: int = 0  # a stop (GC, lost network) after 1 s of work: no heartbeats meanwhile
    fails: bool = False


@dataclass
class Message:
    message_id: str
    body: dict
    visible_at: int = 0
    deleted: bool = False
    receives: int = 0


@dataclass
class Execution:
    execution_id: str
    operation_id: str
    body: dict
    start: int
    last_beat: int
    frozen: bool = False
    end: int | None = None
    ok: bool = False
    expected: str | None = None  # what leasefence would have refused it as (None: nothing)


@dataclass
class Consumer:
    name: str
    shadow: Shadow | None
    current: Execution | None = None
    handler: Any = None


@dataclass
class World:
    """The queue, the consumers, and the ground truth of who ran when."""

    sim: Scheduler
    plan: dict[str, list[Behaviour]]
    consumers: list[Consumer] = field(default_factory=list)
    messages: dict[str, Message] = field(default_factory=dict)
    executions: list[Execution] = field(default_factory=list)
    effects: list[tuple[str, str]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    done: bool = False

    @property
    def now(self) -> int:
        return self.sim.clock()

    def receive(self) -> tuple[Message, int] | None:
        visible = [m for m in self.messages.values() if not m.deleted and m.visible_at <= self.now]
        if not visible:
            return None
        message = min(visible, key=lambda m: (m.visible_at, m.message_id))
        message.visible_at = self.now + VISIBILITY_MS
        message.receives += 1
        return message, message.receives

    def _check_done(self, pending_sends: list) -> None:
        if not pending_sends and all(m.deleted for m in self.messages.values()) and all(
            c.current is None for c in self.consumers
        ):
            self.done = True

    # ------------------------------------------------------------ the threads

    def producer(self, schedule: list[tuple[int, str, dict]]) -> Callable[[], None]:
        pending = sorted(schedule, key=lambda entry: entry[0])

        def send_all() -> None:
            while pending:
                at, message_id, body = pending[0]
                if at > self.now:
                    self.sim.sleep(at - self.now)
                pending.pop(0)
                self.messages[message_id] = Message(message_id, body, visible_at=self.now)
            while not self.done:
                self.sim.sleep(POLL_MS)
                self._check_done(pending)

        return send_all

    def consumer_loop(self, consumer: Consumer) -> Callable[[], None]:
        def loop() -> None:
            while not self.done:
                delivery = self.receive()
                if delivery:
                    self.execute(consumer, *delivery)
                else:
                    self.sim.sleep(POLL_MS)

        return loop

    def heartbeats(self, consumer: Consumer) -> Callable[[], None]:
        """The consumer's heartbeat thread: stopped too while its process is frozen."""

        def beat() -> None:
            while not self.done:
                self.sim.sleep(HEARTBEAT_MS)
                run = consumer.current
                if run is not None and not run.frozen:
                    run.last_beat = self.now
                    if consumer.shadow is not None:
                        consumer.shadow.heartbeat_now()

        return beat

    # ------------------------------------------------------------ one delivery

    def execute(self, consumer: Consumer, message: Message, receive: int) -> None:
        run = Execution(
            execution_id=f"{message.message_id}#{receive}",
            operation_id=message.body["refund_id"],
            body=message.body,
            start=self.now,
            last_beat=self.now,
        )
        run.expected = self._ground_truth(run)
        self.executions.append(run)
        consumer.current = run
        try:
            consumer.handler(message, receive)
            message.deleted = True  # deleted after success, as an SQS consumer does
        except RuntimeError:
            self.failures.append((run.operation_id, run.execution_id))
        finally:
            run.end = self.now
            consumer.current = None

    def _ground_truth(self, run: Execution) -> str | None:
        """What leasefence would have refused this execution as, from the timeline alone."""
        others = [e for e in self.executions if e.operation_id == run.operation_id]
        if any(e.body != run.body for e in others):
            return "conflict"
        if any(e.end is not None and e.ok for e in others):
            return "duplicate"  # ran after another execution had finished it
        in_flight = [e for e in others if e.end is None]
        if any(self.now - e.last_beat < LEASE_S * 1000 for e in in_flight):
            return "duplicate"  # another execution was running and renewing its lease
        for lapsed in in_flight:  # frozen past its lease: this one takes over
            lapsed.expected = "overtaken"
        return None

    def existing_handler(self, consumer: Consumer) -> Callable[[Message, int], str]:
        """The existing consumer's own code: work, maybe freeze or fail, then the side effect."""

        def handle(message: Message, receive: int) -> str:
            run = consumer.current
            assert run is not None
            behaviours = (self.plan.get(message.message_id) or [])[receive - 1 : receive]
            behaviour = behaviours[0] if behaviours else Behaviour()
            if behaviour.freeze_ms:
                self.sim.sleep(1_000)
                run.frozen = True
                self.sim.sleep(behaviour.freeze_ms)
                run.frozen = False
            self.sim.sleep(behaviour.work_ms)
            if behaviour.fails:
                raise RuntimeError("the provider said 503")
            run.ok = True
            self.effects.append((run.operation_id, run.execution_id))
            return f"refunded {message.body['refund_id']}"

        return handle


def refund(refund_id: str, cents: int = 500) -> dict:
    return {"refund_id": refund_id, "cents": cents}


#: (send time, message id, body). Visibility 30 s, lease 20 s, five consumers.
SCHEDULE = [
    (0, "m1", refund("r1")),  # quick: once
    (0, "m2", refund("r2")),  # slow (45 s), alive: redelivered at 30 s while it runs: duplicate
    (0, "m3", refund("r3")),  # freezes 80 s: its lease lapses, the redelivery takes over
    (0, "m4", refund("r4")),  # slow 70 s, its redelivery slow 40 s: two duplicates
    (100_000, "m5", refund("r5")),  # fails once (an exception): a retry, not a duplicate
    (100_000, "m6a", refund("r6")),  # the producer sends r6 twice: the second is a duplicate
    (100_000, "m7a", refund("r7", 100)),  # the same id with another amount: a conflict
    (140_000, "m6b", refund("r6")),
    (140_000, "m7b", refund("r7", 999)),
]
PLAN = {
    "m2": [Behaviour(work_ms=45_000)],
    "m3": [Behaviour(work_ms=1_000, freeze_ms=80_000)],
    "m4": [Behaviour(work_ms=70_000), Behaviour(work_ms=40_000)],
    "m5": [Behaviour(work_ms=1_000, fails=True)],
}


def simulate(clock, store: Any) -> tuple[World, list[Shadow]]:
    """Run the queue to empty with five consumers (each its own Shadow, or none)."""
    world = World(sim=Scheduler(clock), plan=PLAN)
    shadows = []
    for index in range(5):
        shadow = (
            Shadow(
                store,
                job_type="refund",
                operation_id=lambda message, _receive: message.body["refund_id"],
                payload=lambda message, _receive: message.body,
                execution_id=lambda message, receive: f"{message.message_id}#{receive}",
                lease_seconds=LEASE_S,
                heartbeat_thread=False,  # World.heartbeats calls heartbeat_now() instead
            )
            if store is not None
            else None
        )
        consumer = Consumer(name=f"consumer-{index}", shadow=shadow)
        handle = world.existing_handler(consumer)
        consumer.handler = shadow.wrap(handle) if shadow else handle
        world.consumers.append(consumer)
        if shadow:
            shadows.append(shadow)
    world.sim.spawn(world.producer(SCHEDULE))
    for consumer in world.consumers:
        world.sim.spawn(world.consumer_loop(consumer))
        world.sim.spawn(world.heartbeats(consumer))
    world.sim.run()
    return world, shadows


def expected(world: World, kind: str) -> set[str]:
    return {e.execution_id for e in world.executions if e.expected == kind}


def refused(report, kind: str) -> set[str]:
    (job,) = report.job_types
    return {example.execution_id for example in getattr(job, kind).examples}


def test_the_report_names_exactly_the_executions_the_queue_ran_twice(engine, clock) -> None:
    baseline, _ = simulate(clock, None)
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    store = EngineShadowStore(engine, tenant)
    world, shadows = simulate(clock, store)

    # The wrapped path did exactly what it does without shadow mode.
    assert world.effects == baseline.effects and world.failures == baseline.failures
    # The simulation did produce every case (so the comparison below means something).
    assert expected(world, "duplicate") == {"m2#2", "m4#2", "m4#3", "m6b#1"}
    assert expected(world, "overtaken") == {"m3#1"}
    assert expected(world, "conflict") == {"m7b#1"}

    report = build_report(store.tenant_id, store.iter_operations(), max_examples=None)
    (job,) = report.job_types
    assert refused(report, "duplicate") == expected(world, "duplicate")
    assert refused(report, "overtaken") == expected(world, "overtaken")
    assert refused(report, "conflict") == expected(world, "conflict")
    assert (job.job_type, job.operations, job.ran_more_than_once) == ("refund", 7, 4)
    # A claim per execution leasefence would have run: one each, plus m3's takeover and m5's retry.
    assert job.claims == 9
    assert not report.clean and "m3#1" in report.text()
    assert sum(s.stats["gaps"] for s in shadows) == 0


def test_shadow_operations_are_never_dispatched_to_workers(engine, clock) -> None:
    store = EngineShadowStore(engine, "acme")
    shadow = Shadow(store, "refund", operation_id=lambda body: body["refund_id"],
                    heartbeat_thread=False)
    shadow.wrap(lambda body: "slow")({"refund_id": "r1"})
    shadow.wrap(lambda body: "again")({"refund_id": "r1"})  # a duplicate: its run record too
    job, record = sorted(op.operation_id for op in store.iter_operations())
    assert job == "r1" and record.startswith(RUN_PREFIX)
    handler = lambda job: "ran"  # noqa: E731 - a handler that must never run
    worker = Worker(EngineBackend(engine, ["acme"]), {"refund": FunctionHandler(handler)},
                    claim_any_type=True)
    assert worker.run_once() is False  # the real tenant has nothing: shadow ops live apart
    with pytest.raises(ValueError, match="shadow tenant"):
        EngineBackend(engine, [shadow_tenant("acme")])


def _shadow_token() -> tuple[str, str]:
    secret = "kit-test-secret-of-at-least-32-bytes"
    return mint(shadow_tenant("acme"), SHADOW_TOKEN_SCOPES, secret=secret), secret


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_shadow_mode_adds_no_failure_when_leasefence_is_down(clock) -> None:
    baseline, _ = simulate(clock, None)
    token, _ = _shadow_token()
    down = api_store(f"http://127.0.0.1:{_closed_port()}", token, timeout_s=0.2)
    started = time.monotonic()
    world, shadows = simulate(clock, down)
    elapsed = time.monotonic() - started

    assert world.effects == baseline.effects and world.failures == baseline.failures
    executions = len(world.executions)
    assert sum(s.stats["executions"] for s in shadows) == executions
    assert sum(s.stats["gaps"] for s in shadows) == executions  # each one counted, none failed
    assert sum(s.stats["claims"] for s in shadows) == 0
    assert elapsed < 10  # refused connections, then the breaker: no waiting per call


def test_shadow_mode_bounds_the_wait_when_leasefence_does_not_answer() -> None:
    token, _ = _shadow_token()
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        store = api_store(f"http://127.0.0.1:{silent.getsockname()[1]}", token, timeout_s=0.2)
        shadow = Shadow(store, "refund", operation_id=lambda body: body["refund_id"],
                        heartbeat_thread=False)
        calls = []
        handler = shadow.wrap(lambda body: calls.append(body) or "ok")
        durations = []
        for index in range(5):
            started = time.monotonic()
            assert handler({"refund_id": f"r{index}"}) == "ok"
            durations.append(time.monotonic() - started)
    assert len(calls) == 5 and shadow.stats["gaps"] == 5
    assert durations[0] < 2  # one timeout (0.2 s), not the client's default 10 s with retries
    assert sum(durations[1:]) < 1  # the breaker is open: leasefence is not asked again


def test_the_wrapped_call_keeps_its_result_and_its_exception(engine) -> None:
    shadow = Shadow(EngineShadowStore(engine, f"acme-{uuid.uuid4().hex[:6]}"), "refund",
                    operation_id=lambda body: body["refund_id"], heartbeat_thread=False)

    class Declined(Exception):
        pass

    def existing(body):
        if body.get("decline"):
            raise Declined(body["refund_id"])
        return {"refunded": body["refund_id"]}

    wrapped = shadow.wrap(existing)
    assert wrapped.__name__ == "existing"
    assert wrapped({"refund_id": "r1"}) == {"refunded": "r1"}
    with pytest.raises(Declined, match="r2"):
        wrapped({"refund_id": "r2", "decline": True})
    assert shadow.stats["claims"] == 2 and shadow.stats["gaps"] == 0


def test_a_token_for_a_real_tenant_is_refused() -> None:
    with pytest.raises(ValueError, match="shadow tenant"):
        api_store("http://127.0.0.1:1", mint("acme", secret="kit-test-secret-of-at-least-32-bytes"))


def test_a_token_for_a_shadow_tenant_without_the_shadow_scope_is_refused() -> None:
    """The API would refuse it (403): api_store says so at once, naming the scope."""
    ordinary = mint(shadow_tenant("acme"), secret="kit-test-secret-of-at-least-32-bytes")
    with pytest.raises(ValueError, match="leasefence/shadow"):
        api_store("http://127.0.0.1:1", ordinary)


def test_heartbeats_run_on_their_own_thread(engine) -> None:
    """With the thread on (the default), a long call keeps its lease: it is renewed meanwhile."""
    store = EngineShadowStore(engine, f"acme-{uuid.uuid4().hex[:6]}")
    shadow = Shadow(store, "refund", operation_id=lambda body: body["refund_id"], lease_seconds=1)
    renewed = threading.Event()
    original = store.heartbeat

    def heartbeat(*args):
        renewed.set()
        return original(*args)

    store.heartbeat = heartbeat
    wrapped = shadow.wrap(lambda body: renewed.wait(5))
    try:
        assert wrapped({"refund_id": "r1"}) is True
    finally:
        shadow.close()
    assert store.get("r1").state == "succeeded"


def test_a_catalogue_refusal_is_a_misconfiguration_named_by_its_code_not_an_outage(engine, clock) -> None:
    """A strict shadow tenant without the job type refuses every execution: each is counted as
    misconfigured (named: unknown_job_type), none as a gap, and the breaker stays closed, so
    the execution after the job type is declared is shadowed at once."""
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    engine.catalogue.set_strict(shadow_tenant(tenant), True)
    events: dict[str, float] = {}
    shadow = Shadow(EngineShadowStore(engine, tenant), "refund", operation_id=lambda body: body["refund_id"],
                    heartbeat_thread=False, events=lambda name, value: events.update({name: events.get(name, 0) + value}))
    wrapped = shadow.wrap(lambda body: body["refund_id"])
    assert [wrapped({"refund_id": f"r{i}"}) for i in range(3)] == ["r0", "r1", "r2"]
    assert (shadow.stats["misconfigured"], shadow.stats["gaps"], shadow.stats["claims"]) == (3, 0, 0)
    assert list(shadow.misconfigurations) == ["unknown_job_type"]
    assert events.get("ShadowMisconfigured") == 3 and "ShadowGaps" not in events
    engine.catalogue.set_strict(shadow_tenant(tenant), False)  # fixed
    clock.advance(CATALOGUE_CACHE_MS)  # the engine's catalogue cache
    assert wrapped({"refund_id": "r3"}) == "r3"
    assert shadow.stats["claims"] == 1 and shadow.stats["gaps"] == 0
    # An entry for the job type whose attempts contradict the shadow's is a refusal too, named.
    engine.catalogue.put(shadow_tenant(tenant), "refund", {"target_class": "C"})
    clock.advance(CATALOGUE_CACHE_MS)
    assert wrapped({"refund_id": "r4"}) == "r4"
    assert shadow.stats["misconfigured"] == 4 and shadow.stats["gaps"] == 0
    assert "contradicts the catalogue" in shadow.misconfigurations["invalid_request"]
