"""How the operations table's stream invokes a function: one event source mapping per
:class:`leasefence.streams.mappings.StreamMapping` (the settings and filter the local stack runs
too), with its own on-failure queue.

Every mapping starts at the stream's tip (``LATEST``), answers with partial batch responses,
bisects a failing batch and, after its retries, sends what still fails (the shard, the sequence
numbers: never the records) to its queue, which is alarmed. A poison record so never blocks the
records behind it in its shard.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from leasefence.streams.filters import filter_criteria
from leasefence.streams.mappings import StreamMapping

from .function import ServiceFunction
from .invocation import dead_letter_queue
from .nag import acknowledge

#: A table the service cannot use without its stream; synthesis stops with this one sentence.
NO_STREAM_MESSAGE = (
    "table has no stream, which stream dispatch, history and outcome events read: create it with "
    "LeaseFenceTable (new and old images), or import it with Table.from_table_attributes("
    "table_stream_arn=...) of a stream with NEW_AND_OLD_IMAGES."
)


def stream_failure_queue(
    scope: Construct, construct_id: str, *, what: str, key: kms.IKey | None
) -> sqs.Queue:
    """The on-failure destination of a stream mapping (encrypted, TLS only, 14 days)."""
    return dead_letter_queue(
        scope,
        construct_id,
        key=key,
        reason=f"This queue is itself the on-failure destination of the {what} function's stream "
        "event source mapping (records that failed every retry; cdk-nag does not see a mapping's "
        "DestinationConfig as a redrive policy); it has its own alarm.",
    )


def subscribe(
    scope: Construct,
    construct_id: str,
    *,
    function: ServiceFunction,
    table: dynamodb.ITable,
    mapping: StreamMapping,
    failure_queue: sqs.IQueue,
) -> lambda_.EventSourceMapping:
    """The event source mapping of ``mapping`` from the table's stream to ``function``; grants
    the function's role the stream read (and the on-failure queue, through the mapping)."""
    if table.table_stream_arn is None:
        raise ValueError(NO_STREAM_MESSAGE)
    # DescribeStream/GetRecords/GetShardIterator on this stream, kms:Decrypt on the table's key,
    # and dynamodb:ListStreams, which names no resource.
    table.grant_stream_read(function.role)
    acknowledge(
        function.role,
        "AwsSolutions-IAM5",
        "dynamodb:ListStreams (Table.grant_stream_read) supports no resource-level permissions "
        "and Lambda's event source mapping requires it of the role; every stream read (records, "
        "shard iterators, descriptions) is scoped to this table's stream.",
        applies_to=["Resource::*"],
    )
    return lambda_.EventSourceMapping(
        scope,
        construct_id,
        target=function.target,
        event_source_arn=table.table_stream_arn,
        starting_position=lambda_.StartingPosition.LATEST,
        filters=[{"pattern": f["Pattern"]} for f in filter_criteria(mapping.filters)["Filters"]],
        batch_size=mapping.batch_size,
        max_batching_window=Duration.seconds(mapping.batching_window_s),
        parallelization_factor=mapping.parallelization_factor,
        retry_attempts=mapping.max_retries,
        bisect_batch_on_error=mapping.bisect,
        max_record_age=(
            Duration.seconds(mapping.max_record_age_s) if mapping.max_record_age_s >= 0 else None
        ),
        report_batch_item_failures=True,
        on_failure=event_sources.SqsDlq(failure_queue),
    )
