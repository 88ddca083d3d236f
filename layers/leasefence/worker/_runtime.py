"""The worker runtime: claim, reconcile, run, finish; and stop acting the moment ownership is lost.

- Heartbeats are tied to progress. A background renewer extends the lease only when the handler
  has called :meth:`Job.progress` since the last renewal, so a stuck handler loses its lease
  instead of holding it forever (its fence still protects the targets).
- Lost-ownership mode. When a heartbeat or any fenced write is refused, :attr:`Job.cancelled` is
  set; every guarded side-effect call (:meth:`Job.guard`, the target helpers) raises
  :class:`LostOwnership` from then on, and the runtime makes no further write for that claim:
  no "one last commit". :class:`LostOwnership` is a ``BaseException``: a handler's own
  ``except Exception:`` around its calls cannot swallow it.
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

import contextlib
import logging
import random
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from leasefence import otel, snapstart
from leasefence.errors import NotFound, PayloadMissing, StaleFence, Unavailable
from leasefence.limits import MAX_REASON_LENGTH
from leasefence.metrics import Metric, MetricSink, no_metrics
from leasefence.model import Claim, TargetClass
from leasefence.validation import MISSING
from leasefence.worker.backend import Backend
from leasefence.worker.handler import (
    Ambiguous,
    FunctionHandler,
    Handler,
    Job,
    LostOwnership,
    Permanent,
    Reconciled,
    Retry,
    Uninterpretable,
    _tag,
    retry_unavailable,
)

log = logging.getLogger("leasefence.worker")

_idle_jitter = random.Random()
snapstart.after_restore(_idle_jitter.seed)  # SnapStart: restored workers must not poll in step

#: The engine refuses longer reasons; the runtime's own reasons are cut to fit.
MAX_REASON = MAX_REASON_LENGTH


def _closing_name(write: Callable[[], Any]) -> str:
    """What a closing write is, for the lost-ownership reason: ``complete``, ``fail``, ``park as
    unknown`` or ``quarantine`` (the backend method a :func:`partial` of :meth:`_decide` calls)."""
    name = getattr(getattr(write, "func", None), "__name__", "closing write")
    return "park as unknown" if name == "park_unknown" else name


def _reason(text: str) -> str:
    return text[:MAX_REASON] or "no reason given"


def with_hooks(handler: Handler) -> Handler:
    """``handler`` as the runtime calls it. A handler object written before :class:`Handler`
    declared its hooks (``run`` only, or one hook) gets the protocol's defaults for the ones it
    lacks, once, here: the runtime then calls ``on_claim`` and ``reconcile`` directly."""
    if isinstance(handler, Handler):
        return handler
    return FunctionHandler(
        handler.run, getattr(handler, "reconcile", None), getattr(handler, "on_claim", None)
    )


def _renewal_wait(interval_s: float, aligned: bool) -> float:
    """The wait before a job's next renewal: ``interval_s``; with ``aligned`` (a backend that
    batches renewals), to the next multiple of it on the process's monotonic clock, so that the
    jobs of one process renew at the same instants and share one request (never longer)."""
    if not aligned:
        return interval_s
    return interval_s - time.monotonic() % interval_s


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
        events: MetricSink | None = None,
        claim_any_type: bool = False,
        idle_max_sleep_ms: int | None = None,
    ) -> None:
        """``claim_any_type``: claim every job type of the tenant (not only those in
        ``handlers``) and quarantine what has no handler, so work of a type nobody serves (a
        typo, a retired type) reaches an operator instead of waiting. Off by default: a worker
        claims only its handlers' types, and the ``OldestDueAgeSeconds`` alarm shows the rest.

        ``idle_max_sleep_ms``: how far :meth:`run` backs off while it finds nothing to claim
        (:meth:`idle_wait_ms`); None: the backend's ``idle_max_sleep_ms`` (the HTTP backend's:
        every idle poll is a billed request), else no backoff (a fixed ``idle_sleep_ms``)."""
        self.backend = backend
        self.handlers = {job_type: with_hooks(h) for job_type, h in handlers.items()}
        self.claim_any_type = claim_any_type
        self.worker_id = worker_id or f"worker-{uuid.uuid4().hex[:12]}"
        #: The lease this worker asks for; a claim may grant less (``claim.lease_ms``).
        self.lease_ms = lease_ms
        #: How often a job renews, at most (:meth:`renewal_interval_ms`: a third of the granted
        #: lease when that is shorter).
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(lease_ms // 3, 50)
        self.idle_sleep_ms = idle_sleep_ms
        #: The longest wait between idle polls (None or at most ``idle_sleep_ms``: no backoff).
        self.idle_max_sleep_ms = (
            idle_max_sleep_ms
            if idle_max_sleep_ms is not None
            else getattr(backend, "idle_max_sleep_ms", None)
        )
        self.shutdown_grace_ms = shutdown_grace_ms
        self.events = events if events is not None else no_metrics
        self._stopping = threading.Event()
        #: While :meth:`run` loops, its ``until`` (never true without one): a closing write may
        #: then carry the next claim. None: not looping.
        self._until: Callable[[], bool] | None = None
        self.current: Job | None = None

    @property
    def job_types(self) -> list[str] | None:
        """What this worker claims: its handlers' job types (None: every type)."""
        return None if self.claim_any_type else sorted(self.handlers)

    # ------------------------------------------------------------ loop

    def run(self, until: Callable[[], bool] | None = None) -> None:
        """Claim and run jobs until :meth:`stop` (or ``until()`` is true). After a poll that
        found nothing it waits :meth:`idle_wait_ms`; a claim resets the backoff. A claim that
        met ``Unavailable`` is asked again after the shortest wait, not the backed-off one: its
        answer may have been lost after the claim was made, and the next claim (the same claim
        token, over HTTP) must reach it within its lease, which may be shorter than the
        backoff's cap."""
        idle = 0
        self._until = until or (lambda: False)
        try:
            while not self._stopping.is_set() and not (until and until()):
                try:
                    worked = self.run_once()
                except Unavailable:
                    idle = 0
                    self._stopping.wait(self.idle_wait_ms(1) / 1000)
                    continue
                if worked:
                    idle = 0
                    continue
                idle += 1
                self._stopping.wait(self.idle_wait_ms(idle) / 1000)
        finally:
            self._until = None
        # A claim the last closing request made just as the worker stopped: run it rather than
        # let its lease lapse (an attempt spent on nothing).
        take_ready = getattr(self.backend, "take_ready", None)
        ready = take_ready(self.worker_id) if take_ready is not None else None
        if ready is not None:
            self.process(ready)

    def idle_wait_ms(self, idle_polls: int) -> float:
        """The wait after the ``idle_polls``-th poll in a row that found nothing: without a
        backoff (:attr:`idle_max_sleep_ms` unset or not above ``idle_sleep_ms``)
        ``idle_sleep_ms``; with one, ``idle_sleep_ms`` doubled with each idle poll up to
        :attr:`idle_max_sleep_ms`, each wait drawn between half of that and all of it (idle
        workers started together do not poll in step)."""
        cap = self.idle_max_sleep_ms
        if cap is None or cap <= self.idle_sleep_ms:
            return self.idle_sleep_ms
        ceiling = min(cap, self.idle_sleep_ms * 2 ** min(max(idle_polls, 1) - 1, 30))
        return _idle_jitter.uniform(ceiling / 2, ceiling)

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
            with otel.process_span(claim):  # the claim's trace continued (OpenTelemetry)
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
            handler.on_claim(job)
            if claim.reconcile_required:
                found = handler.reconcile(job)
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
        job.closing.set()
        try:
            with self._claiming_next():
                retry_unavailable(job, write)
        except (StaleFence, NotFound) as refused:
            job.lose(f"{_closing_name(write)} refused: {refused.code}")
        except LostOwnership:
            self.events(Metric.ABANDONED_AFTER_LOST_OWNERSHIP, 1)
        except Unavailable:
            self.events(Metric.ABANDONED_STORE_UNAVAILABLE, 1)
            log.warning(
                "store unavailable: closing write not made, claim left to lapse",
                extra={"op": _tag(job.claim)},
            )

    def _claiming_next(self) -> contextlib.AbstractContextManager[None]:
        """Within :meth:`run`, with a backend that can (the batched HTTP backend), while the worker
        goes on: the closing write's request also claims this worker's next job."""
        claiming = getattr(self.backend, "claiming_next", None)
        until = self._until
        if claiming is None or until is None or self._stopping.is_set() or until():
            return contextlib.nullcontext()
        return claiming(self.worker_id, self.lease_ms, self.job_types)

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
        aligned = getattr(job.backend, "aligned_renewals", False)
        while not job.finished.wait(_renewal_wait(interval_s, aligned)):
            if job.cancelled.is_set() or job.closing.is_set():
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
                if not job.closing.is_set():  # else the closing write came first: not a loss
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
