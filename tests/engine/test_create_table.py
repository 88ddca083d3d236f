"""``schema.create_table`` against what DynamoDB does and moto does not: a new table answers
``CREATING`` first (and refuses ``UpdateTimeToLive`` until it is ``ACTIVE``), a table may exist
without TTL; and a table still being created is reported as such by the store, not as missing."""

from __future__ import annotations

import uuid

import pytest

from leasefence.errors import StoreMisconfigured, Unavailable
from leasefence.schema import (
    TTL_ATTRIBUTE,
    TableNotReady,
    TableSpec,
    create_table,
    create_table_request,
)
from leasefence.store import Store
from tests.support import endpoints


def _spec() -> TableSpec:
    return TableSpec(table_name=f"create-{uuid.uuid4().hex[:10]}", due_shards=2, sweep_shards=1)


class CreatingFirst:
    """A real client whose new tables answer ``CREATING`` to the first ``creating_for``
    DescribeTable calls and refuse UpdateTimeToLive and UpdateTable meanwhile, as DynamoDB does."""

    def __init__(self, client, creating_for: int = 3) -> None:
        self._client = client
        self.exceptions = client.exceptions
        self.creating_left: dict[str, int] = {}
        self.creating_for = creating_for
        self.calls: list[str] = []

    def create_table(self, **request):
        self.calls.append("CreateTable")
        answer = self._client.create_table(**request)
        self.creating_left[request["TableName"]] = self.creating_for
        answer["TableDescription"]["TableStatus"] = "CREATING"
        return answer

    def describe_table(self, TableName):
        self.calls.append("DescribeTable")
        answer = self._client.describe_table(TableName=TableName)
        if self.creating_left.get(TableName, 0) > 0:
            self.creating_left[TableName] -= 1
            answer["Table"]["TableStatus"] = "CREATING"
        return answer

    def _refuse_while_creating(self, operation: str, table: str) -> None:
        self.calls.append(operation)
        if self.creating_left.get(table, 0) > 0:
            raise self.exceptions.ResourceInUseException(
                {"Error": {"Code": "ResourceInUseException", "Message": "Table is being created"}},
                operation,
            )

    def update_time_to_live(self, **request):
        self._refuse_while_creating("UpdateTimeToLive", request["TableName"])
        return self._client.update_time_to_live(**request)

    def update_table(self, **request):
        self._refuse_while_creating("UpdateTable", request["TableName"])
        return self._client.update_table(**request)

    def describe_time_to_live(self, TableName):
        self.calls.append("DescribeTimeToLive")
        return self._client.describe_time_to_live(TableName=TableName)


@pytest.mark.needs("ttl", "streams")
def test_create_table_waits_for_active_before_it_enables_ttl(ddb, monkeypatch, table_named):
    monkeypatch.setattr("leasefence.schema.ACTIVE_POLL_S", 0.01)
    stub = CreatingFirst(ddb, creating_for=3)
    spec = table_named(_spec())
    table = create_table(stub, spec, stream=True)
    assert table["TableStatus"] == "ACTIVE"
    assert stub.calls.count("DescribeTable") == 4  # three CREATING answers, then ACTIVE
    assert stub.calls.index("UpdateTimeToLive") > 3
    ttl = ddb.describe_time_to_live(TableName=spec.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)


def test_create_table_gives_up_with_the_status_it_saw(ddb, monkeypatch, table_named):
    monkeypatch.setattr("leasefence.schema.ACTIVE_POLL_S", 0.01)
    stub = CreatingFirst(ddb, creating_for=10_000)
    spec = table_named(_spec())
    with pytest.raises(TableNotReady, match=rf"table {spec.table_name} is still CREATING after 0.1 s"):
        create_table(stub, spec, timeout_s=0.1)
    assert "UpdateTimeToLive" not in stub.calls


@pytest.mark.needs("ttl")
def test_an_existing_table_without_ttl_gets_it(ddb, table_named):
    spec = table_named(_spec())
    ddb.create_table(**create_table_request(spec))  # as a table made elsewhere, TTL off
    assert ddb.describe_time_to_live(TableName=spec.table_name)["TimeToLiveDescription"][
        "TimeToLiveStatus"
    ] == "DISABLED"
    create_table(ddb, spec)
    ttl = ddb.describe_time_to_live(TableName=spec.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    create_table(ddb, spec)  # again: nothing to change, nothing refused
    assert ddb.describe_time_to_live(TableName=spec.table_name)["TimeToLiveDescription"][
        "AttributeName"
    ] == TTL_ATTRIBUTE


@pytest.mark.needs("ttl")
def test_an_existing_table_with_ttl_on_another_attribute_is_refused_by_name(ddb, table_named):
    spec = table_named(_spec())
    ddb.create_table(**create_table_request(spec))
    ddb.update_time_to_live(
        TableName=spec.table_name,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "gone_at"},
    )
    with pytest.raises(TableNotReady, match=r"TTL ENABLED on 'gone_at'; leasefence needs it on 'expires_at_epoch_s'"):
        create_table(ddb, spec)
    assert ddb.describe_time_to_live(TableName=spec.table_name)["TimeToLiveDescription"][
        "AttributeName"
    ] == "gone_at"  # an operator's decision: left as it was


@pytest.mark.needs("streams")
def test_an_existing_table_without_a_stream_gets_one(ddb, table_named):
    spec = table_named(_spec())
    ddb.create_table(**create_table_request(spec))
    assert "LatestStreamArn" not in ddb.describe_table(TableName=spec.table_name)["Table"]
    table = create_table(ddb, spec, stream=True)
    assert table["LatestStreamArn"]


@pytest.fixture(scope="module")
def dynalite():
    with endpoints.dynalite(create_ms=500) as endpoint:
        yield endpoints.client(endpoint)


def test_on_dynalite_the_table_is_usable_when_create_table_returns(dynalite):
    """dynalite keeps a new table CREATING for 500 ms and refuses every item call meanwhile."""
    spec = _spec()
    table = create_table(dynalite, spec, ttl=False)  # dynalite has no TTL
    assert table["TableStatus"] == "ACTIVE"
    key = {"tenant_id": {"S": "t"}, "operation_id": {"S": "o"}}
    dynalite.put_item(TableName=spec.table_name, Item=key)
    assert dynalite.get_item(TableName=spec.table_name, Key=key)["Item"] == key


def test_a_table_still_being_created_is_a_wait_not_a_missing_table(dynalite):
    spec = _spec()
    dynalite.create_table(**create_table_request(spec))  # CREATING for 500 ms from now
    store = Store(spec.table_name, client=dynalite)
    with pytest.raises(Unavailable, match="still being created"):
        store.get({"tenant_id": "t", "operation_id": "o"})
    with pytest.raises(StoreMisconfigured, match=r"operations table create-missing-table not found"):
        Store("create-missing-table", client=dynalite).get({"tenant_id": "t", "operation_id": "o"})
