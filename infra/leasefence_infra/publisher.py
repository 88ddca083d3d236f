"""The publisher: each operation's history and the outcome events, both from the table's stream.

The publisher function (``functions/publisher``) reads every transition (and every deletion of an
operation item) through its event source mapping (:func:`leasefence.streams.mappings.publisher`:
batch 100, no batching window, parallelization 4, 10 retries, bisected, then its on-failure
queue), appends the history entry next to the operation (idempotent by ``seq``) and publishes the
outcome events an upstream service cares about to the EventBridge bus: the one you bring
(``event_bus``) or one it creates. Event schema: ``docs/events/operation-event.v1.schema.json``.

A function rather than EventBridge Pipes: history needs a conditional write per record anyway, and
one reader of the stream does both (DynamoDB Streams serves two readers per shard without
throttling: this one and the worker's), in the order of each operation's writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_events as events
from constructs import Construct

from leasefence.streams import mappings

from .environment import PUBLISHER_ENV
from .function import FunctionRuntime, ServiceFunction
from .storage import Storage
from .stream import stream_failure_queue, subscribe

PUBLISHER_HANDLER = "publisher.handler.lambda_handler"
#: History items (one per operation, next to it in the table): the first entry (put), appends and
#: compaction (conditional updates), removal with the operation. No reads: a stream record carries
#: both images, and a refused condition returns the item it was checked against.
PUBLISHER_TABLE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
#: A batch of 100 records is about 200 small requests: seconds, with room for EventBridge retries.
PUBLISHER_TIMEOUT = Duration.seconds(60)
PUBLISHER_MEMORY_MB = 256


class Publisher(Construct):
    """``Function`` (its own role), its stream ``Mapping`` and on-failure queue ``Failures``, and
    the ``Bus`` unless one is brought (``event_bus``)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
        event_bus: events.IEventBus | None,
    ) -> None:
        super().__init__(scope, construct_id)
        #: Where outcome events go (created, or the one you brought).
        self.event_bus: events.IEventBus = event_bus or events.EventBus(
            self, "Bus", description="leasefence outcome events (source leasefence)"
        )
        self.mapping = mappings.publisher()
        self.failure_queue = stream_failure_queue(
            self, "Failures", what="publisher", key=storage.encryption_key
        )
        self.function = ServiceFunction(
            self,
            "Function",
            runtime=runtime,
            handler=PUBLISHER_HANDLER,
            description="leasefence publisher: history and outcome events from the table's stream",
            # An ARN reaches a bus in another account too (PutEvents takes a name or an ARN).
            environment={**environment, PUBLISHER_ENV[0]: self.event_bus.event_bus_arn},
            memory_mb=PUBLISHER_MEMORY_MB,
            timeout=PUBLISHER_TIMEOUT,
        )
        role = self.function.role
        storage.grant_table(
            role, PUBLISHER_TABLE_ACTIONS, [storage.table.table_arn], sid="HistoryItems"
        )
        self.event_bus.grant_put_events_to(role)
        storage.log_hash_key.grant_read(role)
        storage.grant_table_key(role)
        self.event_source_mapping = subscribe(
            self,
            "Mapping",
            function=self.function,
            table=storage.table,
            mapping=self.mapping,
            failure_queue=self.failure_queue,
        )
