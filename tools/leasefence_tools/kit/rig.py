"""The bench a team's handler is verified on: the embedded stack, an engine on a manual clock,
recording targets, and workers running the team's handler unchanged.

A team's *fixture* builds its target on this bench: ``build(env) -> Target``, where ``env`` is a
:class:`VerifyEnv` (a DynamoDB client on the embedded stack for its own tables, the class C and D
fakes, the manual clock) and the :class:`Target` says how to prepare one operation (seed the
target, return the payload to enqueue). The fixture also points the team's handlers at these
(for example by calling the handler module's own ``connect(...)``).
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from leasefence.clock import ManualClock
from leasefence.engine import Engine
from leasefence.errors import NotFound
from leasefence.model import EnqueueResult, State, TargetClass
from leasefence.payloads import canonicalize
from leasefence.schema import TableSpec
from leasefence.worker import EngineBackend, Handler, Job, Reconciled, Worker
from leasefence_tools.kit.evidence import Action, Execution, TargetLog
from leasefence_tools.testing.faults import FaultyClient
from leasefence_tools.testing.recording import (
    RecordingDynamoDB,
    RecordingIdempotentApi,
    SingleCallGateway,
)

#: Leases on the bench (engine time: the manual clock). Long, so that only the checks expire them.
DEFAULT_LEASE_MS = 30_000
#: How far past a lease the checks move the clock to let it lapse.
PAST_LEASE_MS = 1_000
#: The renewer of a worker that should not renew during a check: effectively never (wall clock).
NEVER_MS = 3_600_000

_tables = itertools.count()


@dataclass
class VerifyEnv:
    """What a fixture's ``build(env)`` gets."""

    #: A DynamoDB client on the embedded stack: create and use your tables through it (its
    #: writes are what the checks see; a client of your own would not be observed).
    dynamodb: Any
    #: Class C: the provider fake (``execute(key, request)``, ``lookup(key)``).
    idempotent_api: RecordingIdempotentApi
    #: Class D: the gateway fake (``send(request)``).
    gateway: SingleCallGateway
    #: The engine's clock (ms since the epoch); pass it to a FencedTable as ``clock=``.
    clock: ManualClock
    target_class: TargetClass
    job_type: str


@dataclass
class Target:
    """A fixture's answer: ``prepare(tenant_id, operation_id)`` seeds the target for one operation
    (class A: the order to refund) and returns its payload (any JSON value)."""

    prepare: Callable[[str, str], Any]


Fixture = Callable[[VerifyEnv], "Target | Callable[[str, str], Any]"]


class ObservedHandler:
    """The team's handler, unchanged, with each phase attributed to its execution."""

    def __init__(self, inner: Handler, rig: Rig) -> None:
        self.inner = inner
        self.rig = rig

    def on_claim(self, job: Job) -> None:
        execution = self.rig._execution(job)
        with self.rig.log.acting_as(execution, "on_claim"):
            self.rig._phase(execution, "on_claim")
            on_claim = getattr(self.inner, "on_claim", None)
            if on_claim is not None:
                on_claim(job)

    def reconcile(self, job: Job) -> Reconciled:
        execution = self.rig._execution(job)
        with self.rig.log.acting_as(execution, "reconcile"):
            self.rig._phase(execution, "reconcile")
            reconcile = getattr(self.inner, "reconcile", None)
            own = getattr(self.inner, "reconcile_fn", True) is not None
            if reconcile is None or not own:
                execution.reconcile_missing = True
            found = (
                reconcile(job)
                if reconcile is not None
                else Reconciled.unknown("the handler has no way to reconcile")
            )
            execution.reconciled = found.kind
            execution.reconciled_seq = self.rig.log.next_seq()
            return found

    def run(self, job: Job) -> str | None:
        execution = self.rig._execution(job)
        with self.rig.log.acting_as(execution, "run"):
            self.rig._phase(execution, "run")
            return self.inner.run(job)


@dataclass(eq=False)
class _PhaseHook:
    match: Callable[[Execution, str], bool]
    action: Callable[[Execution], None]
    fired: bool = False


class Rig:
    """One handler (one job type and class) on the bench. Checks use their own tenants."""

    def __init__(
        self,
        aws: Any,
        handler: Handler,
        job_type: str,
        target_class: TargetClass | str,
        fixture: Fixture,
        lease_ms: int = DEFAULT_LEASE_MS,
        seed: int = 0,
    ) -> None:
        self.target_class = TargetClass(target_class)
        self.job_type = job_type
        self.lease_ms = lease_ms
        self.seed = seed
        #: Suffix of this rig's tenants: runs on one endpoint never share target items.
        self.run_id = uuid.uuid4().hex[:8]
        self.raw = aws.client()
        self.spec = aws.create_tables(  # on another DynamoDB: under its run's prefix
            TableSpec(
                table_name=f"verify-ops-{next(_tables)}-{uuid.uuid4().hex[:8]}",
                due_shards=2,
                sweep_shards=1,
            )
        )
        self.clock = ManualClock()
        #: Reads, sweeps and operator actions of the checks: never recorded, never faulted.
        self.observer = Engine(client=self.raw, spec=self.spec, clock=self.clock)
        self.log = TargetLog()
        self.dynamodb = RecordingDynamoDB(self.raw, self.log, self.spec.table_name, self.holds)
        self.idempotent_api = RecordingIdempotentApi(self.log, self.holds)
        self.gateway = SingleCallGateway(self.log, self.holds)
        env = VerifyEnv(
            dynamodb=self.dynamodb,
            idempotent_api=self.idempotent_api,
            gateway=self.gateway,
            clock=self.clock,
            target_class=self.target_class,
            job_type=job_type,
        )
        built = fixture(env)
        self.target = built if isinstance(built, Target) else Target(prepare=built)
        self.handler = ObservedHandler(handler, self)
        self.payloads: dict[tuple[str, str], Any] = {}
        self.events: dict[str, float] = {}
        self._executions: dict[int, Execution] = {}
        self._phase_hooks: list[_PhaseHook] = []
        self.fresh_engine()

    # ------------------------------------------------------------ engine and workers

    def fresh_engine(self) -> Engine:
        """A new engine over a new fault-injecting client (nothing planned carries over)."""
        self.faulty = FaultyClient(self.dynamodb)
        self.engine = Engine(
            client=self.faulty,
            spec=self.spec,
            clock=self.clock,
            rng=random.Random(self.seed),
            events=self._event,
        )
        self.log.clear_interceptors()
        self._phase_hooks.clear()
        return self.engine

    def _event(self, name: str, value: float) -> None:
        self.events[name] = self.events.get(name, 0) + value

    def worker(
        self,
        name: str,
        tenants: Iterable[str],
        heartbeat_interval_ms: int = NEVER_MS,
        events: Callable[[str, float], None] | None = None,
    ) -> Worker:
        backend = EngineBackend(
            self.engine,
            list(tenants),
            payload_loader=lambda claim: self.payloads[(claim.tenant_id, claim.operation_id)],
        )
        return Worker(
            backend,
            {self.job_type: self.handler},
            worker_id=name,
            lease_ms=self.lease_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            idle_sleep_ms=10,
            events=events if events is not None else self._event,
        )

    def enqueue(
        self, tenant_id: str, operation_id: str, payload: Any = None, prepare: bool = True
    ) -> EnqueueResult:
        """Prepare the target (the fixture's ``prepare``) and enqueue the operation with the
        payload it returned (or the one given)."""
        if prepare:
            prepared = self.target.prepare(tenant_id, operation_id)
            payload = prepared if payload is None else payload
        result = self.engine.enqueue(
            tenant_id,
            operation_id,
            self.job_type,
            canonicalize(payload).hash,
            payload_ref="leasefence-verify",
            target_class=self.target_class,
        )
        if result.created:
            self.payloads[(tenant_id, operation_id)] = payload
        return result

    def tenant(self, name: str) -> str:
        """The tenant a check calls ``name``, unique to this rig."""
        return f"{name}-{self.run_id}"

    def drain(self, name: str, tenants: Iterable[str], limit: int = 10) -> int:
        """Run jobs until nothing is claimable; returns how many ran."""
        worker = self.worker(name, tenants)
        ran = 0
        while ran < limit and worker.run_once():
            ran += 1
        return ran

    def run(self, check: str) -> Any:
        """Run one check (``"stale-write"``, ...) on this rig: its
        :class:`~leasefence_tools.kit.report.CheckResult`."""
        from leasefence_tools.kit.checks import check_named
        from leasefence_tools.kit.verify import run_checks

        return run_checks(self, [check_named(check)])[0]

    # ------------------------------------------------------------ observing

    def holds(self, execution: Execution) -> bool:
        """Whether the execution's claim still holds the operation (read now, consistently)."""
        try:
            op = self.observer.get(execution.tenant_id, execution.operation_id)
        except NotFound:
            return False
        return op.state == State.CLAIMED and op.fence == execution.fence

    def _execution(self, job: Job) -> Execution:
        execution = self._executions.get(id(job))
        if execution is None:
            execution = Execution(
                tenant_id=job.tenant_id,
                operation_id=job.operation_id,
                fence=job.fence,
                worker_id=job.claim.worker_id,
                job=job,
                seq=self.log.next_seq(),
            )
            self._executions[id(job)] = execution
            self.log.add_execution(execution)
        return execution

    def on_phase(
        self, match: Callable[[Execution, str], bool], action: Callable[[Execution], None]
    ) -> _PhaseHook:
        """Run ``action`` when an execution matching ``match`` enters a phase (once)."""
        hook = _PhaseHook(match, action)
        self._phase_hooks.append(hook)
        return hook

    def _phase(self, execution: Execution, phase: str) -> None:
        for hook in list(self._phase_hooks):
            if not hook.fired and hook.match(execution, phase):
                hook.fired = True
                self._phase_hooks.remove(hook)
                hook.action(execution)

    def actions(self, tenant_id: str, operation_id: str) -> list[Action]:
        return self.log.of(tenant_id, operation_id)

    def executions(self, tenant_id: str, operation_id: str) -> list[Execution]:
        return self.log.executions_of(tenant_id, operation_id)

    def effects(self, tenant_id: str, operation_id: str) -> list[Action]:
        """The side effects that landed for one operation (writes, executed calls), in order."""
        return [a for a in self.actions(tenant_id, operation_id) if a.effect]

    def state(self, tenant_id: str, operation_id: str) -> Any:
        return self.observer.get(tenant_id, operation_id)


def load_handlers(mapping: Mapping[str, Handler], job_type: str) -> Handler:
    """The handler of ``job_type`` in a mapping of job type to handler (one sentence if absent)."""
    if job_type not in mapping:
        known = ", ".join(sorted(mapping)) or "none"
        raise LookupError(f"the handler mapping has no job type {job_type!r} (it has: {known})")
    return mapping[job_type]


__all__ = [
    "DEFAULT_LEASE_MS",
    "ObservedHandler",
    "Rig",
    "Target",
    "VerifyEnv",
    "load_handlers",
]
