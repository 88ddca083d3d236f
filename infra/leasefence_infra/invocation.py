"""How the scheduled functions (sweeper, worker) are invoked, and where a failed invocation goes.

* :class:`ScheduledInvocation`: an EventBridge Scheduler schedule invoking the function, 2 retries,
  events older than a minute dropped (the next tick is due), undeliverable invocations to its own
  encrypted dead-letter queue, its own role.
* :func:`failure_queue`: the function's on-failure destination for asynchronous invocations that
  failed (Lambda does not retry them; the queue has an alarm).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from .nag import acknowledge


def encrypted_queue(scope: Construct, construct_id: str, key: kms.IKey | None) -> sqs.Queue:
    """An SQS queue under ``key`` (or SQS-managed encryption), TLS only, 14 days' retention."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.KMS if key else sqs.QueueEncryption.SQS_MANAGED,
        encryption_master_key=key,
        enforce_ssl=True,
        retention_period=Duration.days(14),
    )


def dead_letter_queue(
    scope: Construct, construct_id: str, *, key: kms.IKey | None, reason: str
) -> sqs.Queue:
    """An :func:`encrypted_queue` that is itself a dead-letter destination: cdk-nag's SQS3 (no
    dead-letter queue of its own) is acknowledged with ``reason``, which says of what."""
    queue = encrypted_queue(scope, construct_id, key)
    acknowledge(queue, "AwsSolutions-SQS3", reason)
    return queue


def failure_queue(
    scope: Construct, construct_id: str, *, what: str, key: kms.IKey | None
) -> sqs.Queue:
    """The on-failure destination of a function's async invocations (encrypted, TLS only)."""
    return dead_letter_queue(
        scope,
        construct_id,
        key=key,
        reason=f"This queue is itself the dead-letter destination of the {what} function's failed "
        "asynchronous invocations (Lambda OnFailure destination, which cdk-nag does not see "
        "as a redrive policy); it has its own alarm.",
    )


class ScheduledInvocation(Construct):
    """``Schedule`` invoking ``function``, with its ``Dlq`` and ``Role``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        function: lambda_.IFunction,
        what: str,
        description: str,
        expression: scheduler.ScheduleExpression,
        key: kms.IKey | None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.dlq = dead_letter_queue(
            self,
            "Dlq",
            key=key,
            reason=f"This queue is itself the dead-letter queue of the {what} schedule (EventBridge "
            "Scheduler DeadLetterConfig, which cdk-nag does not see as a redrive policy).",
        )
        # Own role (not the stack-wide singleton the target would create): assumable only by
        # EventBridge Scheduler on behalf of this account.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
            description=f"leasefence: EventBridge Scheduler invokes the {what}",
        )
        if key is not None:
            # Sending to a DLQ under a customer-managed key needs a data key (the target only
            # grants sqs:SendMessage; Schedule grants kms:Decrypt for its own input).
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="DlqDataKey",
                    actions=["kms:GenerateDataKey", "kms:Decrypt"],
                    resources=[key.key_arn],
                )
            )
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            description=description,
            schedule=expression,
            target=scheduler_targets.LambdaInvoke(
                function,
                dead_letter_queue=self.dlq,
                retry_attempts=2,
                # A run older than its period is useless: the next one is already due.
                max_event_age=Duration.minutes(1),
                role=self.role,
            ),
            key=key,
        )
        # After the schedule: the target adds the role's policy (acks reach existing children).
        # An alias (SnapStart) is granted on its own ARN only: nothing to acknowledge.
        if not isinstance(function, lambda_.Alias):
            acknowledge(
                self.role,
                "AwsSolutions-IAM5",
                f"lambda:InvokeFunction on the {what} and its versions/aliases (<arn>:*), the form "
                "Function.grant_invoke always emits; no other function is reachable.",
                applies_to=[
                    f"Resource::<{stack.get_logical_id(function.node.default_child)}.Arn>:*"
                ],
            )
