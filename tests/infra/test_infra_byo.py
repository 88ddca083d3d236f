"""Bring your own: table, payload bucket, alarm topic, authorizer. Grants, environment and alarm
actions follow the brought-in resources; what cannot work is refused at synth (a table with
another layout, a non-JWT authorizer, an alarm topic under an imported KMS key).

The imported-key case (issue 12): CloudWatch can only publish to a topic whose key policy lets it,
and an imported key's policy cannot be extended here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from tests.support.infra import (
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    index_arn,
    logical_id,
    props,
    resources,
    role_statements,
)
from leasefence import schema
from leasefence.payloads import KEY_PREFIX as PAYLOAD_KEY_PREFIX
from leasefence_infra import LeaseFenceService, LeaseFenceTable
from leasefence_infra.alarm_topic import IMPORTED_TOPIC_KEY_MESSAGE

ISSUER = {"jwt_issuer": "https://idp.example.com/", "jwt_audience": ["leasefence"]}
BUCKET = "acme-leasefence-payloads"
BUCKET_KEY_ARN = "arn:aws:kms:eu-west-1:111122223333:key/11111111-2222-4333-8444-555555555555"
SERVICE_KEY_ARN = "arn:aws:kms:eu-west-1:111122223333:key/99999999-8888-4777-8666-555555555555"


class ByoStack(Stack):
    """An adopter's stack: its own table (LeaseFenceTable under its own key), an imported bucket
    under an imported key, its own encrypted alarm topic and its own JWT authorizer."""

    def __init__(self, scope: App, construct_id: str, *, core_layer: lambda_.Code) -> None:
        super().__init__(scope, construct_id)
        self.table_key = kms.Key(self, "TableKey", enable_key_rotation=True)
        self.table = LeaseFenceTable(self, "Operations", encryption_key=self.table_key)
        self.bucket = s3.Bucket.from_bucket_attributes(
            self, "Payloads", bucket_name=BUCKET,
            encryption_key=kms.Key.from_key_arn(self, "PayloadsKey", BUCKET_KEY_ARN),
        )
        self.topic_key = kms.Key(self, "OpsTopicKey", enable_key_rotation=True)
        self.topic = sns.Topic(self, "OpsTopic", master_key=self.topic_key, enforce_ssl=True)
        self.authorizer = authorizers.HttpJwtAuthorizer(
            "AcmeJwt", "https://login.acme.example/", jwt_audience=["jobs-api"]
        )
        self.service = LeaseFenceService(
            self, "LeaseFence", table=self.table, payload_bucket=self.bucket, alarm_topic=self.topic,
            authorizer=self.authorizer, core_layer=core_layer,
        )


@pytest.fixture(scope="module")
def byo(prebuilt_layer: Path) -> tuple[ByoStack, dict[str, Any]]:
    app = App()
    stack = ByoStack(app, "Byo", core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack, Template.from_stack(stack).to_json()


def _bucket_arn(suffix: str = "") -> dict[str, Any]:
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, f":s3:::{BUCKET}{suffix}"]]}


def test_the_service_creates_no_table_bucket_or_topic(byo) -> None:
    stack, tpl = byo
    svc = stack.service
    assert svc.table is stack.table and svc.payload_bucket is stack.bucket and svc.alarm_topic is stack.topic
    assert list(resources(tpl, "AWS::DynamoDB::Table")) == [logical_id(stack, stack.table)]
    # The one bucket of the service's own: where the publisher's mapping keeps failed batches.
    assert list(resources(tpl, "AWS::S3::Bucket")) == [logical_id(stack, svc.publisher.failure_bucket)]
    assert list(resources(tpl, "AWS::SNS::Topic")) == [logical_id(stack, stack.topic)]
    # The service key is not needed: no key of the service's own (only the adopter's two).
    assert set(resources(tpl, "AWS::KMS::Key")) == {logical_id(stack, stack.table_key),
                                                    logical_id(stack, stack.topic_key)}


def test_environment_follows_the_brought_in_table_and_bucket(byo) -> None:
    stack, tpl = byo
    for fn in (stack.service.api.function.function, stack.service.sweeper.function.function):
        env = props(tpl, logical_id(stack, fn))["Environment"]["Variables"]
        assert env["LEASEFENCE_TABLE"] == {"Ref": logical_id(stack, stack.table)}
        assert env["LEASEFENCE_PAYLOAD_BUCKET"] == BUCKET


def test_grants_point_to_the_brought_in_table_bucket_and_keys(byo) -> None:
    stack, tpl = byo
    svc = stack.service
    table = logical_id(stack, stack.table)
    api = role_statements(tpl, logical_id(stack, svc.api.function.role))
    sweeper = role_statements(tpl, logical_id(stack, svc.sweeper.function.role))
    assert grant_set(actions_by_resource(api, "dynamodb:")) == grant_set([
        (frozenset({"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem",
                    "dynamodb:Query"}), getatt(table)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
    ])
    assert grant_set(actions_by_resource(sweeper, "dynamodb:")) == grant_set([
        *[(frozenset({"dynamodb:Query"}), index_arn(table, index))
          for index in (schema.SWEEP_INDEX, schema.PARKED_INDEX, schema.PURGE_INDEX, schema.DUE_INDEX)],
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:Query"}), getatt(table)),
    ])
    assert grant_set(actions_by_resource(api, "s3:")) == grant_set([
        (frozenset({"s3:PutObject", "s3:GetObject", "s3:DeleteObject"}), _bucket_arn(f"/{PAYLOAD_KEY_PREFIX}*")),
        (frozenset({"s3:ListBucket"}), _bucket_arn()),
    ])
    assert actions_by_resource(sweeper, "s3:") == [
        (frozenset({"s3:DeleteObject"}), _bucket_arn(f"/{PAYLOAD_KEY_PREFIX}*"))]
    # Both data keys (the table's, the bucket's), and no other key, for both functions.
    for statements in (api, sweeper):
        keys = {json.dumps(key, sort_keys=True) for _, key in actions_by_resource(statements, "kms:")}
        assert keys == {json.dumps(getatt(logical_id(stack, stack.table_key))), json.dumps(BUCKET_KEY_ARN)}


def test_alarms_go_to_the_brought_in_topic_which_cloudwatch_may_use(byo) -> None:
    stack, tpl = byo
    topic = {"Ref": logical_id(stack, stack.topic)}
    alarms = resources(tpl, "AWS::CloudWatch::Alarm").values()
    assert len(alarms) > 10
    assert all(a["Properties"]["AlarmActions"] == [topic] and a["Properties"]["OKActions"] == [topic] for a in alarms)
    key_policy = props(tpl, logical_id(stack, stack.topic_key))["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} for s in key_policy)
    (topic_policy,) = resources(tpl, "AWS::SNS::TopicPolicy").values()
    assert topic_policy["Properties"]["Topics"] == [topic]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} and s["Action"] == "sns:Publish"
               for s in topic_policy["Properties"]["PolicyDocument"]["Statement"])


def test_routes_use_the_brought_in_authorizer(byo) -> None:
    stack, tpl = byo
    (authorizer_lid, authorizer) = next(iter(resources(tpl, "AWS::ApiGatewayV2::Authorizer").items()))
    assert authorizer["Properties"]["JwtConfiguration"] == {"Issuer": "https://login.acme.example/",
                                                            "Audience": ["jobs-api"]}
    routes = [r["Properties"] for r in resources(tpl, "AWS::ApiGatewayV2::Route").values()]
    secured = [r for r in routes if r["AuthorizationType"] != "NONE"]
    # All but the open ones: GET /v1/health, the target-class table and the console's files.
    assert {r["RouteKey"] for r in routes if r["AuthorizationType"] == "NONE"} == {
        "GET /v1/health", "GET /v1/target-classes", "GET /", "GET /console", "GET /console/{asset}", "$default"}
    assert all(r["AuthorizerId"] == {"Ref": authorizer_lid} and r["AuthorizationType"] == "JWT" for r in secured)


def test_no_unacknowledged_nag_findings_with_imported_resources(byo) -> None:
    """The payload-prefix acknowledgment names the imported bucket's ARN as cdk-nag renders it."""
    stack, _ = byo
    finder = Annotations.from_stack(stack)
    for level in ("error", "warning"):
        found = getattr(finder, f"find_{level}")("*", Match.string_like_regexp("AwsSolutions-.*"))
        assert [str(m.entry.data)[:300] for m in found] == []


def test_the_adopters_own_resources_do_not_get_the_service_tags(byo) -> None:
    from leasefence_infra.service import SERVICE_TAG

    stack, tpl = byo
    for construct in (stack.table, stack.table_key, stack.topic, stack.topic_key):
        tags = props(tpl, logical_id(stack, construct)).get("Tags", [])
        assert SERVICE_TAG not in {t["Key"] for t in tags}
    api_fn = props(tpl, logical_id(stack, stack.service.api.function.function))
    assert {"Key": SERVICE_TAG, "Value": "Byo/LeaseFence"} in api_fn["Tags"]


# ----------------------------------------------------------------------------- refused at synth


def test_a_table_with_another_layout_is_refused_at_synth(tmp_path: Path, prebuilt_layer: Path) -> None:
    app = App(outdir=str(tmp_path))
    stack = Stack(app, "WrongTable")
    table = dynamodb.Table(stack, "Jobs",
                           partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                           stream=dynamodb.StreamViewType.KEYS_ONLY)
    LeaseFenceService(stack, "LeaseFence", **ISSUER, table=table,
                      core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    with pytest.raises(RuntimeError) as excinfo:
        app.synth()
    message = str(excinfo.value)
    assert "WrongTable/Jobs is not a leasefence operations table (create it with LeaseFenceTable)" in message
    assert "index due is missing" in message and "TTL must be enabled" in message
    assert "its stream must carry NEW_AND_OLD_IMAGES, got KEYS_ONLY" in message


@pytest.mark.parametrize("kind", ["defined here", "imported"])
def test_a_table_without_a_stream_is_refused_in_one_sentence(kind: str) -> None:
    """Stream dispatch, history and events read the table's stream: without one, synthesis stops
    before any construct is added, with one sentence that says how to bring the table."""
    from leasefence_infra.stream import NO_STREAM_MESSAGE

    stack = Stack(App(), "NoStream")
    if kind == "imported":
        table = dynamodb.Table.from_table_name(stack, "Ops", "ops")
    else:
        table = dynamodb.Table(stack, "Ops", partition_key=dynamodb.Attribute(
            name="tenant_id", type=dynamodb.AttributeType.STRING))
    with pytest.raises(ValueError) as excinfo:
        LeaseFenceService(stack, "LeaseFence", **ISSUER, table=table, core_layer=lambda_.Code.from_inline("x"))
    assert str(excinfo.value) == NO_STREAM_MESSAGE
    assert NO_STREAM_MESSAGE.count(". ") == 0 and NO_STREAM_MESSAGE.endswith(".")
    assert stack.node.try_find_child("LeaseFence") is None


def test_an_imported_table_with_its_stream_is_subscribed_to(prebuilt_layer: Path) -> None:
    stream_arn = "arn:aws:dynamodb:eu-west-1:111122223333:table/ops/stream/2026-01-01T00:00:00.000"
    stack = Stack(App(), "ImportedStream")
    table = dynamodb.Table.from_table_attributes(stack, "Ops", table_name="ops", table_stream_arn=stream_arn)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, table=table,
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    tpl = Template.from_stack(stack).to_json()
    (mapping,) = resources(tpl, "AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["EventSourceArn"] == stream_arn
    statements = role_statements(tpl, logical_id(stack, svc.publisher.function.role))
    assert (frozenset({"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}),
            stream_arn) in actions_by_resource(statements, "dynamodb:")


def test_a_hand_built_table_with_the_schema_passes_the_check() -> None:
    from leasefence_infra.table import schema_mismatches

    stack = Stack(App(), "Tables")
    assert schema_mismatches(LeaseFenceTable(stack, "Ops")) == []
    imported = dynamodb.Table.from_table_name(stack, "Imported", "ops")
    assert schema_mismatches(imported) == []  # cannot be checked here: taken as is
    wrong_ttl = LeaseFenceTable(stack, "Ops2")
    wrong_ttl.node.default_child.time_to_live_specification = dynamodb.CfnTable.TimeToLiveSpecificationProperty(
        enabled=True, attribute_name="ttl")
    assert [p for p in schema_mismatches(wrong_ttl) if "TTL" in p]
    new_images_only = LeaseFenceTable(stack, "Ops3")
    new_images_only.node.default_child.stream_specification = dynamodb.CfnTable.StreamSpecificationProperty(
        stream_view_type="NEW_IMAGE")
    assert schema_mismatches(new_images_only) == ["its stream must carry NEW_AND_OLD_IMAGES, got NEW_IMAGE"]


@pytest.mark.parametrize("kind", ["Table", "TableV2"])
def test_a_replicated_global_table_is_refused(kind: str) -> None:
    """Two regions of a global table could each claim one operation at the same fence (conditions
    are checked per region): the check refuses replication, whatever else the table has right."""
    from aws_cdk import Environment

    from leasefence_infra.table import schema_mismatches

    stack = Stack(App(), "Global", env=Environment(account="111122223333", region="us-east-1"))
    key = dynamodb.Attribute(name="tenant_id", type=dynamodb.AttributeType.STRING)
    if kind == "Table":
        table: Any = dynamodb.Table(stack, "Ops", partition_key=key, replication_regions=["eu-west-1"])
    else:
        table = dynamodb.TableV2(stack, "Ops", partition_key=key,
                                 replicas=[dynamodb.ReplicaTableProps(region="eu-west-1")])
    assert [p for p in schema_mismatches(table) if p.startswith("it is replicated (a global table)")]
    assert not [p for p in schema_mismatches(LeaseFenceTable(stack, "Single")) if "replicated" in p]


def test_a_non_jwt_authorizer_is_refused(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "IamAuth")
    with pytest.raises(ValueError, match="authorizer must be a JWT authorizer .* not AWS_IAM"):
        LeaseFenceService(stack, "LeaseFence", authorizer=authorizers.HttpIamAuthorizer(),
                          core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))


def test_imported_service_key_gives_the_alarm_topic_a_key_cloudwatch_may_use(prebuilt_layer: Path) -> None:
    """Before: the topic was encrypted with the imported key and CloudWatch could not publish."""
    stack = Stack(App(), "ImportedKey")
    key = kms.Key.from_key_arn(stack, "CompanyKey", SERVICE_KEY_ARN)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, encryption_key=key,
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    tpl = Template.from_stack(stack).to_json()
    topic_key = svc.monitoring.node.find_child("AlarmTopicKey")
    topic = props(tpl, logical_id(stack, svc.alarm_topic))
    assert topic["KmsMasterKeyId"] == getatt(logical_id(stack, topic_key))
    statements = props(tpl, logical_id(stack, topic_key))["KeyPolicy"]["Statement"]
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
               and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(as_list(s["Action"])) for s in statements)
    # Everything else stays under the imported key.
    table = props(tpl, logical_id(stack, svc.table))
    assert table["SSESpecification"]["KMSMasterKeyId"] == SERVICE_KEY_ARN
    assert SERVICE_KEY_ARN not in json.dumps(topic)


def test_owned_service_key_is_the_alarm_topics_key(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "OwnedKey")
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, create_encryption_key=True,
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    tpl = Template.from_stack(stack).to_json()
    assert svc.monitoring.node.try_find_child("AlarmTopicKey") is None
    key_lid = logical_id(stack, svc.encryption_key)
    assert props(tpl, logical_id(stack, svc.alarm_topic))["KmsMasterKeyId"] == getatt(key_lid)
    assert any(s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
               for s in props(tpl, key_lid)["KeyPolicy"]["Statement"])


def test_brought_in_topic_under_an_imported_key_is_refused_in_one_sentence(prebuilt_layer: Path) -> None:
    stack = Stack(App(), "TopicImportedKey")
    topic = sns.Topic(stack, "Ops", master_key=kms.Key.from_key_arn(stack, "K", SERVICE_KEY_ARN))
    with pytest.raises(ValueError) as excinfo:
        LeaseFenceService(stack, "LeaseFence", **ISSUER, alarm_topic=topic,
                          core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    assert str(excinfo.value) == IMPORTED_TOPIC_KEY_MESSAGE
    assert IMPORTED_TOPIC_KEY_MESSAGE.count(". ") == 0 and IMPORTED_TOPIC_KEY_MESSAGE.endswith(".")
