"""The example stack (``stack.py``): its outputs."""

from __future__ import annotations

from tests.support.infra import getatt, logical_id, service_of


def test_example_stack_outputs(synth) -> None:
    stack, svc, tpl = service_of(synth, "default")
    outputs = tpl["Outputs"]
    assert outputs["ApiUrl"]["Value"] == getatt(logical_id(stack, svc.http_api), "ApiEndpoint")
    assert outputs["TableName"]["Value"] == {"Ref": logical_id(stack, svc.table)}
    assert outputs["PayloadBucketName"]["Value"] == {"Ref": logical_id(stack, svc.payload_bucket)}
    assert outputs["AlarmTopicArn"]["Value"] == {"Ref": logical_id(stack, svc.alarm_topic)}
    assert outputs["WorkerFunctionName"]["Value"] == {"Ref": logical_id(stack, svc.worker_function)}
    # The dashboard and outcome events are off by default: no output names them.
    assert svc.dashboard is None and svc.event_bus is None
    assert "DashboardName" not in outputs and "EventBusName" not in outputs
    # The construct itself adds no outputs to a consumer's stack.
    assert "Outputs" not in synth.template_json("full")
