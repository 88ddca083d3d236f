"""IAM ways into a ``LeaseFenceService``: the IAM-authorized HTTP API for callers inside AWS, the
``grant_*`` methods, the tenant-erasure operator policy, and a service imported into another
stack (:meth:`LeaseFenceService.from_attributes <leasefence_infra.LeaseFenceService.from_attributes>`).

**The IAM API** (``iam_tenant``): a second HTTP API beside the JWT one, every route authorized by
IAM (SigV4) and placed under the name of its scope: ``POST /produce/v1/operations``,
``POST /work/v1/claims``, ``GET /operate/v1/operations``,
``POST /approve/v1/operations/{id}/approve``; a route another scope opens too (an approver reads
what it approves) is also under that scope's name (``GET /approve/v1/operations/{id}``). So an
IAM policy on a path prefix is the grant of exactly one scope (an IAM ``*`` spans ``/``: grants
on the contract's own paths could not tell ``GET /v1/operations/{id}`` (produce) from
``GET /v1/operations/{id}/payload`` (work)). Every request acts for the one tenant
``iam_tenant`` (never a shadow tenant), with the scope its prefix names, as the signing principal
(its ``userArn``: the identity recorded as the actor, so a principal cannot approve what it
enqueued). The API function checks all of it again (``leasefence.api.security.iam_request``): a
request from another API, without a prefix, or for a route of another scope is refused.

Limits: one tenant per service's IAM API (callers of several tenants use the JWT API, or one
service per tenant); IAM decides per principal and prefix only, not per operation.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from constructs import Construct

from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX

from .api import Api, http_api_with_stage, lambda_integration
from .contract import ALSO_SCOPES, ROUTES, SCOPE_APPROVE, SCOPE_OPERATE, SCOPE_PRODUCE, SCOPE_WORK
from .function import FunctionRuntime
from .nag import acknowledge, finding_pattern

#: The IAM API's path prefix of each scope (``leasefence.api.security.IAM_PREFIXES``).
SCOPE_PREFIXES = {
    scope: scope.split("/", 1)[1]
    for scope in (SCOPE_PRODUCE, SCOPE_WORK, SCOPE_OPERATE, SCOPE_APPROVE)
}
#: What ``leasefence erase-tenant`` does: hold the tenant (a conditional update of its settings
#: and catalogue items), query its partition, delete its rows and items (conditionally), list and
#: delete its payload objects; the log-hash key for its logs.
ERASURE_TABLE_ACTIONS = ("dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
ERASURE_OBJECT_ACTIONS = ("s3:DeleteObject",)
ERASURE_LIST_ACTIONS = ("s3:ListBucket",)
ERASURE_KEY_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")


def iam_route_path(path: str, scope: str) -> str:
    """A contract route's path on the IAM API: under its scope's name."""
    return f"/{SCOPE_PREFIXES[scope]}{path}"


class IamApi(Construct):
    """``HttpApi`` with every scoped route of the contract under its scope's prefix, each
    authorized by IAM, into the API function; ``DefaultStage`` with the JWT API's throttling and
    JSON access logs (``AccessLogs``). Sets ``LEASEFENCE_IAM_TENANT`` and
    ``LEASEFENCE_IAM_API_ID`` on the API function."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        api: Api,
        tenant: str,
        runtime: FunctionRuntime,
        throttling_rate_limit: float,
        throttling_burst_limit: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.tenant = tenant
        self.http_api, self.access_log_group, self.stage = http_api_with_stage(
            self,
            description="leasefence API v1 for IAM callers (SigV4), one scope per path prefix",
            runtime=runtime,
            throttling_rate_limit=throttling_rate_limit,
            throttling_burst_limit=throttling_burst_limit,
        )
        # One invoke permission for the whole API (see lambda_integration).
        integration = lambda_integration("IamApiIntegration", api.function.target)
        authorizer = authorizers.HttpIamAuthorizer()
        self.routes: dict[tuple[str, str], apigw.HttpRoute] = {}
        for method, path, route_scope in ROUTES:
            if route_scope is None:
                continue  # GET /v1/health stays on the JWT API, open
            # Under its scope, and under each scope that opens it too (an approver reads the
            # operations it approves: GET /approve/v1/operations/{id}).
            for prefix_scope in (route_scope, *ALSO_SCOPES.get((method, path), ())):
                (route,) = self.http_api.add_routes(
                    path=iam_route_path(path, prefix_scope),
                    methods=[apigw.HttpMethod(method)],
                    integration=integration,
                    authorizer=authorizer,
                )
                self.routes[(method, iam_route_path(path, prefix_scope))] = route
        function = api.function.function
        function.add_environment("LEASEFENCE_IAM_TENANT", tenant)
        function.add_environment("LEASEFENCE_IAM_API_ID", self.http_api.api_id)

    @property
    def url(self) -> str:
        """``https://<api-id>.execute-api.<region>.amazonaws.com`` (no trailing slash)."""
        return self.http_api.api_endpoint


def iam_api_arn(scope: Construct, api_id: str, route_scope: str) -> str:
    """``execute-api:Invoke`` resource of every route of one scope on an IAM API."""
    return Stack.of(scope).format_arn(
        service="execute-api",
        resource=api_id,
        resource_name=f"*/*/{SCOPE_PREFIXES[route_scope]}/*",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


class ServiceAccess:
    """``grant_*`` of a service, created or imported: what they need is :meth:`_access`."""

    def _access(self) -> dict[str, Any]:
        """``scope`` (a construct to build ARNs and policies in), ``iam_api_id`` (or None),
        ``table``, ``payload_bucket``, ``log_hash_key`` (or None), ``keys`` (customer-managed
        keys of the data)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the IAM API

    def grant_enqueue(self, grantee: iam.IGrantable) -> iam.Grant:
        """Enqueue, read and cancel operations (scope ``leasefence/produce``) on the IAM API:
        ``execute-api:Invoke`` on its ``/produce/*`` routes."""
        return self._grant_scope(grantee, SCOPE_PRODUCE, "grant_enqueue")

    def grant_work(self, grantee: iam.IGrantable) -> iam.Grant:
        """Claim operations and report their outcome (``leasefence/work``): ``/work/*``."""
        return self._grant_scope(grantee, SCOPE_WORK, "grant_work")

    def grant_operate(self, grantee: iam.IGrantable) -> iam.Grant:
        """List, resolve, erase operations, the catalogue, settings, history (``leasefence/operate``):
        ``/operate/*``."""
        return self._grant_scope(grantee, SCOPE_OPERATE, "grant_operate")

    def grant_approve(self, grantee: iam.IGrantable) -> iam.Grant:
        """Approve or reject operations awaiting approval (``leasefence/approve``):
        ``/approve/*``. A principal never approves what it enqueued itself."""
        return self._grant_scope(grantee, SCOPE_APPROVE, "grant_approve")

    def _grant_scope(self, grantee: iam.IGrantable, route_scope: str, name: str) -> iam.Grant:
        access = self._access()
        api_id = access["iam_api_id"]
        if api_id is None:
            raise ValueError(
                f"{name} grants a route of the IAM API, which this service does not have: "
                "create it with iam_tenant=<the tenant IAM callers act for> (or import it with "
                "iam_api_id)"
            )
        arn = iam_api_arn(access["scope"], api_id, route_scope)
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["execute-api:Invoke"], resource_arns=[arn]
        )
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            acknowledge(
                principal,
                "AwsSolutions-IAM5",
                f"execute-api:Invoke on the leasefence IAM API's routes of the scope {route_scope} "
                f"(the '/{SCOPE_PREFIXES[route_scope]}/' prefix: route paths hold operation ids); "
                "no other route and no other API.",
                applies_to=[finding_pattern(f"/*/*/{SCOPE_PREFIXES[route_scope]}/*")],
            )
        return grant

    # ------------------------------------------------------------------ operators

    def tenant_erasure_statements(self) -> list[iam.PolicyStatement]:
        """What ``leasefence erase-tenant`` needs against this service's table and bucket."""
        access = self._access()
        table: dynamodb.ITable = access["table"]
        bucket: s3.IBucket = access["payload_bucket"]
        statements = [
            iam.PolicyStatement(
                sid="TenantRows",
                actions=list(ERASURE_TABLE_ACTIONS),
                resources=[table.table_arn],
            ),
            iam.PolicyStatement(
                sid="TenantPayloadObjects",
                actions=list(ERASURE_OBJECT_ACTIONS),
                resources=[bucket.arn_for_objects(f"{PAYLOAD_KEY_PREFIX}*")],
            ),
            iam.PolicyStatement(
                sid="ListTenantPayloads",
                actions=list(ERASURE_LIST_ACTIONS),
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{PAYLOAD_KEY_PREFIX}*"]}},
            ),
        ]
        secret: secretsmanager.ISecret | None = access["log_hash_key"]
        if secret is not None:
            statements.append(
                iam.PolicyStatement(
                    sid="LogHashKey",
                    actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                    resources=[secret.secret_arn],
                )
            )
        keys: list[kms.IKey] = access["keys"]
        if keys:
            statements.append(
                iam.PolicyStatement(
                    sid="DataKeys",
                    actions=list(ERASURE_KEY_ACTIONS),
                    resources=[k.key_arn for k in keys],
                )
            )
        return statements

    def grant_erase_tenant(self, grantee: iam.IGrantable) -> None:
        """Let ``grantee`` run ``leasefence erase-tenant`` against this service (an operator's
        role; every tenant: erasure is not a tenant's own action)."""
        for statement in self.tenant_erasure_statements():
            grantee.grant_principal.add_to_principal_policy(statement)
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            self._acknowledge_erasure(principal)

    def tenant_erasure_policy(self) -> iam.ManagedPolicy:
        """A managed policy with :meth:`tenant_erasure_statements`, created once: attach it to
        the operators' role (or permission set) that runs ``leasefence erase-tenant``."""
        access = self._access()
        owner: Construct = access["scope"]
        existing = owner.node.try_find_child("TenantErasurePolicy")
        if isinstance(existing, iam.ManagedPolicy):
            return existing
        policy = iam.ManagedPolicy(
            owner,
            "TenantErasurePolicy",
            description="leasefence: run `leasefence erase-tenant` against this service",
            statements=self.tenant_erasure_statements(),
        )
        self._acknowledge_erasure(policy)
        return policy

    @staticmethod
    def _acknowledge_erasure(construct: Construct) -> None:
        acknowledge(
            construct,
            "AwsSolutions-IAM5",
            "Tenant erasure deletes payload objects whose keys are created per operation at run "
            f"time (keyed hashes under '{PAYLOAD_KEY_PREFIX}'): s3:DeleteObject on that prefix of "
            "this one bucket only.",
            applies_to=[finding_pattern(f"/{PAYLOAD_KEY_PREFIX}*")],
        )


class ImportedLeaseFenceService(Construct, ServiceAccess):
    """A service deployed by another stack or app (:meth:`LeaseFenceService.from_attributes`):
    its table, bucket, APIs, topic and bus as imported resources, and the same ``grant_*``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table_name: str | None = None,
        table_arn: str | None = None,
        table_stream_arn: str | None = None,
        payload_bucket_name: str,
        log_hash_secret_arn: str | None = None,
        encryption_key_arn: str | None = None,
        api_url: str | None = None,
        iam_api_id: str | None = None,
        alarm_topic_arn: str | None = None,
        event_bus_arn: str | None = None,
        metrics_namespace: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if (table_name is None) == (table_arn is None):
            raise ValueError("from_attributes needs exactly one of table_name and table_arn")
        #: The service's customer-managed key, if it has one.
        self.encryption_key: kms.IKey | None = (
            kms.Key.from_key_arn(self, "Key", encryption_key_arn) if encryption_key_arn else None
        )
        self.table: dynamodb.ITable = dynamodb.Table.from_table_attributes(
            self,
            "Table",
            table_name=table_name,
            table_arn=table_arn,
            table_stream_arn=table_stream_arn,
            encryption_key=self.encryption_key,
        )
        self.payload_bucket: s3.IBucket = s3.Bucket.from_bucket_attributes(
            self,
            "PayloadBucket",
            bucket_name=payload_bucket_name,
            encryption_key=self.encryption_key,
        )
        self.log_hash_key: secretsmanager.ISecret | None = (
            secretsmanager.Secret.from_secret_complete_arn(self, "LogHashKey", log_hash_secret_arn)
            if log_hash_secret_arn
            else None
        )
        self.api_url = api_url
        self.iam_api_id = iam_api_id
        self.alarm_topic: sns.ITopic | None = (
            sns.Topic.from_topic_arn(self, "AlarmTopic", alarm_topic_arn)
            if alarm_topic_arn
            else None
        )
        self.event_bus: events.IEventBus | None = (
            events.EventBus.from_event_bus_arn(self, "EventBus", event_bus_arn)
            if event_bus_arn
            else None
        )
        self.metrics_namespace = metrics_namespace

    @property
    def iam_api_url(self) -> str | None:
        if self.iam_api_id is None:
            return None
        stack = Stack.of(self)
        return f"https://{self.iam_api_id}.execute-api.{stack.region}.{stack.url_suffix}"

    def _access(self) -> dict[str, Any]:
        return {
            "scope": self,
            "iam_api_id": self.iam_api_id,
            "table": self.table,
            "payload_bucket": self.payload_bucket,
            "log_hash_key": self.log_hash_key,
            "keys": [self.encryption_key] if self.encryption_key is not None else [],
        }
