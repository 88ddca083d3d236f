"""What a job type's handler sees, raises and returns: the handler-facing API of the worker.

A handler (:class:`Handler`) runs a claimed operation through the :class:`Job` it is given, and
ends it by returning an outcome code or raising one of the outcome exceptions (every one a
:class:`HandlerOutcome`: :class:`Retry`, :class:`Permanent`, :class:`Ambiguous`,
:class:`Uninterpretable`). Once the worker no longer holds the claim, every guarded call raises
:class:`LostOwnership`, a :class:`BaseException`: a handler's own ``except Exception:`` around its
side effects cannot swallow the order to stop (it reaches the runtime, which makes no further
write for that claim). The machinery that claims, renews and closes (the loop, the renewer,
shutdown) is :mod:`leasefence.worker._runtime`.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from leasefence import snapstart
from leasefence.errors import (
    InvalidInput,
    ItemTooLarge,
    NotFound,
    StaleFence,
    TargetRefused,
    Unavailable,
)
from leasefence.metrics import Metric, MetricSink
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


# ---------------------------------------------------------------- what handlers raise and return


class LostOwnership(BaseException):
    """This worker no longer holds the claim. Start no side effect; make no further write.

    A :class:`BaseException` (as ``KeyboardInterrupt`` is): a handler's ``except Exception:``
    around its own calls does not catch it, so the order to stop reaches the runtime, which makes
    no further write for the claim. A handler that must clean up catches it by name and raises
    it again."""


class HandlerOutcome(Exception):
    """The base of what a handler raises to end its job other than by returning an outcome code:
    :class:`Retry`, :class:`Permanent`, :class:`Ambiguous` and :class:`Uninterpretable`."""


class Retry(HandlerOutcome):
    """A transient failure: try again later (if attempts remain), after reconciling."""

    def __init__(self, reason: str, retry_after_ms: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_ms = retry_after_ms


class Permanent(HandlerOutcome):
    """A definite failure that no retry will fix: ``failed_terminal``."""


class Ambiguous(HandlerOutcome):
    """The side effect may or may not have happened: park as ``unknown`` for reconciliation."""


class Uninterpretable(HandlerOutcome):
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


@runtime_checkable
class Handler(Protocol):
    """One job type's code. ``run`` returns the outcome code (or completes via class A).

    Two hooks, each with a default that a class subclassing :class:`Handler` inherits (and the
    worker supplies for a handler object that lacks it):

    * ``on_claim``: called right after the claim, before reconciling (class B raises its target
      fences there). Default: nothing.
    * ``reconcile``: called before ``run`` when the claim has ``reconcile_required`` (a previous
      attempt may have had its side effect): :meth:`Reconciled.done` completes the operation,
      :meth:`Reconciled.not_done` runs it, :meth:`Reconciled.unknown` parks it ``unknown``.
      Default: unknown (the handler has no way to reconcile).
    """

    def run(self, job: Job) -> str | None: ...

    def reconcile(self, job: Job) -> Reconciled:  # noqa: ARG002 - the default needs no job
        return Reconciled.unknown("the handler has no way to reconcile")

    def on_claim(self, job: Job) -> None:  # noqa: ARG002 - the default needs no job
        return None


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

    def __init__(self, claim: Claim, backend: Backend, events: MetricSink) -> None:
        self.claim = claim
        self.backend = backend
        self.cancelled = threading.Event()
        self.finished = threading.Event()
        #: Set when the runtime starts the closing write: no renewal after it (one that raced it
        #: and was refused is no loss of ownership: the claim was being closed).
        self.closing = threading.Event()
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
        """Enter lost-ownership mode (once): ``reason`` says what was refused and why. The log
        line names the operation by its keyed hash, the fence and the reason in its message (a
        default formatter drops ``extra``), and keeps them as fields too."""
        if not self.cancelled.is_set():
            self.lost_reason = reason
            self.cancelled.set()
            self._events(Metric.LOST_OWNERSHIP, 1)
            op = _tag(self.claim)
            log.warning(
                "lost ownership of operation %s at fence %s: %s",
                op,
                self.claim.fence,
                reason,
                extra={"op": op, "fence": self.claim.fence, "why": reason},
            )

    def fenced(self, write: Callable[[], Any], what: str = "fenced write") -> Any:
        """Run a fenced write; a refusal puts the job in lost-ownership mode (the reason names
        ``what`` was refused)."""
        self.guard()
        try:
            return write()
        except (StaleFence, NotFound) as refused:
            self.lose(f"{what} refused: {refused.code}")
            raise LostOwnership(self.lost_reason) from refused

    def record_intent(self, what: str = "call") -> None:
        """Durably record, under this fence, that a side effect is about to start (class D).

        Kept in the operation's own ``intent`` attribute (``{"fence": f, "what": what}``), which
        later checkpoints never overwrite and every later claim sees as ``claim.intent`` (after a
        takeover or an operator's requeue too). A busy store is retried (within half the lease);
        if the intent cannot be recorded, nothing may be called."""
        self.fenced(
            lambda: retry_unavailable(
                self, lambda: self.backend.heartbeat(self.claim, intent=what)
            ),
            "class D intent (heartbeat)",
        )

    def complete_with(self, outcome_code: str, writes: list[dict[str, Any]]) -> None:
        """Class A: complete together with the business writes, in one transaction.

        A throttled or conflicted transaction (nothing committed) is retried with backoff within
        half the lease; a repeat of a transaction that did commit is recognized as done. Writes
        the store refuses as malformed (or one on the operation's own item) are refused every
        time: :class:`Permanent`, never a retry."""
        complete_with = getattr(self.backend, "complete_with", None)
        if complete_with is None:
            raise Permanent("class A needs the in-process engine backend (same database)")
        try:
            self.fenced(
                lambda: retry_unavailable(
                    self, lambda: complete_with(self.claim, outcome_code, writes)
                ),
                "class A complete with its writes",
            )
        except TargetRefused as refused:
            raise Permanent(f"business guard refused: {refused.message}") from refused
        except ItemTooLarge:
            raise  # the operation's item or a business item: as any other handler error
        except InvalidInput as malformed:
            raise Permanent(f"business writes refused: {malformed.message}") from malformed
        self.completed = True
