"""The two event source mappings on the operations table's stream, defined once: the CDK app
creates them from these values and the local stack runs them (:mod:`leasefence.local.streams`).

DynamoDB Streams lets at most two readers poll a shard at a time without throttling: these two
are all there are (history and events share the publisher's read for that reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leasefence.streams.filters import dispatch_filters, publisher_filters


@dataclass(frozen=True)
class StreamMapping:
    """An event source mapping (the Lambda ``CreateEventSourceMapping`` settings it needs).

    Always: ``StartingPosition: LATEST``, ``FunctionResponseTypes: [ReportBatchItemFailures]``
    (the functions answer with a partial batch response), an on-failure destination (an SQS
    queue, alarmed when not empty)."""

    function: str  # the directory of functions/
    filters: list[dict[str, Any]] = field(default_factory=list)
    batch_size: int = 10
    batching_window_s: int = 0
    parallelization_factor: int = 1
    max_retries: int = 2
    bisect: bool = True
    #: Records older than this are not delivered (-1: no limit).
    max_record_age_s: int = -1


def worker(tenants: Sequence[str] | None) -> StreamMapping:
    """The worker's mapping: work that became claimable now, for the tenants it serves.

    * batch 10, no batching window: a record is delivered as soon as a poll sees it (Lambda
      polls a shard about four times a second); a batch's jobs run side by side, so 10 is also
      how many jobs one invocation runs at once.
    * parallelization 10: up to 10 batches of one shard at a time (the most Lambda allows);
      records with the same partition key (one tenant) stay in order in one of them, so a
      tenant gets at most 10 jobs at once from the stream; the drain takes the rest. The
      function's reserved concurrency, if set, caps the total.
    * 2 retries, bisected, then the on-failure destination: the work itself is still found by
      the scheduled drain, so retrying longer only blocks the records behind it.
    * records older than 10 minutes are skipped: the drain has found that work long before.
    """
    return StreamMapping(
        "worker",
        dispatch_filters(tenants),
        batch_size=10,
        batching_window_s=0,
        parallelization_factor=10,
        max_retries=2,
        bisect=True,
        max_record_age_s=600,
    )


def publisher() -> StreamMapping:
    """The publisher's mapping: every transition and every deletion of an operation item.

    * batch 100, no batching window: events go out within a poll of the write.
    * parallelization 4: one operation's records stay in order (same partition key, one
      batch at a time), which the history needs and event consumers get.
    * 10 retries, bisected, then the on-failure destination: a failing EventBridge call is
      retried for a while before a record is given up (its history entry is written first and
      a retry never writes it twice); records of any age are delivered (the stream keeps them
      24 hours).
    """
    return StreamMapping(
        "publisher",
        publisher_filters(),
        batch_size=100,
        batching_window_s=0,
        parallelization_factor=4,
        max_retries=10,
        bisect=True,
        max_record_age_s=-1,
    )
