"""`leasefence torture`: many workers, four target classes, several tenants, and a fault injector.

Worker threads execute operations for several tenants (with colliding operation ids) against
instrumented targets of classes A to D, over the embedded stack, while faults are injected:

* ``stall``: a worker pauses past its lease just before the side effect, then carries on;
* ``crash``: a worker dies right after the side effect, before its completion write;
* ``lost_response`` / ``not_sent``: a store call commits and its answer is lost, or never arrives;
* ``throttle`` / ``txn_conflict``: DynamoDB throttling and transaction conflicts;
* ``ambiguous_call``: a class C or D call whose answer is lost;
* ``replay`` / ``conflict``: an enqueue repeated with the same payload, or with another one;
* ``sweep``: sweeper runs at random moments, concurrently with claims.

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
from dataclasses import dataclass, field
from typing import Any

from leasefence.demo.kits import (
    FencedTableKit,
    Hooks,
    IdempotentApiKit,
    Kit,
    SameTableKit,
    SingleShotKit,
    overtaken,
)
from leasefence.engine import Engine
from leasefence.errors import PayloadConflict, Unavailable
from leasefence.faults import AFTER, BEFORE, CONFLICT, THROTTLE, FaultyClient
from leasefence.model import Claim, State, TargetClass
from leasefence.schema import TableSpec
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


class FastClock:
    """Engine time: starts at the wall clock and runs ``speed`` times faster."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.origin_ms = time.time_ns() // 1_000_000
        self.t0 = time.monotonic()

    def __call__(self) -> int:
        return self.origin_ms + int((time.monotonic() - self.t0) * 1000 * self.speed)

    def wall_seconds(self, engine_ms: float) -> float:
        return engine_ms / self.speed / 1000


@dataclass
class Report:
    settings: Settings
    faults: Counter = field(default_factory=Counter)
    history: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    violations: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, tenant_id: str, operation_id: str, event: str) -> None:
        with self.lock:
            self.history[(tenant_id, operation_id)].append(event)

    def fault(self, kind: str, tenant_id: str | None = None, operation_id: str | None = None, detail: str = "") -> None:
        with self.lock:
            self.faults[kind] += 1
        if tenant_id is not None and operation_id is not None:
            self.note(tenant_id, operation_id, f"fault:{kind}{(' ' + detail) if detail else ''}")

    def violate(self, kind: str, tenant_id: str, operation_id: str, detail: str) -> None:
        with self.lock:
            self.violations.append(
                {"kind": kind, "tenant_id": tenant_id, "operation_id": operation_id, "detail": detail,
                 "history": list(self.history.get((tenant_id, operation_id), []))}
            )


class ChaosHooks(Hooks):
    """Stalls before the side effect and crashes after it, decided per (operation, fence)."""

    def __init__(self, settings: Settings, clock: FastClock, report: Report, observer: Engine) -> None:
        super().__init__()
        self.settings, self.clock, self.report = settings, clock, report
        self.observer = observer

    def before(self, job: Job) -> None:
        if _chance(self.settings.seed, "stall", job.tenant_id, job.operation_id, job.fence) < self.settings.stall_rate:
            self.report.fault("stall", job.tenant_id, job.operation_id, f"fence {job.fence}")
            time.sleep(self.clock.wall_seconds(self.settings.lease_ms * 1.5))
            # Then stay paused until someone else acted on the operation (a takeover raised the
            # fence, or the sweeper parked it), however loaded the machine is, for at most a
            # few more leases: the zombie must wake up into the situation it is meant to test.
            deadline = time.monotonic() + self.clock.wall_seconds(self.settings.lease_ms * 5)
            while time.monotonic() < deadline and not overtaken(self.observer, job):
                time.sleep(0.05)

    def after(self, job: Job) -> None:
        if _chance(self.settings.seed, "crash", job.tenant_id, job.operation_id, job.fence) < self.settings.crash_rate:
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
    def subject(method: str, request: dict[str, Any]) -> str:
        if "TransactItems" in request:
            parts = [op.get("Key") or op.get("Item", {}) for entry in request["TransactItems"] for op in entry.values()]
            return json.dumps([{k: v for k, v in part.items() if k in ("tenant_id", "operation_id", "pk")} for part in parts],
                              sort_keys=True)
        if "Key" in request:
            return json.dumps(request["Key"], sort_keys=True)
        if "Item" in request:
            return json.dumps({k: request["Item"].get(k) for k in ("tenant_id", "operation_id")}, sort_keys=True)
        values = request.get("ExpressionAttributeValues", {})  # a query: its partition
        return json.dumps({k: v for k, v in values.items() if "S" in v}, sort_keys=True)

    def __call__(self, method: str, request: dict[str, Any]) -> str | None:
        if method not in ("update_item", "put_item", "transact_write_items", "query", "get_item"):
            return None
        subject = self.subject(method, request)
        self.calls[(method, subject)] += 1
        nth = self.calls[(method, subject)]
        if _chance(self.seed, "store", method, subject, nth) >= self.rate:
            return None
        if method == "transact_write_items":
            modes = [BEFORE, THROTTLE, AFTER, CONFLICT, CONFLICT]
        elif method in ("update_item", "put_item"):
            modes = [BEFORE, THROTTLE, AFTER, AFTER]
        else:
            modes = [BEFORE, THROTTLE]
        mode = modes[int(_chance(self.seed, "store-mode", method, subject, nth) * len(modes))]
        self.report.fault({AFTER: "lost_response", BEFORE: "not_sent", THROTTLE: "throttle", CONFLICT: "txn_conflict"}[mode])
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
        super().__init__(engine, tenants)
        self.report = report
        self.window = window
        self.claims: list[tuple[str, str, int]] = []

    def claim_next(self, worker_id: str, lease_ms: int, job_types: Any = None) -> Claim | None:
        claim = super().claim_next(worker_id, lease_ms, job_types)
        if claim is not None:
            self.report.note(claim.tenant_id, claim.operation_id, f"claimed fence {claim.fence} by {worker_id}")
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

    def fail(self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None) -> None:
        operation = self.engine.fail(claim.tenant_id, claim.operation_id, claim.fence, retryable, reason, retry_after_ms)
        if operation.state in FINAL_STATES:
            self._finished(claim)

    def park_unknown(self, claim: Claim, reason: str) -> None:
        super().park_unknown(claim, reason)
        self._finished(claim)

    def quarantine(self, claim: Claim, reason: str) -> None:
        super().quarantine(claim, reason)
        self._finished(claim)


def _payload_hash(tenant_id: str, operation_id: str, variant: str = "") -> str:
    return "sha256:" + hashlib.sha256(f"{tenant_id}\x00{operation_id}\x00{variant}".encode()).hexdigest()


def run_torture(settings: Settings) -> dict[str, Any]:
    from leasefence.local.embedded import EmbeddedAws

    started = time.monotonic()
    report = Report(settings)
    clock = FastClock(settings.speed)
    tenants = [f"tenant-{i}" for i in range(settings.tenants)]
    with EmbeddedAws(process=True) as aws:
        spec = aws.create_tables(TableSpec(table_name="torture-operations", due_shards=2, sweep_shards=2))
        client = aws.client()
        engine = Engine(client=FaultyClient(client, chaos=StoreChaos(settings, report)), spec=spec, clock=clock,
                        rng=random.Random(settings.seed))
        checker_engine = Engine(client=client, spec=spec, clock=clock)
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
            target = list(TargetClass)[int(_chance(settings.seed, "class", tenant, operation_id) * 4)]
            ops.append((tenant, operation_id, target))
            if target is TargetClass.D and _chance(settings.seed, "ambiguous-d", tenant, operation_id) < settings.ambiguous_rate:
                d_kit.lose_answer.add((tenant, operation_id))
                report.fault("ambiguous_call", tenant, operation_id)

        window = Window(settings.window or 4 * settings.workers, checker_engine)
        backend = RecordingBackend(engine, tenants, report, window)
        handlers = {kit.job_type: kit.handler() for kit in kits.values()}
        stop = threading.Event()
        workers = [
            Worker(backend, handlers, worker_id=f"w{i}", lease_ms=settings.lease_ms,
                   heartbeat_interval_ms=max(10, int(settings.lease_ms / settings.speed / 3)), idle_sleep_ms=10)
            for i in range(settings.workers)
        ]

        def work(worker: Worker) -> None:
            idle = 0.02
            while not stop.is_set():
                try:
                    if worker.run_once():
                        idle = 0.02
                    else:
                        # An empty poll reads every shard of every tenant: back off while idle.
                        time.sleep(idle)
                        idle = min(idle * 2, 0.4)
                except Crash:
                    continue  # the process "restarts"; its claim is left to lapse
                except Unavailable:
                    time.sleep(0.005)

        def sweep() -> None:
            rng = random.Random(settings.seed + 1)
            while not stop.wait(rng.uniform(0.05, 0.5)):
                try:
                    result = engine.sweep(limit=50)
                    report.fault("sweep")
                    for tenant_id, operation_id in result.swept_keys:
                        report.note(tenant_id, operation_id, "swept to unknown")
                        window.finished(tenant_id, operation_id)
                except Unavailable:
                    pass

        threads = [threading.Thread(target=work, args=(w,), name=w.worker_id, daemon=True) for w in workers]
        threads.append(threading.Thread(target=sweep, name="sweeper", daemon=True))
        for thread in threads:
            thread.start()

        enqueued: list[tuple[str, str, TargetClass]] = []
        deadline = time.monotonic() + (settings.timeout_s or 300 + 0.25 * settings.operations)
        tenth = max(1, settings.operations // 10)

        def enqueue(tenant: str, operation_id: str, target: TargetClass, payload_hash: str) -> bool:
            for _ in range(20):
                try:
                    return engine.enqueue(tenant, operation_id, kits[target].job_type, payload_hash, target_class=target).created
                except Unavailable:
                    continue
            raise RuntimeError("the store stayed unavailable for 20 enqueue tries")

        for number, (tenant, operation_id, target) in enumerate(ops):
            if settings.progress and number % tenth == 0 and number:
                print(f"torture: {number:,} of {settings.operations:,} enqueued, {sum(report.faults.values()):,} faults, "
                      f"{len(report.violations)} violations, {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
            window.wait_below(window.size, deadline)
            if target is TargetClass.A:
                kits[target].setup(tenant, operation_id)
            window.add(tenant, operation_id)
            enqueue(tenant, operation_id, target, _payload_hash(tenant, operation_id))
            report.note(tenant, operation_id, "enqueued")
            enqueued.append((tenant, operation_id, target))
            if _chance(settings.seed, "replay", tenant, operation_id) < settings.replay_rate:
                report.fault("replay", tenant, operation_id)
                if enqueue(tenant, operation_id, target, _payload_hash(tenant, operation_id)):
                    report.violate("replay_created", tenant, operation_id, "a replay created a second operation")
            if _chance(settings.seed, "conflict", tenant, operation_id) < settings.conflict_rate:
                report.fault("conflict", tenant, operation_id)
                try:
                    enqueue(tenant, operation_id, target, _payload_hash(tenant, operation_id, "other"))
                    report.violate("conflict_accepted", tenant, operation_id, "another payload was accepted")
                except PayloadConflict:
                    pass
        window.wait_below(1, deadline)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        summary = _check(settings, report, checker_engine, kits, enqueued, backend.claims)
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


def _check(settings: Settings, report: Report, engine: Engine, kits: dict[TargetClass, Kit],
           enqueued: list[tuple[str, str, TargetClass]], claims: list[tuple[str, str, int]]) -> dict[str, Any]:
    counts = Counter()
    claimed_fences: dict[tuple[str, str], list[int]] = defaultdict(list)
    for tenant, operation_id, fence in claims:
        claimed_fences[(tenant, operation_id)].append(fence)
    a_kit, b_kit, c_kit, d_kit = (kits[c] for c in TargetClass)
    assert isinstance(a_kit, SameTableKit) and isinstance(b_kit, FencedTableKit)
    assert isinstance(c_kit, IdempotentApiKit) and isinstance(d_kit, SingleShotKit)
    known_keys = set()
    for tenant, operation_id, target in enqueued:
        key = (tenant, operation_id)
        expected_hash = _payload_hash(tenant, operation_id)
        try:
            op = engine.get(tenant, operation_id)
        except Exception:  # noqa: BLE001 - a missing row is the violation being looked for
            counts["lost"] += 1
            report.violate("lost", tenant, operation_id, "enqueued but not in the table")
            continue
        counts[op.state.value] += 1
        if op.state not in FINAL_STATES:
            counts["stuck"] += 1
            report.violate("stuck", tenant, operation_id, f"still {op.state.value} (lease {op.lease_expires_at})")
        if op.payload_hash != expected_hash:
            counts["cross_tenant"] += 1
            report.violate("payload_changed", tenant, operation_id, "stored payload hash changed")
        fences = claimed_fences.get(key, [])
        if len(set(fences)) != len(fences) or any(f > op.fence for f in fences) or op.fence != op.attempts:
            counts["fence_violations"] += 1
            report.violate("fence", tenant, operation_id, f"claims {sorted(fences)}, final fence {op.fence}, attempts {op.attempts}")
        kit = kits[target]
        effects = kit.effects(tenant, operation_id)
        if effects > 1:
            counts["duplicates"] += effects - 1
            report.violate("duplicate", tenant, operation_id, f"{effects} side effects at a class {target.value} target")
        succeeded = op.state == State.SUCCEEDED
        if succeeded and effects != 1:
            counts["missing_effects"] += 1
            report.violate("missing_effect", tenant, operation_id, f"succeeded with {effects} side effects")
        if target is TargetClass.A:
            order = a_kit.order(tenant, operation_id)
            refunded_by = order.get("refunded_by_fence", {}).get("N")
            if effects and (not succeeded or int(refunded_by) != op.fence):
                counts["stale_commits"] += 1
                report.violate("stale_commit", tenant, operation_id, f"refund by fence {refunded_by}, operation fence {op.fence}")
            if effects and order.get("refunded_payload", {}).get("S") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate("cross_tenant", tenant, operation_id, "refund carries another operation's payload")
        elif target is TargetClass.B:
            history = b_kit.history(tenant, operation_id)
            if history != sorted(history) or any(f > op.fence for f in history):
                counts["stale_commits"] += 1
                report.violate("stale_commit", tenant, operation_id, f"target history {history}, fence {op.fence}")
            item = b_kit.table.read(b_kit._key(tenant, operation_id)) or {}
            if history and item.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate("cross_tenant", tenant, operation_id, "ledger entry carries another payload")
        elif target is TargetClass.C:
            key_c = idempotency_key(tenant, operation_id)
            known_keys.add(key_c)
            request = c_kit.api.requests.get(key_c)
            if request is not None and request.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate("cross_tenant", tenant, operation_id, "provider request carries another payload")
        else:
            sent = d_kit.sent[key]
            if sent and not succeeded and op.state != State.UNKNOWN:
                counts["unhonest_d"] += 1
                report.violate("ambiguous_not_unknown", tenant, operation_id, f"called once, then {op.state.value}")
            if any(h != expected_hash for h in d_kit.sent_payloads.get(key, [])):
                counts["cross_tenant"] += 1
                report.violate("cross_tenant", tenant, operation_id, "gateway call carries another payload")
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

    logging.getLogger("leasefence").setLevel(logging.CRITICAL)  # faults are expected; the summary tells
    summary = run_torture(Settings(operations=operations, seed=seed, workers=workers, progress=True))
    for violation in summary.pop("first_violations"):
        print("VIOLATION", json.dumps(violation))
    print(json.dumps(summary))
    return 1 if summary["violations"] else 0
