"""Stream dispatch: the table's stream invokes the worker function as soon as work becomes
claimable, instead of it waiting for the next scheduled drain.

By default (``WorkerProps.stream_readers=1``) the mapping is shared with the publisher: one
reader of the stream (:func:`leasefence.streams.mappings.shared`, the publisher's settings and
its on-failure bucket), whose function routes each record (:mod:`leasefence.worker.stream_router`).
It keeps the logical id (``StreamDispatch/Mapping``) and the starting position of the worker's
own mapping, so that switching between one and two readers updates it in place, and the worker's
on-failure queue (``StreamDispatch/Failures``) stays: after the switch to one reader nothing new
is sent there, and deleting it would delete what the two-reader layout had sent.
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

#: cdk-nag's reason for the worker's stream queue that a shared mapping keeps (no DLQ of its own).
KEPT_QUEUE_REASON = (
    "This queue was the on-failure destination of the worker function's own stream event source "
    "mapping (stream_readers=2, and every deployment before one stream reader became the "
    "default); with one reader nothing is sent to it, and it is kept so that an upgrade does not "
    "delete the messages it holds; it has its own alarm."
)


class StreamDispatch(Construct):
    """The worker function's event source mapping on the table's stream (``Mapping``): shared
    with ``publisher`` (its on-failure bucket), or, when ``publisher`` is None, with the
    on-failure queue ``Failures`` (which a shared mapping keeps, unused: see above)."""

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
        #: The mapping's settings and filter (:meth:`WorkerProps.stream_mapping`): shared, it
        #: passes what the publisher publishes only when the service has outcome events.
        events = publisher is not None and publisher.event_bus is not None
        self.mapping = worker.props.stream_mapping(events)
        self.function = worker.function.function
        #: Whether the mapping is shared with the publisher (one stream reader).
        self.shared = publisher is not None
        #: The worker's own mapping's on-failure queue: its destination with two readers; with
        #: one, kept with what the two-reader layout sent there (alarmed while it holds any).
        self.failure_queue: sqs.Queue = stream_failure_queue(
            self,
            "Failures",
            what="worker",
            key=key,
            reason=None if publisher is None else KEPT_QUEUE_REASON,
        )
        self.event_source_mapping = subscribe(
            self,
            "Mapping",
            function=worker.function,
            table=table,
            mapping=self.mapping,
            failure_queue=None if publisher is not None else self.failure_queue,
            failure_bucket=publisher.failure_bucket if publisher is not None else None,
        )
