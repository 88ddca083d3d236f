"""The SNS topic every alarm of a ``LeaseFenceService`` publishes to, and the rule that keeps it
usable by CloudWatch.

CloudWatch can publish to an encrypted topic only if the topic's key policy lets
``cloudwatch.amazonaws.com`` use the key (never the AWS-managed ``aws/sns`` key). A key policy
can only be edited by the app that owns the key, so:

* no topic given: the service creates one, encrypted with the service key if this app owns it
  (a ``kms.Key``), else with a key of its own (``AlarmTopicKey``) - an imported service key is
  never used for the topic, because its policy cannot be extended here;
* a topic given: if it is a ``sns.Topic`` of this app encrypted with a key of this app, the key
  and topic policies get the CloudWatch statements; encrypted with an imported key, synthesis is
  refused (:data:`IMPORTED_TOPIC_KEY_MESSAGE`); an imported topic is taken as is (its owner
  allows CloudWatch, see ``infra/README.md``).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

#: The one sentence synthesis stops with for a brought-in topic under an imported key.
IMPORTED_TOPIC_KEY_MESSAGE = (
    "alarm_topic is encrypted with an imported KMS key whose policy this app cannot extend, so "
    "CloudWatch could not publish the alarms: give a topic whose key is created in this app, or "
    "an imported topic whose key policy already allows cloudwatch.amazonaws.com."
)


def refuse_unusable_topic(topic: sns.ITopic) -> None:
    """Raise :data:`IMPORTED_TOPIC_KEY_MESSAGE` for a topic of this app under an imported key."""
    if (
        isinstance(topic, sns.Topic)
        and topic.master_key is not None
        and not isinstance(topic.master_key, kms.Key)
    ):
        raise ValueError(IMPORTED_TOPIC_KEY_MESSAGE)


def alarm_topic(
    scope: Construct, *, topic: sns.ITopic | None, service_key: kms.IKey | None
) -> sns.ITopic:
    """The topic for the alarms: ``topic`` (made usable by CloudWatch where this app can), or a
    new encrypted one (``AlarmTopic``, with ``AlarmTopicKey`` unless the service key is this
    app's own)."""
    if topic is not None:
        refuse_unusable_topic(topic)
        if isinstance(topic, sns.Topic):
            if isinstance(topic.master_key, kms.Key):
                _let_cloudwatch_use_key(topic.master_key)
            _let_cloudwatch_publish(topic)
        return topic
    key = (
        service_key
        if isinstance(service_key, kms.Key)
        else kms.Key(
            scope, "AlarmTopicKey", description="leasefence alarm topic", enable_key_rotation=True
        )
    )
    _let_cloudwatch_use_key(key)
    created = sns.Topic(
        scope, "AlarmTopic", display_name="leasefence alarms", master_key=key, enforce_ssl=True
    )
    _let_cloudwatch_publish(created)
    return created


def _let_cloudwatch_use_key(key: kms.Key) -> None:
    stack = Stack.of(key)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchAlarmsPublish",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"],
            resources=["*"],  # in a key policy "*" means this key
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
        )
    )


def _let_cloudwatch_publish(topic: sns.Topic) -> None:
    stack = Stack.of(topic)
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            sid="CloudWatchAlarmsPublish",
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {
                    "aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"
                },
            },
        )
    )
