"""The worker function (``worker.py``): its function, handler layer, schedule, exact role,
alarms and dashboard, and nothing of it without ``worker``."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Match, Template
from tests.support.infra import (
    ORDERS_KEY_ARN,
    actions_by_resource,
    as_list,
    denies_insecure_transport,
    getatt,
    grant_set,
    index_arn,
    invoked_arn,
    invoked_qualifier,
    logical_id,
    props,
    resources,
    role_statements,
    service_of,
)

from leasefence import schema
from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX
from leasefence_infra import LeaseFenceService
from leasefence_infra.monitoring import WORKER_METRICS

#: (stack, expected values) of the worker in each test stack: the example app's defaults, and
#: every option set (see conftest.FullStack).
WORKER_EXPECTED = {
    "default": {"handlers": "worker.demo_handlers:HANDLERS", "tenants": "demo", "lease": "60",
                "timeout": 300, "memory": 512, "rate": "rate(1 minute)", "lost_ownership": 5},
    "full": {"handlers": "acme_jobs.jobs:HANDLERS", "tenants": "acme,globex", "lease": "120",
             "timeout": 600, "memory": 1024, "rate": "rate(2 minutes)", "lost_ownership": 3},
}


def _imported_table_arn(name: str) -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":dynamodb:", {"Ref": "AWS::Region"},
                              ":", {"Ref": "AWS::AccountId"}, f":table/{name}"]]}


def test_worker_function(variant) -> None:
    name, stack, svc, tpl = variant
    want = WORKER_EXPECTED[name]
    Template.from_json(tpl).has_resource_properties("AWS::Lambda::Function", {
        "Handler": "worker.handler.lambda_handler",
        "Runtime": "python3.12",
        "Architectures": ["arm64"],
        "TracingConfig": {"Mode": "Active"} if name == "full" else Match.absent(),
        "Timeout": want["timeout"],
        "MemorySize": want["memory"],
        "LoggingConfig": Match.object_like({"LogFormat": "JSON",
                                            "LogGroup": {"Ref": logical_id(stack, svc.worker.function.log_group)}}),
        "Role": getatt(logical_id(stack, svc.worker.function.role)),
        "Environment": {"Variables": Match.object_like({
            "LEASEFENCE_WORKER_HANDLERS": want["handlers"],
            "LEASEFENCE_WORKER_TENANTS": want["tenants"],
            "LEASEFENCE_WORKER_LEASE_SECONDS": want["lease"],
            "LEASEFENCE_TABLE": {"Ref": logical_id(stack, svc.table)},
            "LEASEFENCE_PAYLOAD_BUCKET": {"Ref": logical_id(stack, svc.payload_bucket)},
            "LEASEFENCE_LOG_HASH_KEY_PARAM": {"Ref": logical_id(stack, svc.storage.log_hash_key)},
            "LEASEFENCE_DUE_SHARDS": str(svc.props.due_shards),
        })},
    })
    env = props(tpl, logical_id(stack, svc.worker_function))["Environment"]["Variables"]
    # The worker uses the function's own role for every tenant: no tenant role, even when the
    # API has one.
    assert "LEASEFENCE_TENANT_ROLE_ARN" not in env
    if name == "full":
        assert env["ACME_ORDERS_TABLE"] == "acme-orders" and env["ACME_LEDGER_TABLE"] == "acme-ledger"
    assert props(tpl, logical_id(stack, svc.worker.function.log_group))["RetentionInDays"] == 30
    # A failed drain is not retried by Lambda (the next tick drains again).
    Template.from_json(tpl).has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": {"Ref": logical_id(stack, svc.worker_function)},
        "MaximumRetryAttempts": 0,
        "MaximumEventAgeInSeconds": 60,
        "Qualifier": invoked_qualifier(stack, svc.worker.function),
    })


def test_worker_handler_layer(synth) -> None:
    stack, svc, tpl = service_of(synth, "full")
    layer = props(tpl, logical_id(stack, svc.worker_handlers_layer))
    assert layer["CompatibleRuntimes"] == ["python3.12"]
    assert layer["CompatibleArchitectures"] == ["arm64"]
    # package_layer_code put the consumer's package under python/, where Lambda imports it from.
    asset = synth.outdir / f"asset.{layer['Content']['S3Key'].removesuffix('.zip')}"
    assert (asset / "python" / "acme_jobs" / "jobs.py").is_file()
    assert service_of(synth, "default")[1].worker_handlers_layer is None  # demo module: functions/ asset


def test_worker_schedule_retries_and_dlq(variant) -> None:
    name, stack, svc, tpl = variant
    dlq = logical_id(stack, svc.worker.schedule.dlq)
    schedule_role = logical_id(stack, svc.worker.schedule.role)
    Template.from_json(tpl).has_resource_properties("AWS::Scheduler::Schedule", {
        "ScheduleExpression": WORKER_EXPECTED[name]["rate"],
        "State": "ENABLED",
        "Target": Match.object_like({
            "Arn": invoked_arn(stack, svc.worker.function),
            "RoleArn": getatt(schedule_role),
            "RetryPolicy": {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 60},
            "DeadLetterConfig": {"Arn": getatt(dlq)},
        }),
    })
    assert dlq != logical_id(stack, svc.sweeper.schedule.dlq)  # its own DLQ, its own alarm
    queue = props(tpl, dlq)
    if name == "default":
        assert queue["SqsManagedSseEnabled"] is True
    else:
        assert queue["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
    (qpolicy,) = [q["Properties"] for q in resources(tpl, "AWS::SQS::QueuePolicy").values()
                  if q["Properties"]["Queues"] == [{"Ref": dlq}]]
    assert denies_insecure_transport(qpolicy)
    trust = props(tpl, schedule_role)["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]
    statements = role_statements(tpl, schedule_role)
    fn = invoked_arn(stack, svc.worker.function)
    if svc.worker.function.alias is not None:  # SnapStart: the alias, nothing else
        assert actions_by_resource(statements, "lambda:") == [(frozenset({"lambda:InvokeFunction"}), fn)]
    else:
        assert actions_by_resource(statements, "lambda:") == [
            (frozenset({"lambda:InvokeFunction"}), fn),
            (frozenset({"lambda:InvokeFunction"}), {"Fn::Join": ["", [fn, ":*"]]}),
        ]
    assert actions_by_resource(statements, "sqs:") == [(frozenset({"sqs:SendMessage"}), getatt(dlq))]
    assert {a for acts, _ in actions_by_resource(statements, "") for a in acts} <= {
        "lambda:InvokeFunction", "sqs:SendMessage", "kms:GenerateDataKey", "kms:Decrypt"}


def test_worker_role_is_exact(variant) -> None:
    """Every action and resource of the worker's role, nothing else."""
    name, stack, svc, tpl = variant
    table = logical_id(stack, svc.table)
    bucket = logical_id(stack, svc.payload_bucket)
    statements = role_statements(tpl, logical_id(stack, svc.worker.function.role))
    expected_dynamodb = [
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem", "dynamodb:Query"}),
         getatt(table)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        # Stream dispatch: its table's stream, and ListStreams (no resource-level permissions).
        (frozenset({"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}),
         getatt(table, "StreamArn")),
        (frozenset({"dynamodb:ListStreams"}), "*"),
    ]
    if name == "default":  # one stream reader: the worker also publishes (history items)
        expected_dynamodb += [
            (frozenset({"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}), getatt(table)),
        ]
    if name == "full":
        expected_dynamodb += [
            (frozenset({"dynamodb:ConditionCheckItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                        "dynamodb:DeleteItem"}), _imported_table_arn("acme-orders")),
            (frozenset({"dynamodb:UpdateItem", "dynamodb:GetItem"}), _imported_table_arn("acme-ledger")),
        ]
    assert grant_set(actions_by_resource(statements, "dynamodb:")) == grant_set(expected_dynamodb)
    # One stream reader (default): the publisher's bucket, as the shared mapping's on-failure
    # destination and where the function keeps what it could not publish (put and list only).
    failures = logical_id(stack, svc.publisher.failure_bucket)
    kept = [(frozenset({"s3:PutObject"}), {"Fn::Join": ["", [getatt(failures), "/aws/lambda/*"]]}),
            (frozenset({"s3:ListBucket"}), getatt(failures))] if name == "default" else []
    assert grant_set(actions_by_resource(statements, "s3:")) == grant_set([
        (frozenset({"s3:GetObject"}), {"Fn::Join": ["", [getatt(bucket), f"/{PAYLOAD_KEY_PREFIX}*"]]}),
        # A missing object is then 404 (payload_missing), never 403 (a refused access).
        (frozenset({"s3:ListBucket"}), getatt(bucket)),
        *kept,
    ])
    (listing, *_) = [s for s in statements if "s3:ListBucket" in as_list(s["Action"])]
    assert "Condition" not in listing
    # Its failed invocations and the stream records it could not claim go to their on-failure
    # queues (Lambda sends them with this role).
    send = frozenset({"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"})
    assert grant_set(actions_by_resource(statements, "sqs:")) == grant_set([
        (send, getatt(logical_id(stack, svc.worker.failure_queue))),
        # The worker's own stream mapping's queue (two readers; one reader: the bucket above).
        *([(send, getatt(logical_id(stack, svc.dispatch.failure_queue)))] if name == "full" else []),
    ])
    # The invoke dispatch mode (full): its own invocations, this function and its versions.
    fn_arn = getatt(logical_id(stack, svc.worker_function))
    assert grant_set(actions_by_resource(statements, "lambda:")) == grant_set(
        [(frozenset({"lambda:InvokeFunction"}), fn_arn),
         (frozenset({"lambda:InvokeFunction"}), {"Fn::Join": ["", [fn_arn, ":*"]]})] if name == "full" else [])
    assert actions_by_resource(statements, "secretsmanager:") == [
        (frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}),
         {"Ref": logical_id(stack, svc.storage.log_hash_key)})
    ]
    assert actions_by_resource(statements, "logs:") == [
        (frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}), getatt(logical_id(stack, svc.worker.function.log_group)))
    ]
    assert actions_by_resource(statements, "xray:") == ([
        (frozenset({"xray:PutTelemetryRecords", "xray:PutTraceSegments"}), "*")
    ] if name == "full" else [])  # tracing is off by default
    kms_grants = actions_by_resource(statements, "kms:")
    if name == "default":
        assert kms_grants == []
    else:  # the service key (table, bucket; the stream read) and the business table's own key
        data = frozenset({"kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"})
        service_key = getatt(logical_id(stack, svc.encryption_key))
        assert grant_set(kms_grants) == grant_set([
            (data, service_key), (data, ORDERS_KEY_ARN),
            (frozenset({"kms:Decrypt", "kms:DescribeKey"}), service_key),
        ])
    # Nothing else: no other service, no wildcard action, no condition widening anything.
    services = {a.split(":")[0] for st in statements for a in as_list(st["Action"])}
    assert services == {"dynamodb", "s3", "secretsmanager", "logs", "sqs"} | (
        {"kms", "xray", "lambda"} if name == "full" else set())
    for st in statements:
        assert st["Effect"] == "Allow" and "Condition" not in st
        for action in as_list(st["Action"]):
            assert "*" not in action.split(":")[1] or action in {"kms:GenerateDataKey*", "kms:ReEncrypt*"}, action


def test_worker_never_reaches_the_sweep_index_or_lists(variant) -> None:
    _, stack, svc, tpl = variant
    table = logical_id(stack, svc.table)
    statements = role_statements(tpl, logical_id(stack, svc.worker.function.role))
    rendered = json.dumps(statements)
    assert f"/index/{schema.SWEEP_INDEX}" not in rendered
    assert "/index/*" not in rendered
    for actions, resource in actions_by_resource(statements, "dynamodb:"):
        assert not actions & {"dynamodb:Scan", "dynamodb:BatchGetItem", "dynamodb:BatchWriteItem"}
        if resource == getatt(table):
            # Query on its own table only for an unrecorded tenant's layout (one item of the bare
            # partition: tests/infra/test_infra_role_calls.py), never Scan. No Put/Delete but the
            # publisher's, when it publishes too (one stream reader).
            if svc.publisher.function is not svc.worker.function:
                assert not actions & {"dynamodb:PutItem", "dynamodb:DeleteItem"}
        if "dynamodb:Query" in actions:
            assert resource in (getatt(table), index_arn(table, schema.DUE_INDEX))
    assert svc.worker.function.role not in (svc.api.function.role, svc.sweeper.function.role)


def test_worker_alarms_and_dashboard(variant) -> None:
    name, stack, svc, tpl = variant
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    fn_dims = [{"Name": "FunctionName", "Value": {"Ref": logical_id(stack, svc.worker_function)}}]
    template = Template.from_json(tpl)
    for metric, threshold, comparison, periods in (
        ("Errors", 1, "GreaterThanOrEqualToThreshold", 2),
        ("Invocations", 1, "LessThanThreshold", 1),
    ):
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "Namespace": "AWS/Lambda", "MetricName": metric, "Dimensions": fn_dims,
            "Threshold": threshold, "ComparisonOperator": comparison, "EvaluationPeriods": periods,
            "AlarmActions": [topic], "OKActions": [topic],
        })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/Lambda", "MetricName": "Invocations", "Dimensions": fn_dims,
        "TreatMissingData": "breaching",
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Metrics": [Match.object_like({"MetricStat": {
            "Metric": {"Namespace": svc.metrics_namespace, "MetricName": "LostOwnership",
                       "Dimensions": [{"Name": "service", "Value": "leasefence"}]},
            "Period": 900, "Stat": "Sum"}})],
        "Threshold": WORKER_EXPECTED[name]["lost_ownership"],
        "AlarmActions": [topic], "OKActions": [topic],
    })
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName",
                        "Value": getatt(logical_id(stack, svc.worker.schedule.dlq), "QueueName")}],
        "Threshold": 1,
    })
    if svc.dashboard is None:  # the dashboard is opt-in (on in the full stack)
        assert name == "default" and resources(tpl, "AWS::CloudWatch::Dashboard") == {}
        return
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in WORKER_METRICS:
        assert f'\\"{metric}\\"' in body, metric
    assert logical_id(stack, svc.worker_function) in body


def test_no_worker_no_worker_resources(prebuilt_layer) -> None:
    """worker=None (the construct's default) adds nothing of the worker."""
    from aws_cdk import App

    stack = Stack(App(), "Minimal")  # (the stack name is in the metrics namespace)
    svc = LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://x/", jwt_audience=["a"],
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    assert svc.worker is None and svc.worker_function is None
    template = Template.from_stack(stack)
    assert svc.dispatch is None
    template.resource_count_is("AWS::Lambda::Function", 3)  # API, sweeper, publisher
    template.resource_count_is("AWS::Scheduler::Schedule", 1)
    template.resource_count_is("AWS::SQS::Queue", 2)  # sweep schedule DLQ, sweeper failures
    template.resource_count_is("AWS::S3::Bucket", 2)  # payloads, the publisher's failed batches
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 1)  # the publisher's
    template.resource_count_is("AWS::Lambda::EventInvokeConfig", 1)  # the sweeper's
    body = json.dumps(template.to_json())
    assert "Worker" not in body and "LostOwnership" not in body
    # Nor the worker runtime's alarms: nothing without the in-process worker emits their metrics.
    for metric in ("StalledClaims", "PayloadMissing"):  # as an alarm's or a widget's metric name
        assert f'"{metric}"' not in body and f'\\"{metric}\\"' not in body, metric
    assert set(svc.monitoring.alarms).isdisjoint({"StalledClaimsAlarm", "WorkerPayloadMissingAlarm"})
