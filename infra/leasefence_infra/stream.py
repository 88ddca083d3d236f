"""How the operations table's stream invokes a function: one event source mapping per
:class:`leasefence.streams.mappings.StreamMapping` (the settings and filter the local stack runs
too), with its own on-failure destination.

Every mapping starts where its settings say (the worker's, shared or its own, at the stream's
tip, ``LATEST``, so that it is updated in place, never replaced, between one and two readers;
the publisher's at ``TRIM_HORIZON``, so that a mapping created again replays what the stream
holds instead of skipping it), answers with partial batch responses, bisects a failing batch and,
after its retries, sends what still fails to its destination, which is alarmed: an SQS queue
(:func:`stream_failure_queue`: the shard and the sequence numbers, never the records) or an S3
bucket (:func:`stream_failure_bucket`: Lambda writes the invocation record with the whole batch,
kept until it is redriven). A poison record so never blocks the records behind it in its shard.
"""

from __future__ import annotations

import jsii
from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from leasefence.streams.filters import filter_criteria
from leasefence.streams.mappings import FAILED_BATCH_PREFIX, StreamMapping

from .function import ServiceFunction
from .invocation import dead_letter_queue
from .nag import acknowledge, finding_resource

#: The request-metrics filter of an on-failure bucket (``PutRequests``: a batch given up).
FAILED_BATCHES_METRICS_ID = "FailedBatches"

#: A table the service cannot use without its stream; synthesis stops with this one sentence.
NO_STREAM_MESSAGE = (
    "table has no stream, which stream dispatch, history and outcome events read: create it with "
    "LeaseFenceTable (new and old images), or import it with Table.from_table_attributes("
    "table_stream_arn=...) of a stream with NEW_AND_OLD_IMAGES."
)


def stream_failure_queue(
    scope: Construct,
    construct_id: str,
    *,
    what: str,
    key: kms.IKey | None,
    reason: str | None = None,
) -> sqs.Queue:
    """The on-failure destination of a stream mapping (encrypted, TLS only, 14 days);
    ``reason``: cdk-nag's, when the queue is not (or no longer) one."""
    return dead_letter_queue(
        scope,
        construct_id,
        key=key,
        reason=reason
        or f"This queue is itself the on-failure destination of the {what} function's stream "
        "event source mapping (records that failed every retry; cdk-nag does not see a mapping's "
        "DestinationConfig as a redrive policy); it has its own alarm.",
    )


def stream_failure_bucket(
    scope: Construct,
    construct_id: str,
    *,
    what: str,
    key: kms.IKey | None,
    access_logs: s3.IBucket | None,
    removal_policy: RemovalPolicy,
) -> s3.Bucket:
    """The S3 on-failure destination of a stream mapping: encrypted (the service key, or
    S3-managed), private, TLS only, kept (no expiry: its objects are records not yet processed),
    with a request-metrics filter (:data:`FAILED_BATCHES_METRICS_ID`) for its alarm."""
    bucket = s3.Bucket(
        scope,
        construct_id,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        encryption=s3.BucketEncryption.KMS if key else s3.BucketEncryption.S3_MANAGED,
        encryption_key=key,
        bucket_key_enabled=True if key else None,
        lifecycle_rules=[
            s3.LifecycleRule(
                id="abort-incomplete-uploads",
                enabled=True,
                abort_incomplete_multipart_upload_after=Duration.days(1),
            )
        ],
        metrics=[s3.BucketMetrics(id=FAILED_BATCHES_METRICS_ID, prefix=FAILED_BATCH_PREFIX)],
        server_access_logs_bucket=access_logs,
        server_access_logs_prefix=f"leasefence-{what}-failures/" if access_logs else None,
        removal_policy=removal_policy,
    )
    if access_logs is None:
        acknowledge(
            bucket,
            "AwsSolutions-S1",
            f"Only the {what} function's event source mapping writes here (batches it gave up "
            "on, each write alarmed) and only an operator's redrive reads and deletes; no other "
            "principal has access. Pass server_access_logs_bucket to turn S3 server access "
            "logging on.",
        )
    return bucket


def failed_batches_metric(
    bucket: s3.IBucket, period: Duration, label: str | None = None
) -> cw.Metric:
    """Objects written to an on-failure bucket (S3 request metrics, ``PutRequests``): each one is
    a batch the mapping gave up on."""
    return cw.Metric(
        namespace="AWS/S3",
        metric_name="PutRequests",
        dimensions_map={"BucketName": bucket.bucket_name, "FilterId": FAILED_BATCHES_METRICS_ID},
        period=period,
        statistic="Sum",
        label=label,
    )


@jsii.implements(lambda_.IEventSourceDlq)
class S3FailureDestination:
    """An S3 bucket as a stream mapping's on-failure destination, granted exactly what Lambda
    needs on the function's role (``s3:PutObject`` under ``aws/lambda/``, ``s3:ListBucket``, and
    a data key when the bucket has a customer-managed key), not read or delete."""

    def __init__(self, bucket: s3.IBucket, role: iam.IRole) -> None:
        self.bucket = bucket
        self.role = role

    def bind(
        self, _target: lambda_.IEventSourceMapping, _target_handler: lambda_.IFunction
    ) -> lambda_.DlqDestinationConfig:
        objects = self.bucket.arn_for_objects(f"{FAILED_BATCH_PREFIX}*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="FailedBatchesPut", actions=["s3:PutObject"], resources=[objects]
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="FailedBatchesList",
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
            )
        )
        if self.bucket.encryption_key is not None:
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="FailedBatchesDataKey",
                    actions=["kms:GenerateDataKey"],
                    resources=[self.bucket.encryption_key.key_arn],
                )
            )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5",
            "Lambda names each failed batch it writes to the on-failure bucket at run time "
            f"('{FAILED_BATCH_PREFIX}<mapping>/<shard>/<date>/...'): s3:PutObject only, scoped to "
            "that prefix of this one bucket.",
            applies_to=[finding_resource(self.role, objects)],
        )
        return lambda_.DlqDestinationConfig(destination=self.bucket.bucket_arn)


def subscribe(
    scope: Construct,
    construct_id: str,
    *,
    function: ServiceFunction,
    table: dynamodb.ITable,
    mapping: StreamMapping,
    failure_queue: sqs.IQueue | None = None,
    failure_bucket: s3.IBucket | None = None,
) -> lambda_.EventSourceMapping:
    """The event source mapping of ``mapping`` from the table's stream to ``function``; grants
    the function's role the stream read (and the on-failure destination, through the mapping:
    ``failure_bucket`` when the mapping's destination is ``s3``, else ``failure_queue``)."""
    if table.table_stream_arn is None:
        raise ValueError(NO_STREAM_MESSAGE)
    on_failure: lambda_.IEventSourceDlq
    if mapping.failure_destination == "s3":
        if failure_bucket is None:
            raise ValueError(f"the {mapping.function} mapping's on-failure destination is a bucket")
        on_failure = S3FailureDestination(failure_bucket, function.role)
    else:
        if failure_queue is None:
            raise ValueError(f"the {mapping.function} mapping's on-failure destination is a queue")
        on_failure = event_sources.SqsDlq(failure_queue)
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
        starting_position=lambda_.StartingPosition(mapping.starting_position),
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
        on_failure=on_failure,
    )
