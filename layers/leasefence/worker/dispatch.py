"""Stream-driven dispatch: the worker function claims the operation a stream record names.

The event source mapping hands the worker only records where work became claimable now
(:func:`leasefence.streams.filters.dispatch_filters`); each is checked again here (the same
definition), then claimed by name with one conditional write pinned to the record's image
(:meth:`Engine.claim_seen`: no read) and run by the worker runtime, heartbeats, reconcile and
closing write included. A record for work that was taken meanwhile (by the scheduled drain, or
a record delivered again) yields no claim. Delayed retries and expired leases are the scheduled
drain's: it stays as the safety net.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leasefence.engine import Engine
from leasefence.metrics import Metric, MetricSink
from leasefence.model import Claim, State
from leasefence.schema import DUE_SK
from leasefence.streams import records
from leasefence.streams.filters import CLAIMABLE_NOW
from leasefence.worker._runtime import Worker

log = logging.getLogger("leasefence.dispatch")

#: A record can arrive before the enqueuer's clock said the work is due by the worker's clock
#: (skew between hosts): wait that long at most instead of leaving it to the drain.
MAX_SKEW_WAIT_MS = 1_000
#: Claim only while a whole lease plus this margin still fits in the invocation.
MARGIN_MS = 5_000


class StreamDispatch:
    """Claims the operations stream records name (for the tenants a worker serves) and runs them.

    A batch's claims are made one by one in record order (:meth:`claim`: what the partial batch
    response reports on), then their jobs run side by side, one thread each (:meth:`run`): a
    shard hands one tenant's records to one batch at a time, so running a batch's jobs one after
    another would make each job of a burst wait for all before it."""

    def __init__(
        self,
        worker: Worker,
        engine: Engine,
        tenants: Sequence[str],
        count: MetricSink | None = None,
        handoff: Callable[[Claim], None] | None = None,
    ) -> None:
        """``handoff``: the ``invoke`` dispatch mode (:mod:`leasefence.worker.handoff`): each
        claim is handed to it instead of run here."""
        if not tenants:
            raise ValueError("stream dispatch serves at least one tenant")
        self.worker = worker
        self.engine = engine
        self.tenants = frozenset(tenants)
        self.count = count if count is not None else (lambda _name, _value: None)
        self.handoff = handoff

    def claim(
        self, record: Mapping[str, Any], remaining_ms: Callable[[], int] | None = None
    ) -> tuple[str, Claim | None]:
        """One record: ``("claimed", claim)``, or no claim with why: ``taken`` (no longer
        claimable), ``ignored`` (not work that became claimable now), ``not_served`` (another
        tenant or job type), ``deferred`` (no time left in this invocation for a lease: the drain
        will find it). :class:`~leasefence.streams.records.MalformedRecord` and store errors
        raise (the record is retried, then goes to the failure destination)."""
        change = records.parse(record)
        new = change.new
        if (
            change.transition not in CLAIMABLE_NOW
            or new is None
            or new.get("state") != State.QUEUED
        ):
            return "ignored", None
        types = self.worker.job_types
        if change.tenant_id not in self.tenants or (
            types is not None and new["job_type"] not in types
        ):
            return "not_served", None
        if remaining_ms is not None and remaining_ms() < self.worker.lease_ms + MARGIN_MS:
            self.count(Metric.STREAM_DISPATCH_DEFERRED, 1)
            return "deferred", None
        early = int(new.get(DUE_SK, 0)) - self.engine.clock()
        if 0 < early <= MAX_SKEW_WAIT_MS:
            time.sleep(early / 1000)
        claim = self.engine.claim_seen(new, self.worker.worker_id, self.worker.lease_ms, types)
        if claim is None:
            self.count(Metric.STREAM_DISPATCH_TAKEN, 1)
            return "taken", None
        self.count(Metric.STREAM_DISPATCHED, 1)
        return "claimed", claim

    def run(self, claims: Sequence[Claim]) -> None:
        """Run the claimed jobs (:meth:`start`) and return when all have finished."""
        if len(claims) == 1 and self.handoff is None:
            self.worker.process(claims[0])
            return
        self.start(claims)()

    def start(self, claims: Sequence[Claim]) -> Callable[[], None]:
        """Start the claimed jobs and return what waits for them: each runs in a thread of its
        own through the worker runtime (reconcile, heartbeats, closing write), or, with a
        ``handoff``, is handed to it (then nothing waits here). A claim that cannot be handed
        over is counted and left: its lease lapses and the scheduled drain takes it over."""
        if self.handoff is not None:
            for claim in claims:
                try:
                    self.handoff(claim)
                except Exception as error:  # noqa: BLE001 - the drain takes the claim over
                    self.count(Metric.STREAM_HANDOFF_FAILED, 1)
                    log.warning("hand-off failed: %s", type(error).__name__)
                else:
                    self.count(Metric.STREAM_HANDED_OFF, 1)
            return lambda: None
        threads = [
            threading.Thread(
                target=self._runner().process, args=(claim,), name=f"job-{i}", daemon=True
            )
            for i, claim in enumerate(claims)
        ]
        for thread in threads:
            thread.start()

        def wait() -> None:
            for thread in threads:
                thread.join()

        return wait

    def run_handed_off(self, claim: Claim) -> None:
        """Run a claim a stream batch handed to this invocation (the ``invoke`` mode), through
        a worker of its own (invocations may share this process: the local stack's do)."""
        self._runner().process(claim)

    def _runner(self) -> Worker:
        """A worker for one job of a batch: the same identity, handlers and lease as
        :attr:`worker` (whose claims these are), its own job slot."""
        w = self.worker
        return Worker(
            w.backend,
            w.handlers,
            worker_id=w.worker_id,
            lease_ms=w.lease_ms,
            heartbeat_interval_ms=w.heartbeat_interval_ms,
            events=w.events,
        )
