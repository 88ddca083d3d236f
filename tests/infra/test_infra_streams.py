"""Issue 13's CDK part: the table's stream drives the worker (stream dispatch) and the publisher
(history, outcome events on EventBridge).

Expectations are written out by hand (the numbers of the issue and of
``leasefence.streams.mappings``' docstrings), not read back from the code under test: the filter
JSON in the template is parsed and compared with the patterns spelled out here, and then run
against real stream records (the samples in ``events/``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import (
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    invoked_name,
    logical_id,
    props,
    resources,
    role_statements,
)
from leasefence import keys
from leasefence.streams import filters
from leasefence_infra import LeaseFenceService, WorkerProps
from leasefence_infra.monitoring import PUBLISHER_METRICS

ROOT = Path(__file__).resolve().parents[2]
BUS_ARN = "arn:aws:events:eu-west-1:111122223333:event-bus/acme-ops"
ISSUER = {"jwt_issuer": "https://idp.example.com/", "jwt_audience": ["leasefence"]}
#: The worker's stream settings per test stack (``conftest``: defaults, and the full stack's own).
WORKER_STREAM = {
    "default": {"tenants": ["demo"], "batch": 10, "parallelization": 10, "reserved": None},
    "full": {"tenants": ["acme", "globex"], "batch": 25, "parallelization": 5, "reserved": 50},
}
ITERATOR_AGE_S = {"default": 300, "full": 120}
SEND = frozenset({"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"})
STREAM_READ = frozenset({"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"})


@pytest.fixture(scope="module", params=["default", "full"])
def variant(request: pytest.FixtureRequest, synth) -> tuple[str, Stack, LeaseFenceService, dict[str, Any]]:
    stack = synth.stacks[request.param]
    return request.param, stack, stack.service, synth.template_json(request.param)


def _mapping(stack: Stack, tpl: dict[str, Any], function: Any) -> dict[str, Any]:
    fn = invoked_name(stack, function)
    (found,) = [m["Properties"] for m in resources(tpl, "AWS::Lambda::EventSourceMapping").values()
                if m["Properties"]["FunctionName"] == fn]
    return copy.deepcopy(found)  # the template is the session's: never edit it


def _patterns(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]


def _sample(name: str) -> dict[str, Any]:
    (record,) = json.loads((ROOT / "events" / name).read_text())["Records"]
    return record


# ----------------------------------------------------------------------------- the mappings


def test_publisher_mapping(variant) -> None:
    _, stack, svc, tpl = variant
    mapping = _mapping(stack, tpl, svc.publisher.function)
    filters_json = mapping.pop("FilterCriteria")
    assert {k: v for k, v in mapping.items() if k != "Tags"} == {
        "FunctionName": invoked_name(stack, svc.publisher.function),
        "EventSourceArn": getatt(logical_id(stack, svc.table), "StreamArn"),
        # A mapping created again replays what the stream holds (24 h) instead of skipping it.
        "StartingPosition": "TRIM_HORIZON",
        "BatchSize": 100,
        "MaximumBatchingWindowInSeconds": 0,
        "ParallelizationFactor": 4,
        "MaximumRetryAttempts": 10,
        "BisectBatchOnFunctionError": True,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        # No MaximumRecordAgeInSeconds: a record is retried until the stream drops it (24 h).
        # An S3 destination: Lambda writes the invocation record with the whole batch there.
        "DestinationConfig": {"OnFailure": {"Destination": getatt(logical_id(stack, svc.publisher.failure_bucket))}},
    }
    assert _patterns({"FilterCriteria": filters_json}) == [
        {"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"transition": {"S": [{"exists": True}]}}}},
        {"eventName": ["REMOVE"], "dynamodb": {"OldImage": {"transition": {"S": [{"exists": True}]}}}},
    ]
    # The same definition the local stack runs (leasefence.streams.filters), byte for byte.
    assert filters_json == filters.filter_criteria(filters.publisher_filters())


def test_worker_mapping(variant) -> None:
    name, stack, svc, tpl = variant
    want = WORKER_STREAM[name]
    mapping = _mapping(stack, tpl, svc.worker.function)
    filters_json = mapping.pop("FilterCriteria")
    assert {k: v for k, v in mapping.items() if k != "Tags"} == {
        "FunctionName": invoked_name(stack, svc.worker.function),
        "EventSourceArn": getatt(logical_id(stack, svc.table), "StreamArn"),
        "StartingPosition": "LATEST",
        "BatchSize": want["batch"],
        "MaximumBatchingWindowInSeconds": 0,
        "ParallelizationFactor": want["parallelization"],
        "MaximumRetryAttempts": 2,
        "BisectBatchOnFunctionError": True,
        "MaximumRecordAgeInSeconds": 600,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "DestinationConfig": {"OnFailure": {"Destination": getatt(logical_id(stack, svc.dispatch.failure_queue))}},
    }
    assert _patterns({"FilterCriteria": filters_json}) == [{
        "eventName": ["INSERT", "MODIFY"],
        "dynamodb": {
            "NewImage": {"state": {"S": ["queued"]}, "transition": {"S": ["enqueue", "retry", "requeue", "approve"]}},
            "Keys": {"tenant_id": {"S": want["tenants"]}},
        },
    }]
    assert filters_json == filters.filter_criteria(filters.dispatch_filters(want["tenants"]))
    # max_concurrency is the worker function's reserved concurrency (streams have no other cap).
    fn = props(tpl, logical_id(stack, svc.worker_function))
    assert fn.get("ReservedConcurrentExecutions") == want["reserved"]
    # The schedule stays as the safety net.
    assert svc.worker.schedule is not None


def test_the_deployed_filters_pass_the_records_they_are_meant_for(variant) -> None:
    """The filters in the template, run over real stream records: the worker gets claimable work
    of its own tenants only; the publisher gets transitions and deletions, never its own history
    writes (which would feed it forever)."""
    name, stack, svc, tpl = variant
    worker = _patterns(_mapping(stack, tpl, svc.worker.function))
    publisher = _patterns(_mapping(stack, tpl, svc.publisher.function))
    tenant = WORKER_STREAM[name]["tenants"][-1]

    enqueue = _sample("worker-stream.json")
    enqueue["dynamodb"]["Keys"]["tenant_id"]["S"] = tenant
    other_tenant = copy.deepcopy(enqueue)
    other_tenant["dynamodb"]["Keys"]["tenant_id"]["S"] = "initech"
    delayed_retry = copy.deepcopy(enqueue)
    delayed_retry["eventName"] = "MODIFY"
    delayed_retry["dynamodb"]["NewImage"]["transition"] = {"S": "retry_later"}
    completion = _sample("publisher-stream.json")
    completion["dynamodb"]["Keys"]["tenant_id"]["S"] = tenant
    deletion = {**copy.deepcopy(completion), "eventName": "REMOVE"}
    deletion["dynamodb"].pop("NewImage")
    history_write = copy.deepcopy(enqueue)
    history_write["dynamodb"]["Keys"]["operation_id"]["S"] = keys.history_id("sample-order-1")
    history_write["dynamodb"]["NewImage"] = {"tenant_id": {"S": tenant},
                                             "operation_id": {"S": keys.history_id("sample-order-1")},
                                             "last_seq": {"N": "1"}, "entries": {"L": []}}

    assert filters.passes(worker, enqueue)
    for record in (other_tenant, delayed_retry, completion, deletion, history_write):
        assert not filters.passes(worker, record)
    for record in (enqueue, delayed_retry, completion, deletion):
        assert filters.passes(publisher, record)
    assert not filters.passes(publisher, history_write)


def test_the_worker_mapping_failure_queue_is_encrypted_tls_only_and_alarmed(variant) -> None:
    name, stack, svc, tpl = variant
    template = Template.from_json(tpl)
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    queues = [svc.dispatch.failure_queue]
    assert svc.dispatch.failure_queue is not svc.worker.failure_queue  # its own, apart from async failures
    for queue in queues:
        qid = logical_id(stack, queue)
        q = props(tpl, qid)
        if name == "default":
            assert q["SqsManagedSseEnabled"] is True
        else:
            assert q["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
        assert q["MessageRetentionPeriod"] == 14 * 24 * 3600
        (policy,) = [p["Properties"] for p in resources(tpl, "AWS::SQS::QueuePolicy").values()
                     if p["Properties"]["Queues"] == [{"Ref": qid}]]
        assert any(st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
                   for st in policy["PolicyDocument"]["Statement"])
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": getatt(qid, "QueueName")}],
            "Statistic": "Maximum", "Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "AlarmActions": [topic], "OKActions": [topic],
        })


def test_the_publisher_keeps_failed_batches_in_an_encrypted_private_alarmed_bucket(variant) -> None:
    """The publisher mapping's on-failure destination is an S3 bucket (Lambda writes the whole
    batch there, not only where it was): private, TLS only, the service key when there is one,
    kept with the stack, and every object written raises the alarm (S3 request metrics)."""
    name, stack, svc, tpl = variant
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    bid = logical_id(stack, svc.publisher.failure_bucket)
    bucket = tpl["Resources"][bid]
    assert bucket["Type"] == "AWS::S3::Bucket"
    # Kept like the payload bucket (the stack's removal_policy: retained by default).
    payloads = tpl["Resources"][logical_id(stack, svc.payload_bucket)]
    assert bucket["DeletionPolicy"] == payloads["DeletionPolicy"] == ("Retain" if name == "default" else "Delete")
    b = bucket["Properties"]
    assert b["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    (encryption,) = b["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    if name == "default":
        assert encryption["ServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    else:
        assert encryption["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "aws:kms", "KMSMasterKeyID": getatt(logical_id(stack, svc.encryption_key))}
    # No expiry: an object is records not processed yet; the redrive deletes it.
    assert [r.get("ExpirationInDays") for r in b["LifecycleConfiguration"]["Rules"]] == [None]
    assert b["MetricsConfigurations"] == [{"Id": "FailedBatches", "Prefix": "aws/lambda/"}]
    (policy,) = [p["Properties"] for p in resources(tpl, "AWS::S3::BucketPolicy").values()
                 if p["Properties"]["Bucket"] == {"Ref": bid}]
    assert any(st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
               for st in policy["PolicyDocument"]["Statement"])
    Template.from_json(tpl).has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/S3", "MetricName": "PutRequests",
        "Dimensions": [{"Name": "BucketName", "Value": {"Ref": bid}}, {"Name": "FilterId", "Value": "FailedBatches"}],
        "Statistic": "Sum", "Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "AlarmActions": [topic], "OKActions": [topic],
    })
    assert bid in resources(tpl, "AWS::S3::Bucket")


def test_iterator_age_alarms_on_both_functions(variant) -> None:
    name, stack, svc, tpl = variant
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    alarms = [a["Properties"] for a in resources(tpl, "AWS::CloudWatch::Alarm").values()
              if a["Properties"].get("MetricName") == "IteratorAge"]
    by_function = {json.dumps(a["Dimensions"][0]["Value"]): a for a in alarms}
    assert set(by_function) == {json.dumps({"Ref": logical_id(stack, fn)})
                                for fn in (svc.publisher_function, svc.worker_function)}
    for alarm in alarms:
        assert alarm["Namespace"] == "AWS/Lambda" and alarm["Statistic"] == "Maximum"
        assert alarm["Threshold"] == ITERATOR_AGE_S[name] * 1000  # IteratorAge is in milliseconds
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert alarm["AlarmActions"] == [topic] and alarm["OKActions"] == [topic]


def test_dashboard_shows_the_stream_consumers(variant) -> None:
    _, stack, svc, tpl = variant
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (*PUBLISHER_METRICS, "IteratorAge", "StreamDispatched", "StreamDispatchDeferred"):
        assert f'\\"{metric}\\"' in body, metric
    for resource in (svc.publisher.failure_bucket, svc.dispatch.failure_queue):
        assert logical_id(stack, resource) in body
    assert logical_id(stack, svc.publisher_function) in body


# ----------------------------------------------------------------------------- publisher


def test_publisher_function(variant) -> None:
    name, stack, svc, tpl = variant
    fn = props(tpl, logical_id(stack, svc.publisher_function))
    sweeper = props(tpl, logical_id(stack, svc.sweeper.function.function))
    assert fn["Handler"] == "publisher.handler.lambda_handler"
    assert (fn["Timeout"], fn["MemorySize"]) == (60, 256)
    for same in ("Runtime", "Architectures", "Code", "Layers", "TracingConfig"):
        assert fn[same] == sweeper[same], same
    env, sweeper_env = fn["Environment"]["Variables"], sweeper["Environment"]["Variables"]
    assert {k: v for k, v in env.items() if k != "LEASEFENCE_EVENT_BUS"} == sweeper_env
    assert env["LEASEFENCE_EVENT_BUS"] == getatt(logical_id(stack, svc.event_bus))
    # Invoked only by its mapping (synchronously): no async retries or destinations of its own.
    configs = [c["Properties"]["FunctionName"] for c in resources(tpl, "AWS::Lambda::EventInvokeConfig").values()]
    assert {"Ref": logical_id(stack, svc.publisher_function)} not in configs


def test_publisher_role_is_exact(variant) -> None:
    """History writes without reads, the stream, PutEvents on the bus, its failure bucket (the
    mapping writes failed batches there under aws/lambda/: put and list, no read, no delete)."""
    name, stack, svc, tpl = variant
    table = logical_id(stack, svc.table)
    statements = role_statements(tpl, logical_id(stack, svc.publisher.function.role))
    assert grant_set(actions_by_resource(statements, "dynamodb:")) == grant_set([
        (frozenset({"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}), getatt(table)),
        (STREAM_READ, getatt(table, "StreamArn")),
        (frozenset({"dynamodb:ListStreams"}), "*"),
    ])
    assert actions_by_resource(statements, "events:") == [
        (frozenset({"events:PutEvents"}), getatt(logical_id(stack, svc.event_bus)))]
    bucket = logical_id(stack, svc.publisher.failure_bucket)
    assert actions_by_resource(statements, "sqs:") == []
    assert grant_set(actions_by_resource(statements, "s3:")) == grant_set([
        (frozenset({"s3:PutObject"}), {"Fn::Join": ["", [getatt(bucket), "/aws/lambda/*"]]}),
        (frozenset({"s3:ListBucket"}), getatt(bucket)),
    ])
    assert actions_by_resource(statements, "secretsmanager:") == [
        (frozenset({"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}),
         {"Ref": logical_id(stack, svc.storage.log_hash_key)})]
    assert actions_by_resource(statements, "logs:") == [
        (frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}),
         getatt(logical_id(stack, svc.publisher.function.log_group)))]
    kms_grants = actions_by_resource(statements, "kms:")
    if name == "default":
        assert kms_grants == []
    else:  # the table's key (the service key here): writes, the stream, the bucket; nothing else
        key = getatt(logical_id(stack, svc.encryption_key))
        assert {json.dumps(resource) for _, resource in kms_grants} == {json.dumps(key)}
        assert {a for actions, _ in kms_grants for a in actions} == {
            "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "kms:DescribeKey",
            "kms:GenerateDataKey"}
    services = {a.split(":")[0] for st in statements for a in as_list(st["Action"])}
    assert services == {"dynamodb", "events", "s3", "secretsmanager", "logs", "xray"} | (
        {"kms"} if name == "full" else set())
    for st in statements:
        assert st["Effect"] == "Allow" and "Condition" not in st
    # No payloads: the publisher never reaches the bucket.
    assert logical_id(stack, svc.payload_bucket) not in json.dumps(statements)


def test_the_list_streams_wildcard_is_acknowledged_with_its_reason(variant) -> None:
    _, stack, svc, tpl = variant
    for role in (svc.publisher.function.role, svc.worker.function.role):
        metadata = tpl["Resources"][logical_id(stack, role)]["Metadata"]
        reasons = [r["reason"] for r in metadata["cdk_nag"]["rules_to_suppress"]
                   if r["id"] == "AwsSolutions-IAM5" and r.get("applies_to") == ["Resource::*"]]
        assert any("dynamodb:ListStreams" in reason for reason in reasons), reasons


def test_created_bus_and_its_output(synth) -> None:
    stack = synth.stacks["default"]
    svc, tpl = stack.service, synth.template_json("default")
    (bus_lid,) = resources(tpl, "AWS::Events::EventBus")
    assert bus_lid == logical_id(stack, svc.event_bus)
    assert tpl["Outputs"]["EventBusName"]["Value"] == {"Ref": bus_lid}
    # What `leasefence publisher redrive --bucket` takes.
    assert tpl["Outputs"]["PublisherFailuresBucketName"]["Value"] == {
        "Ref": logical_id(stack, svc.publisher.failure_bucket)}


def test_a_brought_in_bus_is_used_and_none_is_created(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "OwnBus")
    bus = events.EventBus.from_event_bus_arn(stack, "Ops", BUS_ARN)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, event_bus=bus,
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    assert svc.event_bus is bus
    tpl = Template.from_stack(stack).to_json()
    assert resources(tpl, "AWS::Events::EventBus") == {}
    fn = props(tpl, logical_id(stack, svc.publisher_function))
    assert fn["Environment"]["Variables"]["LEASEFENCE_EVENT_BUS"] == BUS_ARN
    statements = role_statements(tpl, logical_id(stack, svc.publisher.function.role))
    assert actions_by_resource(statements, "events:") == [(frozenset({"events:PutEvents"}), BUS_ARN)]
    # No worker here: the publisher's is the only stream mapping, and nothing of dispatch exists.
    assert svc.dispatch is None and len(resources(tpl, "AWS::Lambda::EventSourceMapping")) == 1


def test_a_bus_prop_that_is_not_a_bus_is_refused() -> None:
    stack = Stack(App(), "NotABus")
    with pytest.raises(TypeError, match="event_bus must be an aws_events.IEventBus"):
        LeaseFenceService(stack, "LeaseFence", **ISSUER, event_bus=BUS_ARN, core_layer=lambda_.Code.from_inline("x"))


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize("overrides, message", [
    ({"stream_batch_size": 0}, "stream_batch_size must be a whole number from 1 to 100"),
    ({"stream_batch_size": 101}, "stream_batch_size"),
    ({"stream_parallelization": 11}, "stream_parallelization must be a whole number from 1 to 10"),
    ({"stream_parallelization": 2.5}, "stream_parallelization"),
    ({"max_concurrency": 0}, "max_concurrency must be a whole number, at least 1"),
    # 1,000 one-character tenants fit the 2,048-character environment limit; in the filter each is
    # a JSON string (\uXXXX, quotes, comma): over 4,096.
    ({"tenants": [f"{chr(0x4E00 + i)}" for i in range(1000)]}, "stream filter of .* characters, over Lambda's 4096"),
])
def test_invalid_stream_settings_are_refused(overrides: dict[str, Any], message: str) -> None:
    stack = Stack(App(), "BadStream")
    worker = WorkerProps(**{"handlers": "worker.demo_handlers:HANDLERS", "tenants": ["demo"], **overrides})
    with pytest.raises(ValueError, match=message):
        LeaseFenceService(stack, "LeaseFence", **ISSUER, worker=worker, core_layer=lambda_.Code.from_inline("x"))


def test_stream_iterator_age_alarm_age_needs_a_minute() -> None:
    stack = Stack(App(), "BadAge")
    with pytest.raises(ValueError, match="stream_iterator_age_alarm_age must be a Duration of at least one minute"):
        LeaseFenceService(stack, "LeaseFence", **ISSUER, stream_iterator_age_alarm_age=Duration.seconds(30),
                          core_layer=lambda_.Code.from_inline("x"))


def test_the_stream_defaults_are_the_shared_mapping() -> None:
    """WorkerProps' defaults are leasefence.streams.mappings.worker's, which the local stack runs."""
    from leasefence.streams import mappings

    shared = mappings.worker(["demo"])
    props_default = WorkerProps(handlers="worker.demo_handlers:HANDLERS", tenants=["demo"])
    assert props_default.stream_mapping == shared
    assert (shared.batch_size, shared.parallelization_factor, shared.max_retries, shared.max_record_age_s) == (
        10, 10, 2, 600)
    # The drain finds what the worker's mapping misses: it starts at the tip, failures to a queue.
    assert (shared.starting_position, shared.failure_destination) == ("LATEST", "sqs")
    publisher = mappings.publisher()
    assert (publisher.starting_position, publisher.failure_destination) == ("TRIM_HORIZON", "s3")
    assert props_default.max_concurrency is None


def test_a_consumer_subscribes_to_one_tenant_with_a_rule_on_the_bus(prebuilt_layer: Path) -> None:
    """infra/README.md's snippet: a rule on svc.event_bus from subscription_pattern."""
    from aws_cdk import aws_events_targets as targets
    from aws_cdk import aws_sqs as sqs
    from leasefence.streams.events import subscription_pattern

    stack = Stack(App(), "Consumer")
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    pattern = subscription_pattern(tenant_id="acme", detail_types=["Operation Succeeded", "Operation Failed"])
    events.Rule(stack, "AcmeOutcomes", event_bus=svc.event_bus,
                event_pattern=events.EventPattern(source=pattern["source"], detail_type=pattern["detail-type"],
                                                  detail=pattern["detail"]),
                targets=[targets.SqsQueue(sqs.Queue(stack, "AcmeOutcomesQueue"))])
    tpl = Template.from_stack(stack).to_json()
    (rule,) = resources(tpl, "AWS::Events::Rule").values()
    assert rule["Properties"]["EventBusName"] == {"Ref": logical_id(stack, svc.event_bus)}
    assert rule["Properties"]["EventPattern"] == {
        "source": ["leasefence"], "detail-type": ["Operation Succeeded", "Operation Failed"],
        "detail": {"tenant_id": ["acme"]}}
