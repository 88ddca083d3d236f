"""The environment variables the construct sets on its functions (read by ``leasefence.settings``)."""

from __future__ import annotations

#: On every function that runs the engine (API, sweeper, worker, publisher).
SHARED_ENV = (
    "LEASEFENCE_TABLE",
    "LEASEFENCE_PAYLOAD_BUCKET",
    "LEASEFENCE_DUE_SHARDS",
    "LEASEFENCE_SWEEP_SHARDS",
    "LEASEFENCE_LOG_HASH_KEY_PARAM",
    "LEASEFENCE_IDENTITY_RETENTION_DAYS",
    "LEASEFENCE_PAYLOAD_RETENTION_DAYS",
    "LEASEFENCE_FENCE_EPOCH",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "POWERTOOLS_TRACER_CAPTURE_RESPONSE",
)
#: On every function that runs the engine, only when set to other than its default (a
#: deployment of one write shard keeps the template it had before issue 33).
OPTIONAL_SHARED_ENV = ("LEASEFENCE_OPERATION_SHARDS", "LEASEFENCE_PACK_PAYLOADS")
#: On the API function with tenant isolation.
TENANT_ENV = ("LEASEFENCE_TENANT_ROLE_ARN", "LEASEFENCE_TENANT_SESSION_TAG")
#: On the worker function only.
WORKER_ENV = (
    "LEASEFENCE_WORKER_HANDLERS",
    "LEASEFENCE_WORKER_TENANTS",
    "LEASEFENCE_WORKER_LEASE_SECONDS",
)
#: On the worker function, only in the ``invoke`` dispatch mode.
WORKER_DISPATCH_ENV = "LEASEFENCE_WORKER_DISPATCH"
#: On the publishing function (the publisher's, or the worker's when they share a mapping): the
#: bus of the outcome events.
PUBLISHER_ENV = ("LEASEFENCE_EVENT_BUS",)
#: On the worker function when it also publishes (one stream reader): the publisher's on-failure
#: bucket, where it keeps the records it could not publish.
SHARED_PUBLISHER_ENV = "LEASEFENCE_PUBLISHER_FAILURES"
#: On the API function: the alarm topic, the alert route the go/no-go report names.
API_ENV = ("LEASEFENCE_ALARM_TOPIC",)
#: Every variable the construct sets (a worker's own ``environment`` may not replace one).
RESERVED_ENV = (
    *SHARED_ENV,
    *OPTIONAL_SHARED_ENV,
    *TENANT_ENV,
    *WORKER_ENV,
    *PUBLISHER_ENV,
    WORKER_DISPATCH_ENV,
    SHARED_PUBLISHER_ENV,
    *API_ENV,
)

#: POWERTOOLS_SERVICE_NAME, and the ``service`` dimension of every metric.
SERVICE_NAME = "leasefence"


def shared_environment(
    *,
    table_name: str,
    bucket_name: str,
    due_shards: int,
    sweep_shards: int,
    log_hash_secret_arn: str,
    identity_retention_days: int | None,
    payload_retention_days: int,
    fence_epoch: int,
    metrics_namespace: str,
    powertools_log_level: str,
    operation_shards: tuple[int, ...] | None = None,
    pack_payloads: bool = True,
) -> dict[str, str]:
    """:data:`SHARED_ENV`, filled in (names follow the brought-in or created resources)."""
    environment = {
        "LEASEFENCE_TABLE": table_name,
        "LEASEFENCE_PAYLOAD_BUCKET": bucket_name,
        "LEASEFENCE_DUE_SHARDS": str(due_shards),
        "LEASEFENCE_SWEEP_SHARDS": str(sweep_shards),
        # A Secrets Manager secret ARN (a valid SecretId for GetSecretValue / Powertools
        # parameters.get_secret): the functions read it once per cold start.
        "LEASEFENCE_LOG_HASH_KEY_PARAM": log_hash_secret_arn,
        "LEASEFENCE_IDENTITY_RETENTION_DAYS": (
            "forever" if identity_retention_days is None else str(identity_retention_days)
        ),
        "LEASEFENCE_PAYLOAD_RETENTION_DAYS": str(payload_retention_days),
        "LEASEFENCE_FENCE_EPOCH": str(fence_epoch),
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": metrics_namespace,
        "POWERTOOLS_LOG_LEVEL": powertools_log_level,
        # Traces must not carry payloads or ids in responses.
        "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
    }
    assert set(environment) == set(SHARED_ENV)
    if operation_shards is not None:  # None: each tenant's counts as recorded (the engine's)
        environment["LEASEFENCE_OPERATION_SHARDS"] = ",".join(str(n) for n in operation_shards)
    if not pack_payloads:  # packed is the engine's default: a default stack sets nothing
        environment["LEASEFENCE_PACK_PAYLOADS"] = "false"
    return environment
