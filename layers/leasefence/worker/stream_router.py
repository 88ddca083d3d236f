"""One stream batch for both of leasefence's stream consumers: the worker's dispatch and the
publisher, in the worker function, so that leasefence takes one reader per stream shard
(:func:`leasefence.streams.mappings.shared`) and leaves the other to the adopter.

The mapping's filter is a superset of both (:func:`leasefence.streams.filters.shared_filters`);
here each record goes to the consumers whose exact filter it passes, and neither consumer's
failure reaches the other:

1. **Dispatch first.** Each record for the worker (written in the last
   :data:`DISPATCH_MAX_AGE_S`: older work is the drain's) is claimed by name (one conditional write pinned
   to the record's image: a record delivered again claims nothing), and the claimed jobs start
   (threads, or handed to an asynchronous invocation: :mod:`leasefence.worker.handoff`) before
   anything is published: a slow or failing publish never delays a job. A claim that fails (the
   table throttled, a record that cannot be read) is counted (``StreamDispatchFailed``) and never
   reported to the mapping: the operation is still queued, the scheduled drain finds it, and the
   publisher's records of the batch are not delivered again for it.
2. **Then publishing**, in stream order, stopping at the first record that fails after
   :data:`PUBLISH_ATTEMPTS` attempts (a short backoff between them). That record and every later
   one of the batch for the publisher are **kept**: written, as one failed batch, to the
   publisher's on-failure bucket (the object Lambda itself writes there:
   :mod:`leasefence.streams.kept`), alarmed and replayed by ``leasefence publisher redrive`` in
   each operation's order; ``PublishFailuresKept`` counts them. The batch then succeeds, so the
   shard moves on: a poison record for publishing holds no later dispatch. Only when the bucket
   cannot be written either are the records reported in ``batchItemFailures`` (the mapping
   retries from the first, bisects, and in the end writes the batch to the same bucket): nothing
   is lost, at the price of holding the shard while both EventBridge and S3 fail.
3. **Then the batch waits for its jobs** (the ``run`` mode) and answers.

A record redelivered after step 2's fallback publishes again (at least once, as before: events
carry ``sequence``); its dispatch claims nothing twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from leasefence.metrics import Metric, MetricSink
from leasefence.model import Claim
from leasefence.streams import filters

log = logging.getLogger("leasefence.router")

#: Records older than this are not dispatched (the worker's own mapping's maximum record age):
#: the scheduled drain has long found their work. The shared mapping delivers records of any
#: age (the publisher needs them), so a shard that fell behind (a batch retried for a while, the
#: function throttled) would otherwise spend a refused claim write on each late record.
DISPATCH_MAX_AGE_S = 600
#: Attempts at publishing one record before it is kept (the backoff doubles from
#: :data:`PUBLISH_BACKOFF_S`: at most about 0.3 s of waiting for a record that keeps failing).
PUBLISH_ATTEMPTS = 3
PUBLISH_BACKOFF_S = 0.1

Record = Mapping[str, Any]


class StreamRouter:
    """``dispatch``: a :class:`~leasefence.worker.dispatch.StreamDispatch` (``claim``, ``start``);
    ``publish``: the publisher's ``handle`` (raises to have a record done again); ``keep``:
    writes records it gave up on to the on-failure bucket (raises when it cannot); ``events``:
    whether the service publishes outcome events (without, the publisher gets only the records of
    operations enqueued before: :func:`leasefence.streams.filters.publisher_filters`)."""

    def __init__(
        self,
        dispatch: Any,
        publish: Callable[[Record], str],
        keep: Callable[[Sequence[Record]], None],
        count: MetricSink | None = None,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.time,
        events: bool = True,
    ) -> None:
        self.dispatch = dispatch
        self.publish = publish
        self.keep = keep
        self.count = count if count is not None else (lambda _name, _value: None)
        self.sleep = sleep
        self.now = now
        self.dispatch_filters = filters.dispatch_filters(sorted(dispatch.tenants))
        #: What the publisher gets: as its own mapping would pass it (``events`` False: only the
        #: records of operations enqueued before, whatever else the batch brought for dispatch).
        self.publisher_filters = filters.publisher_filters(events)

    def handle(
        self, event: Mapping[str, Any], remaining_ms: Callable[[], int] | None = None
    ) -> dict[str, Any]:
        """One batch; returns the partial batch response and counts what was done."""
        batch: list[Record] = list(event.get("Records") or [])
        outcomes: dict[str, int] = {}
        claims: list[Claim] = []
        oldest = self.now() - DISPATCH_MAX_AGE_S
        for record in batch:
            if not filters.passes(self.dispatch_filters, record):
                continue
            created = record.get("dynamodb", {}).get("ApproximateCreationDateTime")
            if isinstance(created, (int, float)) and created < oldest:
                outcomes["too_old"] = outcomes.get("too_old", 0) + 1
                continue
            try:
                outcome, claim = self.dispatch.claim(record, remaining_ms)
            except Exception as error:  # noqa: BLE001 - the drain finds the work; see module
                self.count(Metric.STREAM_DISPATCH_FAILED, 1)
                log.warning("stream dispatch failed: %s", type(error).__name__)
                outcome, claim = "dispatch_failed", None
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if claim is not None:
                claims.append(claim)
        wait = self.dispatch.start(claims)
        try:
            failed = self._publish(
                [r for r in batch if filters.passes(self.publisher_filters, r)], outcomes
            )
        finally:
            wait()
            log.info("stream batch finished", extra={"records": len(batch), **outcomes})
        return {"batchItemFailures": [{"itemIdentifier": seq} for seq in failed]}

    def _publish(self, records: list[Record], outcomes: dict[str, int]) -> list[str]:
        """Publish in order; the sequence numbers to report (empty unless keeping failed)."""
        for index, record in enumerate(records):
            error = self._attempt(record, outcomes)
            if error is None:
                continue
            rest = records[index:]
            try:
                self.keep(rest)
            except Exception as keeping:  # noqa: BLE001 - reported: the mapping retries
                log.error(
                    "publishing failed (%s) and keeping failed (%s): the mapping retries",
                    type(error).__name__,
                    type(keeping).__name__,
                )
                return [str(r["dynamodb"]["SequenceNumber"]) for r in rest]
            self.count(Metric.PUBLISH_FAILURES_KEPT, len(rest))
            outcomes["kept"] = outcomes.get("kept", 0) + len(rest)
            log.error("publishing failed (%s): %d record(s) kept", type(error).__name__, len(rest))
            return []
        return []

    def _attempt(self, record: Record, outcomes: dict[str, int]) -> Exception | None:
        delay = PUBLISH_BACKOFF_S
        for attempt in range(PUBLISH_ATTEMPTS):
            try:
                outcome = self.publish(record)
            except Exception as error:  # noqa: BLE001 - retried, then kept
                if attempt + 1 == PUBLISH_ATTEMPTS:
                    return error
                self.sleep(delay)
                delay *= 2
            else:
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                return None
        return None  # pragma: no cover - the loop returns
