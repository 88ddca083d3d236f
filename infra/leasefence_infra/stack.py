"""The example stack of ``infra/app.py`` and how it reads its CDK context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Annotations, CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_logs as logs
from constructs import Construct

from .service import LeaseFenceService
from .worker import WorkerProps

#: Safe placeholders so `make synth` works offline: `.invalid` can never issue a token, so a
#: stack deployed with them refuses every authenticated request (and synth warns).
PLACEHOLDER_ISSUER = "https://issuer.invalid/"
PLACEHOLDER_AUDIENCE = "leasefence"
#: The example app's worker runs the demo handlers (``functions/worker/demo_handlers.py``).
DEMO_WORKER_HANDLERS = "worker.demo_handlers:HANDLERS"
DEFAULT_WORKER_TENANTS = ("demo",)


_R = logs.RetentionDays
#: CloudWatch Logs retention periods by number of days.
_RETENTION = {
    1: _R.ONE_DAY, 3: _R.THREE_DAYS, 5: _R.FIVE_DAYS, 7: _R.ONE_WEEK, 14: _R.TWO_WEEKS,
    30: _R.ONE_MONTH, 60: _R.TWO_MONTHS, 90: _R.THREE_MONTHS, 120: _R.FOUR_MONTHS,
    150: _R.FIVE_MONTHS, 180: _R.SIX_MONTHS, 365: _R.ONE_YEAR, 400: _R.THIRTEEN_MONTHS,
    545: _R.EIGHTEEN_MONTHS, 731: _R.TWO_YEARS, 1096: _R.THREE_YEARS, 1827: _R.FIVE_YEARS,
    2192: _R.SIX_YEARS, 2557: _R.SEVEN_YEARS, 2922: _R.EIGHT_YEARS, 3288: _R.NINE_YEARS,
    3653: _R.TEN_YEARS,
}


def _bool(value: Any, default: bool) -> bool:
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
    ``tableName``, ``retentionDays``, ``deletionProtection``, ``customerManagedKey``,
    ``tenantIsolation``, ``logRetentionDays``, ``logLevel``, ``dueShards``, ``sweepShards``,
    ``destroyOnRemoval`` (dev stacks only: tables, buckets, keys are deleted with the stack),
    ``worker`` (default true: deploy the worker function with the demo handlers) and
    ``workerTenants`` (comma-separated, default ``demo``).
    """
    if isinstance(node_or_context, Construct):
        node = node_or_context.node

        def get(key: str) -> Any:
            return node.try_get_context(key)
    else:
        get = node_or_context.get

    create_user_pool = _bool(get("createUserPool"), False)
    props: dict[str, Any] = {}
    if create_user_pool:
        props["create_user_pool"] = True
        props["user_pool_domain_prefix"] = get("userPoolDomainPrefix")
        if get("jwtAudience"):
            props["jwt_audience"] = _list(get("jwtAudience"))
    else:
        props["jwt_issuer"] = get("jwtIssuer") or PLACEHOLDER_ISSUER
        props["jwt_audience"] = _list(get("jwtAudience")) or [PLACEHOLDER_AUDIENCE]
    if get("tableName"):
        props["table_name"] = str(get("tableName"))
    for key, prop in (("payloadRetentionDays", "payload_retention_days"), ("dueShards", "due_shards"),
                      ("sweepShards", "sweep_shards")):
        if get(key) is not None:
            props[prop] = int(get(key))
    if get("identityRetentionDays") is not None:
        days = str(get("identityRetentionDays"))
        props["identity_retention_days"] = None if days == "forever" else int(days)
    props["deletion_protection"] = _bool(get("deletionProtection"), True)
    props["create_encryption_key"] = _bool(get("customerManagedKey"), False)
    props["tenant_isolation"] = _bool(get("tenantIsolation"), False)
    if _bool(get("destroyOnRemoval"), False):
        props["removal_policy"] = RemovalPolicy.DESTROY
    if get("logRetentionDays") is not None:
        days = int(get("logRetentionDays"))
        if days not in _RETENTION:
            raise ValueError(f"logRetentionDays={days} is not a CloudWatch Logs retention period "
                             f"(one of {sorted(_RETENTION)})")
        props["log_retention"] = _RETENTION[days]
    if get("logLevel"):
        props["log_level"] = str(get("logLevel")).upper()
    if _bool(get("worker"), True):
        tenants = _list(get("workerTenants")) if get("workerTenants") is not None else list(DEFAULT_WORKER_TENANTS)
        if not tenants:
            raise ValueError("workerTenants is empty: name at least one tenant, or set -c worker=false")
        props["worker"] = WorkerProps(handlers=DEMO_WORKER_HANDLERS, tenants=tenants)
    return props


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
        props = dict(service_props if service_props is not None else service_props_from_context(self))
        self.service = service = LeaseFenceService(self, "LeaseFence", **props)
        # Outputs live in the stack, not the construct, so they keep plain names
        # (`cdk deploy --outputs-file` gives {"<stack>": {"ApiUrl": ...}}).
        CfnOutput(self, "ApiUrl", value=service.api_url, description="leasefence API base URL")
        CfnOutput(self, "TableName", value=service.table.table_name, description="operations table")
        CfnOutput(self, "PayloadBucketName", value=service.payload_bucket.bucket_name,
                  description="payload bucket")
        CfnOutput(self, "AlarmTopicArn", value=service.alarm_topic.topic_arn,
                  description="SNS topic of the alarms (subscribe to it)")
        CfnOutput(self, "DashboardName", value=service.dashboard.dashboard_name,
                  description="CloudWatch dashboard")
        if service.worker_function is not None:
            CfnOutput(self, "WorkerFunctionName", value=service.worker_function.function_name,
                      description="worker function (its log group shows each drain)")
        if service.user_pool is not None and service.user_pool_client is not None:
            CfnOutput(self, "UserPoolId", value=service.user_pool.user_pool_id)
            CfnOutput(self, "UserPoolClientId", value=service.user_pool_client.user_pool_client_id)
            CfnOutput(self, "TokenUrl", value=service.token_url or "",
                      description="OAuth2 token endpoint (client_credentials)")
        if props.get("jwt_issuer") == PLACEHOLDER_ISSUER:
            Annotations.of(self).add_warning_v2(
                "leasefence:placeholder-issuer",
                f"jwtIssuer is the placeholder {PLACEHOLDER_ISSUER}: every authenticated route will "
                "answer 401. Deploy with -c jwtIssuer=<your issuer> -c jwtAudience=<audience>.",
            )
