"""The sweeper (``sweeper.py``): its schedule, dead-letter queue and schedule role."""

from __future__ import annotations

from tests.support.infra import (
    actions_by_resource,
    denies_insecure_transport,
    getatt,
    invoked_arn,
    logical_id,
    props,
    resources,
    role_statements,
)


def test_sweeper_schedule(variant) -> None:
    name, stack, svc, tpl = variant
    schedules = resources(tpl, "AWS::Scheduler::Schedule")
    assert set(schedules) == {logical_id(stack, svc.sweeper.schedule.schedule),
                              logical_id(stack, svc.worker.schedule.schedule)}
    p = props(tpl, logical_id(stack, svc.sweeper.schedule.schedule))
    dlq = logical_id(stack, svc.sweeper.schedule.dlq)
    assert p["ScheduleExpression"] == "rate(1 minute)"
    assert p["State"] == "ENABLED"
    assert p["Target"]["Arn"] == invoked_arn(stack, svc.sweeper.function)
    assert p["Target"]["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 60}
    assert p["Target"]["DeadLetterConfig"] == {"Arn": getatt(dlq)}
    queue = props(tpl, dlq)
    if name == "default":
        assert queue["SqsManagedSseEnabled"] is True
    else:
        assert queue["KmsMasterKeyId"] == getatt(logical_id(stack, svc.encryption_key))
    (qpolicy,) = [q["Properties"] for q in resources(tpl, "AWS::SQS::QueuePolicy").values()
                  if q["Properties"]["Queues"] == [{"Ref": dlq}]]
    assert denies_insecure_transport(qpolicy)
    schedule_role = logical_id(stack, svc.sweeper.schedule.role)
    assert p["Target"]["RoleArn"] == getatt(schedule_role)
    trust = props(tpl, schedule_role)["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]
    statements = role_statements(tpl, schedule_role)
    assert actions_by_resource(statements, "sqs:") == [(frozenset({"sqs:SendMessage"}), getatt(dlq))]
    kms_grants = actions_by_resource(statements, "kms:")
    if name == "default":
        assert kms_grants == []
    else:  # the DLQ (and the schedule input) use the customer-managed key
        key = getatt(logical_id(stack, svc.encryption_key))
        assert (frozenset({"kms:GenerateDataKey", "kms:Decrypt"}), key) in kms_grants
