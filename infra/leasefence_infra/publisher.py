"""The publisher: each operation's history and the outcome events, both from the table's stream.

The publisher function (``functions/publisher``) reads every transition (and every deletion of an
operation item) through its event source mapping (:func:`leasefence.streams.mappings.publisher`:
starting at ``TRIM_HORIZON``, batch 100, no batching window, parallelization 4, 10 retries,
bisected, then its on-failure bucket), records the history entry next to the operation (placed by
``seq``: idempotent, a late one inserted) and publishes the outcome events an upstream service
cares about to the EventBridge bus: the one you bring (``event_bus``) or one it creates. Event
schema: ``docs/events/operation-event.v1.schema.json``.

A batch the mapping gives up on after its retries is kept whole: the on-failure destination is an
S3 bucket (``FailedBatches``), where Lambda writes the invocation record with the records
themselves (an SQS destination would get only their shard and sequence numbers, and the stream
drops the records after 24 hours). Each write is alarmed (S3 request metrics, ``PutRequests``);
``leasefence publisher redrive --bucket <PublisherFailuresBucketName>`` replays and deletes them.

A function rather than EventBridge Pipes: the detail-type depends on both images, history
compaction needs a conditional write, and one reader of the stream does both, in the order of
each operation's writes. DynamoDB Streams serves two readers per shard without throttling: with a
worker, the publisher's work is done by the worker function in the one mapping it shares with
stream dispatch (``function``: :func:`leasefence.streams.mappings.shared`,
:mod:`leasefence.worker.stream_router`), which keeps the records it could not publish in this same
bucket; no publisher function is created, and the second reader is the adopter's.

Outcome events are optional (``events``, off by default): without them no bus is created or
granted and ``LEASEFENCE_EVENT_BUS`` is not set, and the mapping's filter passes only the records
of operations enqueued before the history moved into the item (whose history item the function
still keeps): an operation's end invokes nothing. A history in the item is bounded by its own
writers (:func:`leasefence.history.make_room`) and, with events, compacted sooner by the function.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from leasefence.streams import mappings

from .environment import PUBLISHER_ENV, SHARED_PUBLISHER_ENV
from .function import FunctionRuntime, ServiceFunction
from .storage import Storage
from .stream import failed_batches_metric, stream_failure_bucket, subscribe

PUBLISHER_HANDLER = "publisher.handler.lambda_handler"
#: Compaction of the history in an operation's item (a conditional update), and the history items
#: of operations enqueued before the history moved into the item (one per operation, next to it:
#: the first entry (put), appends and compaction (conditional updates), removal with the
#: operation). No reads: a stream record carries both images, and a refused condition returns the
#: item it was checked against.
PUBLISHER_TABLE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
#: A batch of 100 records is about 200 small requests: seconds, with room for EventBridge retries.
PUBLISHER_TIMEOUT = Duration.seconds(60)
PUBLISHER_MEMORY_MB = 256


class Publisher(Construct):
    """``Function`` (its own role) and its stream ``Mapping``, or the worker's function (shared);
    the on-failure bucket ``FailedBatches``; with ``events``, the ``Bus`` unless one is brought
    (``event_bus``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
        events_on: bool,
        event_bus: events.IEventBus | None,
        access_logs: s3.IBucket | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        function: ServiceFunction | None = None,
    ) -> None:
        """``function``: the function that publishes from a mapping it shares (the worker's:
        granted what publishing needs; its mapping is the caller's); None: a function and a
        mapping of the publisher's own."""
        super().__init__(scope, construct_id)
        #: Where outcome events go (created, or the one you brought); None: no events.
        self.event_bus: events.IEventBus | None = None
        if events_on:
            self.event_bus = event_bus or events.EventBus(
                self, "Bus", description="leasefence outcome events (source leasefence)"
            )
        self.mapping = mappings.publisher(events=events_on)
        #: The mapping's on-failure destination: batches given up on, kept whole until redriven.
        self.failure_bucket = stream_failure_bucket(
            self,
            "FailedBatches",
            what="publisher",
            key=storage.encryption_key,
            access_logs=access_logs,
            removal_policy=removal_policy,
        )
        # An ARN reaches a bus in another account too (PutEvents takes a name or an ARN).
        bus_environment = {PUBLISHER_ENV[0]: self.event_bus.event_bus_arn} if self.event_bus else {}
        #: Whether the function is shared (the worker's) rather than the publisher's own.
        self.shared = function is not None
        if function is None:
            self.function = ServiceFunction(
                self,
                "Function",
                runtime=runtime,
                handler=PUBLISHER_HANDLER,
                description="leasefence publisher: history and outcome events from the table's stream",
                environment={**environment, **bus_environment},
                memory_mb=PUBLISHER_MEMORY_MB,
                timeout=PUBLISHER_TIMEOUT,
            )
        else:
            self.function = function
            #: The log group of the publisher function of earlier releases, kept in place: it is
            #: retained (an upgrade must delete no retained resource, and a stack policy from
            #: ``leasefence_infra.stateful`` forbids it) and holds that function's logs.
            self.legacy_log_group = logs.LogGroup(
                Construct(self, "Function"),
                "Logs",
                retention=runtime.log_retention,
                removal_policy=runtime.removal_policy,
            )
            for name, value in {
                **bus_environment,
                SHARED_PUBLISHER_ENV: self.failure_bucket.bucket_name,
            }.items():
                function.function.add_environment(name, value)
        role = self.function.role
        storage.grant_table(
            role, PUBLISHER_TABLE_ACTIONS, [storage.table.table_arn], sid="HistoryItems"
        )
        if self.event_bus is not None:
            self.event_bus.grant_put_events_to(role)
        storage.log_hash_key.grant_read(role)
        storage.grant_table_key(role)
        #: The publisher's own mapping; None when it shares the worker's (``StreamDispatch``).
        self.event_source_mapping: lambda_.EventSourceMapping | None = None
        if function is None:
            self.event_source_mapping = subscribe(
                self,
                "Mapping",
                function=self.function,
                table=storage.table,
                mapping=self.mapping,
                failure_bucket=self.failure_bucket,
            )

    def metric_failed_batches(self, period: Duration, label: str | None = None) -> cw.Metric:
        """Batches the mapping gave up on after its retries (objects written to its bucket)."""
        return failed_batches_metric(self.failure_bucket, period, label)
