"""The model check's in-process client answers as the boto3 client does on the same moto: items
with binary values, a refused condition with the item, a cancelled transaction with its reasons,
a malformed request."""

from __future__ import annotations

import uuid

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID

from leasefence_tools.local.embedded import LOCAL_REGION, use_local_credentials
from leasefence_tools.modelcheck.direct_client import DirectClient
from leasefence_tools.modelcheck.world import start_moto, stop_moto

TABLE = f"direct-{uuid.uuid4().hex[:12]}"
KEY = {"pk": {"S": "a"}}


@pytest.fixture
def clients():
    use_local_credentials()
    mock = start_moto()  # no reset: an embedded endpoint in this process keeps its tables
    try:
        boto = boto3.client("dynamodb", region_name=LOCAL_REGION)
        boto.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        boto.put_item(TableName=TABLE, Item={**KEY, "n": {"N": "1"}, "b": {"B": b"\x00\xff"}})
        yield boto, DirectClient(boto, DEFAULT_ACCOUNT_ID, LOCAL_REGION)
        boto.delete_table(TableName=TABLE)
    finally:
        stop_moto(mock)


def _error(call, **params):
    with pytest.raises(ClientError) as caught:
        call(**params)
    response = dict(caught.value.response)
    response.pop("ResponseMetadata", None)
    return type(caught.value).__name__, response


def test_an_item_read_back_is_the_same(clients):
    boto, direct = clients
    asked = {"TableName": TABLE, "Key": KEY, "ConsistentRead": True}
    assert direct.get_item(**asked)["Item"] == boto.get_item(**asked)["Item"]
    assert direct.get_item(**asked)["Item"]["b"] == {"B": b"\x00\xff"}


def test_a_refused_condition_carries_the_item_as_boto3_raises_it(clients):
    boto, direct = clients
    refused = {
        "TableName": TABLE,
        "Key": KEY,
        "UpdateExpression": "SET n = :two",
        "ConditionExpression": "n = :zero",
        "ExpressionAttributeValues": {":two": {"N": "2"}, ":zero": {"N": "0"}},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    assert _error(direct.update_item, **refused) == _error(boto.update_item, **refused)
    name, response = _error(direct.update_item, **refused)
    assert name == "ConditionalCheckFailedException"
    assert response["Item"]["n"] == {"N": "1"}


def test_a_cancelled_transaction_carries_its_reasons(clients):
    boto, direct = clients
    transaction = {
        "TransactItems": [
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": KEY,
                    "UpdateExpression": "SET n = :two",
                    "ConditionExpression": "attribute_not_exists(pk)",
                    "ExpressionAttributeValues": {":two": {"N": "2"}},
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        ]
    }
    assert _error(direct.transact_write_items, **transaction) == _error(
        boto.transact_write_items, **transaction
    )
    _, response = _error(direct.transact_write_items, **transaction)
    assert response["CancellationReasons"][0]["Code"] == "ConditionalCheckFailed"


def test_a_malformed_request_is_refused_as_boto3_refuses_it(clients):
    boto, direct = clients
    malformed = {"TableName": TABLE, "Key": KEY, "UpdateExpression": "SET n = :missing"}
    assert _error(direct.update_item, **malformed) == _error(boto.update_item, **malformed)


def test_other_calls_go_to_the_boto3_client(clients):
    _, direct = clients
    assert direct.describe_table(TableName=TABLE)["Table"]["TableName"] == TABLE
