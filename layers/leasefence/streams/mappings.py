"""The event source mappings on the operations table's stream, defined once: the CDK app
creates them from these values and the local stack runs them (:mod:`leasefence_tools.local.streams`).

DynamoDB Streams lets at most two readers poll a shard at a time without throttling. With a
worker, leasefence reads the stream once (:func:`shared`: one mapping whose function dispatches
work and publishes outcomes), leaving the second slot to the adopter; without one, the
publisher's own mapping (:func:`publisher`) is the only reader. :func:`worker` and
:func:`publisher` side by side (two readers, no slot left) remain for
``WorkerProps(stream_readers=2)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from leasefence.streams.filters import dispatch_filters, publisher_filters, shared_filters

#: Where Lambda writes a mapping's failed batches in an S3 on-failure destination
#: (``aws/lambda/<mapping UUID>/<shard>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>``).
FAILED_BATCH_PREFIX = "aws/lambda/"


@dataclass(frozen=True)
class StreamMapping:
    """An event source mapping (the Lambda ``CreateEventSourceMapping`` settings it needs).

    Always: ``FunctionResponseTypes: [ReportBatchItemFailures]`` (the functions answer with a
    partial batch response) and an alarmed on-failure destination."""

    function: str  # the directory of functions/
    filters: list[dict[str, Any]] = field(default_factory=list)
    batch_size: int = 10
    batching_window_s: int = 0
    parallelization_factor: int = 1
    max_retries: int = 2
    bisect: bool = True
    #: Records older than this are not delivered (-1: no limit).
    max_record_age_s: int = -1
    #: Where a new mapping starts reading: ``LATEST`` (what is written from then on) or
    #: ``TRIM_HORIZON`` (the oldest record the stream keeps: 24 hours).
    starting_position: str = "LATEST"
    #: The on-failure destination: ``sqs`` (a queue: what Lambda sends there says where the
    #: records are, shard and sequence numbers, not the records) or ``s3`` (a bucket: Lambda
    #: writes the invocation record with the whole batch, kept until it is redriven).
    failure_destination: str = "sqs"


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
    * starts at ``LATEST``, with an SQS on-failure queue: a record it misses (the mapping
      recreated, retries exhausted) is work the drain still finds, so nothing is replayed (at
      ``TRIM_HORIZON`` a new mapping would discard a day of records older than 10 minutes into
      its on-failure queue).
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


def publisher(events: bool = True) -> StreamMapping:
    """The publisher's mapping: every transition and every deletion of an operation item
    (``events`` False: only those of operations enqueued before the history moved into the item:
    :func:`leasefence.streams.filters.publisher_filters`).

    * batch 100, no batching window: events go out within a poll of the write.
    * parallelization 4: one operation's records stay in order (same partition key, one
      batch at a time), which the history needs and event consumers get.
    * 10 retries, bisected, then the on-failure destination: a failing EventBridge call is
      retried for a while before a record is given up (its history entry is written first and
      a retry never writes it twice); records of any age are delivered (the stream keeps them
      24 hours). The function stops a batch at its first failed record, so the retries start
      there and nothing overtakes it.
    * on-failure destination an S3 bucket: Lambda writes the invocation record with the whole
      batch, which stays there (not only 24 hours) until ``leasefence publisher redrive``
      replays it (:mod:`leasefence.streams.redrive`).
    * starts at ``TRIM_HORIZON``: a mapping created again (a stack update that replaces it, a
      mapping deleted and recreated) replays what the stream still holds rather than skipping
      the gap; the history ignores entries it has (by ``seq``), events go out again (consumers
      dedupe on ``(tenant_id, operation_id, sequence)``).
    """
    return StreamMapping(
        "publisher",
        publisher_filters(events),
        batch_size=100,
        batching_window_s=0,
        parallelization_factor=4,
        max_retries=10,
        bisect=True,
        max_record_age_s=-1,
        starting_position="TRIM_HORIZON",
        failure_destination="s3",
    )


def shared(
    batch_size: int = 10,
    parallelization_factor: int = 10,
    events: bool = True,
    tenants: Sequence[str] | None = None,
) -> StreamMapping:
    """The one mapping of a deployment with a worker: the worker function dispatches the work
    that became claimable and publishes what the publisher would
    (:class:`leasefence.worker.stream_router.StreamRouter`), so leasefence takes one of the stream's two
    readers per shard.

    * the filter: :func:`leasefence.streams.filters.shared_filters`, five patterns (a superset of
      both; the function applies the exact ones); ``events`` False (no outcome events): three,
      the worker's for ``tenants`` and the publisher's of operations enqueued before.
    * batch size and parallelization: the worker's (``WorkerProps.stream_batch_size``,
      ``stream_parallelization``): in the ``run`` dispatch mode a batch's jobs run side by side.
    * the function reports no dispatch failure (the work stays queued: the scheduled drain finds
      it) and no publishing failure it could keep (it retries a record briefly, then writes it
      and the later records it holds back to the on-failure bucket itself, for
      ``leasefence publisher redrive``): what the mapping retries is what the function could not
      keep, or a batch whose invocation failed outright (a timeout). For those: the publisher's
      settings (10 retries, bisected, records of any age, the S3 bucket), so no record the
      publisher needs is given up; a redelivered dispatch record claims nothing twice (the claim
      is pinned to the record's image).
    * starts at ``LATEST``, as the worker's own mapping (:func:`worker`), and is deployed under
      that mapping's logical id: the upgrade from two readers (or ``stream_readers=2`` to 1)
      then *updates* the worker's mapping in place (filter, batch, retries, destination), and it
      keeps reading from where it was. The starting position is a create-only property of
      ``AWS::Lambda::EventSourceMapping``: a different one would have CloudFormation create a
      second mapping of the same function on the same stream before deleting the first, which
      Lambda refuses (``ResourceConflictException``: the update fails and rolls back). The
      publisher's own mapping, a different function's, keeps ``TRIM_HORIZON``.
    """
    return StreamMapping(
        "worker",
        shared_filters(events, tenants),
        batch_size=batch_size,
        batching_window_s=0,
        parallelization_factor=parallelization_factor,
        max_retries=10,
        bisect=True,
        max_record_age_s=-1,
        starting_position="LATEST",
        failure_destination="s3",
    )
