"""The run: the embedded stack, the workload, the workers and the phases (see the package
docstring); :func:`run_torture` returns the checker's summary."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import sys
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from leasefence.api.errors import Forbidden
from leasefence.engine import DAY_MS, MISSING, Engine
from leasefence.errors import InvalidInput, LeaseFenceError, PayloadConflict, Unavailable
from leasefence.model import Claim, TargetClass
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import TableSpec, create_table
from leasefence.worker import EngineBackend, Worker
from leasefence_tools.testing.faults import FaultyClient
from leasefence_tools.testing.kits import (
    FencedTableKit,
    IdempotentApiKit,
    Kit,
    SameTableKit,
    SingleShotKit,
)
from leasefence_tools.torture.chaos import ChaosApi, ChaosHooks, StoreChaos
from leasefence_tools.torture.checker import Composed, check, first_of_each_kind
from leasefence_tools.torture.compose import (
    APPROVAL_JOB_TYPE,
    WORK,
    AccountLedgerKit,
    Actors,
    ExternalStore,
    Http,
    InProcessApi,
    PublisherRig,
    TortureHttpBackend,
    catalogue,
    kits_for,
)
from leasefence_tools.torture.indeterminate import CallLog, RecordedEngine, format_rates
from leasefence_tools.torture.months import identities, months_phase
from leasefence_tools.torture.settings import (
    FINAL_STATES,
    Crash,
    FastClock,
    Key,
    Report,
    Settings,
    chance,
    payload,
)

TABLE, BUCKET = "torture-operations", "torture-payloads"


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


class Pause(threading.Event):
    """Workers take no new claim while set; :meth:`set` returns once none is in flight (a claim
    being made, or its job), at most ``grace_s`` later: a claim that reads a lagging index on a
    loaded machine can take seconds, and must not take what is enqueued after the pause."""

    def __init__(self, grace_s: float = 30.0) -> None:
        super().__init__()
        self.grace_s = grace_s
        self.active = 0
        self.idle = threading.Condition()

    def set(self) -> None:
        super().set()
        with self.idle:
            self.idle.wait_for(lambda: self.active == 0, timeout=self.grace_s)

    def enter(self) -> bool:
        """A worker's turn begins (False: paused, take none)."""
        with self.idle:
            if self.is_set():
                return False
            self.active += 1
            return True

    def leave(self) -> None:
        with self.idle:
            self.active -= 1
            self.idle.notify_all()


class TortureWorker(Worker):
    """The worker runtime, told that engine time runs ``speed`` times faster than the wall clock.

    The runtime times a claim in wall-clock milliseconds from the lease it was granted (its
    renewal interval: :meth:`Worker.renewal_interval_ms`); the engine grants leases in engine
    milliseconds. So the runtime's own rule is applied to the granted lease as the wall clock
    sees it (a 5 s engine lease lasts 0.5 s here), as the configured interval already is."""

    def __init__(self, *args: Any, speed: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.speed = speed

    def renewal_interval_ms(self, claim: Claim) -> int:
        runtime_rule = getattr(super(), "renewal_interval_ms", None)
        if runtime_rule is None:  # a runtime that renews on its configured interval only
            return int(self.heartbeat_interval_ms)
        wall = dataclasses.replace(claim, lease_ms=max(1, int(claim.lease_ms / self.speed)))
        return int(runtime_rule(wall))


class RecordingBackend(EngineBackend):
    """Records every claim a worker received (for the fence checks) and every operation a
    worker finished (for the window); loads by-reference payloads from the producers' store."""

    def __init__(
        self,
        engine: Engine,
        tenants: list[str],
        report: Report,
        window: Window,
        external: ExternalStore,
        parked: Any = None,
    ) -> None:
        super().__init__(engine, tenants, payload_loader=self._load)
        self.report = report
        self.window = window
        self.external = external
        self.parked = parked
        self.claims: list[tuple[str, str, int]] = []
        #: Per worker, the claim whose answer it did not get: (tenant, claim token), sent again.
        self.unanswered: dict[str, tuple[str, str]] = {}

    def heartbeat(
        self,
        claim: Claim,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
        intent: str | None = None,
    ) -> int:
        self.report.renewal_sent(claim.tenant_id, claim.operation_id, claim.fence)
        return super().heartbeat(claim, lease_ms, checkpoint, intent)

    def _load(self, claim: Claim) -> Any:
        if self.external.owns(claim.payload_ref):
            return self.external.load(claim)
        return json.loads(self.engine.payload(claim))

    def _claim_with_tokens(
        self, worker_id: str, lease_ms: int, job_types: Any = None
    ) -> Claim | None:
        """What :meth:`EngineBackend.claim_next` does, each claim with a claim token; a claim
        whose answer was lost (:class:`Unavailable`) is sent again first, to the same tenant with
        the same token (the documented recovery: the same claim while it holds)."""
        types = list(job_types) if job_types is not None else None
        pending = self.unanswered.get(worker_id)
        if pending is not None:
            tenant, token = pending
            claim = self.engine.claim_next(
                tenant, worker_id, lease_ms=lease_ms, job_types=types, claim_token=token
            )
            del self.unanswered[worker_id]
            if claim is not None:
                return claim
        with self._lock:
            start = next(self._turn) % len(self.tenants)
        for i in range(len(self.tenants)):
            tenant = self.tenants[(start + i) % len(self.tenants)]
            token = uuid.uuid4().hex
            self.unanswered[worker_id] = (tenant, token)
            claim = self.engine.claim_next(
                tenant, worker_id, lease_ms=lease_ms, job_types=types, claim_token=token
            )
            del self.unanswered[worker_id]
            if claim is not None:
                return claim
        return None

    def claim_next(self, worker_id: str, lease_ms: int, job_types: Any = None) -> Claim | None:
        if self.report.calls is not None:
            claim = self._claim_with_tokens(worker_id, lease_ms, job_types)
        else:
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
        if self.parked is not None:
            self.parked(claim.tenant_id, claim.operation_id)

    def quarantine(self, claim: Claim, reason: str) -> None:
        super().quarantine(claim, reason)
        self._finished(claim)


@dataclass
class Mode:
    """How one operation of a composed run is enqueued."""

    job_type: str
    http: bool = False
    by_ref: bool = False
    anonymous: bool = False  # over HTTP with a token that names nobody
    batched: bool = False  # over HTTP as an item of ``POST /v1/batch/enqueue``

    @property
    def approval(self) -> bool:
        return self.job_type == APPROVAL_JOB_TYPE


#: Every fifth operation id, and the first in-process worker's id, are 256 characters of four
#: bytes each (1 KiB of UTF-8, the longest id accepted): keys, history entries and the item's
#: byte budget meet them in every feature of the run (issue 32).
WIDE_ID_EVERY = 5


def torture_operation_id(n: int) -> str:
    base = f"op-{n:05d}"
    if n % WIDE_ID_EVERY != WIDE_ID_EVERY - 1:
        return base
    return base + "-" + "\U0001f680" * (256 - len(base) - 1)


def torture_worker_id(i: int) -> str:
    return f"w{i}" if i else "w0-" + "\U0001f6e0" * 253


def _only_item(send_batch: Any, item: dict[str, Any]) -> Any:
    """A batch of one item: its answer, or its refusal raised."""
    return send_batch([item])[0].result()


def plan(settings: Settings, tenant: str, operation_id: str, target: TargetClass, kit: Kit) -> Mode:
    """The composed run's choice for one operation (each a coin of its own)."""
    seed = settings.seed
    coin = partial(chance, seed, tenant, operation_id)
    approval = target is TargetClass.C and coin("approval") < settings.approval_rate * 4
    return Mode(
        job_type=APPROVAL_JOB_TYPE if approval else kit.job_type,
        http=approval or coin("http") < settings.http_enqueue_rate,
        by_ref=coin("by-ref") < settings.by_ref_rate,
        anonymous=approval and coin("anonymous") < settings.anonymous_producer_rate,
        batched=coin("batched-enqueue") < settings.batched_enqueue_rate,
    )


def run_torture(settings: Settings) -> dict[str, Any]:
    from leasefence_tools.local.embedded import EmbeddedAws, Fidelity

    started = time.monotonic()
    report = Report(settings)
    clock = FastClock(settings.speed)
    tenants = [f"tenant-{i}" for i in range(settings.tenants)]
    fidelity = (
        Fidelity(index_lag_ms=settings.index_lag_ms, seed=settings.seed)
        if settings.fidelity
        else False
    )
    api: InProcessApi | None = None
    with EmbeddedAws(process=True, fidelity=fidelity) as aws:
        spec = TableSpec(
            table_name=TABLE,
            due_shards=1,
            sweep_shards=2,
            # 0: the default layout (each tenant's counts recorded at its first enqueue).
            operation_shards=(settings.operation_shards,) if settings.operation_shards else None,
        )
        client = aws.client()
        create_table(client, spec, stream=settings.compose)  # the publisher reads its stream
        s3 = aws.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        payloads = PayloadStore(BUCKET, client=s3)
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
        if settings.indeterminate:  # every client call recorded, some answers lost
            report.calls = CallLog(
                settings.seed,
                settings.lost_answer_rate,
                clock,
                rate_of={"resolve": settings.resolve_lost_answer_rate},
            )
            # The engine's own API, each client call recorded (the rest delegated).
            engine = cast("Engine", RecordedEngine(engine, report.calls))
        checker_engine = engine_on(client=client)
        hooks = ChaosHooks(settings, clock, report, observer=checker_engine)
        kits: dict[TargetClass, Kit] = {
            TargetClass.A: SameTableKit(client, "torture-orders", hooks=hooks),
            TargetClass.B: AccountLedgerKit(
                client, "torture-ledger", tenants, settings.account_max_entries, hooks=hooks
            )
            if settings.compose
            else FencedTableKit(client, "torture-ledger", hooks=hooks),
            TargetClass.C: IdempotentApiKit(api=ChaosApi(settings, report), hooks=hooks),
            TargetClass.D: SingleShotKit(hooks=hooks),
        }
        d_kit = kits[TargetClass.D]
        assert isinstance(d_kit, SingleShotKit)
        by_type = kits_for(kits) if settings.compose else {k.job_type: k for k in kits.values()}
        external = ExternalStore()

        # The workload: operation ids collide across tenants on purpose.
        ops: list[tuple[str, str, TargetClass]] = []
        modes: dict[Key, Mode] = {}
        for i in range(settings.operations):
            tenant = tenants[i % len(tenants)]
            operation_id = torture_operation_id(i // len(tenants))
            target = list(TargetClass)[
                int(chance(settings.seed, "class", tenant, operation_id) * 4)
            ]
            ops.append((tenant, operation_id, target))
            if settings.compose:
                modes[(tenant, operation_id)] = plan(
                    settings, tenant, operation_id, target, kits[target]
                )
            if (
                target is TargetClass.D
                and chance(settings.seed, "ambiguous-d", tenant, operation_id)
                < settings.ambiguous_rate
            ):
                d_kit.lose_answer.add((tenant, operation_id))
                report.fault("ambiguous_call", tenant, operation_id)

        window = Window(settings.window or 4 * settings.workers, checker_engine)
        actors: Actors | None = None
        rig: PublisherRig | None = None
        http: Http | None = None
        if settings.compose:
            api_engine = engine_on(
                client=FaultyClient(
                    client,
                    chaos=StoreChaos(settings, report, salt="api", prefix="api_"),
                    rng=random.Random(settings.seed + 3),
                ),
                rng=random.Random(settings.seed + 3),
            )
            api = InProcessApi(api_engine, payloads, TABLE, BUCKET)
            http = Http(api, settings, report, clock, checker_engine)
            actors = Actors(
                settings,
                report,
                clock,
                http,
                tenants,
                hooks,
                external,
                window.add,
                window.finished,
                checker_engine,
            )
            rig = PublisherRig(aws, settings, report, TABLE).start()
        backend = RecordingBackend(
            engine,
            tenants,
            report,
            window,
            external,
            parked=actors.park if actors is not None else None,
        )
        stop, paused = threading.Event(), Pause()

        def retrying(call: Any) -> Any:
            for _ in range(20):
                try:
                    return call()
                except Unavailable:
                    continue
            raise RuntimeError("the store stayed unavailable for 20 tries")

        if actors is not None:
            for tenant in tenants:  # the catalogue, declared over the API (lost answers too)
                for job_type, entry in catalogue(settings).items():
                    retrying(partial(actors.operators[tenant].put_job_type, job_type, entry))

        engine_workers = settings.workers - settings.http_worker_count
        workers = [
            TortureWorker(
                backend,
                {job_type: kit.handler() for job_type, kit in by_type.items()},
                worker_id=torture_worker_id(i),
                lease_ms=settings.lease_ms,
                heartbeat_interval_ms=max(10, int(settings.lease_ms / settings.speed / 3)),
                idle_sleep_ms=10,
                speed=settings.speed,
            )
            for i in range(engine_workers)
        ]
        for worker in workers:
            hooks.workers[worker.worker_id] = (
                "engine",
                settings.lease_ms,
                worker.heartbeat_interval_ms,
            )
        if http is not None and actors is not None:
            for i in range(settings.http_worker_count):
                tenant = tenants[i % len(tenants)]
                batched = settings.batched_http_worker(i)
                shared = TortureHttpBackend(
                    http.client(f"worker{i}-{tenant}", tenant, [WORK], f"worker:{tenant}"),
                    tenant,
                    report,
                    backend.claims,
                    window.finished,
                    actors.park,
                    external,
                    batched=batched,
                )
                # A batched fleet: several workers over one backend, sharing its batches.
                for k in range(settings.batched_fleet if batched else 1):
                    worker = TortureWorker(
                        shared,
                        # Class A completes in the engine's own transaction: in-process only.
                        {jt: kit.handler() for jt, kit in by_type.items() if jt != "refund-a"},
                        worker_id=f"h{i}-b{k}" if batched else f"h{i}",
                        lease_ms=settings.http_lease_ms,
                        heartbeat_interval_ms=max(
                            10, int(settings.http_lease_ms / settings.speed / 3)
                        ),
                        idle_sleep_ms=10,
                        speed=settings.speed,
                    )
                    hooks.workers[worker.worker_id] = (
                        "http_batched" if batched else "http",
                        settings.http_lease_ms,
                        worker.heartbeat_interval_ms,
                    )
                    workers.append(worker)

        def work(worker: Worker) -> None:
            idle = 0.02
            while not stop.is_set():
                if not paused.enter():
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
                except LeaseFenceError as error:  # an HTTP worker's unexpected answer
                    report.count(f"worker_error:{error.code}")
                    with report.lock:
                        if len(report.errors) < 10:
                            report.errors.append(f"{worker.worker_id} {error.code}: {error}"[:300])
                    time.sleep(0.05)
                finally:
                    paused.leave()

        def sweep_once(limit: int = 50) -> int:
            result = engine.sweep(limit=limit)
            for tenant_id, operation_id in result.swept_keys:
                report.note(tenant_id, operation_id, "swept to unknown")
                window.finished(tenant_id, operation_id)
                if actors is not None:
                    actors.park(tenant_id, operation_id)
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
        if actors is not None:
            actors.start()

        enqueued: list[tuple[str, str, TargetClass]] = []
        # A hung run fails instead of running on; a slow machine is not a hung run: 5,000
        # composed operations took 3,433 s to enqueue on 2 cores shared with other jobs.
        per_operation = 1.5 if settings.compose else 0.75
        deadline = time.monotonic() + (
            settings.timeout_s or 300 + per_operation * settings.operations
        )
        tenth = max(1, settings.operations // 10)

        def enqueue(tenant: str, operation_id: str, target: TargetClass, variant: str = "") -> bool:
            mode = modes.get((tenant, operation_id))
            if mode is not None:
                return enqueue_composed(tenant, operation_id, target, mode, variant)
            return enqueue_inline(tenant, operation_id, kits[target].job_type, target, variant)

        def enqueue_inline(
            tenant: str, operation_id: str, job_type: str, target: TargetClass, variant: str
        ) -> bool:
            """In-process, with the payload stored inline (what the API does): kept in the item
            when it fits, else in S3 first. Every third identity is stored in S3 whatever its
            size, as the code before in-item payloads did: items of both kinds side by side, as
            after an upgrade."""
            canonical = canonicalize(payload(tenant, operation_id, variant))
            if (
                engine.keeps_in_item(canonical)
                and zlib.crc32(f"{tenant}/{operation_id}".encode()) % 3
            ):
                return bool(
                    retrying(
                        lambda: engine.enqueue(
                            tenant,
                            operation_id,
                            job_type,
                            canonical.hash,
                            target_class=target,
                            payload_json=canonical.body,
                        )
                    ).created
                )
            stored = payloads.put(tenant, operation_id, canonical)
            try:
                result = retrying(
                    lambda: engine.enqueue(
                        tenant,
                        operation_id,
                        job_type,
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

        def enqueue_composed(
            tenant: str, operation_id: str, target: TargetClass, mode: Mode, variant: str
        ) -> bool:
            """Over the API (a producer's token, or one naming nobody) or in-process, inline or by
            reference. What a later fix refuses (a by-reference payload for an approval, an
            approval enqueue naming nobody) is enqueued the way it then allows."""
            assert actors is not None
            value = payload(tenant, operation_id, variant)
            key = (tenant, operation_id)
            if mode.by_ref:
                if variant:  # another payload under this id: its own object, never stored
                    ref = f"{ExternalStore.PREFIX}{tenant}/{operation_id}?{variant}"
                    value_hash = canonicalize(value).hash
                else:
                    ref, value_hash = external.put(key, value)
            if not mode.http:
                if mode.by_ref:
                    result = retrying(
                        lambda: engine.enqueue(
                            tenant,
                            operation_id,
                            mode.job_type,
                            value_hash,
                            payload_ref=ref,
                            target_class=target,
                        )
                    )
                    return result.created
                return enqueue_inline(tenant, operation_id, mode.job_type, target, variant)
            producer = (actors.anonymous if mode.anonymous else actors.producers)[tenant]
            fields: dict[str, Any] = {"target_class": target.value}
            if mode.by_ref:
                fields |= {"payload_ref": ref, "payload_hash": value_hash}
            try:
                if mode.batched:  # its item's refusal raised as the one-at-a-time call's
                    item = {"operation_id": operation_id, "job_type": mode.job_type, **fields}
                    if not mode.by_ref:
                        item["payload"] = value
                    # Sent again whole while it is not answered (an ``Unavailable`` item too).
                    answer = retrying(partial(_only_item, producer.enqueue_batch, item))
                elif mode.by_ref:
                    answer = retrying(
                        lambda: producer.enqueue(operation_id, mode.job_type, **fields)
                    )
                else:
                    answer = retrying(
                        lambda: producer.enqueue(operation_id, mode.job_type, value, **fields)
                    )
            except (InvalidInput, Forbidden) as refused:
                if mode.approval and mode.by_ref and isinstance(refused, InvalidInput):
                    report.count(f"approval_by_ref_refused:{refused.code}")
                    mode.by_ref = False
                elif mode.approval and mode.anonymous and isinstance(refused, Forbidden):
                    report.count(f"anonymous_approval_refused:{refused.code}")
                    mode.anonymous = False
                else:
                    raise
                return enqueue_composed(tenant, operation_id, target, mode, variant)
            return answer.created

        def submit(tenant: str, operation_id: str, target: TargetClass, wait: bool = True) -> None:
            if wait:
                window.wait_below(window.size, deadline)
            if target is TargetClass.A:
                kits[target].setup(tenant, operation_id)
            window.add(tenant, operation_id)
            enqueue(tenant, operation_id, target)
            report.note(tenant, operation_id, "enqueued")
            enqueued.append((tenant, operation_id, target))
            mode = modes.get((tenant, operation_id))
            if actors is None or mode is None:
                return
            coin = partial(chance, settings.seed, tenant, operation_id)
            if mode.approval:
                report.approval_ops.add((tenant, operation_id))
                actors.at(
                    0.05 + coin("approve-delay") * 0.8,
                    partial(
                        actors.approval,
                        tenant,
                        operation_id,
                        canonicalize(payload(tenant, operation_id)).hash,
                        mode.by_ref,
                    ),
                )
            elif coin("cancel") < settings.cancel_rate:
                actors.at(coin("cancel-delay") * 0.3, partial(actors.cancel, tenant, operation_id))

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
            if chance(settings.seed, "conflict", label, tenant, operation_id) < 0.5:
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

        def stage(text: str) -> None:
            if settings.progress:
                print(
                    f"torture: {text} ({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )

        try:
            for number, (tenant, operation_id, target) in enumerate(ops):
                if settings.progress and number % tenth == 0 and number:
                    published = (
                        f", {rig.mapping.stats.records_read:,} stream records published"
                        if rig is not None
                        else ""
                    )
                    print(
                        f"torture: {number:,} of {settings.operations:,} enqueued, "
                        f"{sum(report.faults.values()):,} faults{published}, "
                        f"{len(report.violations)} violations, {time.monotonic() - started:.0f} s",
                        file=sys.stderr,
                        flush=True,
                    )
                submit(tenant, operation_id, target)
                if chance(settings.seed, "replay", tenant, operation_id) < settings.replay_rate:
                    report.fault("replay", tenant, operation_id)
                    if enqueue(tenant, operation_id, target):
                        report.violate(
                            "replay_created",
                            tenant,
                            operation_id,
                            "a replay created a second operation",
                        )
                if chance(settings.seed, "conflict", tenant, operation_id) < settings.conflict_rate:
                    report.fault("conflict", tenant, operation_id)
                    try:
                        enqueue(tenant, operation_id, target, "other")
                        report.violate(
                            "conflict_accepted",
                            tenant,
                            operation_id,
                            "another payload was accepted",
                        )
                    except PayloadConflict:
                        pass
            stage("all enqueued")
            window.wait_below(1, deadline)
            stage("all final")
            if actors is not None:
                # Late approvals, cancels and the operator's requeues: until none is left.
                while time.monotonic() < deadline and (actors.pending() or window.entries):
                    window.wait_below(1, deadline)
                    time.sleep(0.3)
                actors.stop()
                stage("approvals, cancels and requeues done")

            months: dict[str, Any] = {}
            if settings.months:
                months = months_phase(
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
            composed = None
            if rig is not None:
                rig.drain()
                stage("publisher drained")
                composed = Composed(
                    rig.events.published if settings.events else None,
                    kits[TargetClass.B],
                    set(report.approval_ops),
                )
            summary = check(
                settings, report, checker_engine, kits, enqueued, backend.claims, composed
            )
            stage("checked")
            if rig is not None:
                summary["publisher"] = rig.stats()
            if settings.months:
                # Past the identity retention: DynamoDB's TTL deletes every ended identity.
                ended = sum(
                    summary["states"][s] for s in ("succeeded", "failed_terminal", "cancelled")
                )
                # TTL deletes their histories too (they carry their identity's TTL), and any
                # short-lived marker: only the operation items are counted.
                before = identities(checker_engine, tenants)
                clock.jump((settings.identity_retention_days + 10) * DAY_MS)
                aws.set_time(clock())
                reaped = aws.reap_ttl()
                deleted = before - identities(checker_engine, tenants)
                months["identities_deleted_after_window"] = deleted
                months["ended_identities"] = ended
                months["other_items_deleted_with_them"] = reaped - deleted
                if months["identities_deleted_after_window"] != ended:
                    report.violate(
                        "window",
                        "*",
                        "*",
                        f"{months['identities_deleted_after_window']} identities deleted "
                        f"past the window, {ended} ended",
                    )
                    summary["violations"] = len(report.violations)
                    summary["first_violations"] = first_of_each_kind(report.violations)
                summary["months"] = months
        finally:
            stop.set()
            if actors is not None:
                actors.stop()
            if api is not None:
                api.close()
    summary["compose"] = settings.compose
    summary["seconds"] = round(time.monotonic() - started, 1)
    return summary


def main(
    operations: int = 2_000, seed: int = 1, workers: int = 6, compose: bool = True, **extra: Any
) -> int:
    import logging

    # Faults are expected; the summary tells.
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    summary = run_torture(
        Settings(
            operations=operations,
            seed=seed,
            workers=workers,
            progress=True,
            compose=compose,
            **extra,
        )
    )
    for violation in summary.pop("first_violations"):
        print("VIOLATION", json.dumps(violation))
    if "indeterminate" in summary:
        rates = summary["indeterminate"]["calls"]
        print(f"torture: answers lost (indeterminate calls): {format_rates(rates)}", flush=True)
    batched = summary.get("composed", {}).get("batched")
    if batched:
        print(
            f"torture: batched HTTP workers ended {batched['lifecycles']:,} lifecycles "
            f"({batched['claims']:,} claims); batch requests {batched['requests']}, "
            f"items {batched['items']}",
            flush=True,
        )
    print(json.dumps(summary))
    return 1 if summary["violations"] else 0
