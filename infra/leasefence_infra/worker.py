"""The optional worker function of a ``LeaseFenceService``: its role, its schedule, its queues.
Its stream trigger (stream dispatch) is :mod:`leasefence_infra.dispatch`.

Cross-tenant by design: one fleet claims for every tenant in ``WorkerProps.tenants``, and its
role is not narrowed per tenant (no ``dynamodb:LeadingKeys``): which tenants it serves is decided
by its configuration, not by IAM. See ``infra/README.md`` ("Worker"). Props and their checks:
:mod:`leasefence_infra.worker_props`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .environment import WORKER_DISPATCH_ENV
from .function import FunctionRuntime, ServiceFunction
from .invocation import ScheduledInvocation, failure_queue
from .nag import acknowledge, finding_resource
from .storage import Storage
from .worker_props import WORKER_HANDLER, WorkerProps

#: The operations table: read an operation (claim by id, the post-transaction read), fenced
#: conditional updates (claim, heartbeat, complete/fail/unknown/quarantine, due-entry repair)
#: and condition checks inside a class A transaction. Query only for a command by id of a tenant
#: whose write shard layout is not recorded yet (a tenant of a deployment upgraded from before
#: the record): one query of its bare partition, one item (``leasefence.engine._layout``), whose
#: answer the record (an UpdateItem) then keeps. No PutItem (it never creates operations), no
#: DeleteItem, no Scan.
WORKER_TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:Query",
)
#: Claims: Query the listed tenants' ``due`` shards. Never the ``sweep`` index.
WORKER_DUE_INDEX_ACTIONS = ("dynamodb:Query",)
#: Inline payloads, read-only (a job never runs as if it had none: a missing payload is an error).
WORKER_BUCKET_ACTIONS = ("s3:GetObject",)
#: ListBucket only so that S3 answers GetObject on a missing object with 404 NoSuchKey (the job
#: is quarantined: ``payload_missing``) instead of 403 AccessDenied, which the runtime treats as
#: a misconfiguration (``PayloadAccessDenied``: alarmed, the job left to be retried). Object keys
#: are keyed hashes, so a listing reveals no ids.
WORKER_BUCKET_LIST_ACTIONS = ("s3:ListBucket",)
#: Class A business tables: the items of ``Job.complete_with``'s ``TransactWriteItems`` (IAM
#: authorizes each item by its own action; there is no TransactWriteItems action).
WORKER_BUSINESS_TABLE_ACTIONS = (
    "dynamodb:ConditionCheckItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
)
#: Class B target tables (``leasefence.targets.fenced_table``): fenced updates and reads.
WORKER_FENCED_TABLE_ACTIONS = ("dynamodb:UpdateItem", "dynamodb:GetItem")


class Worker(Construct):
    """``Function`` running your handlers for the listed tenants, its on-failure queue
    ``Failures`` and its ``Schedule`` (each tick starts one drain).

    ``handlers_layer``: the layer holding ``props.code`` (created by the service, so that it
    merges before the core and Powertools layers).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: WorkerProps,
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
        handlers_layer: lambda_.ILayerVersion | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.props = props
        worker_environment = {
            **environment,
            "LEASEFENCE_WORKER_HANDLERS": props.handlers,
            "LEASEFENCE_WORKER_TENANTS": ",".join(props.tenants),
            "LEASEFENCE_WORKER_LEASE_SECONDS": str(props.lease_seconds),
            **(
                {WORKER_DISPATCH_ENV: props.stream_dispatch}
                if props.stream_dispatch != "run"
                else {}
            ),
            **props.environment,
        }
        layers: Sequence[lambda_.ILayerVersion] = runtime.layers
        if handlers_layer is not None:
            # Lambda merges layers in order, a later layer's file replacing an earlier one's:
            # this one goes first so that the core and Powertools layers win any clash.
            layers = (handlers_layer, *layers)
        # An invocation that failed is not retried by Lambda: the next tick drains again; the
        # failed one lands in its own queue (with an alarm).
        self.failure_queue = failure_queue(
            self, "Failures", what="worker", key=storage.encryption_key
        )
        self.function = ServiceFunction(
            self,
            "Function",
            runtime=runtime,
            handler=WORKER_HANDLER,
            description=f"leasefence worker: runs {props.module} jobs for {len(props.tenants)} tenant(s)",
            environment=worker_environment,
            memory_mb=props.memory_mb,
            timeout=props.timeout_or_default,
            layers=layers,
            retry_attempts=0,
            max_event_age=Duration.minutes(1),
            on_failure=self.failure_queue,
            reserved_concurrency=props.max_concurrency,
        )
        role = self.function.role
        storage.grant_table(
            role, WORKER_TABLE_ACTIONS, [storage.table.table_arn], sid="OperationItems"
        )
        storage.grant_table(
            role, WORKER_DUE_INDEX_ACTIONS, [storage.due_index_arn], sid="ClaimFromDueShards"
        )
        storage.grant_payload_objects(
            role,
            "PayloadRead",
            WORKER_BUCKET_ACTIONS,
            "the worker reads the inline payloads of the jobs it claims.",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PayloadMissingIs404",
                actions=list(WORKER_BUCKET_LIST_ACTIONS),
                resources=[storage.payload_bucket.bucket_arn],
                # No s3:prefix condition: a GetObject carries no prefix key, so a conditioned
                # grant would not count and S3 would still answer 403.
            )
        )
        storage.log_hash_key.grant_read(role)
        if props.business_tables:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="BusinessTablesTransactItems",
                    actions=list(WORKER_BUSINESS_TABLE_ACTIONS),
                    resources=[t.table_arn for t in props.business_tables],
                )
            )
        if props.fenced_tables:
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="FencedTargetTables",
                    actions=list(WORKER_FENCED_TABLE_ACTIONS),
                    resources=[t.table_arn for t in props.fenced_tables],
                )
            )
        table_keys = [
            t.encryption_key
            for t in (*props.business_tables, *props.fenced_tables)
            if t.encryption_key is not None
        ]
        storage.grant_data_keys(role, extra_keys=table_keys)
        if props.stream_dispatch == "invoke":
            # Its own asynchronous invocations run the claims its stream batches hand over. A
            # policy of its own, not the role's default one: the function depends on that one,
            # so naming the function's ARN there would be a cycle.
            arn = self.function.function.function_arn
            hand_off = iam.Policy(
                self,
                "HandOff",
                roles=[role],
                statements=[
                    iam.PolicyStatement(
                        sid="HandClaimsToItself",
                        actions=["lambda:InvokeFunction"],
                        resources=[arn, f"{arn}:*"],
                    )
                ],
            )
            acknowledge(
                hand_off,
                "AwsSolutions-IAM5",
                "The worker hands claims to asynchronous invocations of the version it runs "
                "(stream_dispatch='invoke'; a published version under SnapStart): "
                "lambda:InvokeFunction on this one function, any of its versions.",
                applies_to=[finding_resource(hand_off, f"{arn}:*")],
            )
        self.schedule = ScheduledInvocation(
            self,
            "Schedule",
            function=self.function.target,
            what="worker",
            description=f"leasefence worker: drain claims for {len(props.tenants)} tenant(s)",
            expression=props.schedule_or_default,
            key=storage.encryption_key,
        )
