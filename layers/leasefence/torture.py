"""`leasefence torture`: many workers, four target classes, several tenants, and a fault injector.

Worker threads execute operations for several tenants (with colliding operation ids) against
instrumented targets of classes A to D, over the embedded stack, while faults are injected:

* ``stall``: a worker pauses past its lease just before the side effect, then carries on;
* ``crash``: a worker dies right after the side effect, before its completion write;
* ``lost_response`` / ``not_sent``: a store call commits and its answer is lost, or never arrives;
* ``throttle`` / ``txn_conflict``: DynamoDB throttling and transaction conflicts;
* ``ambiguous_call``: a class C or D call whose answer is lost;
* ``replay`` / ``conflict``: an enqueue repeated with the same payload, or with another one;
* ``sweep``: sweeper runs at random moments, concurrently with claims (parking expired final
  attempts, and purging payloads whose retention after their operation's end has passed);
* ``txn_throttle``: a transaction cancelled with throttling reasons, as DynamoDB reports it.

The embedded endpoint is as unkind as DynamoDB here (:class:`~leasefence.local.embedded.Fidelity`):
index queries lag the table, and TTL deletes expired items. Payloads are stored inline in the
embedded S3 and every handler loads and checks its payload before its side effect.

Then the **months phase** (``Settings.months``): workers pause, a backlog is enqueued, and the clock
jumps 45 days (past the payload retention), then 300 more days (within the 400-day identity
retention) while operations are queued, parked or finished: old ``unknown`` operations are
requeued, finished ones replayed and conflicted, some finished and some queued operations erased
in the middle, payloads purged and TTL deletions run. Finally the clock jumps past the identity
retention and TTL deletes every ended identity (the window, measured).

Then a checker reads the final table and the targets' own records. The seed fixes the workload
and every fault decision (each is a hash of the seed and of what it applies to, not a draw from
one sequence the threads share); thread interleaving still varies between runs, which is the
point of running it many times.

Time runs ``speed`` times faster than the wall clock for the engine (leases, backoff), so a
10 s lease lapses in one second and stalls stay cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from leasefence import keys
from leasefence.demo.kits import (
    FencedTableKit,
    Hooks,
    IdempotentApiKit,
    Kit,
    SameTableKit,
    SingleShotKit,
    overtaken,
)
from leasefence.engine import DAY_MS, Engine
from leasefence.errors import InvalidTransition, PayloadConflict, PayloadMissing, Unavailable
from leasefence.faults import AFTER, BEFORE, CONFLICT, THROTTLE, TXN_THROTTLE, FaultyClient
from leasefence.model import Claim, Operation, State, TargetClass
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import TTL_ATTRIBUTE, TableSpec
from leasefence.targets.idempotent_api import InMemoryIdempotentApi, idempotency_key
from leasefence.worker import EngineBackend, Job, Worker

FINAL_STATES = {State.SUCCEEDED, State.FAILED_TERMINAL, State.UNKNOWN, State.QUARANTINED}


class Crash(BaseException):
    """The worker process dies here. Nothing after it runs for this claim."""


def _chance(seed: int, *parts: Any) -> float:
    """A deterministic coin in [0, 1) for one decision about one thing."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class Settings:
    operations: int = 2_000
    seed: int = 1
    tenants: int = 3
    workers: int = 8
    lease_ms: int = 10_000  # engine time
    speed: float = 10.0  # engine ms per wall ms
    stall_rate: float = 0.06
    crash_rate: float = 0.04
    store_fault_rate: float = 0.03
    ambiguous_rate: float = 0.05
    replay_rate: float = 0.05
    conflict_rate: float = 0.03
    window: int = 0  # operations enqueued but not yet final, at most (0: four per worker)
    timeout_s: float = 0.0  # wall-clock budget; 0: 300 s plus 0.25 s per operation
    progress: bool = False  # a line on stderr every tenth of the run
    months: bool = True  # the months phase: clock jumps past the retention windows
    fidelity: bool = True  # TTL deletion and index lag in the embedded endpoint
    index_lag_ms: int = 250  # wall-clock lag of index queries (per item, seeded, up to this)
    identity_retention_days: int = 400
    payload_retention_days: int = 30


class FastClock:
    """Engine time: starts at the wall clock and runs ``speed`` times faster; :meth:`jump` moves
    it days or months ahead at once (the months phase)."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.origin_ms = time.time_ns() // 1_000_000
        self.t0 = time.monotonic()
        self.jumped_ms = 0

    def __call__(self) -> int:
        return (
            self.origin_ms + self.jumped_ms + int((time.monotonic() - self.t0) * 1000 * self.speed)
        )

    def jump(self, ms: int) -> int:
        self.jumped_ms += ms
        return self()

    def wall_seconds(self, engine_ms: float) -> float:
        return engine_ms / self.speed / 1000


@dataclass
class Report:
    settings: Settings
    faults: Counter = field(default_factory=Counter)
    history: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    violations: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    purged: int = 0  # payloads the sweeper deleted after their retention (or erasure)

    def note(self, tenant_id: str, operation_id: str, event: str) -> None:
        with self.lock:
            self.history[(tenant_id, operation_id)].append(event)

    def fault(
        self,
        kind: str,
        tenant_id: str | None = None,
        operation_id: str | None = None,
        detail: str = "",
    ) -> None:
        with self.lock:
            self.faults[kind] += 1
        if tenant_id is not None and operation_id is not None:
            self.note(tenant_id, operation_id, f"fault:{kind}{(' ' + detail) if detail else ''}")

    def violate(self, kind: str, tenant_id: str, operation_id: str, detail: str) -> None:
        with self.lock:
            self.violations.append(
                {
                    "kind": kind,
                    "tenant_id": tenant_id,
                    "operation_id": operation_id,
                    "detail": detail,
                    "history": list(self.history.get((tenant_id, operation_id), [])),
                }
            )


class ChaosHooks(Hooks):
    """Stalls before the side effect and crashes after it, decided per (operation, fence). Before
    any side effect the handler loads its payload and checks it is its operation's."""

    def __init__(
        self, settings: Settings, clock: FastClock, report: Report, observer: Engine
    ) -> None:
        super().__init__()
        self.settings, self.clock, self.report = settings, clock, report
        self.observer = observer
        self.erased: set[tuple[str, str]] = set()

    def before(self, job: Job) -> None:
        try:
            payload = job.payload
        except PayloadMissing:
            self.report.note(
                job.tenant_id, job.operation_id, f"payload missing at fence {job.fence}"
            )
            if (job.tenant_id, job.operation_id) not in self.erased:
                self.report.violate(
                    "payload_lost",
                    job.tenant_id,
                    job.operation_id,
                    "a live operation's payload was gone when its handler ran",
                )
            raise
        if payload != _payload(job.tenant_id, job.operation_id):
            self.report.violate(
                "ran_without_payload",
                job.tenant_id,
                job.operation_id,
                f"the handler got {payload!r} instead of its payload",
            )
            raise Crash()
        if (
            _chance(self.settings.seed, "stall", job.tenant_id, job.operation_id, job.fence)
            < self.settings.stall_rate
        ):
            self.report.fault("stall", job.tenant_id, job.operation_id, f"fence {job.fence}")
            time.sleep(self.clock.wall_seconds(self.settings.lease_ms * 1.5))
            # Then stay paused until someone else acted on the operation (a takeover raised the
            # fence, or the sweeper parked it), however loaded the machine is, for at most a
            # few more leases: the zombie must wake up into the situation it is meant to test.
            deadline = time.monotonic() + self.clock.wall_seconds(self.settings.lease_ms * 5)
            while time.monotonic() < deadline and not overtaken(self.observer, job):
                time.sleep(0.05)

    def after(self, job: Job) -> None:
        if (
            _chance(self.settings.seed, "crash", job.tenant_id, job.operation_id, job.fence)
            < self.settings.crash_rate
        ):
            self.report.fault("crash", job.tenant_id, job.operation_id, f"fence {job.fence}")
            raise Crash()


class ChaosApi(InMemoryIdempotentApi):
    """A class C provider whose answer is lost for some (key, call) pairs after executing."""

    def __init__(self, settings: Settings, report: Report) -> None:
        super().__init__()
        self.settings, self.report = settings, report
        self.calls_per_key: Counter[str] = Counter()

    def execute(self, key: str, request: Any) -> Any:
        with self._lock:
            self.calls_per_key[key] += 1
            nth = self.calls_per_key[key]
        if _chance(self.settings.seed, "ambiguous-c", key, nth) < self.settings.ambiguous_rate:
            self.report.fault("ambiguous_call")
            self.lose_answer_next = True  # guarded by the parent's lock inside execute
        return super().execute(key, request)


class StoreChaos:
    """Faults in DynamoDB calls of the engine (not of the targets: those are the real world).

    Each decision is a hash of the seed, the call, what it applies to (its key, its partition,
    or its transaction's keys) and how many times that call was made for it before, not a draw
    from one shared sequence: a seed injects nearly the same faults into the same operations
    whatever order the threads run in (a count can differ by a heartbeat or a poll).
    """

    def __init__(self, settings: Settings, report: Report) -> None:
        self.seed = settings.seed
        self.rate = settings.store_fault_rate
        self.report = report
        self.calls: Counter[tuple[str, str]] = Counter()  # FaultyClient calls this under its lock

    @staticmethod
    def subject(request: dict[str, Any]) -> str:
        if "TransactItems" in request:
            parts = [
                op.get("Key") or op.get("Item", {})
                for entry in request["TransactItems"]
                for op in entry.values()
            ]
            return json.dumps(
                [
                    {k: v for k, v in part.items() if k in ("tenant_id", "operation_id", "pk")}
                    for part in parts
                ],
                sort_keys=True,
            )
        if "Key" in request:
            return json.dumps(request["Key"], sort_keys=True)
        if "Item" in request:
            return json.dumps(
                {k: request["Item"].get(k) for k in ("tenant_id", "operation_id")}, sort_keys=True
            )
        values = request.get("ExpressionAttributeValues", {})  # a query: its partition
        return json.dumps({k: v for k, v in values.items() if "S" in v}, sort_keys=True)

    def __call__(self, method: str, request: dict[str, Any]) -> str | None:
        if method not in ("update_item", "put_item", "transact_write_items", "query", "get_item"):
            return None
        subject = self.subject(request)
        self.calls[(method, subject)] += 1
        nth = self.calls[(method, subject)]
        if _chance(self.seed, "store", method, subject, nth) >= self.rate:
            return None
        if method == "transact_write_items":
            modes = [BEFORE, THROTTLE, AFTER, CONFLICT, CONFLICT, TXN_THROTTLE]
        elif method in ("update_item", "put_item"):
            modes = [BEFORE, THROTTLE, AFTER, AFTER]
        else:
            modes = [BEFORE, THROTTLE]
        mode = modes[int(_chance(self.seed, "store-mode", method, subject, nth) * len(modes))]
        self.report.fault(
            {
                AFTER: "lost_response",
                BEFORE: "not_sent",
                THROTTLE: "throttle",
                CONFLICT: "txn_conflict",
                TXN_THROTTLE: "txn_throttle",
            }[mode]
        )
        return mode


class Window:
    """The operations enqueued and not yet known to be final, at most ``size`` of them.

    Workers and the sweeper report each operation they finish; an operation whose finishing
    answer was lost (a store fault after the commit) is found by asking the table about the
    oldest entries once nobody has reported anything for a while. Keeping the window small
    keeps the queue short, so an operation whose lease lapsed is taken over promptly.
    """

    def __init__(self, size: int, engine: Engine) -> None:
        self.size = size
        self.engine = engine
        self.entries: dict[tuple[str, str], None] = {}  # insertion order: oldest first
        self.changed = threading.Condition()

    def add(self, tenant_id: str, operation_id: str) -> None:
        with self.changed:
            self.entries[(tenant_id, operation_id)] = None

    def finished(self, tenant_id: str, operation_id: str) -> None:
        with self.changed:
            if self.entries.pop((tenant_id, operation_id), 0) is None:
                self.changed.notify_all()

    def wait_below(self, limit: int, deadline: float, poll_after_s: float = 0.3) -> None:
        while time.monotonic() < deadline:
            with self.changed:
                if len(self.entries) < limit:
                    return
                if self.changed.wait(timeout=poll_after_s):
                    continue
                oldest = list(itertools.islice(self.entries, 8))
            for tenant_id, operation_id in oldest:  # nothing reported for a while: look
                if self.engine.get(tenant_id, operation_id).state in FINAL_STATES:
                    self.finished(tenant_id, operation_id)


class RecordingBackend(EngineBackend):
    """Records every claim a worker received (for the fence checks) and every operation a
    worker finished (for the window)."""

    def __init__(self, engine: Engine, tenants: list[str], report: Report, window: Window) -> None:
        super().__init__(
            engine, tenants, payload_loader=lambda claim: json.loads(engine.payload(claim))
        )
        self.report = report
        self.window = window
        self.claims: list[tuple[str, str, int]] = []

    def claim_next(self, worker_id: str, lease_ms: int, job_types: Any = None) -> Claim | None:
        claim = super().claim_next(worker_id, lease_ms, job_types)
        if claim is not None:
            self.report.note(
                claim.tenant_id, claim.operation_id, f"claimed fence {claim.fence} by {worker_id}"
            )
            with self.report.lock:
                self.claims.append((claim.tenant_id, claim.operation_id, claim.fence))
        return claim

    def _finished(self, claim: Claim) -> None:
        self.window.finished(claim.tenant_id, claim.operation_id)

    def complete(self, claim: Claim, outcome_code: str) -> None:
        super().complete(claim, outcome_code)
        self._finished(claim)

    def complete_with(self, claim: Claim, outcome_code: str, writes: list[dict[str, Any]]) -> None:
        super().complete_with(claim, outcome_code, writes)
        self._finished(claim)

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None:
        operation = self.engine.fail(
            claim.tenant_id, claim.operation_id, claim.fence, retryable, reason, retry_after_ms
        )
        if operation.state in FINAL_STATES:
            self._finished(claim)

    def park_unknown(self, claim: Claim, reason: str) -> None:
        super().park_unknown(claim, reason)
        self._finished(claim)

    def quarantine(self, claim: Claim, reason: str) -> None:
        super().quarantine(claim, reason)
        self._finished(claim)


def _payload(tenant_id: str, operation_id: str, variant: str = "") -> dict[str, str]:
    """Each operation's own payload (a variant: another payload under the same id)."""
    return {
        "tenant": tenant_id,
        "operation": operation_id,
        **({"variant": variant} if variant else {}),
    }


def _payload_hash(tenant_id: str, operation_id: str, variant: str = "") -> str:
    return canonicalize(_payload(tenant_id, operation_id, variant)).hash


def run_torture(settings: Settings) -> dict[str, Any]:
    from leasefence.local.embedded import EmbeddedAws, Fidelity

    started = time.monotonic()
    report = Report(settings)
    clock = FastClock(settings.speed)
    tenants = [f"tenant-{i}" for i in range(settings.tenants)]
    fidelity = (
        Fidelity(index_lag_ms=settings.index_lag_ms, seed=settings.seed)
        if settings.fidelity
        else False
    )
    with EmbeddedAws(process=True, fidelity=fidelity) as aws:
        spec = aws.create_tables(
            TableSpec(table_name="torture-operations", due_shards=1, sweep_shards=2)
        )
        client = aws.client()
        s3 = aws.client("s3")
        s3.create_bucket(Bucket="torture-payloads")
        payloads = PayloadStore("torture-payloads", client=s3)
        engine_on = partial(
            Engine,
            spec=spec,
            clock=clock,
            payloads=payloads,
            identity_retention_ms=settings.identity_retention_days * DAY_MS,
            payload_retention_ms=settings.payload_retention_days * DAY_MS,
        )
        engine = engine_on(
            client=FaultyClient(
                client, chaos=StoreChaos(settings, report), rng=random.Random(settings.seed)
            ),
            rng=random.Random(settings.seed),
        )
        checker_engine = engine_on(client=client)
        hooks = ChaosHooks(settings, clock, report, observer=checker_engine)
        kits: dict[TargetClass, Kit] = {
            TargetClass.A: SameTableKit(client, "torture-orders", hooks=hooks),
            TargetClass.B: FencedTableKit(client, "torture-ledger", hooks=hooks),
            TargetClass.C: IdempotentApiKit(api=ChaosApi(settings, report), hooks=hooks),
            TargetClass.D: SingleShotKit(hooks=hooks),
        }
        d_kit = kits[TargetClass.D]
        assert isinstance(d_kit, SingleShotKit)

        # The workload: operation ids collide across tenants on purpose.
        ops: list[tuple[str, str, TargetClass]] = []
        for i in range(settings.operations):
            tenant = tenants[i % len(tenants)]
            operation_id = f"op-{i // len(tenants):05d}"
            target = list(TargetClass)[
                int(_chance(settings.seed, "class", tenant, operation_id) * 4)
            ]
            ops.append((tenant, operation_id, target))
            if (
                target is TargetClass.D
                and _chance(settings.seed, "ambiguous-d", tenant, operation_id)
                < settings.ambiguous_rate
            ):
                d_kit.lose_answer.add((tenant, operation_id))
                report.fault("ambiguous_call", tenant, operation_id)

        window = Window(settings.window or 4 * settings.workers, checker_engine)
        backend = RecordingBackend(engine, tenants, report, window)
        handlers = {kit.job_type: kit.handler() for kit in kits.values()}
        stop, paused = threading.Event(), threading.Event()
        workers = [
            Worker(
                backend,
                handlers,
                worker_id=f"w{i}",
                lease_ms=settings.lease_ms,
                heartbeat_interval_ms=max(10, int(settings.lease_ms / settings.speed / 3)),
                idle_sleep_ms=10,
            )
            for i in range(settings.workers)
        ]

        def work(worker: Worker) -> None:
            idle = 0.02
            while not stop.is_set():
                if paused.is_set():
                    time.sleep(0.02)
                    continue
                try:
                    if worker.run_once():
                        idle = 0.02
                    else:
                        # An empty poll reads every shard of every tenant: back off while idle.
                        time.sleep(idle)
                        idle = min(idle * 2, 0.8)
                except Crash:
                    continue  # the process "restarts"; its claim is left to lapse
                except Unavailable:
                    time.sleep(0.005)

        def sweep_once(limit: int = 50) -> int:
            result = engine.sweep(limit=limit)
            for tenant_id, operation_id in result.swept_keys:
                report.note(tenant_id, operation_id, "swept to unknown")
                window.finished(tenant_id, operation_id)
            purged = engine.purge_payloads(limit=limit)
            if purged.purged:
                with report.lock:
                    report.purged += purged.purged
            return purged.purged + purged.failed  # 0: nothing (more) was due

        def sweep() -> None:
            rng = random.Random(settings.seed + 1)
            while not stop.wait(rng.uniform(0.05, 0.5)):
                try:
                    sweep_once()
                    report.fault("sweep")
                except Unavailable:
                    pass

        threads = [
            threading.Thread(target=work, args=(w,), name=w.worker_id, daemon=True) for w in workers
        ]
        threads.append(threading.Thread(target=sweep, name="sweeper", daemon=True))
        for thread in threads:
            thread.start()

        enqueued: list[tuple[str, str, TargetClass]] = []
        deadline = time.monotonic() + (settings.timeout_s or 300 + 0.25 * settings.operations)
        tenth = max(1, settings.operations // 10)

        def retrying(call: Any) -> Any:
            for _ in range(20):
                try:
                    return call()
                except Unavailable:
                    continue
            raise RuntimeError("the store stayed unavailable for 20 tries")

        def enqueue(tenant: str, operation_id: str, target: TargetClass, variant: str = "") -> bool:
            canonical = canonicalize(_payload(tenant, operation_id, variant))
            stored = payloads.put(tenant, operation_id, canonical)
            try:
                result = retrying(
                    lambda: engine.enqueue(
                        tenant,
                        operation_id,
                        kits[target].job_type,
                        canonical.hash,
                        payload_ref=stored.ref,
                        payload_inline=True,
                        target_class=target,
                    )
                )
            except PayloadConflict:
                payloads.delete_quietly(stored.key)
                raise
            if not result.created and (
                result.operation.payload_ref != stored.ref
                or (stored.created and result.operation.payload_state != "stored")
            ):
                payloads.delete_quietly(
                    stored.key
                )  # what the API does: an erased payload stays erased
            return result.created

        def submit(tenant: str, operation_id: str, target: TargetClass, wait: bool = True) -> None:
            if wait:
                window.wait_below(window.size, deadline)
            if target is TargetClass.A:
                kits[target].setup(tenant, operation_id)
            window.add(tenant, operation_id)
            enqueue(tenant, operation_id, target)
            report.note(tenant, operation_id, "enqueued")
            enqueued.append((tenant, operation_id, target))

        def replay_and_conflict(
            tenant: str, operation_id: str, target: TargetClass, label: str
        ) -> None:
            report.fault("replay", tenant, operation_id, label)
            if enqueue(tenant, operation_id, target):
                report.violate(
                    "replay_created",
                    tenant,
                    operation_id,
                    f"a replay ({label}) created a second operation",
                )
            if _chance(settings.seed, "conflict", label, tenant, operation_id) < 0.5:
                report.fault("conflict", tenant, operation_id, label)
                try:
                    enqueue(tenant, operation_id, target, "other")
                    report.violate(
                        "conflict_accepted",
                        tenant,
                        operation_id,
                        f"another payload was accepted ({label})",
                    )
                except PayloadConflict:
                    pass

        for number, (tenant, operation_id, target) in enumerate(ops):
            if settings.progress and number % tenth == 0 and number:
                print(
                    f"torture: {number:,} of {settings.operations:,} enqueued, {sum(report.faults.values()):,} faults, "
                    f"{len(report.violations)} violations, {time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            submit(tenant, operation_id, target)
            if _chance(settings.seed, "replay", tenant, operation_id) < settings.replay_rate:
                report.fault("replay", tenant, operation_id)
                if enqueue(tenant, operation_id, target):
                    report.violate(
                        "replay_created",
                        tenant,
                        operation_id,
                        "a replay created a second operation",
                    )
            if _chance(settings.seed, "conflict", tenant, operation_id) < settings.conflict_rate:
                report.fault("conflict", tenant, operation_id)
                try:
                    enqueue(tenant, operation_id, target, "other")
                    report.violate(
                        "conflict_accepted", tenant, operation_id, "another payload was accepted"
                    )
                except PayloadConflict:
                    pass
        window.wait_below(1, deadline)

        months: dict[str, Any] = {}
        if settings.months:
            months = _months_phase(
                settings,
                report,
                clock,
                aws,
                engine,
                checker_engine,
                hooks,
                window,
                paused,
                enqueued,
                submit,
                replay_and_conflict,
                sweep_once,
                retrying,
                deadline,
            )
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        summary = _check(settings, report, checker_engine, kits, enqueued, backend.claims)
        if settings.months:
            # Past the identity retention: DynamoDB's TTL deletes every ended identity (the window).
            ended = sum(summary["states"][s] for s in ("succeeded", "failed_terminal"))
            # An erased operation's history (reset by the erasure) carries its identity's TTL too.
            histories = _histories_with_ttl(checker_engine, tenants)
            clock.jump((settings.identity_retention_days + 10) * DAY_MS)
            aws.set_time(clock())
            months["identities_deleted_after_window"] = aws.reap_ttl() - histories
            months["ended_identities"] = ended
            months["histories_deleted_with_them"] = histories
            if months["identities_deleted_after_window"] != ended:
                report.violate(
                    "window",
                    "*",
                    "*",
                    f"{months['identities_deleted_after_window']} identities deleted "
                    f"past the window, {ended} ended",
                )
                summary["violations"] = len(report.violations)
                summary["first_violations"] = report.violations[:5]
            summary["months"] = months
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


def _months_phase(
    settings: Settings,
    report: Report,
    clock: FastClock,
    aws: Any,
    engine: Engine,
    checker: Engine,
    hooks: ChaosHooks,
    window: Window,
    paused: threading.Event,
    enqueued: list[tuple[str, str, TargetClass]],
    submit: Any,
    replay_and_conflict: Any,
    sweep_once: Any,
    retrying: Any,
    deadline: float,
) -> dict[str, Any]:
    """Months pass while operations are queued, parked or finished (see the module docstring)."""
    rng = random.Random(settings.seed + 2)
    stats: Counter[str] = Counter()
    t0 = time.monotonic()
    paused.set()  # the endpoint serves one request at a time: idle polls would slow the bookkeeping
    time.sleep(0.2)  # claims in flight finish their write

    def stage(text: str) -> None:
        if settings.progress:
            print(
                f"torture: months phase: {text} ({time.monotonic() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    def table() -> dict[tuple[str, str], Operation]:
        return _operations(checker, {t for t, _, _ in enqueued})

    now = table()
    finished = [
        op for op in enqueued if now[op[:2]].state in (State.SUCCEEDED, State.FAILED_TERMINAL)
    ]
    parked = [op for op in enqueued if now[op[:2]].state == State.UNKNOWN]
    sample = max(10, len(enqueued) // 20)

    def jump(days: int) -> int:
        clock.jump(days * DAY_MS)
        aws.set_time(clock())
        deleted = aws.reap_ttl()
        stats["ttl_deleted_within_window"] += deleted
        if deleted:
            report.violate(
                "identity_forgotten",
                "*",
                "*",
                f"TTL deleted {deleted} identities within the window",
            )

        # The sweeper's purge until nothing is due, by two sweepers at once (stateless, lock-free:
        # running it concurrently is allowed and is exercised here; more of them only read and
        # refuse each other's entries: four made 2.6 reads and writes per payload purged).
        def drain() -> None:
            while retrying(lambda: sweep_once(limit=100)):
                pass

        sweepers = [threading.Thread(target=drain, name=f"purge-{i}") for i in range(2)]
        for thread in sweepers:
            thread.start()
        for thread in sweepers:
            thread.join()
        return deleted

    # 1. A backlog nobody works on, then 45 days pass (past the payload retention).
    base = len(enqueued)
    backlog = [
        (f"tenant-{i % settings.tenants}", f"late-{i:05d}", list(TargetClass)[i % 4])
        for i in range(sample)
    ]
    for tenant, operation_id, target in backlog:
        submit(
            tenant, operation_id, target, wait=False
        )  # nobody works now: the window cannot drain
    stats["backlog"] = len(backlog)
    stage("backlog enqueued")
    jump(45)
    stage("45 days later, payloads purged")
    now = table()
    for tenant, operation_id, _target in backlog + parked:  # every live payload is still there
        if now[(tenant, operation_id)].payload_state != "stored":
            report.violate(
                "payload_purged_while_live",
                tenant,
                operation_id,
                "a live operation lost its payload",
            )
    for tenant, operation_id, _ in finished:
        operation = now[(tenant, operation_id)]
        if operation.payload_state != "purged":
            report.violate(
                "payload_kept",
                tenant,
                operation_id,
                f"payload {operation.payload_state} 45 days after the end",
            )
    stats["payloads_purged_after_45_days"] = report.purged

    # 2. Late replays and conflicts of finished operations; erasures; requeues of old unknowns.
    for tenant, operation_id, target in rng.sample(finished, min(sample, len(finished))):
        replay_and_conflict(tenant, operation_id, target, "after 45 days")
        stats["late_replays"] += 1
    for tenant, operation_id, _ in rng.sample(finished, min(sample // 4 + 1, len(finished))):
        hooks.erased.add((tenant, operation_id))
        retrying(partial(engine.erase, tenant, operation_id))
        report.note(tenant, operation_id, "erased")
        stats["erased_finished"] += 1
    for tenant, operation_id, _ in backlog[: max(1, len(backlog) // 10)]:
        hooks.erased.add((tenant, operation_id))
        retrying(partial(engine.erase, tenant, operation_id))
        report.note(tenant, operation_id, "erased while queued")
        stats["erased_queued"] += 1
    for tenant, operation_id, _ in parked[:sample]:
        window.add(tenant, operation_id)
        try:
            retrying(
                partial(
                    engine.resolve, tenant, operation_id, "requeue", note="checked after 45 days"
                )
            )
        except InvalidTransition:  # an earlier try committed and its answer was lost
            if checker.get(tenant, operation_id).state == State.UNKNOWN:
                raise
        report.note(tenant, operation_id, "requeued after 45 days")
        stats["requeued_unknown"] += 1
    stage("replayed, erased, requeued")
    paused.clear()
    window.wait_below(1, deadline)
    stage("backlog and requeued operations done")

    # 3. Most of a year later, still inside the identity retention: replays stay replays.
    paused.set()
    jump(300)
    stage("345 days later")
    now = table()
    for tenant, operation_id, target in rng.sample(enqueued[:base], min(sample, base)):
        if now[(tenant, operation_id)].state in (State.SUCCEEDED, State.FAILED_TERMINAL):
            replay_and_conflict(tenant, operation_id, target, "after 345 days")
            stats["late_replays"] += 1
    return dict(stats)


def _operations(engine: Engine, tenants: Iterable[str]) -> dict[tuple[str, str], Operation]:
    """Every operation of these tenants, a page of 500 per read (the operator listing), not one
    read each."""
    found: dict[tuple[str, str], Operation] = {}
    for tenant in sorted(tenants):
        cursor = None
        while True:
            page = engine.list(tenant, limit=500, cursor=cursor)
            found.update({(tenant, op.operation_id): op for op in page.operations})
            cursor = page.next_cursor
            if cursor is None:
                break
    return found


def _histories_with_ttl(engine: Engine, tenants: list[str]) -> int:
    """History items (:mod:`leasefence.history`) that will go with their identity's TTL."""
    found = 0
    for tenant in tenants:
        start = None
        while True:
            page = engine.store.query(
                KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :h)",
                values={":t": tenant, ":h": keys.HISTORY_PREFIX},
                start=start,
            )
            found += sum(1 for item in page.items if TTL_ATTRIBUTE in item)
            start = page.last_key
            if start is None:
                break
    return found


def _check(
    settings: Settings,
    report: Report,
    engine: Engine,
    kits: dict[TargetClass, Kit],
    enqueued: list[tuple[str, str, TargetClass]],
    claims: list[tuple[str, str, int]],
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    claimed_fences: dict[tuple[str, str], list[int]] = defaultdict(list)
    for tenant, operation_id, fence in claims:
        claimed_fences[(tenant, operation_id)].append(fence)
    a_kit, b_kit, c_kit, d_kit = (kits[c] for c in TargetClass)
    assert isinstance(a_kit, SameTableKit) and isinstance(b_kit, FencedTableKit)
    assert isinstance(c_kit, IdempotentApiKit) and isinstance(d_kit, SingleShotKit)
    known_keys = set()
    table = _operations(engine, {t for t, _, _ in enqueued})
    for tenant, operation_id, target in enqueued:
        key = (tenant, operation_id)
        expected_hash = _payload_hash(tenant, operation_id)
        op = table.get(key)
        if op is None:  # a missing row is the violation being looked for
            counts["lost"] += 1
            report.violate("lost", tenant, operation_id, "enqueued but not in the table")
            continue
        counts[op.state.value] += 1
        if op.state not in FINAL_STATES:
            counts["stuck"] += 1
            report.violate(
                "stuck",
                tenant,
                operation_id,
                f"still {op.state.value} (lease {op.lease_expires_at})",
            )
        if op.payload_hash != expected_hash:
            counts["cross_tenant"] += 1
            report.violate("payload_changed", tenant, operation_id, "stored payload hash changed")
        fences = claimed_fences.get(key, [])
        if (
            len(set(fences)) != len(fences)
            or any(f > op.fence for f in fences)
            or op.fence != op.attempts
        ):
            counts["fence_violations"] += 1
            report.violate(
                "fence",
                tenant,
                operation_id,
                f"claims {sorted(fences)}, final fence {op.fence}, attempts {op.attempts}",
            )
        # The target's own record, read once: class A's order, class B's ledger entry.
        if target is TargetClass.A:
            order = a_kit.order(tenant, operation_id)
            effects = a_kit.refunds(order)
        elif target is TargetClass.B:
            entry = b_kit.entry(tenant, operation_id)
            history = b_kit.history_of(entry)
            effects = len(history)
        else:
            effects = kits[target].effects(tenant, operation_id)
        if effects > 1:
            counts["duplicates"] += effects - 1
            report.violate(
                "duplicate",
                tenant,
                operation_id,
                f"{effects} side effects at a class {target.value} target",
            )
        succeeded = op.state == State.SUCCEEDED
        if succeeded and effects != 1:
            counts["missing_effects"] += 1
            report.violate(
                "missing_effect", tenant, operation_id, f"succeeded with {effects} side effects"
            )
        if target is TargetClass.A:
            refunded_by = order.get("refunded_by_fence", {}).get("N")
            if effects and (not succeeded or int(refunded_by) != op.fence):
                counts["stale_commits"] += 1
                report.violate(
                    "stale_commit",
                    tenant,
                    operation_id,
                    f"refund by fence {refunded_by}, operation fence {op.fence}",
                )
            if effects and order.get("refunded_payload", {}).get("S") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant",
                    tenant,
                    operation_id,
                    "refund carries another operation's payload",
                )
        elif target is TargetClass.B:
            if history != sorted(history) or any(f > op.fence for f in history):
                counts["stale_commits"] += 1
                report.violate(
                    "stale_commit",
                    tenant,
                    operation_id,
                    f"target history {history}, fence {op.fence}",
                )
            if history and entry.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "ledger entry carries another payload"
                )
        elif target is TargetClass.C:
            key_c = idempotency_key(tenant, operation_id)
            known_keys.add(key_c)
            request = c_kit.api.requests.get(key_c)
            if request is not None and request.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "provider request carries another payload"
                )
        else:
            sent = d_kit.sent[key]
            if sent and not succeeded and op.state != State.UNKNOWN:
                counts["unhonest_d"] += 1
                report.violate(
                    "ambiguous_not_unknown",
                    tenant,
                    operation_id,
                    f"called once, then {op.state.value}",
                )
            if any(h != expected_hash for h in d_kit.sent_payloads.get(key, [])):
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "gateway call carries another payload"
                )
    stray = set(c_kit.api.executions) - known_keys
    if stray:
        counts["cross_tenant"] += len(stray)
    faults = dict(sorted(report.faults.items()))
    summary = {
        "operations": len(enqueued),
        "faults": faults,
        "faults_total": sum(v for k, v in faults.items() if k != "sweep"),
        "states": {s.value: counts[s.value] for s in State},
        "duplicates": counts["duplicates"],
        "lost": counts["lost"],
        "cross_tenant": counts["cross_tenant"],
        "stale_commits": counts["stale_commits"],
        "fence_violations": counts["fence_violations"],
        "missing_effects": counts["missing_effects"],
        "stuck": counts["stuck"],
        "unknown": counts[State.UNKNOWN.value],
        "violations": len(report.violations),
        "seed": settings.seed,
    }
    summary["first_violations"] = report.violations[:5]
    return summary


def main(operations: int = 2_000, seed: int = 1, workers: int = 6) -> int:
    import logging

    logging.getLogger("leasefence").setLevel(
        logging.CRITICAL
    )  # faults are expected; the summary tells
    summary = run_torture(
        Settings(operations=operations, seed=seed, workers=workers, progress=True)
    )
    for violation in summary.pop("first_violations"):
        print("VIOLATION", json.dumps(violation))
    print(json.dumps(summary))
    return 1 if summary["violations"] else 0
