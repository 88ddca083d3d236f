"""The HTTP API of a ``LeaseFenceService``: the API function (every route), its JWT authorizer,
the authorization scope the public contract gives each route (and the approve scope on the three
reads an approver needs: :data:`.contract.ALSO_SCOPES`), ``GET /v1/health`` open,
JSON access logs, default-stage throttling, and the optional tenant-scoped role."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import jsii
from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw_v1
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from leasefence import keys
from leasefence.limits import CLAIM_RETRY_BUDGET_MS
from leasefence.settings import STORE_CALL_WORST_S

from .contract import ALSO_SCOPES, CONSOLE_ROUTES, ROUTES
from .function import FunctionRuntime, ServiceFunction
from .nag import acknowledge
from .storage import Storage

API_HANDLER = "api.handler.lambda_handler"

#: What the API function does to the table: read/create/fenced-update one item, query a tenant's
#: partition (list) and a tenant's ``due`` shards (claim), and the claim-next marker's proven
#: re-point (a ``TransactWriteItems`` of the marker's update and a ``ConditionCheck`` of the
#: operation it named: IAM authorizes each item by its own action). Nothing else (no Scan, no
#: Delete, no batch, no ``sweep`` index).
API_TABLE_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:Query",
)
API_DUE_INDEX_ACTIONS = ("dynamodb:Query",)
#: Inline payloads live in the bucket under the payload prefix: written on enqueue (conditional
#: put), read by GET .../payload, and an orphan left by an enqueue that lost a race is deleted.
API_BUCKET_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:DeleteObject")
#: ListBucket only so that S3 answers GetObject on a missing object with 404 NoSuchKey instead
#: of 403 AccessDenied (the engine maps the former to "no payload"). Object keys are keyed
#: hashes, so a listing reveals no ids.
API_BUCKET_LIST_ACTIONS = ("s3:ListBucket",)

#: Session tag carrying the caller's tenant when ``tenant_isolation`` is on.
TENANT_TAG = "tenant_id"
TENANT_TAG_VARIABLE = "${aws:PrincipalTag/" + TENANT_TAG + "}"

#: The API function's timeout: a claim's whole retry budget (its own retries, then one more store
#: call with the client's retries) fits in it, and it stays within API Gateway's 30 s limit.
API_TIMEOUT_S = 29
assert CLAIM_RETRY_BUDGET_MS / 1000 + STORE_CALL_WORST_S <= API_TIMEOUT_S < 30

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


#: Why each open route is open (cdk-nag's APIG4 acknowledgment).
_OPEN_ROUTES = {
    ("GET", "/v1/health"): "GET /v1/health is open by contract (load balancers and uptime checks "
    "call it without a token); it returns a constant and reads no data.",
    ("GET", "/v1/target-classes"): "A static table of the four target classes (what each "
    "guarantees, how to reconcile it); it reads no data.",
    ("GET", "/"): "Redirects to the operator console (/console); reads no data.",
    ("GET", "/console"): "The operator console's page: a static file that holds no data; every "
    "call it makes goes to the JWT-authorized routes with the signed-in person's token.",
    ("GET", "/console/{asset}"): "The operator console's script, style sheet and sign-in "
    "settings (issuer and public client id): static, no data.",
}
#: Why the ``$default`` route needs no authorizer.
_UNMATCHED_ROUTE_REASON = (
    "$default only receives requests that no declared route matches; the function answers each "
    "with 404 or 405 (the contract's error body) and reads no data: every route that reads or "
    "writes is declared with the JWT authorizer, and the function itself requires the verified "
    "claims and scopes of the route it serves."
)


class Api(Construct):
    """``Function`` (the API function), ``HttpApi`` with one route per contract route,
    ``DefaultStage``, ``AccessLogs`` and, with tenant isolation, ``TenantAccessRole``.

    ``authorizer`` must be of type JWT: the API function reads the caller's ``tenant_id`` and
    ``scope`` from ``requestContext.authorizer.jwt.claims`` (checked here).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: FunctionRuntime,
        storage: Storage,
        environment: Mapping[str, str],
        authorizer: apigw.IHttpRouteAuthorizer,
        tenant_isolation: bool,
        memory_mb: int,
        throttling_rate_limit: float,
        throttling_burst_limit: int,
        console: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        self._storage = storage
        api_environment = dict(environment)
        #: The operator console is served (``GET /console``): its routes exist and the function
        #: answers them; off, neither.
        self.console = console
        if not console:
            api_environment["LEASEFENCE_CONSOLE"] = "off"
        self.function = ServiceFunction(
            self,
            "Function",
            runtime=runtime,
            handler=API_HANDLER,
            description="leasefence HTTP API (all routes)",
            environment=api_environment,
            memory_mb=memory_mb,
            timeout=Duration.seconds(API_TIMEOUT_S),
        )
        role = self.function.role

        self.tenant_role: iam.Role | None = None
        if tenant_isolation:
            self.tenant_role = self._tenant_role(role)
            self.function.function.add_environment(
                "LEASEFENCE_TENANT_ROLE_ARN", self.tenant_role.role_arn
            )
            self.function.function.add_environment("LEASEFENCE_TENANT_SESSION_TAG", TENANT_TAG)
        else:
            # Tenant scoping without isolation: the handler takes the tenant only from the
            # verified JWT claim (requestContext.authorizer.jwt.claims.tenant_id) and every key
            # it builds starts with it; IAM confines the function to this table, its `due` index
            # and the four actions, not to one tenant's partition. See infra/README.md.
            storage.grant_table(role, API_TABLE_ACTIONS, [storage.table.table_arn])
            storage.grant_table(role, API_DUE_INDEX_ACTIONS, [storage.due_index_arn])
        storage.grant_payload_objects(
            role,
            "PayloadObjects",
            API_BUCKET_ACTIONS,
            "enqueue writes them, GET .../payload reads them, a lost race deletes one.",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PayloadMissingIs404",
                actions=list(API_BUCKET_LIST_ACTIONS),
                resources=[storage.payload_bucket.bucket_arn],
                # No s3:prefix condition: a GetObject carries no prefix key, so a conditioned
                # grant would not count and S3 would still answer 403.
            )
        )
        storage.grant_data_keys(role)
        storage.log_hash_key.grant_read(role)

        # ------------------------------------------------------------------ HTTP API
        self.authorizer = authorizer
        self.http_api, self.access_log_group, self.stage = http_api_with_stage(
            self,
            description="leasefence public API v1",
            runtime=runtime,
            throttling_rate_limit=throttling_rate_limit,
            throttling_burst_limit=throttling_burst_limit,
        )
        integration = lambda_integration("ApiIntegration", self.function.target)
        self.routes: dict[tuple[str, str], apigw.HttpRoute] = {}
        for method, path, route_scope in ROUTES:
            if not console and (method, path) in CONSOLE_ROUTES:
                continue
            (route,) = self.http_api.add_routes(
                path=path,
                methods=[apigw.HttpMethod(method)],
                integration=integration,
                authorizer=authorizer if route_scope else apigw.HttpNoneAuthorizer(),
                authorization_scopes=[route_scope, *ALSO_SCOPES.get((method, path), ())]
                if route_scope
                else None,
            )
            self.routes[(method, path)] = route
            if route_scope is None:
                acknowledge(route, "AwsSolutions-APIG4", _OPEN_ROUTES[(method, path)])
            else:
                kind = route.node.default_child.authorization_type
                if kind != "JWT":
                    raise ValueError(
                        f"authorizer must be a JWT authorizer (HttpJwtAuthorizer or HttpUserPoolAuthorizer), "
                        f"not {kind}: the API function reads tenant_id and scope from the JWT claims"
                    )
        # Requests no route declares (another method on a known path, an unknown path) reach the
        # function too, so that AWS answers them as the contract says (405 with Allow, or 404, with
        # the contract's error body) instead of API Gateway's own {"message": "Not Found"}.
        self.default_route = apigw.HttpRoute(
            self,
            "UnmatchedRoute",
            http_api=self.http_api,
            route_key=apigw.HttpRouteKey.DEFAULT,
            integration=integration,
        )
        acknowledge(self.default_route, "AwsSolutions-APIG4", _UNMATCHED_ROUTE_REASON)

    @property
    def url(self) -> str:
        """``https://<api-id>.execute-api.<region>.amazonaws.com`` (no trailing slash)."""
        return self.http_api.api_endpoint

    def _tenant_role(self, api_role: iam.IRole) -> iam.Role:
        """A role the API function assumes per tenant, tagged ``tenant_id=<claim>``.

        Its DynamoDB permissions only reach items whose partition key is the session's tenant
        (``dynamodb:LeadingKeys``): the table's ``tenant_id`` (the bare tenant id and its write
        shards, ``<tenant_id>\t<n>``: :func:`leasefence.keys.shard_partition`) and the ``due``
        index's ``<tenant_id>#<shard>#<job type>`` partitions. Two statements, so that a tenant
        named ``T`` cannot read table rows of a tenant named ``T#0``.
        """
        storage = self._storage
        principal = iam.PrincipalWithConditions(
            api_role,
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
                resources=[storage.table.table_arn],
                # The bare tenant id (write shard 0, where every item of one-shard deployments
                # is) and its write shards. A session tag value holds no '*', '?' or control
                # character, and no tenant id holds the shard mark (a tab): the two patterns match
                # exactly this tenant's partitions, never another tenant's (not even 'T#1''s).
                conditions={
                    "ForAllValues:StringLike": {
                        "dynamodb:LeadingKeys": [
                            TENANT_TAG_VARIABLE,
                            f"{TENANT_TAG_VARIABLE}{keys.SHARD_MARK}*",
                        ]
                    }
                },
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                sid="OwnTenantDueShards",
                actions=list(API_DUE_INDEX_ACTIONS),
                resources=[storage.due_index_arn],
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
        storage.grant_data_keys(role)
        api_role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="AssumeTenantRole",
                actions=["sts:AssumeRole", "sts:TagSession"],
                resources=[role.role_arn],
            )
        )
        return role


class HttpApiStage(NamedTuple):
    """An HTTP API with its one stage and that stage's access log group."""

    http_api: apigw.HttpApi
    access_log_group: logs.LogGroup
    stage: apigw.HttpStage


def lambda_integration(
    integration_id: str, target: lambda_.IFunction
) -> integrations.HttpLambdaIntegration:
    """The API's Lambda proxy integration (payload 2.0) with ONE invoke permission for the whole
    API (source ``<api>/*/*``), not one per route: a statement per route (about 400 bytes each)
    fills the function's resource policy (20 KB at most; a deploy fails past it) as routes are
    added. An aws-cdk-lib without ``scope_permission_to_route`` (2.190.0, the oldest the
    ``[cdk]`` extra accepts, has none) gets its default, a permission per route (30 routes:
    about 12 KB)."""
    options: dict[str, Any] = {"payload_format_version": apigw.PayloadFormatVersion.VERSION_2_0}
    if (
        "scope_permission_to_route"
        in inspect.signature(integrations.HttpLambdaIntegration.__init__).parameters
    ):
        options["scope_permission_to_route"] = False
    return integrations.HttpLambdaIntegration(integration_id, target, **options)


def http_api_with_stage(
    scope: Construct,
    *,
    description: str,
    runtime: FunctionRuntime,
    throttling_rate_limit: float,
    throttling_burst_limit: int,
) -> HttpApiStage:
    """``HttpApi`` (no stage of its own), ``AccessLogs`` (the runtime's retention and removal
    policy) and ``DefaultStage`` (``$default``, deployed automatically, throttled, one JSON access
    log line a request), in ``scope``: the JWT API and the IAM API alike."""
    http_api = apigw.HttpApi(scope, "HttpApi", description=description, create_default_stage=False)
    access_log_group = logs.LogGroup(
        scope,
        "AccessLogs",
        retention=runtime.log_retention,
        removal_policy=runtime.removal_policy,
    )
    stage = apigw.HttpStage(
        scope,
        "DefaultStage",
        http_api=http_api,
        stage_name="$default",
        auto_deploy=True,
        throttle=apigw.ThrottleSettings(
            rate_limit=throttling_rate_limit, burst_limit=throttling_burst_limit
        ),
        access_log_settings=_AccessLogSettings(access_log_group),
    )
    return HttpApiStage(http_api, access_log_group, stage)


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
