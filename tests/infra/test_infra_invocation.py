"""Scheduled functions' asynchronous invocations (``invocation.py``): no Lambda retries,
failures to an encrypted, alarmed on-failure queue."""

from __future__ import annotations

from aws_cdk.assertions import Template
from tests.support.infra import (
    denies_insecure_transport,
    getatt,
    invoked_qualifier,
    logical_id,
    props,
    resources,
)


def test_async_invocations_fail_to_an_alarmed_queue(variant) -> None:
    """Sweeper and worker: no Lambda retries of a failed async invocation (the next tick runs),
    events older than a minute dropped, failures to an encrypted TLS-only queue with an alarm."""
    name, stack, svc, tpl = variant
    template = Template.from_json(tpl)
    topic = {"Ref": logical_id(stack, svc.alarm_topic)}
    pairs = [(svc.sweeper.function, svc.sweeper.failure_queue), (svc.worker.function, svc.worker.failure_queue)]
    queues = {logical_id(stack, q) for _, q in pairs}
    assert len(queues) == 2 and not queues & {logical_id(stack, svc.sweeper.schedule.dlq),
                                              logical_id(stack, svc.worker.schedule.dlq)}
    for fn, queue in pairs:
        qid = logical_id(stack, queue)
        template.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
            "FunctionName": {"Ref": logical_id(stack, fn.function)},
            "Qualifier": invoked_qualifier(stack, fn),
            "MaximumRetryAttempts": 0,
            "MaximumEventAgeInSeconds": 60,
            "DestinationConfig": {"OnFailure": {"Destination": getatt(qid)}},
        })
        q = props(tpl, qid)
        if name == "default":
            assert q["SqsManagedSseEnabled"] is True
        else:
            assert q["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
        assert q["MessageRetentionPeriod"] == 14 * 24 * 3600
        (qpolicy,) = [p["Properties"] for p in resources(tpl, "AWS::SQS::QueuePolicy").values()
                      if p["Properties"]["Queues"] == [{"Ref": qid}]]
        assert denies_insecure_transport(qpolicy)
        template.has_resource_properties("AWS::CloudWatch::Alarm", {
            "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": getatt(qid, "QueueName")}],
            "Statistic": "Maximum", "Threshold": 1, "EvaluationPeriods": 1,
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "AlarmActions": [topic], "OKActions": [topic],
        })
    # The API function is invoked synchronously: no async config of its own.
    configs = [c["Properties"]["FunctionName"] for c in resources(tpl, "AWS::Lambda::EventInvokeConfig").values()]
    assert {"Ref": logical_id(stack, svc.api.function.function)} not in configs and len(configs) == 2
