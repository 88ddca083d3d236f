"""The example stack of ``infra/app.py`` and how it reads its CDK context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Annotations, CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from constructs import Construct

from .service import LeaseFenceService
from .worker_props import WorkerProps

#: Placeholders for an offline synth (``-c allowPlaceholderIssuer=true``, what `make synth`
#: passes): `.invalid` can never issue a token, so a stack deployed with them refuses every
#: authenticated request (and synth warns). Without the opt-out a missing issuer is an error.
PLACEHOLDER_ISSUER = "https://issuer.invalid/"
PLACEHOLDER_AUDIENCE = "leasefence"
#: The one sentence synthesis stops with when no issuer is configured.
MISSING_ISSUER_MESSAGE = (
    "No JWT issuer configured: pass -c jwtIssuer=<issuer URL> -c jwtAudience=<audience>, or "
    "-c createUserPool=true -c userPoolDomainPrefix=<prefix>, or -c allowPlaceholderIssuer=true "
    "for an offline synth whose API refuses every token."
)
#: ``-c worker=demo``: the worker runs the demo handlers (``functions/worker/demo_handlers.py``).
DEMO_WORKER_HANDLERS = "worker.demo_handlers:HANDLERS"
DEFAULT_WORKER_TENANTS = ("demo",)


class ContextError(ValueError):
    """A CDK context value (``-c key=value``) the example app cannot use; ``infra/app.py`` prints
    it as one line and exits non-zero."""


_R = logs.RetentionDays
#: CloudWatch Logs retention periods by number of days.
_RETENTION = {
    1: _R.ONE_DAY,
    3: _R.THREE_DAYS,
    5: _R.FIVE_DAYS,
    7: _R.ONE_WEEK,
    14: _R.TWO_WEEKS,
    30: _R.ONE_MONTH,
    60: _R.TWO_MONTHS,
    90: _R.THREE_MONTHS,
    120: _R.FOUR_MONTHS,
    150: _R.FIVE_MONTHS,
    180: _R.SIX_MONTHS,
    365: _R.ONE_YEAR,
    400: _R.THIRTEEN_MONTHS,
    545: _R.EIGHTEEN_MONTHS,
    731: _R.TWO_YEARS,
    1096: _R.THREE_YEARS,
    1827: _R.FIVE_YEARS,
    2192: _R.SIX_YEARS,
    2557: _R.SEVEN_YEARS,
    2922: _R.EIGHT_YEARS,
    3288: _R.NINE_YEARS,
    3653: _R.TEN_YEARS,
}


def context_bool(value: Any, default: bool) -> bool:
    """A boolean context value (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [v.strip() for v in str(value).split(",") if v.strip()]


def service_props_from_context(node_or_context: Construct | Mapping[str, Any]) -> dict[str, Any]:
    """``LeaseFenceService`` keyword arguments from CDK context (``-c key=value``).

    ``jwtIssuer``, ``jwtAudience`` (comma-separated), ``createUserPool``, ``userPoolDomainPrefix``,
    ``serviceClientTenant`` (the tenant of the pool's own app client), ``iamTenant`` (the IAM API
    for callers inside AWS, acting for this tenant),
    ``tableName``, ``retentionDays``, ``deletionProtection``, ``customerManagedKey``,
    ``tenantIsolation``, ``snapStart``, ``packPayloads`` (on by default: payload items packed where
    shorter; ``false`` while readers from before packing read the table), ``logRetentionDays``,
    ``logLevel``, ``systemLogLevel`` (Lambda's platform lines:
    ``DEBUG``, ``INFO`` or ``WARN``), ``tracing`` (X-Ray,
    off by default), ``events`` (outcome events, off by default), ``alarms`` (on by default),
    ``dashboard`` (off by default), ``dueShards``, ``sweepShards``, ``operationShards`` (``16`` or
    ``16,1``: write shards per tenant, the first where new operations go),
    ``destroyOnRemoval`` (dev stacks only: tables, buckets, keys are deleted with the stack),
    ``metricsNamespace`` (default ``LeaseFence/<stack name>/LeaseFence``), ``allowPlaceholderIssuer``
    (offline synth only: without ``jwtIssuer`` or ``createUserPool`` synthesis is refused),
    ``workerHandlers`` (``package.module:NAME`` in ``functions/``: deploy the worker function with
    these handlers), ``worker`` (``demo``: the worker with the demo handlers; default: no worker)
    and ``workerTenants`` (comma-separated; default ``demo`` for the demo handlers, required
    with ``workerHandlers``).
    """
    if isinstance(node_or_context, Construct):
        node = node_or_context.node

        def get(key: str) -> Any:
            return node.try_get_context(key)
    else:
        context = node_or_context

        def get(key: str) -> Any:
            return context.get(key)

    create_user_pool = context_bool(get("createUserPool"), False)
    props: dict[str, Any] = {}
    if create_user_pool:
        props["create_user_pool"] = True
        props["user_pool_domain_prefix"] = get("userPoolDomainPrefix")
        if get("serviceClientTenant"):
            props["service_client_tenant"] = str(get("serviceClientTenant"))
        if get("jwtAudience"):
            props["jwt_audience"] = _list(get("jwtAudience"))
    elif get("jwtIssuer"):
        props["jwt_issuer"] = str(get("jwtIssuer"))
        props["jwt_audience"] = _list(get("jwtAudience")) or [PLACEHOLDER_AUDIENCE]
    elif context_bool(get("allowPlaceholderIssuer"), False):
        props["jwt_issuer"] = PLACEHOLDER_ISSUER
        props["jwt_audience"] = _list(get("jwtAudience")) or [PLACEHOLDER_AUDIENCE]
    else:
        raise ContextError(MISSING_ISSUER_MESSAGE)
    if get("iamTenant"):
        props["iam_tenant"] = str(get("iamTenant"))
    if get("tableName"):
        props["table_name"] = str(get("tableName"))
    for key, prop in (
        ("payloadRetentionDays", "payload_retention_days"),
        ("dueShards", "due_shards"),
        ("sweepShards", "sweep_shards"),
    ):
        if get(key) is not None:
            props[prop] = int(get(key))
    if get("operationShards") is not None:  # "16" or "16,1" (the first: where new ones go)
        props["operation_shards"] = tuple(int(n) for n in str(get("operationShards")).split(","))
    if get("identityRetentionDays") is not None:
        identity_days = str(get("identityRetentionDays"))
        props["identity_retention_days"] = (
            None if identity_days == "forever" else int(identity_days)
        )
    if get("fenceEpoch") is not None:
        props["fence_epoch"] = int(str(get("fenceEpoch")))
    props["deletion_protection"] = context_bool(get("deletionProtection"), True)
    props["create_encryption_key"] = context_bool(get("customerManagedKey"), False)
    props["tenant_isolation"] = context_bool(get("tenantIsolation"), False)
    props["snap_start"] = context_bool(get("snapStart"), False)
    props["pack_payloads"] = context_bool(get("packPayloads"), True)
    if context_bool(get("destroyOnRemoval"), False):
        props["removal_policy"] = RemovalPolicy.DESTROY
    if get("logRetentionDays") is not None:
        days = int(get("logRetentionDays"))
        if days not in _RETENTION:
            raise ContextError(
                f"logRetentionDays={days} is not a CloudWatch Logs retention period "
                f"(one of {sorted(_RETENTION)})"
            )
        props["log_retention"] = _RETENTION[days]
    if get("logLevel"):
        props["log_level"] = str(get("logLevel")).upper()
    if get("systemLogLevel"):
        props["system_log_level"] = str(get("systemLogLevel")).upper()
    if get("tracing") is not None:
        props["tracing"] = context_bool(get("tracing"), False)
    for key, default in (("events", False), ("alarms", True), ("dashboard", False)):
        if get(key) is not None:
            props[key] = context_bool(get(key), default)
    if get("metricsNamespace"):
        props["metrics_namespace"] = str(get("metricsNamespace"))
    worker = _worker_from_context(get)
    if worker is not None:
        props["worker"] = worker
    return props


def _worker_from_context(get: Any) -> WorkerProps | None:
    """No worker unless ``workerHandlers`` or ``worker=demo`` asks for one."""
    switch = get("worker")
    handlers = get("workerHandlers")
    demo = switch is not None and str(switch).strip().lower() == "demo"
    enabled = demo or (handlers is not None and context_bool(switch, True))
    if not enabled:
        if switch is not None and context_bool(switch, False):
            raise ContextError(
                "-c worker=true needs -c workerHandlers=<package.module:NAME> "
                "(or -c worker=demo for the demo handlers)"
            )
        if get("workerTenants") is not None and switch is None:
            raise ContextError(
                "workerTenants is set but no worker is deployed: add "
                "-c workerHandlers=<package.module:NAME> or -c worker=demo"
            )
        return None
    if demo and handlers is not None:
        raise ContextError("give either -c worker=demo or -c workerHandlers=..., not both")
    if get("workerTenants") is not None:
        tenants = _list(get("workerTenants"))
    elif demo:
        tenants = list(DEFAULT_WORKER_TENANTS)
    else:
        raise ContextError(
            "-c workerHandlers needs -c workerTenants=<tenant,...> (the tenants it claims for)"
        )
    if not tenants:
        raise ContextError("workerTenants is empty: name at least one tenant")
    return WorkerProps(handlers=DEMO_WORKER_HANDLERS if demo else str(handlers), tenants=tenants)


class LeaseFenceStack(Stack):
    """One ``LeaseFenceService``; extra keyword arguments go to ``Stack``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service_props: Mapping[str, Any] | None = None,
        **stack_kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **stack_kwargs)
        props = dict(
            service_props if service_props is not None else service_props_from_context(self)
        )
        self.service = service = LeaseFenceService(self, "LeaseFence", **props)
        # Outputs live in the stack, not the construct, so they keep plain names
        # (`cdk deploy --outputs-file` gives {"<stack>": {"ApiUrl": ...}}).
        CfnOutput(self, "ApiUrl", value=service.api_url, description="leasefence API base URL")
        CfnOutput(self, "TableName", value=service.table.table_name, description="operations table")
        CfnOutput(
            self,
            "PayloadBucketName",
            value=service.payload_bucket.bucket_name,
            description="payload bucket",
        )
        # The optional parts' outputs, where the parts exist (alarms, dashboard, events).
        topic, dashboard, bus = service.alarm_topic, service.dashboard, service.event_bus
        for name, value, description in (
            (
                "AlarmTopicArn",
                topic and topic.topic_arn,
                "SNS topic of the alarms (subscribe to it)",
            ),
            ("DashboardName", dashboard and dashboard.dashboard_name, "CloudWatch dashboard"),
            (
                "EventBusName",
                bus and bus.event_bus_name,
                "EventBridge bus of the outcome events (add your rules to it)",
            ),
        ):
            if value is not None:
                CfnOutput(self, name, value=value, description=description)
        CfnOutput(
            self,
            "PublisherFailuresBucketName",
            value=service.publisher.failure_bucket.bucket_name,
            description="stream records the publisher gave up on, kept whole: "
            "leasefence publisher redrive --bucket <this>",
        )
        CfnOutput(
            self,
            "TenantErasurePolicyArn",
            value=service.tenant_erasure_policy().managed_policy_arn,
            description="managed policy for the operators who run leasefence erase-tenant",
        )
        if service.iam_api_url is not None:
            CfnOutput(
                self,
                "IamApiUrl",
                value=service.iam_api_url,
                description="leasefence API base URL for IAM callers (SigV4, one scope per prefix)",
            )
        if service.worker_function is not None:
            CfnOutput(
                self,
                "WorkerFunctionName",
                value=service.worker_function.function_name,
                description="worker function (its log group shows each drain)",
            )
        if service.user_pool is not None:
            CfnOutput(self, "UserPoolId", value=service.user_pool.pool.user_pool_id)
            CfnOutput(self, "UserPoolClientId", value=service.user_pool.client.user_pool_client_id)
            CfnOutput(
                self,
                "TokenUrl",
                value=service.token_url or "",
                description="OAuth2 token endpoint (client_credentials)",
            )
        if props.get("jwt_issuer") == PLACEHOLDER_ISSUER:
            Annotations.of(self).add_warning_v2(
                "leasefence:placeholder-issuer",
                f"jwtIssuer is the placeholder {PLACEHOLDER_ISSUER}: every authenticated route will "
                "answer 401. Deploy with -c jwtIssuer=<your issuer> -c jwtAudience=<audience>.",
            )
