"""The service's functions (``function.py``, ``environment.py``): runtime, tracing, layers,
environment, log level, and roles that hold only what each function needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import (
    ISSUER,
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    index_arn,
    logical_id,
    props,
    role_statements,
    service_of,
)

from leasefence import schema
from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX
from leasefence_infra import LeaseFenceService
from leasefence_infra.function import POWERTOOLS_LAYER_PARAMETER

EXPECTED_ENV = {
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
    "POWERTOOLS_TRACE_DISABLED",
}


WORKER_ENV = {"LEASEFENCE_WORKER_HANDLERS", "LEASEFENCE_WORKER_TENANTS", "LEASEFENCE_WORKER_LEASE_SECONDS"}


def test_functions_runtime_tracing_env_layers(variant) -> None:
    name, stack, svc, tpl = variant
    core_layer = logical_id(stack, svc.core_layer)
    # Powertools is bundled in the core layer (the default): no layer parameter to resolve.
    assert svc.powertools_layer is None
    assert not [k for k, v in tpl.get("Parameters", {}).items() if v.get("Default") == POWERTOOLS_LAYER_PARAMETER]
    expected = {
        svc.api.function.function: ("api.handler.lambda_handler", svc.api.function.log_group, svc.api.function.role),
        svc.sweeper.function.function: ("sweeper.handler.lambda_handler", svc.sweeper.function.log_group,
                                        svc.sweeper.function.role),
        svc.worker_function: ("worker.handler.lambda_handler", svc.worker.function.log_group, svc.worker.function.role),
    }
    if name == "full":  # two stream readers: the publisher's own function (else the worker publishes)
        expected[svc.publisher_function] = ("publisher.handler.lambda_handler", svc.publisher.function.log_group,
                                            svc.publisher.function.role)
    else:
        assert svc.publisher_function is svc.worker_function
    for fn, (handler, log_group, role) in expected.items():
        f = props(tpl, logical_id(stack, fn))
        assert f["Runtime"] == "python3.12"
        assert f["Architectures"] == ["arm64"]
        assert f["Handler"] == handler
        # Tracing is off by default (each recorded trace is billed); the full stack turns it on.
        if name == "full":
            assert f["TracingConfig"] == {"Mode": "Active"}
        else:
            assert "TracingConfig" not in f
        layers = [{"Ref": core_layer}]
        if fn is svc.worker_function and name == "full":
            # The handler layer is merged first, so the core layer wins a clash.
            layers = [{"Ref": logical_id(stack, svc.worker_handlers_layer)}, *layers]
        assert f["Layers"] == layers
        assert f["LoggingConfig"]["LogGroup"] == {"Ref": logical_id(stack, log_group)}
        assert f["Role"] == getatt(logical_id(stack, role))
        env = f["Environment"]["Variables"]
        extra = {"LEASEFENCE_TENANT_ROLE_ARN", "LEASEFENCE_TENANT_SESSION_TAG",
                 "LEASEFENCE_IAM_TENANT", "LEASEFENCE_IAM_API_ID"} if (  # the full stack's IAM API
            name == "full" and fn is svc.api.function.function) else set()
        if fn is svc.api.function.function:
            extra |= {"LEASEFENCE_ALARM_TOPIC"}  # the go/no-go report's alert route
            assert env["LEASEFENCE_ALARM_TOPIC"] == {"Ref": logical_id(stack, svc.alarm_topic)}
            if name == "full":  # the console signs in through the user pool (issue 25)
                extra |= {f"LEASEFENCE_CONSOLE_OIDC_{k}" for k in (
                    "ISSUER", "CLIENT_ID", "SCOPES", "AUTHORIZATION_ENDPOINT", "TOKEN_ENDPOINT", "LOGOUT_ENDPOINT")}
        if fn is svc.worker_function:
            extra = WORKER_ENV | set(svc.props.worker.environment)
            # The full stack hands claims to invocations; by default the worker also publishes.
            extra |= {"LEASEFENCE_WORKER_DISPATCH"} if name == "full" else {"LEASEFENCE_PUBLISHER_FAILURES"}
        if fn is svc.publisher_function and name == "full":  # the bus only with events on
            extra = {"LEASEFENCE_EVENT_BUS"} if name == "full" else set()
        assert set(env) == EXPECTED_ENV | extra
        # Powertools imports no X-Ray SDK unless the function is traced.
        assert env["POWERTOOLS_TRACE_DISABLED"] == ("false" if name == "full" else "true")
        assert env["LEASEFENCE_TABLE"] == {"Ref": logical_id(stack, svc.table)}
        assert env["LEASEFENCE_PAYLOAD_BUCKET"] == {"Ref": logical_id(stack, svc.payload_bucket)}
        assert env["LEASEFENCE_LOG_HASH_KEY_PARAM"] == {"Ref": logical_id(stack, svc.storage.log_hash_key)}
        assert env["LEASEFENCE_DUE_SHARDS"] == str(svc.props.due_shards)
        assert env["LEASEFENCE_SWEEP_SHARDS"] == str(svc.props.sweep_shards)
        assert env["LEASEFENCE_PAYLOAD_RETENTION_DAYS"] == str(svc.props.payload_retention_days)
        assert env["LEASEFENCE_FENCE_EPOCH"] == str(svc.props.fence_epoch)
        assert env["LEASEFENCE_IDENTITY_RETENTION_DAYS"] == (
            "forever" if svc.props.identity_retention_days is None else str(svc.props.identity_retention_days))
        assert env["POWERTOOLS_SERVICE_NAME"] == "leasefence"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == svc.metrics_namespace
        assert env["POWERTOOLS_LOG_LEVEL"] == ("WARNING" if name == "default" else "DEBUG")
        assert props(tpl, logical_id(stack, log_group))["RetentionInDays"] == 30
    layer = props(tpl, core_layer)
    assert layer["CompatibleRuntimes"] == ["python3.12"]
    assert layer["CompatibleArchitectures"] == ["arm64"]


def test_one_log_level_drives_powertools_and_lambda(variant) -> None:
    """log_level sets POWERTOOLS_LOG_LEVEL and Lambda's JSON log filtering on every function: the
    application filter never above INFO (the EMF metric lines have no level and count as INFO),
    the system level (platform start/report lines) WARN unless the level is DEBUG or INFO."""
    name, stack, svc, tpl = variant
    level, application, system = ("WARNING", "INFO", "WARN") if name == "default" else ("DEBUG",) * 3
    assert svc.log_level == level
    functions = [svc.api.function.function, svc.sweeper.function.function, svc.worker_function]
    if svc.user_pool is not None and svc.user_pool.pre_token is not None:
        functions.append(svc.user_pool.pre_token.function)
    for fn in functions:
        f = props(tpl, logical_id(stack, fn))
        assert f["LoggingConfig"]["LogFormat"] == "JSON"
        assert f["LoggingConfig"]["ApplicationLogLevel"] == application
        assert f["LoggingConfig"]["SystemLogLevel"] == system
        env = f["Environment"]["Variables"]
        if "POWERTOOLS_LOG_LEVEL" in env:
            assert env["POWERTOOLS_LOG_LEVEL"] == level


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"log_level": "INFO"}, ("INFO", "INFO", "INFO", None)),
        ({"log_level": "ERROR", "system_log_level": "info"}, ("ERROR", "INFO", "INFO", None)),
        ({"tracing": True}, ("WARNING", "INFO", "WARN", {"Mode": "Active"})),
    ],
)
def test_each_observability_default_can_be_overridden(prebuilt_layer: Path, overrides, expected) -> None:
    stack = Stack(App(), "Observability")
    svc = LeaseFenceService(stack, "Svc", **ISSUER, core_layer=lambda_.Code.from_asset(str(prebuilt_layer)),
                            **overrides)
    f = props(Template.from_stack(stack).to_json(), logical_id(stack, svc.api.function.function))
    powertools, application, system, tracing = expected
    assert f["Environment"]["Variables"]["POWERTOOLS_LOG_LEVEL"] == powertools
    assert (f["LoggingConfig"]["ApplicationLogLevel"], f["LoggingConfig"]["SystemLogLevel"]) == (application, system)
    assert f.get("TracingConfig") == tracing
    assert f["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == ("false" if tracing else "true")


def test_no_function_role_has_managed_policies(variant) -> None:
    _, stack, svc, tpl = variant
    for role in (svc.api.function.role, svc.sweeper.function.role, svc.sweeper.schedule.role,
                 svc.worker.function.role, svc.worker.schedule.role):
        assert "ManagedPolicyArns" not in props(tpl, logical_id(stack, role))


def test_dynamodb_permissions_are_exact(synth) -> None:
    stack, svc, tpl = service_of(synth, "default")
    table = logical_id(stack, svc.table)
    api = actions_by_resource(role_statements(tpl, logical_id(stack, svc.api.function.role)), "dynamodb:")
    sweeper = actions_by_resource(role_statements(tpl, logical_id(stack, svc.sweeper.function.role)), "dynamodb:")
    assert grant_set(api) == grant_set([
        (frozenset({"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem",
                    "dynamodb:Query"}),
         getatt(table)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
    ])
    assert grant_set(sweeper) == grant_set([
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.SWEEP_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PARKED_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PURGE_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:Query"}), getatt(table)),
    ])


def test_other_permissions_are_scoped(variant) -> None:
    name, stack, svc, tpl = variant
    bucket = logical_id(stack, svc.payload_bucket)
    api = role_statements(tpl, logical_id(stack, svc.api.function.role))
    sweeper = role_statements(tpl, logical_id(stack, svc.sweeper.function.role))
    assert grant_set(actions_by_resource(api, "s3:")) == grant_set([
        (frozenset({"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}),
         {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]}),
        (frozenset({"s3:ListBucket"}), getatt(bucket)),
    ])
    # Unconditioned: S3 only answers 404 (not 403) for a missing key to a caller that may list.
    (listing,) = [s for s in api if "s3:ListBucket" in as_list(s["Action"])]
    assert "Condition" not in listing
    # The sweeper deletes payloads that are due (retention after the end, or erasure), nothing else.
    assert actions_by_resource(sweeper, "s3:") == [
        (frozenset({"s3:DeleteObject"}), {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]})
    ]
    secret = {"Ref": logical_id(stack, svc.storage.log_hash_key)}
    for statements, log_group in ((api, svc.api.function.log_group), (sweeper, svc.sweeper.function.log_group)):
        assert actions_by_resource(statements, "secretsmanager:") == [
            (frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}), secret)
        ]
        assert actions_by_resource(statements, "logs:") == [
            (frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}), getatt(logical_id(stack, log_group)))
        ]
        # The only "*" resource is X-Ray (no resource-level permissions), and only when traced.
        star = [s for s in statements if s["Resource"] == "*"]
        traced = [["xray:PutTelemetryRecords", "xray:PutTraceSegments"]] if name == "full" else []
        assert [sorted(as_list(s["Action"])) for s in star] == traced
        for st in statements:
            for action in as_list(st["Action"]):
                assert not action.endswith(":*"), action
