"""The table's stream (``stream.py``, ``dispatch.py``): its mappings drive the worker (stream
dispatch) and the publisher (history, outcome events on EventBridge), each with its filters,
its on-failure destination and its alarms (issue 13's CDK part). By default (the ``default``
stack) one mapping feeds both through the worker function, so leasefence takes one of the
stream's two readers per shard (issue 33); the ``full`` stack keeps two (``stream_readers=2``).

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
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import (
    ISSUER,
    as_list,
    getatt,
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


#: The worker's stream settings per test stack (``conftest``: defaults, and the full stack's own).
WORKER_STREAM = {
    "default": {"tenants": ["demo"], "batch": 10, "parallelization": 10, "reserved": None},
    "full": {"tenants": ["acme", "globex"], "batch": 25, "parallelization": 5, "reserved": 50},
}


ITERATOR_AGE_S = {"default": 300, "full": 120}


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


def _full(synth) -> tuple[str, Stack, Any, dict[str, Any]]:
    """The stack with two readers (the worker's mapping and the publisher's)."""
    stack = synth.stacks["full"]
    return "full", stack, stack.service, synth.template_json("full")


def test_one_mapping_reads_the_stream_by_default(variant) -> None:
    """The default deployment (a worker, stream_readers=1, no outcome events) has one event
    source mapping on the table's stream: the worker function's, with the publisher's settings and
    bucket and a three-pattern filter; no publisher function. ``full`` (stream_readers=2) has
    two."""
    name, stack, svc, tpl = variant
    stream = getatt(logical_id(stack, svc.table), "StreamArn")
    on_stream = [copy.deepcopy(m["Properties"]) for m in resources(tpl, "AWS::Lambda::EventSourceMapping").values()
                 if m["Properties"]["EventSourceArn"] == stream]  # (copies: the template is the session's)
    if name == "full":
        assert sorted(json.dumps(m["FunctionName"]) for m in on_stream) == sorted(
            json.dumps(invoked_name(stack, f)) for f in (svc.worker.function, svc.publisher.function))
        return
    (mapping,) = on_stream
    want = WORKER_STREAM[name]
    assert svc.publisher.function is svc.worker.function and svc.publisher.event_source_mapping is None
    filters_json = mapping.pop("FilterCriteria")
    assert {k: v for k, v in mapping.items() if k != "Tags"} == {
        "FunctionName": invoked_name(stack, svc.worker.function),
        "EventSourceArn": stream,
        # The worker's own mapping's (its logical id too): switching readers updates it in place.
        "StartingPosition": "LATEST",
        "BatchSize": want["batch"],
        "MaximumBatchingWindowInSeconds": 0,
        "ParallelizationFactor": want["parallelization"],
        "MaximumRetryAttempts": 10,
        "BisectBatchOnFunctionError": True,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "DestinationConfig": {"OnFailure": {"Destination": getatt(logical_id(stack, svc.publisher.failure_bucket))}},
    }
    changed, before = ["INSERT", "MODIFY"], {"N": [{"exists": False}]}
    patterns = _patterns({"FilterCriteria": filters_json})
    # No outcome events (the default): the worker's exact pattern for its tenants, and the
    # publisher's two of operations enqueued before; an operation's end invokes nothing.
    assert patterns == [
        {"eventName": changed, "dynamodb": {
            "NewImage": {"state": {"S": ["queued"]}, "transition": {"S": ["enqueue", "retry", "requeue", "approve"]}},
            "Keys": {"tenant_id": {"S": ["demo", {"prefix": "demo\t"}]}}}},
        {"eventName": changed, "dynamodb": {"NewImage": {"hv": before, "transition": {"S": [{"exists": True}]}}}},
        {"eventName": ["REMOVE"], "dynamodb": {"OldImage": {"hv": before, "transition": {"S": [{"exists": True}]}}}},
    ]  # fmt: skip
    assert filters_json == filters.filter_criteria(filters.shared_filters(False, want["tenants"]))
    # The function publishes: the bus (when events are on) and where it keeps what it could not.
    env = props(tpl, logical_id(stack, svc.worker_function))["Environment"]["Variables"]
    assert env["LEASEFENCE_PUBLISHER_FAILURES"] == {"Ref": logical_id(stack, svc.publisher.failure_bucket)}
    assert "LEASEFENCE_WORKER_DISPATCH" not in env  # the default mode: run
    functions = [f["Properties"].get("Handler") for f in resources(tpl, "AWS::Lambda::Function").values()]
    assert "publisher.handler.lambda_handler" not in functions


def test_the_shared_function_may_write_what_the_publisher_writes(variant) -> None:
    name, stack, svc, tpl = variant
    if name == "full":  # two readers: the worker's role keeps to the worker's own grants
        statements = role_statements(tpl, logical_id(stack, svc.worker.function.role))
        assert not [st for st in statements if st.get("Sid") in ("HistoryItems", "FailedBatchesPut")]
        return
    statements = {st.get("Sid"): st for st in role_statements(tpl, logical_id(stack, svc.worker.function.role))}
    assert sorted(as_list(statements["HistoryItems"]["Action"])) == [
        "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem"]
    assert statements["FailedBatchesPut"]["Action"] == "s3:PutObject"
    assert statements["FailedBatchesPut"]["Resource"] == {"Fn::Join": ["", [
        getatt(logical_id(stack, svc.publisher.failure_bucket)), "/aws/lambda/*"]]}


def test_the_invoke_dispatch_mode_hands_claims_to_the_function_itself(synth) -> None:
    _, stack, svc, tpl = _full(synth)
    env = props(tpl, logical_id(stack, svc.worker_function))["Environment"]["Variables"]
    assert env["LEASEFENCE_WORKER_DISPATCH"] == "invoke"
    (policy,) = [p["Properties"] for lid, p in resources(tpl, "AWS::IAM::Policy").items() if "HandOff" in lid]
    assert policy["Roles"] == [{"Ref": logical_id(stack, svc.worker.function.role)}]
    (statement,) = policy["PolicyDocument"]["Statement"]
    arn = getatt(logical_id(stack, svc.worker_function))
    assert (statement["Action"], statement["Resource"]) == (
        "lambda:InvokeFunction", [arn, {"Fn::Join": ["", [arn, ":*"]]}])
    # A policy apart from the role's default one, which the function depends on (no cycle).
    depends = tpl["Resources"][logical_id(stack, svc.worker_function)].get("DependsOn", [])
    assert not [d for d in depends if "HandOff" in d]


def test_publisher_mapping(synth) -> None:
    _, stack, svc, tpl = _full(synth)
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
    # Only what the publisher still needs (the history is in each operation's item): records that
    # publish an outcome event, and every record of an operation enqueued before (no ``hv``).
    changed, in_item, before = ["INSERT", "MODIFY"], {"N": [{"exists": True}]}, {"N": [{"exists": False}]}
    assert _patterns({"FilterCriteria": filters_json}) == [
        {"eventName": changed, "dynamodb": {"NewImage": {"hv": in_item, "transition": {"S": [
            "retry", "retry_later", "unknown", "sweep", "quarantine", "requeue", "approve"]}}}},
        {"eventName": changed, "dynamodb": {"NewImage": {"hv": in_item, "transition": {"S": [
            "complete", "fail", "resolve", "reject", "approval_expire", "cancel"]},
            "purge_at": {"N": [{"exists": True}]}, "hx": {"N": [{"exists": False}]}}}},
        {"eventName": changed, "dynamodb": {"NewImage": {"hv": in_item, "transition": {"S": ["claim", "enqueue"]},
            "state": {"S": ["claimed", "awaiting_approval"]}, "claimed_from": {"S": ["claimed", {"exists": False}]}}}},
        {"eventName": changed, "dynamodb": {"NewImage": {"hv": before, "transition": {"S": [{"exists": True}]}}}},
        {"eventName": ["REMOVE"], "dynamodb": {"OldImage": {"hv": before, "transition": {"S": [{"exists": True}]}}}},
    ]  # fmt: skip
    # The same definition the local stack runs (leasefence.streams.filters), byte for byte.
    assert filters_json == filters.filter_criteria(filters.publisher_filters())


def test_worker_mapping(synth) -> None:
    name, stack, svc, tpl = _full(synth)
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
            # A tenant's bare partition and its write shards (<tenant>\t<n>).
            "Keys": {"tenant_id": {"S": [*want["tenants"], *({"prefix": f"{t}\t"} for t in want["tenants"])]}},
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

    if name == "default":  # one mapping for both: what either needs, never the history writes
        shared = _patterns(_mapping(stack, tpl, svc.worker.function))
        for record in (enqueue, other_tenant, delayed_retry, completion, deletion):
            assert filters.passes(shared, record)
        assert not filters.passes(shared, history_write)
        return
    worker = _patterns(_mapping(stack, tpl, svc.worker.function))
    publisher = _patterns(_mapping(stack, tpl, svc.publisher.function))
    assert filters.passes(worker, enqueue)
    for record in (other_tenant, delayed_retry, completion, deletion, history_write):
        assert not filters.passes(worker, record)
    for record in (enqueue, delayed_retry, completion, deletion):
        assert filters.passes(publisher, record)
    assert not filters.passes(publisher, history_write)


def test_the_worker_mapping_failure_queue_is_encrypted_tls_only_and_alarmed(variant) -> None:
    name, stack, svc, tpl = variant
    if name == "default":  # the shared mapping's destination is the publisher's bucket (below)
        (mapping,) = [m["Properties"] for m in resources(tpl, "AWS::Lambda::EventSourceMapping").values()]
        assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == getatt(
            logical_id(stack, svc.publisher.failure_bucket))
        # ... and the worker's stream queue stays, unused, with what two readers sent there
        # (an upgrade must not delete those messages): still encrypted, TLS only and alarmed.
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


def test_dashboard_shows_the_stream_consumers(synth) -> None:
    stack, tpl = synth.stacks["full"], synth.template_json("full")  # the dashboard is opt-in
    svc = stack.service
    (dashboard,) = resources(tpl, "AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (*PUBLISHER_METRICS, "IteratorAge", "StreamDispatched", "StreamDispatchDeferred"):
        assert f'\\"{metric}\\"' in body, metric
    for resource in (svc.publisher.failure_bucket, svc.dispatch.failure_queue):
        assert logical_id(stack, resource) in body
    assert logical_id(stack, svc.publisher_function) in body


@pytest.mark.parametrize("overrides, message", [
    ({"stream_batch_size": 0}, "stream_batch_size must be a whole number from 1 to 100"),
    ({"stream_batch_size": 101}, "stream_batch_size"),
    ({"stream_parallelization": 11}, "stream_parallelization must be a whole number from 1 to 10"),
    ({"stream_parallelization": 2.5}, "stream_parallelization"),
    ({"max_concurrency": 0}, "max_concurrency must be a whole number, at least 1"),
    ({"stream_readers": 3}, "stream_readers must be 1 .* or 2"),
    ({"stream_readers": 0}, "stream_readers"),
    ({"stream_dispatch": "fleet"}, "stream_dispatch must be one of 'run', 'invoke'"),
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
    """WorkerProps' defaults are leasefence.streams.mappings.shared's (one reader), and with two
    readers mappings.worker's, which the local stack runs."""
    from leasefence.streams import mappings

    props_default = WorkerProps(handlers="worker.demo_handlers:HANDLERS", tenants=["demo"])
    assert (props_default.stream_readers, props_default.stream_dispatch) == (1, "run")
    assert props_default.stream_mapping(events=True) == mappings.shared(10, 10)
    assert props_default.stream_mapping(events=False) == mappings.shared(10, 10, False, ["demo"])
    shared = mappings.worker(["demo"])
    two = WorkerProps(handlers="worker.demo_handlers:HANDLERS", tenants=["demo"], stream_readers=2)
    assert two.stream_mapping(events=True) == two.stream_mapping(events=False) == shared
    assert (shared.batch_size, shared.parallelization_factor, shared.max_retries, shared.max_record_age_s) == (
        10, 10, 2, 600)
    # The drain finds what the worker's mapping misses: it starts at the tip, failures to a queue.
    assert (shared.starting_position, shared.failure_destination) == ("LATEST", "sqs")
    publisher = mappings.publisher()
    assert (publisher.starting_position, publisher.failure_destination) == ("TRIM_HORIZON", "s3")
    # One reader: the publisher's durability, the worker's starting position (updated in place).
    one = mappings.shared()
    assert (one.starting_position, one.failure_destination, one.max_retries, one.max_record_age_s) == (
        "LATEST", "s3", 10, -1)
    assert props_default.max_concurrency is None


#: The create-only properties of ``AWS::Lambda::EventSourceMapping`` (CloudFormation's resource
#: schema, ``createOnlyProperties``): a change to one replaces the mapping.
MAPPING_CREATE_ONLY = ("EventSourceArn", "StartingPosition", "StartingPositionTimestamp", "SelfManagedEventSource")


def _with_readers(readers: int, layer: Path, **more: Any) -> tuple[Stack, Any, dict[str, Any]]:
    stack = Stack(App(), "Readers")  # one name: the same logical ids as a deployed stack's
    worker = WorkerProps(handlers="worker.demo_handlers:HANDLERS", tenants=["demo"], stream_readers=readers)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, worker=worker,
                            core_layer=lambda_.Code.from_asset(str(layer)), **more)
    return stack, svc, Template.from_stack(stack).to_json()


def test_with_outcome_events_the_one_mapping_passes_what_the_publisher_publishes(prebuilt_layer: Path) -> None:
    """events=True: the one mapping's filter is the five-pattern superset of the worker's and the
    publisher's (Lambda's default quota of filters per mapping): the worker's pattern and the
    publisher's first merged, the publisher's other four as they are."""
    stack, svc, tpl = _with_readers(1, prebuilt_layer, events=True)
    filters_json = props(tpl, logical_id(stack, svc.dispatch.event_source_mapping))["FilterCriteria"]
    changed, in_item = ["INSERT", "MODIFY"], {"N": [{"exists": True}]}
    patterns = _patterns({"FilterCriteria": filters_json})
    assert len(patterns) == 5
    assert patterns[0] == {"eventName": changed, "dynamodb": {"NewImage": {"transition": {"S": [
        "retry", "retry_later", "unknown", "sweep", "quarantine", "requeue", "approve", "enqueue"]}}}}
    assert patterns[1]["dynamodb"]["NewImage"]["hv"] == in_item
    assert patterns[1:] == filters.publisher_filters()[1:]
    assert filters_json == filters.filter_criteria(filters.shared_filters())


def test_switching_stream_readers_updates_the_worker_mapping_in_place(prebuilt_layer: Path) -> None:
    """The upgrade from two readers (every deployment before one reader became the default) to
    one, and back: the worker's mapping keeps its logical id and every create-only property, so
    CloudFormation updates it in place. A replacement would create the new mapping first, a
    second one of the same function on the same stream, which Lambda refuses
    (ResourceConflictException: the stack update fails and rolls back). The worker's stream queue
    stays under its id (its messages are not deleted), and so does the old publisher's retained
    log group."""
    one_stack, one, one_tpl = _with_readers(1, prebuilt_layer)
    two_stack, two, two_tpl = _with_readers(2, prebuilt_layer)
    mapping_id = logical_id(one_stack, one.dispatch.event_source_mapping)
    assert mapping_id == logical_id(two_stack, two.dispatch.event_source_mapping)
    before, after = props(two_tpl, mapping_id), props(one_tpl, mapping_id)
    assert before["FunctionName"] == after["FunctionName"]
    assert {k: before.get(k) for k in MAPPING_CREATE_ONLY} == {k: after.get(k) for k in MAPPING_CREATE_ONLY}
    assert before["FilterCriteria"] != after["FilterCriteria"]  # what the update changes
    # The publisher's own mapping (two readers) is another function's: no conflict either way.
    assert two.publisher.event_source_mapping is not None and one.publisher.event_source_mapping is None
    queue_id = logical_id(two_stack, two.dispatch.failure_queue)
    assert queue_id == logical_id(one_stack, one.dispatch.failure_queue)
    assert one_tpl["Resources"][queue_id]["Type"] == "AWS::SQS::Queue"
    log_group = logical_id(two_stack, two.publisher.function.log_group)
    assert one_tpl["Resources"][log_group]["Type"] == "AWS::Logs::LogGroup"
    assert one_tpl["Resources"][log_group]["DeletionPolicy"] == "Retain"
