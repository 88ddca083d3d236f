"""``LeaseFenceService``: the whole leasefence service as one L3 construct.

Drop it into any stack::

    LeaseFenceService(self, "LeaseFence",
                      jwt_issuer="https://idp.example.com/", jwt_audience=["leasefence"])

What it creates (see ``infra/README.md`` for the why):

* the operations table, defined from :mod:`leasefence.schema` (keys, both sparse indexes and their
  INCLUDE projection, TTL attribute) - nothing about the layout is restated here;
* the payload bucket (private, TLS only, encrypted); a payload is deleted by the sweeper
  ``payload_retention_days`` after its operation ended (or at erasure), never while it can run;
* the core layer (``layers/leasefence`` + ``rfc8785``, built locally without Docker) and the
  AWS-managed Powertools layer, resolved at deploy time from its public SSM parameter;
* the API function (every route of the HTTP API) and the sweeper function (EventBridge Scheduler,
  every minute, retries + encrypted dead-letter queue; failed runs are not retried by Lambda and
  go to an alarmed on-failure queue), arm64 / Python 3.12 / X-Ray / own log groups, one log level;
* optionally (``worker=WorkerProps(...)``) the worker function: your job handlers run in process
  against the engine for the tenants you list, started by its own schedule (see
  :mod:`leasefence_infra.worker`);
* the HTTP API: JWT authorizer (your issuer, or a Cognito user pool the construct creates, with
  the pre token generation trigger of ``functions/pretoken`` unless you give your own),
  one authorization scope per route exactly as the public contract lists, ``GET /v1/health`` open,
  JSON access logs, default-stage throttling;
* least-privilege roles (one per function, no managed policies) and, optionally, a tenant-scoped
  role for the API (``tenant_isolation=True``, ``dynamodb:LeadingKeys``);
* a dashboard, alarms and an encrypted SNS topic for them (:attr:`alarm_topic`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import jsii
from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from cdk_nag import NagSuppressions
from constructs import Construct

from ._core import CLAIM_RETRY_BUDGET_MS, PAYLOAD_KEY_PREFIX, STORE_CALL_WORST_S, keys, schema
from .bundling import REPO_ROOT, core_layer_code
from .monitoring import Monitoring
from .versions import powertools_layer_parameter
from .worker import (
    WORKER_BUCKET_ACTIONS,
    WORKER_BUSINESS_TABLE_ACTIONS,
    WORKER_DUE_INDEX_ACTIONS,
    WORKER_FENCED_TABLE_ACTIONS,
    WORKER_HANDLER,
    WORKER_TABLE_ACTIONS,
    WorkerProps,
    validate_worker,
)

# ----------------------------------------------------------------------------- contract

SCOPE_PRODUCE = "leasefence/produce"
SCOPE_WORK = "leasefence/work"
SCOPE_OPERATE = "leasefence/operate"
#: Resource server identifier and scope names of the optional Cognito user pool.
RESOURCE_SERVER_ID = "leasefence"

#: Every route of the public contract (section 4) with the one scope section 2 gives it.
#: ``None``: open route (no authorizer).
ROUTES: tuple[tuple[str, str, str | None], ...] = (
    ("GET", "/v1/health", None),
    ("POST", "/v1/operations", SCOPE_PRODUCE),
    ("GET", "/v1/operations/{id}", SCOPE_PRODUCE),
    ("POST", "/v1/claims", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/heartbeat", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/complete", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/fail", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/unknown", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/quarantine", SCOPE_WORK),
    ("GET", "/v1/operations/{id}/payload", SCOPE_WORK),
    ("GET", "/v1/operations", SCOPE_OPERATE),
    ("POST", "/v1/operations/{id}/resolve", SCOPE_OPERATE),
    ("POST", "/v1/operations/{id}/erase", SCOPE_OPERATE),
)

# ----------------------------------------------------------------------------- least privilege

#: What the API function does to the table: read/create/fenced-update one item, query a tenant's
#: partition (list) and a tenant's ``due`` shards (claim). Nothing else (no Scan, no Delete, no
#: batch, no ``sweep`` index). If the engine starts using TransactWriteItems, add the per-item
#: actions it needs (e.g. ``dynamodb:ConditionCheckItem``) here and in the tests.
API_TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query")
API_DUE_INDEX_ACTIONS = ("dynamodb:Query",)
#: The sweeper reads the due part of the ``sweep`` index and parks items with fenced updates.
SWEEPER_SWEEP_INDEX_ACTIONS = ("dynamodb:Query",)
SWEEPER_TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem")
#: The sweeper deletes payloads that are due (retention after the end, or erasure).
SWEEPER_BUCKET_ACTIONS = ("s3:DeleteObject",)
#: Inline payloads live in the bucket under PAYLOAD_KEY_PREFIX: written on enqueue (conditional
#: put), read by GET .../payload, and an orphan left by an enqueue that lost a race is deleted.
API_BUCKET_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:DeleteObject")
#: ListBucket only so that S3 answers GetObject on a missing object with 404 NoSuchKey instead
#: of 403 AccessDenied (the engine maps the former to "no payload"). Object keys are keyed
#: hashes, so a listing reveals no ids.
API_BUCKET_LIST_ACTIONS = ("s3:ListBucket",)

#: Session tag carrying the caller's tenant when ``tenant_isolation`` is on.
TENANT_TAG = "tenant_id"
TENANT_TAG_VARIABLE = "${aws:PrincipalTag/" + TENANT_TAG + "}"

#: Public SSM parameter naming the AWS-managed Powertools layer (arm64, py3.12) of the locked
#: aws-lambda-powertools version (``versions.py``; ``powertools_layer_parameter("3.x.y")`` for another).
POWERTOOLS_LAYER_PARAMETER = powertools_layer_parameter()

#: The API function's timeout: a claim's whole retry budget (its own retries, then one more store
#: call with the client's retries) fits in it, and it stays within API Gateway's 30 s limit.
API_TIMEOUT_S = 29
assert CLAIM_RETRY_BUDGET_MS / 1000 + STORE_CALL_WORST_S <= API_TIMEOUT_S < 30

SERVICE_NAME = "leasefence"
#: Metrics namespace prefix: the default namespace is ``LeaseFence/<stack name>``, so two
#: deployments in one account (dev, staging) never feed each other's alarms.
METRICS_NAMESPACE = "LeaseFence"
_NAMESPACE_RE = re.compile(r"^[0-9A-Za-z._/#: -]{1,255}$")

#: One ``log_level`` drives Powertools (POWERTOOLS_LOG_LEVEL) and Lambda's JSON log filtering
#: (application and system log level): name -> (Powertools, application, system).
LOG_LEVELS: dict[str, tuple[str, lambda_.ApplicationLogLevel, lambda_.SystemLogLevel]] = {
    "DEBUG": ("DEBUG", lambda_.ApplicationLogLevel.DEBUG, lambda_.SystemLogLevel.DEBUG),
    "INFO": ("INFO", lambda_.ApplicationLogLevel.INFO, lambda_.SystemLogLevel.INFO),
    "WARNING": ("WARNING", lambda_.ApplicationLogLevel.WARN, lambda_.SystemLogLevel.WARN),
    "WARN": ("WARNING", lambda_.ApplicationLogLevel.WARN, lambda_.SystemLogLevel.WARN),
    "ERROR": ("ERROR", lambda_.ApplicationLogLevel.ERROR, lambda_.SystemLogLevel.WARN),
    "CRITICAL": ("CRITICAL", lambda_.ApplicationLogLevel.FATAL, lambda_.SystemLogLevel.WARN),
}

#: Variables the construct sets on every function, on the API function with tenant isolation,
#: and on the worker only.
SHARED_ENV = (
    "LEASEFENCE_TABLE", "LEASEFENCE_PAYLOAD_BUCKET", "LEASEFENCE_DUE_SHARDS", "LEASEFENCE_SWEEP_SHARDS",
    "LEASEFENCE_LOG_HASH_KEY_PARAM", "LEASEFENCE_IDENTITY_RETENTION_DAYS", "LEASEFENCE_PAYLOAD_RETENTION_DAYS",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL", "POWERTOOLS_TRACER_CAPTURE_RESPONSE",
)
TENANT_ENV = ("LEASEFENCE_TENANT_ROLE_ARN", "LEASEFENCE_TENANT_SESSION_TAG")
WORKER_ENV = ("LEASEFENCE_WORKER_HANDLERS", "LEASEFENCE_WORKER_TENANTS", "LEASEFENCE_WORKER_LEASE_SECONDS")

FUNCTIONS_DIR = REPO_ROOT / "functions"
API_HANDLER = "api.handler.lambda_handler"
SWEEPER_HANDLER = "sweeper.handler.lambda_handler"
#: The pre token generation trigger shipped with the user pool (``functions/pretoken``).
PRETOKEN_HANDLER = "pretoken.handler.lambda_handler"

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}

_ACCESS_LOG_FORMAT = json.dumps(
    {
        # Route *templates* only, never the path: the path holds operation ids, which the
        # service keeps out of logs (ids are logged as keyed hashes by the functions).
        "requestId": "$context.requestId",
        "requestTime": "$context.requestTime",
        "routeKey": "$context.routeKey",
        "status": "$context.status",
        "protocol": "$context.protocol",
        "responseLength": "$context.responseLength",
        "responseLatencyMs": "$context.responseLatency",
        "integrationLatencyMs": "$context.integrationLatency",
        "integrationStatus": "$context.integrationStatus",
        "integrationError": "$context.integrationErrorMessage",
        "authorizerError": "$context.authorizer.error",
        "sourceIp": "$context.identity.sourceIp",
        "userAgent": "$context.identity.userAgent",
    },
    separators=(",", ":"),
)


def _attribute(name: str) -> dynamodb.Attribute:
    types = {d["AttributeName"]: d["AttributeType"] for d in schema.attribute_definitions()}
    return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[types[name]])


def _key_names(key_schema: Sequence[Mapping[str, str]]) -> tuple[str, str | None]:
    by_type = {k["KeyType"]: k["AttributeName"] for k in key_schema}
    return by_type["HASH"], by_type.get("RANGE")


def _ack(construct: Construct, rule: str, reason: str, applies_to: Sequence[str] | None = None,
         children: bool = True) -> None:
    """One cdk-nag acknowledgment, always with its reason."""
    suppression: dict[str, object] = {"id": rule, "reason": reason}
    if applies_to:
        suppression["appliesTo"] = list(applies_to)
    NagSuppressions.add_resource_suppressions(construct, [suppression], apply_to_children=children)


def _ack_kms_grant(role: iam.IRole) -> None:
    _ack(
        role,
        "AwsSolutions-IAM5",
        "Key.grant_encrypt_decrypt on the one customer-managed key of this service (resource is "
        "that key's ARN): DynamoDB, S3 (SSE-KMS) and Secrets Manager need data-key generation "
        "and re-encryption on it.",
        applies_to=["Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"],
    )


class LeaseFenceService(Construct):
    """The leasefence service: table, bucket, functions, HTTP API, schedule, monitoring.

    Authentication: give ``jwt_issuer`` and ``jwt_audience`` of your identity provider, or
    ``create_user_pool=True`` to get a Cognito user pool (resource server ``leasefence`` with the
    scopes ``produce``, ``work``, ``operate``). Tokens must carry a ``tenant_id`` claim and a
    space-separated ``scope`` claim (see ``infra/README.md``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        # --- authentication
        jwt_issuer: str | None = None,
        jwt_audience: Sequence[str] | None = None,
        create_user_pool: bool = False,
        user_pool_domain_prefix: str | None = None,
        pre_token_generation: lambda_.IFunction | None = None,
        client_tenants: Mapping[str, str] | None = None,
        # --- data
        table_name: str | None = None,
        due_shards: int = schema.DEFAULT_DUE_SHARDS,
        sweep_shards: int = schema.DEFAULT_SWEEP_SHARDS,
        identity_retention_days: int | None = 400,
        payload_retention_days: int = 30,
        deletion_protection: bool = True,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        encryption_key: kms.IKey | None = None,
        create_encryption_key: bool = False,
        server_access_logs_bucket: s3.IBucket | None = None,
        # --- compute
        tenant_isolation: bool = False,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        log_level: str = "INFO",
        metrics_namespace: str | None = None,
        api_memory_mb: int = 1024,
        sweeper_memory_mb: int = 512,
        core_layer: lambda_.Code | None = None,
        functions_dir: str | Path = FUNCTIONS_DIR,
        worker: WorkerProps | None = None,
        # --- API
        throttling_rate_limit: float = 100,
        throttling_burst_limit: int = 200,
        # --- operations
        oldest_unknown_alarm_age: Duration | None = None,
        oldest_due_alarm_age: Duration | None = None,
        quarantine_alarm_threshold: int = 5,
        takeover_alarm_percent: float = 20,
        stale_fence_alarm_threshold: int = 25,
        api_5xx_alarm_threshold: int = 5,
    ) -> None:
        super().__init__(scope, construct_id)
        self._validate(
            jwt_issuer, jwt_audience, create_user_pool, user_pool_domain_prefix, pre_token_generation,
            due_shards, sweep_shards, identity_retention_days, payload_retention_days, encryption_key,
            create_encryption_key,
        )
        functions_path = Path(functions_dir)
        if not functions_path.is_dir():
            raise FileNotFoundError(f"functions directory not found: {functions_path}")
        if client_tenants and (not create_user_pool or pre_token_generation is not None):
            raise ValueError("client_tenants configures the shipped pre token generation trigger: it "
                             "needs create_user_pool=True and no pre_token_generation of your own")
        if worker is not None:
            validate_worker(worker, functions_path, reserved_env=[*SHARED_ENV, *WORKER_ENV, *TENANT_ENV])
        stack = Stack.of(self)
        level = str(log_level).upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {sorted(LOG_LEVELS)}, got {log_level!r}")
        self.log_level = level
        if metrics_namespace is None:
            metrics_namespace = f"{METRICS_NAMESPACE}/{stack.stack_name}"
        if not _NAMESPACE_RE.match(metrics_namespace) or metrics_namespace.startswith("AWS/"):
            raise ValueError(f"metrics_namespace {metrics_namespace!r} is not a CloudWatch namespace "
                             "(1-255 of A-Z a-z 0-9 . - _ / # : space, not starting with AWS/)")
        #: The EMF namespace of every function, alarm and dashboard widget of this service.
        self.metrics_namespace = metrics_namespace
        self.identity_retention_days = identity_retention_days
        self.payload_retention_days = payload_retention_days
        self.spec = schema.TableSpec(due_shards=due_shards, sweep_shards=sweep_shards)

        # ------------------------------------------------------------------ encryption key
        self.encryption_key: kms.IKey | None = encryption_key
        if create_encryption_key:
            self.encryption_key = kms.Key(
                self,
                "Key",
                description="leasefence: table, payload bucket, secret, queues and alarm topic",
                enable_key_rotation=True,
                removal_policy=removal_policy,
            )

        # ------------------------------------------------------------------ table
        table_pk, table_sk = _key_names(schema.key_schema())
        self.table = dynamodb.Table(
            self,
            "Table",
            table_name=table_name,
            partition_key=_attribute(table_pk),
            sort_key=_attribute(table_sk) if table_sk else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            encryption=(
                dynamodb.TableEncryption.CUSTOMER_MANAGED
                if self.encryption_key
                else dynamodb.TableEncryption.DEFAULT  # AWS-owned key
            ),
            encryption_key=self.encryption_key,
            time_to_live_attribute=schema.TTL_ATTRIBUTE,
            removal_policy=removal_policy,
        )
        for gsi in schema.global_secondary_indexes():
            pk, sk = _key_names(gsi["KeySchema"])
            projection = gsi["Projection"]
            if projection["ProjectionType"] == "INCLUDE":
                extra = {"projection_type": dynamodb.ProjectionType.INCLUDE,
                         "non_key_attributes": list(projection["NonKeyAttributes"])}
            elif projection["ProjectionType"] == "KEYS_ONLY":
                extra = {"projection_type": dynamodb.ProjectionType.KEYS_ONLY}
            else:  # pragma: no cover - schema guard
                raise ValueError(f"unexpected projection for {gsi['IndexName']}: {projection}")
            self.table.add_global_secondary_index(
                index_name=gsi["IndexName"],
                partition_key=_attribute(pk),
                sort_key=_attribute(sk) if sk else None,
                **extra,
            )
        self.due_index_arn = f"{self.table.table_arn}/index/{schema.DUE_INDEX}"
        self.sweep_index_arn = f"{self.table.table_arn}/index/{schema.SWEEP_INDEX}"
        self.parked_index_arn = f"{self.table.table_arn}/index/{schema.PARKED_INDEX}"
        self.purge_index_arn = f"{self.table.table_arn}/index/{schema.PURGE_INDEX}"

        # ------------------------------------------------------------------ payload bucket
        self.payload_bucket = s3.Bucket(
            self,
            "PayloadBucket",
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            encryption=s3.BucketEncryption.KMS if self.encryption_key else s3.BucketEncryption.S3_MANAGED,
            encryption_key=self.encryption_key,
            bucket_key_enabled=True if self.encryption_key else None,
            # No age-based expiry: an object's life follows its operation's (the sweeper deletes
            # it payload_retention_days after the operation ended), so a backlog, a long retry
            # delay or a parked operation never loses its input.
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="abort-incomplete-uploads",
                    enabled=True,
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            server_access_logs_bucket=server_access_logs_bucket,
            server_access_logs_prefix="leasefence-payloads/" if server_access_logs_bucket else None,
            removal_policy=removal_policy,
        )
        if server_access_logs_bucket is None:
            _ack(
                self.payload_bucket,
                "AwsSolutions-S1",
                "Payload objects are written and read only by the API function, whose every request "
                "is in the API access log and X-Ray, and read by the worker function (when deployed, "
                "in X-Ray); no other principal has access. Pass server_access_logs_bucket to turn "
                "S3 server access logging on.",
            )

        # ------------------------------------------------------------------ log-hash secret
        self.log_hash_key = secretsmanager.Secret(
            self,
            "LogHashKey",
            description="leasefence: HMAC key for keyed hashes of ids in logs and metrics",
            encryption_key=self.encryption_key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False
            ),
            removal_policy=removal_policy,
        )
        _ack(
            self.log_hash_key,
            "AwsSolutions-SMG4",
            "Not a credential: the key pseudonymizes ids in logs. Rotating it would only break "
            "the correlation of log lines across the rotation; it grants no access to anything.",
        )

        # ------------------------------------------------------------------ layers
        self.core_layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=core_layer or core_layer_code(),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description="leasefence core package + rfc8785 (python3.12, arm64)",
        )
        self.powertools_layer = lambda_.LayerVersion.from_layer_version_arn(
            self,
            "PowertoolsLayer",
            ssm.StringParameter.value_for_string_parameter(self, POWERTOOLS_LAYER_PARAMETER),
        )

        # ------------------------------------------------------------------ functions
        self._functions_code = lambda_.Code.from_asset(
            str(functions_path), exclude=["**/__pycache__", "**/*.pyc", "**/tests"]
        )
        environment = {
            "LEASEFENCE_TABLE": self.table.table_name,
            "LEASEFENCE_PAYLOAD_BUCKET": self.payload_bucket.bucket_name,
            "LEASEFENCE_DUE_SHARDS": str(due_shards),
            "LEASEFENCE_SWEEP_SHARDS": str(sweep_shards),
            # A Secrets Manager secret ARN (a valid SecretId for GetSecretValue / Powertools
            # parameters.get_secret): the functions read it once per cold start.
            "LEASEFENCE_LOG_HASH_KEY_PARAM": self.log_hash_key.secret_arn,
            "LEASEFENCE_IDENTITY_RETENTION_DAYS": (
                "forever" if identity_retention_days is None else str(identity_retention_days)
            ),
            "LEASEFENCE_PAYLOAD_RETENTION_DAYS": str(payload_retention_days),
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
            "POWERTOOLS_LOG_LEVEL": LOG_LEVELS[level][0],
            # Traces must not carry payloads or ids in responses.
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
        }
        assert set(environment) == set(SHARED_ENV)
        self.api_log_group = self._log_group("ApiFunctionLogs", log_retention, removal_policy)
        self.sweeper_log_group = self._log_group("SweeperFunctionLogs", log_retention, removal_policy)
        self.api_role = self._role("ApiFunctionRole", "leasefence API function", self.api_log_group)
        self.sweeper_role = self._role("SweeperFunctionRole", "leasefence sweeper function",
                                       self.sweeper_log_group)

        self.tenant_role: iam.Role | None = None
        api_environment = dict(environment)
        if tenant_isolation:
            self.tenant_role = self._tenant_role()
            api_environment["LEASEFENCE_TENANT_ROLE_ARN"] = self.tenant_role.role_arn
            api_environment["LEASEFENCE_TENANT_SESSION_TAG"] = TENANT_TAG
        else:
            # Tenant scoping without isolation: the handler takes the tenant only from the
            # verified JWT claim (requestContext.authorizer.jwt.claims.tenant_id) and every key
            # it builds starts with it; IAM confines the function to this table, its `due` index
            # and the four actions, not to one tenant's partition. See infra/README.md.
            self._grant_table(self.api_role, API_TABLE_ACTIONS, [self.table.table_arn])
            self._grant_table(self.api_role, API_DUE_INDEX_ACTIONS, [self.due_index_arn])
        self.api_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PayloadObjects",
                actions=list(API_BUCKET_ACTIONS),
                resources=[self.payload_bucket.arn_for_objects(f"{PAYLOAD_KEY_PREFIX}*")],
            )
        )
        self.api_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PayloadMissingIs404",
                actions=list(API_BUCKET_LIST_ACTIONS),
                resources=[self.payload_bucket.bucket_arn],
                # No s3:prefix condition: a GetObject carries no prefix key, so a conditioned
                # grant would not count and S3 would still answer 403.
            )
        )
        if self.encryption_key:
            self.encryption_key.grant_encrypt_decrypt(self.api_role)
        # The sweeper is the one cross-tenant path: the `sweep` and `parked` index partitions are
        # not per tenant. It may only read those indexes (the parked one, KEYS_ONLY, to measure
        # the age of the oldest unknown operation) and make fenced updates on the table.
        # It also reads the `purge` index (payloads due for deletion) and, to measure the oldest
        # due age per job type, the tenants' directories (parked index) and `due` partitions.
        self._grant_table(self.sweeper_role, SWEEPER_SWEEP_INDEX_ACTIONS, [self.sweep_index_arn])
        self._grant_table(self.sweeper_role, SWEEPER_SWEEP_INDEX_ACTIONS, [self.parked_index_arn])
        self._grant_table(self.sweeper_role, SWEEPER_SWEEP_INDEX_ACTIONS, [self.purge_index_arn])
        self._grant_table(self.sweeper_role, SWEEPER_SWEEP_INDEX_ACTIONS, [self.due_index_arn])
        self._grant_table(self.sweeper_role, SWEEPER_TABLE_ACTIONS, [self.table.table_arn])
        self.sweeper_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PurgePayloads",
                actions=list(SWEEPER_BUCKET_ACTIONS),
                resources=[self.payload_bucket.arn_for_objects(f"{PAYLOAD_KEY_PREFIX}*")],
            )
        )
        _ack(
            self.sweeper_role,
            "AwsSolutions-IAM5",
            "Payload object keys are created per operation at run time (keyed hashes under "
            f"'{PAYLOAD_KEY_PREFIX}'); the sweeper may only s3:DeleteObject under that prefix of this "
            "bucket, to delete payloads whose retention after their operation's end has passed.",
            applies_to=[
                f"Resource::<{Stack.of(self).get_logical_id(self.payload_bucket.node.default_child)}.Arn>/"
                f"{PAYLOAD_KEY_PREFIX}*"
            ],
        )
        if self.encryption_key:
            self.encryption_key.grant_encrypt_decrypt(self.sweeper_role)
        self.log_hash_key.grant_read(self.api_role)
        self.log_hash_key.grant_read(self.sweeper_role)

        # Async invocations (the scheduler's) are not retried by Lambda: the next tick sweeps
        # again; a failed invocation lands in this queue, which has its own alarm.
        self.sweeper_failure_queue = self._failure_queue("SweeperFailures", "sweeper")
        self.api_function = self._function(
            "ApiFunction",
            handler=API_HANDLER,
            description="leasefence HTTP API (all routes)",
            role=self.api_role,
            log_group=self.api_log_group,
            environment=api_environment,
            memory_mb=api_memory_mb,
            timeout=Duration.seconds(API_TIMEOUT_S),
        )
        self.sweeper_function = self._function(
            "SweeperFunction",
            handler=SWEEPER_HANDLER,
            description="leasefence sweeper: parks expired final-attempt claims as unknown",
            role=self.sweeper_role,
            log_group=self.sweeper_log_group,
            environment=environment,
            memory_mb=sweeper_memory_mb,
            timeout=Duration.seconds(50),
            retry_attempts=0,
            max_event_age=Duration.minutes(1),
            on_failure=self.sweeper_failure_queue,
        )
        for role in (self.api_role, self.sweeper_role):
            _ack(
                role,
                "AwsSolutions-IAM5",
                "X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) support no "
                "resource-level permissions; AWS documents Resource '*' for them.",
                applies_to=["Resource::*"],
            )
        _ack(
            self.api_role,
            "AwsSolutions-IAM5",
            "Payload object keys are created per operation at run time (keyed hashes under "
            f"'{PAYLOAD_KEY_PREFIX}'), so the statement is scoped to that prefix of this one "
            "bucket (s3:PutObject/GetObject/DeleteObject only).",
            applies_to=[
                f"Resource::<{stack.get_logical_id(self.payload_bucket.node.default_child)}.Arn>/"
                f"{PAYLOAD_KEY_PREFIX}*"
            ],
        )
        if self.encryption_key is not None:
            for role in (self.api_role, self.sweeper_role):
                _ack_kms_grant(role)
        for fn in (self.api_function, self.sweeper_function):
            _ack(
                fn.node.default_child,  # not the sweeper's EventInvokeConfig child
                "AwsSolutions-L1",
                "Pinned to python3.12 on purpose: the AWS-managed Powertools layer is resolved "
                f"from {POWERTOOLS_LAYER_PARAMETER} and the core layer is built for cp312; "
                "moving runtimes is a deliberate change of both.",
                children=False,
            )

        # ------------------------------------------------------------------ HTTP API
        self.user_pool: cognito.UserPool | None = None
        self.user_pool_client: cognito.UserPoolClient | None = None
        self.user_pool_domain: cognito.UserPoolDomain | None = None
        audience = list(jwt_audience or [])
        issuer = jwt_issuer
        self.pre_token_function: lambda_.Function | None = None
        if create_user_pool:
            if pre_token_generation is None:
                pre_token_generation = self._pre_token_function(
                    dict(client_tenants or {}), log_retention, removal_policy
                )
            issuer, pool_audience = self._user_pool(
                user_pool_domain_prefix, pre_token_generation, removal_policy
            )
            audience = [*pool_audience, *audience]
        assert issuer is not None
        self.authorizer = authorizers.HttpJwtAuthorizer(
            "JwtAuthorizer",
            issuer,
            jwt_audience=audience,
            identity_source=["$request.header.Authorization"],
        )
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            description="leasefence public API v1",
            create_default_stage=False,
        )
        self.access_log_group = self._log_group("ApiAccessLogs", log_retention, removal_policy)
        self.stage = apigw.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(
                rate_limit=throttling_rate_limit, burst_limit=throttling_burst_limit
            ),
            access_log_settings=_AccessLogSettings(self.access_log_group),
        )
        integration = integrations.HttpLambdaIntegration(
            "ApiIntegration",
            self.api_function,
            payload_format_version=apigw.PayloadFormatVersion.VERSION_2_0,
        )
        self.routes: dict[tuple[str, str], apigw.HttpRoute] = {}
        for method, path, route_scope in ROUTES:
            (route,) = self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod(method)],
                integration=integration,
                authorizer=self.authorizer if route_scope else apigw.HttpNoneAuthorizer(),
                authorization_scopes=[route_scope] if route_scope else None,
            )
            self.routes[(method, path)] = route
            if route_scope is None:
                _ack(
                    route,
                    "AwsSolutions-APIG4",
                    "GET /v1/health is open by contract (load balancers and uptime checks call "
                    "it without a token); it returns a constant and reads no data.",
                )

        # ------------------------------------------------------------------ sweeper schedule
        self.schedule_dlq, self.schedule_role, self.sweep_schedule = self._schedule(
            "Sweep",
            self.sweeper_function,
            what="sweeper",
            description="leasefence sweeper: park expired final-attempt claims",
            expression=scheduler.ScheduleExpression.rate(Duration.minutes(1)),
        )

        # ------------------------------------------------------------------ worker (optional)
        self.worker: WorkerProps | None = worker
        self.worker_function: lambda_.Function | None = None
        self.worker_role: iam.Role | None = None
        self.worker_log_group: logs.LogGroup | None = None
        self.worker_handlers_layer: lambda_.LayerVersion | None = None
        self.worker_schedule: scheduler.Schedule | None = None
        self.worker_schedule_dlq: sqs.Queue | None = None
        self.worker_schedule_role: iam.Role | None = None
        self.worker_failure_queue: sqs.Queue | None = None
        if worker is not None:
            self._add_worker(worker, environment, log_retention, removal_policy)

        # ------------------------------------------------------------------ operations
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            service=self,
            encryption_key=self.encryption_key,
            metrics_namespace=metrics_namespace,
            oldest_unknown_alarm_age=oldest_unknown_alarm_age or Duration.hours(1),
            oldest_due_alarm_age=oldest_due_alarm_age or Duration.minutes(15),
            quarantine_alarm_threshold=quarantine_alarm_threshold,
            takeover_alarm_percent=takeover_alarm_percent,
            stale_fence_alarm_threshold=stale_fence_alarm_threshold,
            api_5xx_alarm_threshold=api_5xx_alarm_threshold,
        )
        self.alarm_topic: sns.Topic = self.monitoring.topic
        self.dashboard = self.monitoring.dashboard

    # ---------------------------------------------------------------------- public helpers

    @property
    def api_url(self) -> str:
        """``https://<api-id>.execute-api.<region>.amazonaws.com`` (no trailing slash)."""
        return self.http_api.api_endpoint

    @property
    def token_url(self) -> str | None:
        """The Cognito OAuth2 token endpoint (client credentials), when the pool is created."""
        if self.user_pool_domain is None:
            return None
        return f"{self.user_pool_domain.base_url()}/oauth2/token"

    # ---------------------------------------------------------------------- internals

    @staticmethod
    def _validate(
        jwt_issuer: str | None,
        jwt_audience: Sequence[str] | None,
        create_user_pool: bool,
        user_pool_domain_prefix: str | None,
        pre_token_generation: lambda_.IFunction | None,
        due_shards: int,
        sweep_shards: int,
        identity_retention_days: int | None,
        payload_retention_days: int,
        encryption_key: kms.IKey | None,
        create_encryption_key: bool,
    ) -> None:
        if create_user_pool:
            if jwt_issuer:
                raise ValueError("give either jwt_issuer or create_user_pool=True, not both")
            if not user_pool_domain_prefix:
                raise ValueError("create_user_pool=True needs user_pool_domain_prefix "
                                 "(the Cognito token endpoint for client credentials)")
        else:
            if not jwt_issuer or not jwt_audience:
                raise ValueError("jwt_issuer and jwt_audience are required unless create_user_pool=True")
            if pre_token_generation is not None:
                raise ValueError("pre_token_generation needs create_user_pool=True")
        if not 1 <= due_shards <= 100 or not 1 <= sweep_shards <= 100:
            raise ValueError("due_shards and sweep_shards must be from 1 to 100")
        if payload_retention_days < 0:
            raise ValueError("payload_retention_days must be at least 0")
        if identity_retention_days is not None and identity_retention_days < max(payload_retention_days, 1):
            raise ValueError("identity_retention_days must be at least 1 and at least payload_retention_days "
                             "(or None: forever)")
        if encryption_key is not None and create_encryption_key:
            raise ValueError("give either encryption_key or create_encryption_key=True, not both")

    def _schedule(
        self,
        prefix: str,
        function: lambda_.Function,
        *,
        what: str,
        description: str,
        expression: scheduler.ScheduleExpression,
    ) -> tuple[sqs.Queue, iam.Role, scheduler.Schedule]:
        """An EventBridge Scheduler schedule invoking ``function``: 2 retries, events older than a
        minute dropped (the next tick is due), failures to its own encrypted dead-letter queue."""
        stack = Stack.of(self)
        dlq = sqs.Queue(
            self,
            f"{prefix}ScheduleDlq",
            encryption=sqs.QueueEncryption.KMS if self.encryption_key else sqs.QueueEncryption.SQS_MANAGED,
            encryption_master_key=self.encryption_key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        _ack(
            dlq,
            "AwsSolutions-SQS3",
            f"This queue is itself the dead-letter queue of the {what} schedule (EventBridge "
            "Scheduler DeadLetterConfig, which cdk-nag does not see as a redrive policy).",
        )
        # Own role (not the stack-wide singleton the target would create): assumable only by
        # EventBridge Scheduler on behalf of this account.
        role = iam.Role(
            self,
            f"{prefix}ScheduleRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
            description=f"leasefence: EventBridge Scheduler invokes the {what}",
        )
        if self.encryption_key is not None:
            # Sending to a DLQ under a customer-managed key needs a data key (the target only
            # grants sqs:SendMessage; Schedule grants kms:Decrypt for its own input).
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="DlqDataKey",
                    actions=["kms:GenerateDataKey", "kms:Decrypt"],
                    resources=[self.encryption_key.key_arn],
                )
            )
        schedule = scheduler.Schedule(
            self,
            f"{prefix}Schedule",
            description=description,
            schedule=expression,
            target=scheduler_targets.LambdaInvoke(
                function,
                dead_letter_queue=dlq,
                retry_attempts=2,
                # A run older than its period is useless: the next one is already due.
                max_event_age=Duration.minutes(1),
                role=role,
            ),
            key=self.encryption_key,
        )
        # After the schedule: the target adds the role's policy (acks reach existing children).
        _ack(
            role,
            "AwsSolutions-IAM5",
            f"lambda:InvokeFunction on the {what} and its versions/aliases (<arn>:*), the form "
            "Function.grant_invoke always emits; no other function is reachable.",
            applies_to=[f"Resource::<{stack.get_logical_id(function.node.default_child)}.Arn>:*"],
        )
        return dlq, role, schedule

    def _add_worker(
        self,
        props: WorkerProps,
        environment: Mapping[str, str],
        log_retention: logs.RetentionDays,
        removal_policy: RemovalPolicy,
    ) -> None:
        """The worker function, its role, optional handler layer and schedule (see ``worker.py``).

        Cross-tenant by design: one fleet claims for every tenant in ``props.tenants``, and its
        role is not narrowed per tenant (no ``dynamodb:LeadingKeys``): which tenants it serves is
        decided by its configuration, not by IAM. See ``infra/README.md`` ("Worker").
        """
        stack = Stack.of(self)
        log_group = self._log_group("WorkerFunctionLogs", log_retention, removal_policy)
        role = self._role("WorkerFunctionRole", "leasefence worker function", log_group)
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="OperationItems", actions=list(WORKER_TABLE_ACTIONS),
                                resources=[self.table.table_arn])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(sid="ClaimFromDueShards", actions=list(WORKER_DUE_INDEX_ACTIONS),
                                resources=[self.due_index_arn])
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PayloadRead",
                actions=list(WORKER_BUCKET_ACTIONS),
                resources=[self.payload_bucket.arn_for_objects(f"{PAYLOAD_KEY_PREFIX}*")],
            )
        )
        self.log_hash_key.grant_read(role)
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
        keys: list[kms.IKey] = [self.encryption_key] if self.encryption_key is not None else []
        for table in (*props.business_tables, *props.fenced_tables):
            if table.encryption_key is not None and not any(table.encryption_key is k for k in keys):
                keys.append(table.encryption_key)
        for key in keys:
            key.grant_encrypt_decrypt(role)

        layers: list[lambda_.ILayerVersion] = [self.core_layer, self.powertools_layer]
        if props.code is not None:
            # Lambda merges layers in order, a later layer's file replacing an earlier one's: this
            # layer goes first so that the core and Powertools layers win any clash. CDK renders
            # a function's layers sorted by construct path (flag recognizeLayerVersion), so the
            # id must sort before "CoreLayer" (tests/infra checks the rendered order).
            self.worker_handlers_layer = lambda_.LayerVersion(
                self,
                "AppHandlersLayer",
                code=props.code,
                compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
                compatible_architectures=[lambda_.Architecture.ARM_64],
                description=f"leasefence worker handlers ({props.module})",
            )
            layers = [self.worker_handlers_layer, *layers]
        worker_environment = {
            **environment,
            "LEASEFENCE_WORKER_HANDLERS": props.handlers,
            "LEASEFENCE_WORKER_TENANTS": ",".join(props.tenants),
            "LEASEFENCE_WORKER_LEASE_SECONDS": str(props.lease_seconds),
            **props.environment,
        }
        self.worker_failure_queue = self._failure_queue("WorkerFailures", "worker")
        function = self._function(
            "WorkerFunction",
            handler=WORKER_HANDLER,
            description=f"leasefence worker: runs {props.module} jobs for {len(props.tenants)} tenant(s)",
            role=role,
            log_group=log_group,
            environment=worker_environment,
            memory_mb=props.memory_mb,
            timeout=props.timeout_or_default,
            layers=layers,
            # An invocation that failed is not retried by Lambda: the next tick drains again;
            # the failed one lands in its own queue (with an alarm).
            retry_attempts=0,
            max_event_age=Duration.minutes(1),
            on_failure=self.worker_failure_queue,
        )
        _ack(
            role,
            "AwsSolutions-IAM5",
            "X-Ray PutTraceSegments/PutTelemetryRecords (active tracing) support no "
            "resource-level permissions; AWS documents Resource '*' for them.",
            applies_to=["Resource::*"],
        )
        _ack(
            role,
            "AwsSolutions-IAM5",
            "Payload object keys are created per operation at run time (keyed hashes under "
            f"'{PAYLOAD_KEY_PREFIX}'); the worker may only s3:GetObject under that prefix of this "
            "one bucket.",
            applies_to=[
                f"Resource::<{stack.get_logical_id(self.payload_bucket.node.default_child)}.Arn>/"
                f"{PAYLOAD_KEY_PREFIX}*"
            ],
        )
        if keys:
            _ack(
                role,
                "AwsSolutions-IAM5",
                "Key.grant_encrypt_decrypt on the customer-managed keys of the tables the worker "
                "writes (this service's key and those of the business/target tables given in "
                "WorkerProps; each resource is one key's ARN): DynamoDB and S3 need data-key "
                "generation and re-encryption on them.",
                applies_to=["Action::kms:GenerateDataKey*", "Action::kms:ReEncrypt*"],
            )
        _ack(
            function.node.default_child,  # not its EventInvokeConfig child
            "AwsSolutions-L1",
            "Pinned to python3.12 on purpose: the AWS-managed Powertools layer is resolved "
            f"from {POWERTOOLS_LAYER_PARAMETER} and the core layer is built for cp312; "
            "moving runtimes is a deliberate change of both.",
            children=False,
        )
        self.worker_log_group = log_group
        self.worker_role = role
        self.worker_function = function
        self.worker_schedule_dlq, self.worker_schedule_role, self.worker_schedule = self._schedule(
            "Worker",
            function,
            what="worker",
            description=f"leasefence worker: drain claims for {len(props.tenants)} tenant(s)",
            expression=props.schedule_or_default,
        )

    def _log_group(self, construct_id: str, retention: logs.RetentionDays,
                   removal_policy: RemovalPolicy) -> logs.LogGroup:
        return logs.LogGroup(self, construct_id, retention=retention, removal_policy=removal_policy)

    def _role(self, construct_id: str, what: str, log_group: logs.LogGroup) -> iam.Role:
        # Own role instead of the default one: no AWSLambdaBasicExecutionRole (logs:* on every
        # log group), only this function's log group.
        role = iam.Role(
            self,
            construct_id,
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{what}: least privilege",
        )
        log_group.grant_write(role)
        return role

    def _grant_table(self, principal: iam.IGrantable, actions: Sequence[str],
                     resources: Sequence[str]) -> None:
        principal.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=list(actions), resources=list(resources))
        )
        if self.encryption_key is not None:
            self.encryption_key.grant_encrypt_decrypt(principal)

    def _tenant_role(self) -> iam.Role:
        """A role the API function assumes per tenant, tagged ``tenant_id=<claim>``.

        Its DynamoDB permissions only reach items whose partition key is the session's tenant
        (``dynamodb:LeadingKeys``): the table's ``tenant_id`` and the ``due`` index's
        ``<tenant_id>#<shard>`` partitions. Two statements, so that a tenant named ``T`` cannot
        read table rows of a tenant named ``T#0``.
        """
        principal = iam.PrincipalWithConditions(
            self.api_role,
            {
                "StringLike": {f"aws:RequestTag/{TENANT_TAG}": "?*"},
                "ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]},
            },
        ).with_session_tags()
        role = iam.Role(
            self,
            "TenantAccessRole",
            assumed_by=principal,
            description="leasefence API, one tenant per session (dynamodb:LeadingKeys = session tag)",
            max_session_duration=Duration.hours(1),
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnTenantItems",
                actions=list(API_TABLE_ACTIONS),
                resources=[self.table.table_arn],
                conditions={
                    "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [TENANT_TAG_VARIABLE]}
                },
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnTenantDueShards",
                actions=list(API_DUE_INDEX_ACTIONS),
                resources=[self.due_index_arn],
                # Due partitions are <tenant>#<shard>#<job type>. A tenant usable with isolation is
                # a session tag value, which holds no '#', '*' or '?': the pattern matches exactly
                # this tenant's partitions.
                conditions={
                    "ForAllValues:StringLike": {
                        "dynamodb:LeadingKeys": [f"{keys.escape_tenant(TENANT_TAG_VARIABLE)}#*"]
                    }
                },
            )
        )
        if self.encryption_key is not None:
            self.encryption_key.grant_encrypt_decrypt(role)
            _ack_kms_grant(role)
        self.api_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="AssumeTenantRole",
                actions=["sts:AssumeRole", "sts:TagSession"],
                resources=[role.role_arn],
            )
        )
        return role

    def _function(
        self,
        construct_id: str,
        *,
        handler: str,
        description: str,
        role: iam.Role,
        log_group: logs.LogGroup,
        environment: Mapping[str, str],
        memory_mb: int,
        timeout: Duration,
        layers: Sequence[lambda_.ILayerVersion] | None = None,
        retry_attempts: int | None = None,
        max_event_age: Duration | None = None,
        on_failure: sqs.IQueue | None = None,
    ) -> lambda_.Function:
        _, application_level, system_level = LOG_LEVELS[self.log_level]
        return lambda_.Function(
            self,
            construct_id,
            description=description,
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            code=self._functions_code,
            handler=handler,
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            # The same level as POWERTOOLS_LOG_LEVEL: Lambda drops JSON log lines below it.
            application_log_level_v2=application_level,
            system_log_level_v2=system_level,
            environment=dict(environment),
            layers=list(layers) if layers is not None else [self.core_layer, self.powertools_layer],
            memory_size=memory_mb,
            timeout=timeout,
            tracing=lambda_.Tracing.ACTIVE,
            retry_attempts=retry_attempts,
            max_event_age=max_event_age,
            on_failure=destinations.SqsDestination(on_failure) if on_failure is not None else None,
        )

    def _failure_queue(self, construct_id: str, what: str) -> sqs.Queue:
        """The on-failure destination of a function's async invocations (encrypted, TLS only)."""
        queue = sqs.Queue(
            self,
            construct_id,
            encryption=sqs.QueueEncryption.KMS if self.encryption_key else sqs.QueueEncryption.SQS_MANAGED,
            encryption_master_key=self.encryption_key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        _ack(
            queue,
            "AwsSolutions-SQS3",
            f"This queue is itself the dead-letter destination of the {what} function's failed "
            "asynchronous invocations (Lambda OnFailure destination, which cdk-nag does not see "
            "as a redrive policy); it has its own alarm.",
        )
        return queue

    def _pre_token_function(self, client_tenants: Mapping[str, str], log_retention: logs.RetentionDays,
                            removal_policy: RemovalPolicy) -> lambda_.Function:
        """``functions/pretoken``: adds ``tenant_id`` (and group scopes) to the pool's tokens."""
        for client, tenant in client_tenants.items():
            if not isinstance(client, str) or not isinstance(tenant, str) or not client or not tenant:
                raise ValueError("client_tenants must map app client ids to tenant ids (non-empty strings)")
        log_group = self._log_group("PreTokenFunctionLogs", log_retention, removal_policy)
        role = self._role("PreTokenFunctionRole", "leasefence pre token generation trigger", log_group)
        _, application_level, system_level = LOG_LEVELS[self.log_level]
        function = lambda_.Function(
            self,
            "PreTokenFunction",
            description="leasefence: tenant_id and scope claims for the user pool's tokens",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_.Architecture.ARM_64,
            code=self._functions_code,
            handler=PRETOKEN_HANDLER,
            role=role,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            application_log_level_v2=application_level,
            system_log_level_v2=system_level,
            environment={"LEASEFENCE_CLIENT_TENANTS": json.dumps(dict(client_tenants), sort_keys=True)},
            memory_size=128,
            timeout=Duration.seconds(5),
        )
        _ack(
            function,
            "AwsSolutions-L1",
            "Pinned to python3.12 like the service's other functions (one runtime to move "
            "deliberately); the trigger uses the standard library only.",
        )
        self.pre_token_function = function
        return function

    def _user_pool(
        self,
        domain_prefix: str | None,
        pre_token_generation: lambda_.IFunction | None,
        removal_policy: RemovalPolicy,
    ) -> tuple[str, list[str]]:
        pool = cognito.UserPool(
            self,
            "UserPool",
            self_sign_up_enabled=False,
            sign_in_case_sensitive=False,
            # Machine-to-machine pool (client credentials); a password policy and MFA still apply
            # to any human user someone adds later.
            password_policy=cognito.PasswordPolicy(
                min_length=14, require_digits=True, require_lowercase=True,
                require_uppercase=True, require_symbols=True,
            ),
            mfa=cognito.Mfa.REQUIRED,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            account_recovery=cognito.AccountRecovery.NONE,
            feature_plan=(
                cognito.FeaturePlan.ESSENTIALS if pre_token_generation else cognito.FeaturePlan.LITE
            ),
            removal_policy=removal_policy,
        )
        if pre_token_generation is not None:
            # V3 events reach the trigger for client-credentials tokens too: that is where a
            # `tenant_id` claim is added (see infra/README.md).
            pool.add_trigger(
                cognito.UserPoolOperation.PRE_TOKEN_GENERATION_CONFIG,
                pre_token_generation,
                cognito.LambdaVersion.V3_0,
            )
        _ack(
            pool,
            "AwsSolutions-COG8",
            "The Plus feature plan adds threat protection for user sign-ins; this pool issues "
            "client-credentials tokens to services only (no users sign in).",
        )
        scopes = {
            name: cognito.ResourceServerScope(scope_name=name, scope_description=desc)
            for name, desc in (
                ("produce", "enqueue operations and read them"),
                ("work", "claim operations and report their outcome"),
                ("operate", "list operations, resolve unknown/quarantined ones, erase operations"),
            )
        }
        resource_server = pool.add_resource_server(
            "ResourceServer", identifier=RESOURCE_SERVER_ID, scopes=list(scopes.values())
        )
        self.user_pool_domain = pool.add_domain(
            "Domain", cognito_domain=cognito.CognitoDomainOptions(domain_prefix=domain_prefix)
        )
        client = pool.add_client(
            "ServiceClient",
            generate_secret=True,
            auth_flows=cognito.AuthFlow(),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(client_credentials=True),
                scopes=[cognito.OAuthScope.resource_server(resource_server, s) for s in scopes.values()],
            ),
            access_token_validity=Duration.hours(1),
            prevent_user_existence_errors=True,
        )
        self.user_pool = pool
        self.user_pool_client = client
        self.resource_server = resource_server
        # Cognito access tokens have no `aud`; API Gateway then checks `client_id` against the
        # audience list, so the audience is the app client id.
        # The issuer as it appears in the tokens' `iss` (CloudFormation's ProviderURL lacks
        # the scheme, so it is built here the way HttpUserPoolAuthorizer builds it).
        stack = Stack.of(self)
        issuer = f"https://cognito-idp.{stack.region}.{stack.url_suffix}/{pool.user_pool_id}"
        return issuer, [client.user_pool_client_id]


@jsii.implements(apigw.IAccessLogSettings)
class _AccessLogSettings:
    """``IAccessLogSettings`` (a jsii interface) for the HTTP API stage: one JSON line a request."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._log_group = log_group

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return apigw.LogGroupLogDestination(self._log_group)

    @property
    def format(self) -> apigw_v1.AccessLogFormat:
        return apigw_v1.AccessLogFormat.custom(_ACCESS_LOG_FORMAT)
