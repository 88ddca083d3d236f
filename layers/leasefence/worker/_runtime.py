"""The worker runtime: claim, reconcile, run, finish; and stop acting the moment ownership is lost.

- Heartbeats are tied to progress. A background renewer extends the lease only when the handler
  has called :meth:`Job.progress` since the last renewal, so a stuck handler loses its lease
  instead of holding it forever (its fence still protects the targets).
- Lost-ownership mode. When a heartbeat or any fenced write is refused, :attr:`Job.cancelled` is
  set; every guarded side-effect call (:meth:`Job.guard`, the target helpers) raises
  :class:`LostOwnership` from then on, and the runtime makes no further write for that claim:
  no "one last commit".
- A claim with ``reconcile_required`` runs the handler's ``reconcile`` first: confirmed done ->
  complete; confirmed not done -> run under the new fence; cannot tell -> ``unknown``. A class-D
  claim that carries an intent (an erased one too: its fence stays) is never "not done": a
  reconcile that says so is taken as "cannot tell" (``unknown``), so the handler never runs and a
  class-D target is called at most once.
- Graceful shutdown: :meth:`Worker.stop` (wired to SIGTERM) stops claiming; the job in flight
  finishes, or after the grace period is cancelled: it makes no further write, its lease lapses
  and the next claim reconciles. (Releasing it early would be one more write by a worker that is
  giving up, and for class D a release would spend its only attempt.)
- A missing payload is never None: :attr:`Job.payload` raises
  :class:`~leasefence.errors.PayloadMissing` (purged, erased, the object gone) and the runtime
  quarantines the operation ("payload missing: ...") for an operator, counted as ``PayloadMissing``.
  A payload store that refuses access (S3 ``AccessDenied``, a KMS key fault) raises
  :class:`~leasefence.errors.PayloadAccessDenied`, an :class:`~leasefence.errors.Unavailable`:
  treated as a busy store below (no quarantine, no fail write), counted as ``PayloadAccessDenied``.
- A busy store never spends an attempt. The runtime's own writes (the closing write, a class-A
  :meth:`Job.complete_with`, :meth:`Job.record_intent`) retry
  :class:`~leasefence.errors.Unavailable` with capped exponential backoff and full jitter, for at
  most half the lease (:func:`retry_unavailable`). If the store stays unavailable (there, or in
  the handler's own store calls) the runtime makes no fail write: the claim is left to lapse
  (``AbandonedStoreUnavailable``) exactly as after a crash, and the next claim reconciles. A
  ``fail(retryable=True)`` would requeue the same way but could end ``failed_terminal`` on the
  last attempt, where a lapse ends ``unknown`` for an operator.
- The heartbeat thread never dies silently: anything unexpected from a renewal (say a checkpoint
  over 4 KiB) puts the job in lost-ownership mode, counted as ``HeartbeatErrors``.
- Everything timed by the lease uses the lease GRANTED (``claim.lease_ms``), not the one the
  worker asked for: a job type's ``max_lease_seconds`` may cut it. The renewal interval is the
  configured one but at most a third of the granted lease (:meth:`Worker.renewal_interval_ms`),
  the stall detector and the retry budget (half the lease) count from the granted lease too.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from leasefence import snapstart
from leasefence.errors import NotFound, PayloadMissing, StaleFence, TargetRefused, Unavailable
from leasefence.metrics import Metric
from leasefence.model import Claim, TargetClass
from leasefence.privacy import keyed_hash
from leasefence.validation import MISSING
from leasefence.worker.backend import Backend

log = logging.getLogger("leasefence.worker")

T = TypeVar("T")

#: Retrying a write the store refused as busy: the n-th wait is uniform in
#: ``[0, min(RETRY_CAP_MS, RETRY_BASE_MS * 2**n)]`` (full jitter), at most ``RETRY_MAX_TRIES``
#: tries, and never past half the claim's lease from the first try.
RETRY_BASE_MS = 50
RETRY_CAP_MS = 2_000
RETRY_MAX_TRIES = 6
#: The engine refuses longer reasons; the runtime's own reasons are cut to fit.
MAX_REASON = 1024

_jitter = random.Random()
snapstart.after_restore(_jitter.seed)  # SnapStart: restored instances must not back off in step


def retry_unavailable(job: Job, write: Callable[[], T]) -> T:
    """Run ``write``; while it raises :class:`Unavailable` (throttled, conflicted, unreachable),
    try again after a capped exponential backoff with full jitter, within half the claim's lease.

    Only for writes that are safe to repeat: every fenced write is (a repeat by the same fence
    is recognized as done). Stops early, raising :class:`LostOwnership`, once the job lost
    ownership. The last :class:`Unavailable` is raised when the budget is spent."""
    deadline = time.monotonic() + job.claim.lease_ms / 2000
    tries = 0
    while True:
        job.guard()
        try:
            return write()
        except Unavailable:
            tries += 1
            delay = _jitter.uniform(0, min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** (tries - 1))) / 1000
            if tries >= RETRY_MAX_TRIES or time.monotonic() + delay >= deadline:
                raise
            job._events(Metric.STORE_RETRIES, 1)
            if job.cancelled.wait(delay):
                raise LostOwnership(job.lost_reason or "ownership lost") from None


def _tag(claim: Claim) -> str:
    """The claim's operation as logs name it: a keyed hash, never the raw ids."""
    return keyed_hash(claim.tenant_id, claim.operation_id)


def _reason(text: str) -> str:
    return text[:MAX_REASON] or "no reason given"


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

    def __init__(
        self, claim: Claim, backend: Backend, events: Callable[[str, float], None]
    ) -> None:
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
        """The operation's inline payload (JSON), loaded once.

        Never None for a payload that is gone: :class:`~leasefence.errors.PayloadMissing` when
        it was purged, erased or cannot be read (the runtime then quarantines the operation),
        :class:`~leasefence.errors.NotFound` when the operation has no inline payload (it was
        enqueued by reference: read ``job.claim.payload_ref`` yourself)."""
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

    def _unsent(self, checkpoint: Any) -> None:
        """A checkpoint whose renewal did not go through: keep it unless a newer one came."""
        with self._lock:
            if self._checkpoint is MISSING:
                self._checkpoint = checkpoint

    def guard(self) -> None:
        """Call before every side effect: raises :class:`LostOwnership` once ownership is lost."""
        if self.cancelled.is_set():
            raise LostOwnership(self.lost_reason or "ownership lost")

    def lose(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.lost_reason = reason
            self.cancelled.set()
            self._events(Metric.LOST_OWNERSHIP, 1)
            log.warning("lost ownership", extra={"op": _tag(self.claim), "why": reason})

    def fenced(self, write: Callable[[], Any]) -> Any:
        """Run a fenced write; a refusal puts the job in lost-ownership mode."""
        self.guard()
        try:
            return write()
        except (StaleFence, NotFound) as refused:
            self.lose(f"fenced write refused: {refused.code}")
            raise LostOwnership(self.lost_reason) from refused

    def record_intent(self, what: str = "call") -> None:
        """Durably record, under this fence, that a side effect is about to start (class D).

        Kept in the operation's own ``intent`` attribute (``{"fence": f, "what": what}``), which
        later checkpoints never overwrite and every later claim sees as ``claim.intent`` (after a
        takeover or an operator's requeue too). A busy store is retried (within half the lease);
        if the intent cannot be recorded, nothing may be called."""
        self.fenced(
            lambda: retry_unavailable(self, lambda: self.backend.heartbeat(self.claim, intent=what))
        )

    def complete_with(self, outcome_code: str, writes: list[dict[str, Any]]) -> None:
        """Class A: complete together with the business writes, in one transaction.

        A throttled or conflicted transaction (nothing committed) is retried with backoff within
        half the lease; a repeat of a transaction that did commit is recognized as done."""
        complete_with = getattr(self.backend, "complete_with", None)
        if complete_with is None:
            raise Permanent("class A needs the in-process engine backend (same database)")
        try:
            self.fenced(
                lambda: retry_unavailable(
                    self, lambda: complete_with(self.claim, outcome_code, writes)
                )
            )
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
        claim_any_type: bool = False,
    ) -> None:
        """``claim_any_type``: claim every job type of the tenant (not only those in
        ``handlers``) and quarantine what has no handler, so work of a type nobody serves (a
        typo, a retired type) reaches an operator instead of waiting. Off by default: a worker
        claims only its handlers' types, and the ``OldestDueAgeSeconds`` alarm shows the rest."""
        self.backend = backend
        self.handlers = dict(handlers)
        self.claim_any_type = claim_any_type
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        #: The lease this worker asks for; a claim may grant less (``claim.lease_ms``).
        self.lease_ms = lease_ms
        #: How often a job renews, at most (:meth:`renewal_interval_ms`: a third of the granted
        #: lease when that is shorter).
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(lease_ms // 3, 50)
        self.idle_sleep_ms = idle_sleep_ms
        self.shutdown_grace_ms = shutdown_grace_ms
        self.events = events if events is not None else (lambda _name, _value: None)
        self._stopping = threading.Event()
        self.current: Job | None = None

    @property
    def job_types(self) -> list[str] | None:
        """What this worker claims: its handlers' job types (None: every type)."""
        return None if self.claim_any_type else sorted(self.handlers)

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
        renewer = threading.Thread(
            target=self._renew, args=(job,), name=f"renew-{claim.fence}", daemon=True
        )
        renewer.start()
        try:
            self._execute(job)
        finally:
            job.finished.set()
            renewer.join()
            self.current = None
        return job

    def _execute(self, job: Job) -> None:
        closing = self._decide(job)
        if closing is not None:
            self._finish(job, closing)

    def _decide(self, job: Job) -> Callable[[], Any] | None:
        """Run the handler (after reconciling) and return the closing write it calls for, or None
        when no write is to be made (completed by the handler, ownership lost, store unavailable).
        The closing write runs outside the handler's error handling: a failed closing write is
        never mistaken for a failed handler."""
        claim = job.claim
        backend = self.backend
        handler = self.handlers.get(claim.job_type)
        try:
            if handler is None:
                return partial(
                    backend.quarantine,
                    claim,
                    _reason(f"no handler for job type {claim.job_type!r}"),
                )
            on_claim = getattr(handler, "on_claim", None)
            if on_claim is not None:
                on_claim(job)
            if claim.reconcile_required:
                reconcile = getattr(handler, "reconcile", None)
                found = (
                    reconcile(job)
                    if reconcile
                    else Reconciled.unknown("the handler has no way to reconcile")
                )
                self.events(Metric.RECONCILES, 1)
                if (
                    found.kind == "not_done"
                    and claim.target_class is TargetClass.D
                    and isinstance(claim.intent, dict)
                    and "fence" in claim.intent
                ):
                    # Class D has no lookup: with an intent on record (an erased one too) a call
                    # may have been made, whatever this reconcile believes. Never call twice.
                    found = Reconciled.unknown(
                        f"intent recorded by fence {claim.intent['fence']}; no lookup exists"
                    )
                if found.kind == "done":
                    return partial(backend.complete, claim, found.outcome_code or "reconciled")
                if found.kind == "unknown":
                    return partial(backend.park_unknown, claim, _reason(found.reason))
            outcome = handler.run(job)
            if job.completed:
                return None
            return partial(backend.complete, claim, outcome or "ok")
        except LostOwnership:
            self.events(Metric.ABANDONED_AFTER_LOST_OWNERSHIP, 1)
        except PayloadMissing as missing:
            # Running the handler without its input would be wrong; retrying cannot bring it back.
            self.events(Metric.PAYLOAD_MISSING, 1)
            log.warning(
                "payload missing: quarantined", extra={"op": _tag(claim), "why": missing.message}
            )
            return partial(
                backend.quarantine, claim, _reason(f"payload missing: {missing.message}")
            )
        except Retry as retry:
            return partial(backend.fail, claim, True, _reason(retry.reason), retry.retry_after_ms)
        except Permanent as error:
            return partial(backend.fail, claim, False, _reason(str(error) or "permanent failure"))
        except Uninterpretable as error:
            return partial(
                backend.quarantine, claim, _reason(str(error) or "uninterpretable input")
            )
        except Ambiguous as error:
            return partial(backend.park_unknown, claim, _reason(str(error) or "ambiguous outcome"))
        except Unavailable:
            # The store stayed busy through the runtime's retries (or a handler's own call hit
            # it): spend no attempt on it. No fail write; the lease lapses, the next claim
            # reconciles (on the last attempt the sweeper parks it unknown, never failed_terminal).
            self.events(Metric.ABANDONED_STORE_UNAVAILABLE, 1)
            log.warning("store unavailable: claim left to lapse", extra={"op": _tag(claim)})
        except Exception as error:  # a handler bug must not kill the worker
            log.exception("handler raised", extra={"op": _tag(claim)})
            if claim.target_class is TargetClass.D:
                # No lookup, no second call: anything unexpected after the intent is ambiguous.
                return partial(
                    backend.park_unknown, claim, f"handler raised {type(error).__name__}"
                )
            return partial(backend.fail, claim, True, f"handler raised {type(error).__name__}")
        return None

    def _finish(self, job: Job, write: Callable[[], Any]) -> None:
        """The closing write: skipped once ownership is lost; a refusal means it was lost. A busy
        store is retried within half the lease (a repeat by the same fence is recognized as
        done); if it stays busy, no further write is made and the lease lapses."""
        if job.cancelled.is_set():
            self.events(Metric.ABANDONED_AFTER_LOST_OWNERSHIP, 1)
            return
        try:
            retry_unavailable(job, write)
        except (StaleFence, NotFound) as refused:
            job.lose(f"closing write refused: {refused.code}")
        except LostOwnership:
            self.events(Metric.ABANDONED_AFTER_LOST_OWNERSHIP, 1)
        except Unavailable:
            self.events(Metric.ABANDONED_STORE_UNAVAILABLE, 1)
            log.warning(
                "store unavailable: closing write not made, claim left to lapse",
                extra={"op": _tag(job.claim)},
            )

    def renewal_interval_ms(self, claim: Claim) -> int:
        """How often a job of this claim renews: the configured interval, but at least three
        times per GRANTED lease (a catalogued ``max_lease_seconds`` below the configured
        interval would otherwise let every claim lapse before its first renewal)."""
        return max(1, min(self.heartbeat_interval_ms, max(claim.lease_ms // 3, 50)))

    def _renew(self, job: Job) -> None:
        """Extend the lease only when the handler made progress since the last renewal.

        A job whose lease runs out while its handler makes no progress is reported once as
        ``StalledClaims`` (the on-call signal for "claimed but stalled"). Both the interval and
        the stall are measured against the lease the claim GRANTED."""
        renewed_at = 0
        lease_ends = time.monotonic() + job.claim.lease_ms / 1000
        stalled = False
        interval_s = self.renewal_interval_ms(job.claim) / 1000
        while not job.finished.wait(interval_s):
            if job.cancelled.is_set():
                return
            progress, checkpoint = job._progress_snapshot()
            if progress == renewed_at and checkpoint is MISSING:
                self.events(Metric.HEARTBEATS_SKIPPED_NO_PROGRESS, 1)
                if not stalled and time.monotonic() >= lease_ends:
                    stalled = True
                    self.events(Metric.STALLED_CLAIMS, 1)
                continue
            try:
                job.backend.heartbeat(job.claim, checkpoint=checkpoint)
                renewed_at = progress
                lease_ends = time.monotonic() + job.claim.lease_ms / 1000
                self.events(Metric.HEARTBEATS, 1)
            except (StaleFence, NotFound) as refused:
                job.lose(f"heartbeat refused: {refused.code}")
                return
            except Unavailable:
                if checkpoint is not MISSING:
                    job._unsent(checkpoint)  # sent with the next renewal
                continue
            except Exception as error:  # noqa: BLE001 - this thread must never die silently
                # Anything else (a checkpoint over 4 KiB, a bug, an unexpected store error): the
                # lease can no longer be kept, so stop acting now rather than after it lapses.
                self.events(Metric.HEARTBEAT_ERRORS, 1)
                log.error(
                    "heartbeat failed: giving up the claim",
                    extra={"op": _tag(job.claim), "error_type": type(error).__name__},
                )
                job.lose(f"heartbeat failed: {type(error).__name__}")
                return

    # ------------------------------------------------------------ graceful shutdown

    def shutdown(self) -> None:
        """Stop claiming; cancel the job in flight if it outlives the grace period."""
        self.stop()
        job = self.current
        if job is None:
            return
        if not job.finished.wait(self.shutdown_grace_ms / 1000):
            job.lose("worker shutting down")
