"""The table (``table.py``): the schema module's table, its deletion protection and key."""

from __future__ import annotations

from tests.support.infra import getatt, logical_id, props, resources, service_of

from leasefence import schema


def test_table_is_the_schema_module(variant) -> None:
    _, stack, svc, tpl = variant
    table = props(tpl, logical_id(stack, svc.table))
    request = schema.create_table_request()
    assert table["KeySchema"] == request["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=lambda d: d["AttributeName"]) == sorted(
        request["AttributeDefinitions"], key=lambda d: d["AttributeName"]
    )
    assert table["GlobalSecondaryIndexes"] == request["GlobalSecondaryIndexes"]
    for gsi in table["GlobalSecondaryIndexes"]:
        expected = (
            {"ProjectionType": "KEYS_ONLY"}
            if gsi["IndexName"] in (schema.PARKED_INDEX, schema.PURGE_INDEX)
            else {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(schema.INDEX_PROJECTION)}
        )
        assert gsi["Projection"] == expected
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert table["TimeToLiveSpecification"] == {"AttributeName": schema.TTL_ATTRIBUTE, "Enabled": True}
    # The stream the local stack turns on too (schema.create_table_request(stream=True)).
    assert table["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert schema.create_table_request(stream=True)["StreamSpecification"] == {
        "StreamEnabled": True, **table["StreamSpecification"]}
    assert "TableName" not in table  # CloudFormation names it: two stacks never collide


def test_table_defaults_deletion_protection_and_aws_owned_key(synth) -> None:
    stack, svc, tpl = service_of(synth, "default")
    table = props(tpl, logical_id(stack, svc.table))
    assert table["DeletionProtectionEnabled"] is True
    # AWS-owned key: SSE not "enabled" (that would mean KMS).
    assert table["SSESpecification"] == {"SSEEnabled": False}
    assert tpl["Resources"][logical_id(stack, svc.table)]["DeletionPolicy"] == "Retain"
    assert not resources(tpl, "AWS::KMS::Key").keys() - {logical_id(stack, svc.monitoring.node.find_child("AlarmTopicKey"))}


def test_table_options_cmk_and_no_deletion_protection(synth) -> None:
    stack, svc, tpl = service_of(synth, "full")
    table = props(tpl, logical_id(stack, svc.table))
    key_lid = logical_id(stack, svc.encryption_key)
    assert table["DeletionProtectionEnabled"] is False
    assert table["SSESpecification"] == {
        "SSEEnabled": True, "SSEType": "KMS", "KMSMasterKeyId": getatt(key_lid)
    }
    assert props(tpl, key_lid)["EnableKeyRotation"] is True
