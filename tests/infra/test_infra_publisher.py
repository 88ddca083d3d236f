"""The publisher (``publisher.py``): its function, its exact role, and the event bus it
publishes to (created, or brought in) when outcome events are on (``events``: off by default, on in
the full stack). Its own function exists with two stream readers (the full stack); by default the
worker function publishes (``test_infra_stream.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import (
    ISSUER,
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    logical_id,
    props,
    resources,
    role_statements,
)

from leasefence_infra import LeaseFenceService

BUS_ARN = "arn:aws:events:eu-west-1:111122223333:event-bus/acme-ops"


STREAM_READ = frozenset({"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"})


def _own(synth):
    """The stack whose publisher has a function of its own (``stream_readers=2``)."""
    stack = synth.stacks["full"]
    return "full", stack, stack.service, synth.template_json("full")


def test_publisher_function(synth) -> None:
    name, stack, svc, tpl = _own(synth)
    fn = props(tpl, logical_id(stack, svc.publisher_function))
    sweeper = props(tpl, logical_id(stack, svc.sweeper.function.function))
    assert fn["Handler"] == "publisher.handler.lambda_handler"
    assert (fn["Timeout"], fn["MemorySize"]) == (60, 256)
    for same in ("Runtime", "Architectures", "Code", "Layers", "TracingConfig"):
        assert fn.get(same) == sweeper.get(same), same  # TracingConfig: both absent by default
    env, sweeper_env = fn["Environment"]["Variables"], sweeper["Environment"]["Variables"]
    assert {k: v for k, v in env.items() if k != "LEASEFENCE_EVENT_BUS"} == sweeper_env
    if name == "full":  # events on
        assert env["LEASEFENCE_EVENT_BUS"] == getatt(logical_id(stack, svc.event_bus))
    else:  # the default: no bus, so the function publishes nothing (history only)
        assert svc.event_bus is None and "LEASEFENCE_EVENT_BUS" not in env
    # Invoked only by its mapping (synchronously): no async retries or destinations of its own.
    configs = [c["Properties"]["FunctionName"] for c in resources(tpl, "AWS::Lambda::EventInvokeConfig").values()]
    assert {"Ref": logical_id(stack, svc.publisher_function)} not in configs


def test_publisher_role_is_exact(synth) -> None:
    """History writes without reads, the stream, PutEvents on the bus, its failure bucket (the
    mapping writes failed batches there under aws/lambda/: put and list, no read, no delete)."""
    name, stack, svc, tpl = _own(synth)
    table = logical_id(stack, svc.table)
    statements = role_statements(tpl, logical_id(stack, svc.publisher.function.role))
    assert grant_set(actions_by_resource(statements, "dynamodb:")) == grant_set([
        (frozenset({"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}), getatt(table)),
        (STREAM_READ, getatt(table, "StreamArn")),
        (frozenset({"dynamodb:ListStreams"}), "*"),
    ])
    assert actions_by_resource(statements, "events:") == (
        [(frozenset({"events:PutEvents"}), getatt(logical_id(stack, svc.event_bus)))]
        if name == "full" else [])  # events off by default: no bus permission
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
    assert services == {"dynamodb", "s3", "secretsmanager", "logs"} | (
        {"kms", "xray", "events"} if name == "full" else set())  # X-Ray when traced, events on
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
    stack = synth.stacks["full"]
    svc, tpl = stack.service, synth.template_json("full")
    (bus_lid,) = resources(tpl, "AWS::Events::EventBus")
    assert bus_lid == logical_id(stack, svc.event_bus)
    assert svc.attributes()["event_bus_arn"] == svc.event_bus.event_bus_arn


def test_events_are_off_by_default_no_bus_no_permission_no_rule(synth) -> None:
    """The default: the publisher keeps the history and publishes nothing; nothing of
    EventBridge exists for it (no bus, no PutEvents, no rule, no variable, no output)."""
    stack = synth.stacks["default"]
    svc, tpl = stack.service, synth.template_json("default")
    assert svc.event_bus is None and svc.attributes()["event_bus_arn"] is None
    assert resources(tpl, "AWS::Events::EventBus") == {}
    assert resources(tpl, "AWS::Events::Rule") == {}
    assert "events:PutEvents" not in json.dumps(tpl)
    assert "LEASEFENCE_EVENT_BUS" not in json.dumps(tpl)
    assert "EventBusName" not in tpl["Outputs"]
    # The publisher's code still runs (it compacts the history from the stream), in the worker
    # function (one stream reader).
    assert props(tpl, logical_id(stack, svc.publisher_function))["Handler"] == "worker.handler.lambda_handler"
    # What `leasefence publisher redrive --bucket` takes.
    assert tpl["Outputs"]["PublisherFailuresBucketName"]["Value"] == {
        "Ref": logical_id(stack, svc.publisher.failure_bucket)}


def test_the_example_app_takes_the_options_from_context() -> None:
    from leasefence_infra.stack import service_props_from_context

    base = {"allowPlaceholderIssuer": "true"}
    chosen = service_props_from_context({**base, "events": "true", "alarms": "false", "dashboard": "false"})
    assert (chosen["events"], chosen["alarms"], chosen["dashboard"]) == (True, False, False)
    assert not {"events", "alarms", "dashboard"} & set(service_props_from_context(base))  # the defaults


def test_a_brought_in_bus_is_used_and_none_is_created(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "OwnBus")
    bus = events.EventBus.from_event_bus_arn(stack, "Ops", BUS_ARN)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, events=True, event_bus=bus,
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
        LeaseFenceService(stack, "LeaseFence", **ISSUER, events=True, event_bus=BUS_ARN,
                          core_layer=lambda_.Code.from_inline("x"))


def test_a_bus_without_events_is_refused(prebuilt_layer: Path) -> None:
    """Bringing a bus means you want events: with events off (the default) that is refused at
    synth rather than silently publishing nothing."""
    stack = Stack(App(), "BusNoEvents")
    bus = events.EventBus.from_event_bus_arn(stack, "Ops", BUS_ARN)
    with pytest.raises(ValueError, match="event_bus needs events=True"):
        LeaseFenceService(stack, "LeaseFence", **ISSUER, event_bus=bus, core_layer=lambda_.Code.from_inline("x"))


def test_a_consumer_subscribes_to_one_tenant_with_a_rule_on_the_bus(prebuilt_layer: Path) -> None:
    """infra/README.md's snippet: a rule on svc.event_bus from subscription_pattern."""
    from aws_cdk import aws_events_targets as targets
    from aws_cdk import aws_sqs as sqs

    from leasefence.streams.events import subscription_pattern

    stack = Stack(App(), "Consumer")
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, events=True,
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    assert svc.event_bus is not None
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
