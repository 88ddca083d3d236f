"""Stream dispatch: the table's stream invokes the worker function as soon as work becomes
claimable, instead of it waiting for the next scheduled drain.

By default (``WorkerProps.stream_readers=1``) the mapping is shared with the publisher: one
reader of the stream (:func:`leasefence.streams.mappings.shared`, the publisher's settings and
its on-failure bucket), whose function routes each record (:mod:`leasefence.worker.stream_router`).
What follows describes the worker's own mapping (``stream_readers=2``).

The mapping's filter (:func:`leasefence.streams.filters.dispatch_filters`) passes only records of
the worker's tenants where an operation became ``queued`` and claimable now (an enqueue, an
immediate retry, an operator's requeue); the function claims each by name (one conditional write:
a record for work already taken yields no claim) and runs the batch's jobs side by side. Delayed
retries and expired leases are left to the scheduled drain (:mod:`leasefence_infra.worker`), which
stays as the safety net, so the mapping retries little (2 times, bisected) and drops records older
than 10 minutes: by then the drain has found their work. Settings: ``WorkerProps``
(``stream_batch_size``, ``stream_parallelization``, ``max_concurrency``).
"""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from .publisher import Publisher
from .stream import stream_failure_queue, subscribe
from .worker import Worker


class StreamDispatch(Construct):
    """The worker function's event source mapping on the table's stream (``Mapping``): shared
    with ``publisher`` (its on-failure bucket), or with an on-failure queue of its own
    (``Failures``) when ``publisher`` is None."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        worker: Worker,
        table: dynamodb.ITable,
        key: kms.IKey | None,
        publisher: Publisher | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        #: The mapping's settings and filter (:attr:`WorkerProps.stream_mapping`).
        self.mapping = worker.props.stream_mapping
        self.function = worker.function.function
        #: The worker's own on-failure queue; None when the mapping is shared (the publisher's
        #: bucket is its destination).
        self.failure_queue: sqs.Queue | None = None
        if publisher is None:
            self.failure_queue = stream_failure_queue(self, "Failures", what="worker", key=key)
        self.event_source_mapping = subscribe(
            self,
            "Mapping",
            function=worker.function,
            table=table,
            mapping=self.mapping,
            failure_queue=self.failure_queue,
            failure_bucket=publisher.failure_bucket if publisher is not None else None,
        )
