"""The sweeper of a ``LeaseFenceService``: every minute it parks expired final-attempt claims as
unknown, deletes payloads that are due, and measures the oldest unknown and due ages.

It is the one cross-tenant path: the ``sweep``, ``parked`` and ``purge`` index partitions are not
per tenant. It may only read those indexes and the ``due`` index, make fenced updates on the
table, and delete payload objects.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from .function import FunctionRuntime, ServiceFunction
from .invocation import ScheduledInvocation, failure_queue
from .storage import Storage

SWEEPER_HANDLER = "sweeper.handler.lambda_handler"
#: The sweeper reads the due part of the ``sweep`` index (and ``parked``, ``purge``, ``due``) and
#: parks items with fenced updates. Once the identity retention is forever it also scans the table
#: (bounded pages, a one-off pass or two) to remove the TTLs that ended identities got before
#: (``Engine.clear_ttls``): it reads nothing it could not already read item by item.
SWEEPER_INDEX_ACTIONS = ("dynamodb:Query",)
#: Query on the table: only for a tenant whose write shard layout is not recorded yet (one query
#: of its bare partition, one item: ``leasefence.engine._layout``), as the worker function.
SWEEPER_TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:UpdateItem",
    "dynamodb:Scan",
    "dynamodb:Query",
)
#: The sweeper deletes payloads that are due (retention after the end, or erasure).
SWEEPER_BUCKET_ACTIONS = ("s3:DeleteObject",)
#: One sweep a minute (its ``SweeperNotRunningAlarm`` waits for twice that).
SWEEPER_SCHEDULE = scheduler.ScheduleExpression.rate(Duration.minutes(1))


class Sweeper(Construct):
    """``Function``, its on-failure queue ``Failures`` and its one-minute ``Schedule``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
        memory_mb: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # Async invocations (the scheduler's) are not retried by Lambda: the next tick sweeps
        # again; a failed invocation lands in this queue, which has its own alarm.
        self.failure_queue = failure_queue(
            self, "Failures", what="sweeper", key=storage.encryption_key
        )
        self.function = ServiceFunction(
            self,
            "Function",
            runtime=runtime,
            handler=SWEEPER_HANDLER,
            description="leasefence sweeper: parks expired final-attempt claims as unknown",
            environment=environment,
            memory_mb=memory_mb,
            timeout=Duration.seconds(50),
            retry_attempts=0,
            max_event_age=Duration.minutes(1),
            on_failure=self.failure_queue,
        )
        role = self.function.role
        # The `parked` index (KEYS_ONLY) measures the oldest unknown operation; `purge` lists
        # payloads due for deletion; the tenants' directories (parked index) and `due`
        # partitions measure the oldest due age per job type.
        for index_arn in (
            storage.sweep_index_arn,
            storage.parked_index_arn,
            storage.purge_index_arn,
            storage.due_index_arn,
        ):
            storage.grant_table(role, SWEEPER_INDEX_ACTIONS, [index_arn])
        storage.grant_table(role, SWEEPER_TABLE_ACTIONS, [storage.table.table_arn])
        storage.grant_payload_objects(
            role,
            "PurgePayloads",
            SWEEPER_BUCKET_ACTIONS,
            "payloads whose retention after their operation's end has passed.",
        )
        storage.grant_data_keys(role)
        storage.log_hash_key.grant_read(role)
        self.schedule = ScheduledInvocation(
            self,
            "Schedule",
            function=self.function.target,
            what="sweeper",
            description="leasefence sweeper: park expired final-attempt claims",
            expression=SWEEPER_SCHEDULE,
            key=storage.encryption_key,
        )
