"""The capability probe (``leasefence_tools.local.capabilities``) on a full-featured endpoint (the
embedded one) and on dynalite, which lacks four of them; and a local stack on an external
endpoint without streams or TTL: streams off, said why, the rest served."""

from __future__ import annotations

import socket
import uuid

import pytest

from leasefence_tools.local import capabilities
from leasefence_tools.local.capabilities import (
    RETURNED_ITEM,
    STREAMS,
    TRANSACTIONS,
    TTL,
    Capabilities,
    UnsuitableEndpoint,
    probe,
)
from leasefence_tools.local.server import LocalStack
from tests.support import ROOT, endpoints
from tests.support.api import Api, claimed, enqueue, op_path


def _prefix() -> str:
    return f"probe-{uuid.uuid4().hex[:8]}"


def _tables_of(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_tables").paginate()  # a shared endpoint holds many
    return [t for page in pages for t in page["TableNames"] if t.startswith(prefix)]


def test_the_embedded_endpoint_has_everything_and_keeps_no_scratch_table(aws):
    client, prefix = aws.client(), _prefix()
    found = probe(client, aws.client("dynamodbstreams"), prefix)
    assert found.lacking == {}
    assert found.refusal() is None and found.require() is found
    assert found.left_behind is None
    assert _tables_of(client, prefix) == []


def test_dynalite_lacks_four_capabilities_each_named_with_what_the_probe_saw():
    with endpoints.dynalite() as endpoint:
        client, prefix = endpoints.client(endpoint), _prefix()
        other = "someone-elses-table"
        client.create_table(
            TableName=other,
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        found = probe(client, prefix=prefix)
        assert client.list_tables()["TableNames"] == [other]  # its scratch table gone, no other
    assert list(found.lacking) == [RETURNED_ITEM, TRANSACTIONS, TTL, STREAMS]
    assert found.lacking[TRANSACTIONS] == "UnknownOperationException"
    assert found.lacking[TTL] == "UnknownOperationException"
    assert found.lacking[RETURNED_ITEM] == "a refused conditional write came back without the item"
    assert found.missing_required == (TRANSACTIONS, RETURNED_ITEM)
    refusal = found.refusal()
    assert refusal is not None
    assert refusal.splitlines()[0] == (
        f"the DynamoDB endpoint {endpoint} lacks TransactWriteItems (UnknownOperationException), "
        "ReturnValuesOnConditionCheckFailure (a refused conditional write came back without the "
        "item)."
    )
    assert "It also lacks TTL (UnknownOperationException), Streams (" in refusal
    assert "  without Streams: the stream worker and the publisher" in refusal
    with pytest.raises(UnsuitableEndpoint) as refused:
        found.require()
    assert str(refused.value) == refusal
    # docs/local-stack.md shows this refusal as it is (dynalite on its default port)
    shown = f"cannot start: {refusal}".replace(endpoint, "http://127.0.0.1:4567")
    assert shown in (ROOT / "docs" / "local-stack.md").read_text()


def test_an_endpoint_that_does_not_answer_is_said_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        client = endpoints.client(f"http://127.0.0.1:{port}")
        with pytest.raises(UnsuitableEndpoint, match=rf"127.0.0.1:{port} could not create a table"):
            probe(client, prefix=_prefix())


def test_a_stack_on_an_endpoint_without_streams_and_ttl_serves_with_them_off(aws, monkeypatch):
    lacking = {STREAMS: "no stream API", TTL: "UnknownOperationException"}
    monkeypatch.setattr(
        capabilities, "probe", lambda dynamodb, *_: Capabilities(dynamodb.meta.endpoint_url, lacking)
    )
    prefix = _prefix()
    with LocalStack(
        port=0,
        dynamodb_port=0,
        sweep_interval=None,
        secret="capabilities-test-secret-0123456789",
        streams=True,
        worker_handlers="tests.support.stream_jobs:HANDLERS",
        worker_tenants=("acme",),
        dynamodb_endpoint=aws.endpoint,
        table_prefix=prefix,
    ) as stack:
        assert stack.table_name == f"{prefix}-operations"
        assert stack.dynamodb_endpoint == aws.endpoint != stack.aws_endpoint
        assert not stack.streams and stack.mappings == {}
        assert stack.streams_off_reason == "the DynamoDB endpoint lacks Streams (no stream API)"
        with pytest.raises(RuntimeError, match="lacks Streams"):
            stack.start_streams()
        table = aws.client().describe_table(TableName=stack.table_name)["Table"]
        assert "LatestStreamArn" not in table
        ttl = aws.client().describe_time_to_live(TableName=stack.table_name)
        assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"
        api = Api(stack.base_url, stack.token("acme"))
        enqueue(api, "r-1", job_type="report")
        grant = claimed(api, "r-1")
        done = api.post(op_path("r-1", "complete"), {"fence": grant["fence"], "outcome_code": "ok"})
        assert done.status == 200, done.text
        # In whichever write shard the stack's layout put it (a small table of its own).
        item = next(
            i for i in aws.client().scan(TableName=stack.table_name)["Items"] if i["operation_id"]["S"] == "r-1"
        )
        assert item["state"] == {"S": "succeeded"}
