"""The worker runtime: claim, reconcile, run, finish; and stop acting the moment ownership is lost.

- Heartbeats are tied to progress. A background renewer extends the lease only when the handler
  has called :meth:`Job.progress` since the last renewal, so a stuck handler loses its lease
  instead of holding it forever (its fence still protects the targets).
- Lost-ownership mode. When a heartbeat or any fenced write is refused, :attr:`Job.cancelled` is
  set; every guarded side-effect call (:meth:`Job.guard`, the target helpers) raises
  :class:`LostOwnership` from then on, and the runtime makes no further write for that claim:
  no "one last commit".
- A claim with ``reconcile_required`` runs the handler's ``reconcile`` first: confirmed done ->
  complete; confirmed not done -> run under the new fence; cannot tell -> ``unknown``.
- Graceful shutdown: :meth:`Worker.stop` (wired to SIGTERM) stops claiming; the job in flight
  finishes, or after the grace period is cancelled: it makes no further write, its lease lapses
  and the next claim reconciles. (Releasing it early would be one more write by a worker that is
  giving up, and for class D a release would spend its only attempt.)
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from leasefence.engine import MISSING
from leasefence.errors import LeaseFenceError, NotFound, StaleFence, TargetRefused, Unavailable
from leasefence.model import Claim, TargetClass
from leasefence.privacy import keyed_hash
from leasefence.worker.backend import Backend

log = logging.getLogger("leasefence.worker")


# ---------------------------------------------------------------- what handlers raise and return


class LostOwnership(Exception):
    """This worker no longer holds the claim. Start no side effect; make no further write."""


class Retry(Exception):
    """A transient failure: try again later (if attempts remain), after reconciling."""

    def __init__(self, reason: str, retry_after_ms: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_ms = retry_after_ms


class Permanent(Exception):
    """A definite failure that no retry will fix: ``failed_terminal``."""


class Ambiguous(Exception):
    """The side effect may or may not have happened: park as ``unknown`` for reconciliation."""


class Uninterpretable(Exception):
    """The input cannot be understood: ``quarantined`` for an operator."""


@dataclass(frozen=True)
class Reconciled:
    """What a reconcile step found out about the previous attempts' side effect."""

    kind: str  # "done" | "not_done" | "unknown"
    outcome_code: str | None = None
    reason: str = ""

    @classmethod
    def done(cls, outcome_code: str) -> Reconciled:
        return cls("done", outcome_code)

    @classmethod
    def not_done(cls) -> Reconciled:
        return cls("not_done")

    @classmethod
    def unknown(cls, reason: str = "cannot tell whether the side effect happened") -> Reconciled:
        return cls("unknown", reason=reason)


class Handler(Protocol):
    """One job type's code. ``run`` returns the outcome code (or completes via class A)."""

    def run(self, job: Job) -> str | None: ...


@dataclass
class FunctionHandler:
    """A handler from plain functions: ``run``, and optionally ``reconcile`` and ``on_claim``
    (called right after the claim, before reconciling: class B raises target fences there)."""

    run_fn: Callable[[Job], str | None]
    reconcile_fn: Callable[[Job], Reconciled] | None = None
    on_claim_fn: Callable[[Job], None] | None = None

    def run(self, job: Job) -> str | None:
        return self.run_fn(job)

    def reconcile(self, job: Job) -> Reconciled:
        if self.reconcile_fn is None:
            return Reconciled.unknown("the handler has no way to reconcile")
        return self.reconcile_fn(job)

    def on_claim(self, job: Job) -> None:
        if self.on_claim_fn is not None:
            self.on_claim_fn(job)


# ---------------------------------------------------------------- the job a handler sees


class Job:
    """A claimed operation as its handler sees it."""

    def __init__(self, claim: Claim, backend: Backend, events: Callable[[str, float], None]) -> None:
        self.claim = claim
        self.backend = backend
        self.cancelled = threading.Event()
        self.finished = threading.Event()
        self.completed = False
        self.lost_reason: str | None = None
        self._events = events
        self._lock = threading.Lock()
        self._progress = 0
        self._checkpoint: Any = MISSING
        self._payload: Any = MISSING

    # identity and claim facts
    @property
    def tenant_id(self) -> str:
        return self.claim.tenant_id

    @property
    def operation_id(self) -> str:
        return self.claim.operation_id

    @property
    def fence(self) -> int:
        return self.claim.fence

    @property
    def target_class(self) -> TargetClass:
        return self.claim.target_class

    @property
    def reconcile_required(self) -> bool:
        return self.claim.reconcile_required

    @property
    def checkpoint(self) -> Any:
        """The checkpoint handed over by the previous holder (or saved by this one)."""
        return self.claim.checkpoint

    @property
    def payload(self) -> Any:
        if self._payload is MISSING:
            self._payload = self.backend.load_payload(self.claim)
        return self._payload

    # progress and ownership
    def progress(self, checkpoint: Any = MISSING) -> None:
        """Tell the runtime the handler advanced (optionally with a checkpoint to keep): the
        next renewal will extend the lease. Raises :class:`LostOwnership` if already lost."""
        self.guard()
        with self._lock:
            self._progress += 1
            if checkpoint is not MISSING:
                self._checkpoint = checkpoint

    def _progress_snapshot(self) -> tuple[int, Any]:
        with self._lock:
            checkpoint, self._checkpoint = self._checkpoint, MISSING
            return self._progress, checkpoint

    def guard(self) -> None:
        """Call before every side effect: raises :class:`LostOwnership` once ownership is lost."""
        if self.cancelled.is_set():
            raise LostOwnership(self.lost_reason or "ownership lost")

    def lose(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.lost_reason = reason
            self.cancelled.set()
            self._events("LostOwnership", 1)
            log.warning("lost ownership", extra={"op": keyed_hash(self.tenant_id, self.operation_id), "why": reason})

    def fenced(self, write: Callable[[], Any]) -> Any:
        """Run a fenced write; a refusal puts the job in lost-ownership mode."""
        self.guard()
        try:
            return write()
        except (StaleFence, NotFound) as refused:
            self.lose(f"fenced write refused: {refused.code}")
            raise LostOwnership(self.lost_reason) from refused

    def record_intent(self, what: str = "call") -> None:
        """Durably record, under this fence, that a side effect is about to start (class D)."""
        intent = {"intent_fence": self.fence, "intent": what}
        self.fenced(lambda: self.backend.heartbeat(self.claim, checkpoint=intent))

    def complete_with(self, outcome_code: str, writes: list[dict[str, Any]]) -> None:
        """Class A: complete together with the business writes, in one transaction."""
        complete_with = getattr(self.backend, "complete_with", None)
        if complete_with is None:
            raise Permanent("class A needs the in-process engine backend (same database)")
        try:
            self.fenced(lambda: complete_with(self.claim, outcome_code, writes))
        except TargetRefused as refused:
            raise Permanent(f"business guard refused: {refused.message}") from refused
        self.completed = True


# ---------------------------------------------------------------- the worker


class Worker:
    """Claims and runs one job at a time. Run several for concurrency."""

    def __init__(
        self,
        backend: Backend,
        handlers: Mapping[str, Handler],
        worker_id: str | None = None,
        lease_ms: int = 60_000,
        heartbeat_interval_ms: int | None = None,
        idle_sleep_ms: int = 1_000,
        shutdown_grace_ms: int = 10_000,
        events: Callable[[str, float], None] | None = None,
    ) -> None:
        self.backend = backend
        self.handlers = dict(handlers)
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        self.lease_ms = lease_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(lease_ms // 3, 50)
        self.idle_sleep_ms = idle_sleep_ms
        self.shutdown_grace_ms = shutdown_grace_ms
        self.events = events if events is not None else (lambda name, value: None)
        self._stopping = threading.Event()
        self.current: Job | None = None

    @property
    def job_types(self) -> list[str]:
        return sorted(self.handlers)

    # ------------------------------------------------------------ loop

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Claim and run jobs until :meth:`stop` (or ``until()`` is true)."""
        while not self._stopping.is_set() and not (until and until()):
            try:
                worked = self.run_once()
            except Unavailable:
                worked = False
            if not worked:
                self._stopping.wait(self.idle_sleep_ms / 1000)

    def stop(self) -> None:
        """Stop claiming. The job in flight may finish within the grace period."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run_once(self) -> bool:
        """Claim one job and see it through. False when nothing was claimable."""
        if self._stopping.is_set():
            return False
        claim = self.backend.claim_next(self.worker_id, self.lease_ms, self.job_types)
        if claim is None:
            return False
        self.process(claim)
        return True

    # ------------------------------------------------------------ one job

    def process(self, claim: Claim) -> Job:
        job = Job(claim, self.backend, self.events)
        self.current = job
        renewer = threading.Thread(target=self._renew, args=(job,), name=f"renew-{claim.fence}", daemon=True)
        renewer.start()
        try:
            self._execute(job)
        finally:
            job.finished.set()
            renewer.join()
            self.current = None
        return job

    def _execute(self, job: Job) -> None:
        claim = job.claim
        handler = self.handlers.get(claim.job_type)
        try:
            if handler is None:
                self._finish(job, lambda: self.backend.quarantine(claim, f"no handler for job type {claim.job_type!r}"))
                return
            on_claim = getattr(handler, "on_claim", None)
            if on_claim is not None:
                on_claim(job)
            if claim.reconcile_required:
                reconcile = getattr(handler, "reconcile", None)
                found = reconcile(job) if reconcile else Reconciled.unknown("the handler has no way to reconcile")
                self.events("Reconciles", 1)
                if found.kind == "done":
                    self._finish(job, lambda: self.backend.complete(claim, found.outcome_code or "reconciled"))
                    return
                if found.kind == "unknown":
                    self._finish(job, lambda: self.backend.park_unknown(claim, found.reason))
                    return
            outcome = handler.run(job)
            if not job.completed:
                self._finish(job, lambda: self.backend.complete(claim, outcome or "ok"))
        except LostOwnership:
            self.events("AbandonedAfterLostOwnership", 1)
        except Retry as retry:
            self._finish(job, lambda: self.backend.fail(claim, True, retry.reason, retry.retry_after_ms))
        except Permanent as error:
            self._finish(job, lambda: self.backend.fail(claim, False, str(error) or "permanent failure"))
        except Uninterpretable as error:
            self._finish(job, lambda: self.backend.quarantine(claim, str(error) or "uninterpretable input"))
        except Ambiguous as error:
            self._finish(job, lambda: self.backend.park_unknown(claim, str(error) or "ambiguous outcome"))
        except Exception as error:  # noqa: BLE001 - a handler bug must not kill the worker
            log.exception("handler raised", extra={"op": keyed_hash(claim.tenant_id, claim.operation_id)})
            if claim.target_class is TargetClass.D:
                # No lookup, no second call: anything unexpected after the intent is ambiguous.
                self._finish(job, lambda: self.backend.park_unknown(claim, f"handler raised {type(error).__name__}"))
            else:
                self._finish(job, lambda: self.backend.fail(claim, True, f"handler raised {type(error).__name__}"))

    def _finish(self, job: Job, write: Callable[[], Any]) -> None:
        """The closing write: skipped once ownership is lost; a refusal means it was lost."""
        if job.cancelled.is_set():
            self.events("AbandonedAfterLostOwnership", 1)
            return
        try:
            write()
        except (StaleFence, NotFound) as refused:
            job.lose(f"closing write refused: {refused.code}")
        except LeaseFenceError as error:
            if not error.retryable:
                raise
            # The store is busy or the answer was lost: one more try is safe (fenced, and a
            # repeat by the same fence is recognized as done).
            try:
                write()
            except (StaleFence, NotFound) as refused:
                job.lose(f"closing write refused: {refused.code}")

    def _renew(self, job: Job) -> None:
        """Extend the lease only when the handler made progress since the last renewal.

        A job whose lease runs out while its handler makes no progress is reported once as
        ``StalledClaims`` (the on-call signal for "claimed but stalled")."""
        renewed_at = 0
        lease_ends = time.monotonic() + job.claim.lease_ms / 1000
        stalled = False
        while not job.finished.wait(self.heartbeat_interval_ms / 1000):
            if job.cancelled.is_set():
                return
            progress, checkpoint = job._progress_snapshot()
            if progress == renewed_at and checkpoint is MISSING:
                self.events("HeartbeatsSkippedNoProgress", 1)
                if not stalled and time.monotonic() >= lease_ends:
                    stalled = True
                    self.events("StalledClaims", 1)
                continue
            try:
                job.backend.heartbeat(job.claim, checkpoint=checkpoint)
                renewed_at = progress
                lease_ends = time.monotonic() + job.claim.lease_ms / 1000
                self.events("Heartbeats", 1)
            except (StaleFence, NotFound) as refused:
                job.lose(f"heartbeat refused: {refused.code}")
                return
            except Unavailable:
                continue

    # ------------------------------------------------------------ graceful shutdown

    def shutdown(self) -> None:
        """Stop claiming; cancel the job in flight if it outlives the grace period."""
        self.stop()
        job = self.current
        if job is None:
            return
        if not job.finished.wait(self.shutdown_grace_ms / 1000):
            job.lose("worker shutting down")
