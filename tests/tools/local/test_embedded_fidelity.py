"""The embedded endpoint with a Fidelity is as unkind as DynamoDB: TTL deletes expired items
(after a lag, on the endpoint's settable clock), index queries lag behind the table, and
transactions can be throttled (by the endpoint, or by FaultyClient) exactly as DynamoDB reports it.
"""

from __future__ import annotations

import itertools
import time

import pytest
from botocore.exceptions import ClientError

from leasefence_tools.testing.faults import TXN_THROTTLE, TXN_THROTTLE_PROVISIONED, FaultyClient
from leasefence_tools.local.embedded import EmbeddedAws, Fidelity
from leasefence.schema import DUE_INDEX, TTL_ATTRIBUTE, TableSpec

T0 = 1_800_000_000_000  # what the tests' ManualClock starts at (epoch ms)
HOUR = 3_600_000
DAY = 86_400_000
INDEX_LAG_S = 0.4

_names = itertools.count()


def _table(aws: EmbeddedAws) -> str:
    return aws.create_tables(TableSpec(table_name=f"fidelity-{next(_names)}", due_shards=1, sweep_shards=1)).table_name


def _item(op: str, ttl_s: object = None, state: str = "queued", due_at: int = 5) -> dict:
    item = {
        "tenant_id": {"S": "t"}, "operation_id": {"S": op}, "state": {"S": state},
        "due_pk": {"S": "t#0"}, "due_at": {"N": str(due_at)}, "fence": {"N": "0"},
    }
    if isinstance(ttl_s, str):
        item[TTL_ATTRIBUTE] = {"S": ttl_s}
    elif ttl_s is not None:
        item[TTL_ATTRIBUTE] = {"N": str(ttl_s)}
    return item


def _key(op: str) -> dict:
    return {"tenant_id": {"S": "t"}, "operation_id": {"S": op}}


def _get(client, table: str, op: str, consistent: bool = False) -> dict | None:
    return client.get_item(TableName=table, Key=_key(op), ConsistentRead=consistent).get("Item")


def _index(client, table: str) -> dict[str, dict]:
    """What the due index shows for partition t#0: operation id -> projected item."""
    page = client.query(TableName=table, IndexName=DUE_INDEX, KeyConditionExpression="due_pk = :p",
                        ExpressionAttributeValues={":p": {"S": "t#0"}})
    return {item["operation_id"]["S"]: item for item in page["Items"]}


# ------------------------------------------------------------------------------------------ TTL

TTL_FIDELITY = Fidelity(ttl_lag_ms=HOUR, ttl_lag_min_ms=HOUR, index_lag_ms=0)


@pytest.fixture(scope="module", params=["thread", "process"])
def ttl_aws(request):
    with EmbeddedAws(process=request.param == "process", fidelity=TTL_FIDELITY) as aws:
        yield aws


def test_ttl_deletes_expired_items_only_after_the_lag(ttl_aws):
    aws, client = ttl_aws, ttl_aws.client()
    aws.set_time(T0)
    table = _table(aws)
    expired_s = T0 // 1000 - 60
    items = {
        "expired": _item("expired", expired_s),
        "no-ttl": _item("no-ttl"),
        "future": _item("future", T0 // 1000 + 10 * 86_400),
        "in-ms": _item("in-ms", T0),  # milliseconds by mistake: 57,000 years away, never due
        "text": _item("text", str(expired_s)),  # not a Number: TTL ignores it
        "ancient": _item("ancient", T0 // 1000 - 6 * 365 * 86_400),  # more than five years past: ignored
    }
    for item in items.values():
        client.put_item(TableName=table, Item=item)

    assert aws.reap_ttl() == 0  # expired a minute ago, but the lag (one hour here) has not passed
    assert _get(client, table, "expired") is not None  # still readable, as in DynamoDB
    assert "expired" in _index(client, table)

    aws.set_time(expired_s * 1000 + HOUR - 1)
    assert aws.reap_ttl() == 0
    assert _get(client, table, "expired") is not None

    aws.advance_time(1)  # now due: the next request finds it gone, without being asked to reap
    assert _get(client, table, "expired") is None
    assert "expired" not in _index(client, table)  # and gone from the index with it
    assert {op for op in items if _get(client, table, op, consistent=True)} == set(items) - {"expired"}

    aws.advance_time(400 * DAY)  # months later: whatever is due is deleted ("future")
    aws.reap_ttl()  # (the endpoint may have done it already: any request, or its background pass)
    remaining = {op for op in items if _get(client, table, op)}
    assert remaining == {"no-ttl", "in-ms", "text", "ancient"}
    assert set(_index(client, table)) == remaining


def test_ttl_follows_the_tables_ttl_setting(ttl_aws):
    aws, client = ttl_aws, ttl_aws.client()
    aws.set_time(T0)
    for name, enabled in (("custom-ttl", True), ("ttl-off", False)):
        name = f"{name}-{next(_names)}"
        client.create_table(TableName=name, AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")
        client.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": enabled, "AttributeName": "gone_at"})
        client.put_item(TableName=name, Item={"pk": {"S": "a"}, "gone_at": {"N": str(T0 // 1000 - 1)}})
        client.put_item(TableName=name, Item={"pk": {"S": "b"}, TTL_ATTRIBUTE: {"N": str(T0 // 1000 - 1)}})
        aws.advance_time(HOUR)
        aws.reap_ttl()
        survived = client.get_item(TableName=name, Key={"pk": {"S": "a"}}).get("Item") is not None
        assert survived is not enabled
        assert client.get_item(TableName=name, Key={"pk": {"S": "b"}}).get("Item") is not None  # not the TTL attribute


def test_ttl_deletion_runs_in_the_background():
    """An idle endpoint deletes what is due on its own (no request, no reap_ttl)."""
    from moto.dynamodb.models import dynamodb_backends

    with EmbeddedAws(fidelity=Fidelity(ttl_lag_ms=0, index_lag_ms=0, reap_interval_s=0.05)) as aws:
        client = aws.client()
        aws.set_time(T0)
        table = _table(aws)
        client.put_item(TableName=table, Item=_item("soon", T0 // 1000 + 60))
        aws.advance_time(61_000)
        stored = dynamodb_backends["123456789012"]["us-east-1"].tables[table]
        deadline = time.monotonic() + 3
        while stored.items.get(next(iter(stored.items))) and time.monotonic() < deadline:
            time.sleep(0.02)  # looks at moto's backend directly: a request would reap by itself
        assert not any(stored.items.values())


def test_ttl_deletion_writes_a_service_remove_record_to_the_stream():
    with EmbeddedAws(fidelity=Fidelity(ttl_lag_ms=0, index_lag_ms=0)) as aws:
        client, streams = aws.client(), aws.client("dynamodbstreams")
        aws.set_time(T0)
        name = f"streamed-{next(_names)}"
        client.create_table(TableName=name, AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST",
                            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
        client.update_time_to_live(TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE})
        client.put_item(TableName=name, Item={"pk": {"S": "a"}, TTL_ATTRIBUTE: {"N": str(T0 // 1000 - 1)}})
        aws.reap_ttl()
        assert client.get_item(TableName=name, Key={"pk": {"S": "a"}}).get("Item") is None
        arn = client.describe_table(TableName=name)["Table"]["LatestStreamArn"]
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        records = streams.get_records(ShardIterator=iterator)["Records"]
        assert [r["eventName"] for r in records] == ["INSERT", "REMOVE"]
        assert records[-1]["userIdentity"] == {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}
        assert records[-1]["dynamodb"]["OldImage"]["pk"] == {"S": "a"}


# ------------------------------------------------------------------------------------ index lag


@pytest.fixture(scope="module")
def lag_aws():
    lag_ms = int(INDEX_LAG_S * 1000)
    with EmbeddedAws(fidelity=Fidelity(ttl_deletion=False, index_lag_ms=lag_ms, index_lag_min_ms=lag_ms)) as aws:
        yield aws


def test_index_query_misses_a_fresh_write_until_the_lag_passes(lag_aws):
    client = lag_aws.client()
    table = _table(lag_aws)
    for attempt in range(3):  # a check is conclusive only if the query answered within the lag
        op = f"fresh-{attempt}"
        started = time.monotonic()
        client.put_item(TableName=table, Item=_item(op))
        shown = _index(client, table)
        conclusive = time.monotonic() - started < INDEX_LAG_S
        assert _get(client, table, op) is not None  # table reads see it at once
        assert _get(client, table, op, consistent=True) is not None
        table_query = client.query(TableName=table, KeyConditionExpression="tenant_id = :t",
                                   ExpressionAttributeValues={":t": {"S": "t"}})
        assert op in {item["operation_id"]["S"] for item in table_query["Items"]}
        if conclusive:
            assert op not in shown
            break
    else:
        pytest.fail("the machine is too slow to observe a 0.4 s index lag")
    time.sleep(INDEX_LAG_S + 0.05)
    assert op in _index(client, table)


def test_index_shows_the_previous_version_while_conditions_use_the_latest(lag_aws):
    client = lag_aws.client()
    table = _table(lag_aws)
    for op in ("moved", "deleted", "kept"):
        client.put_item(TableName=table, Item=_item(op))
    time.sleep(INDEX_LAG_S + 0.05)
    assert set(_index(client, table)) == {"moved", "deleted", "kept"}

    started = time.monotonic()
    client.update_item(TableName=table, Key=_key("moved"), UpdateExpression="SET #s = :c, due_at = :d, fence = :f",
                       ExpressionAttributeNames={"#s": "state"},
                       ExpressionAttributeValues={":c": {"S": "claimed"}, ":d": {"N": "99"}, ":f": {"N": "1"}})
    client.delete_item(TableName=table, Key=_key("deleted"))
    client.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": _item("in-txn")}}])
    shown = _index(client, table)
    if time.monotonic() - started < INDEX_LAG_S:
        assert set(shown) == {"moved", "deleted", "kept"}  # the delete still shows; the new item does not
        assert (shown["moved"]["state"]["S"], shown["moved"]["due_at"]["N"], shown["moved"]["fence"]["N"]) == ("queued", "5", "0")
    # The condition is checked against the table item, never against what the index showed.
    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as refused:
        client.update_item(TableName=table, Key=_key("moved"), UpdateExpression="SET fence = :f",
                           ConditionExpression="#s = :q AND fence = :seen", ExpressionAttributeNames={"#s": "state"},
                           ExpressionAttributeValues={":f": {"N": "1"}, ":q": {"S": "queued"}, ":seen": {"N": "0"}},
                           ReturnValuesOnConditionCheckFailure="ALL_OLD")
    assert refused.value.response["Item"]["state"] == {"S": "claimed"}
    assert _get(client, table, "moved", consistent=True)["due_at"] == {"N": "99"}
    assert _get(client, table, "deleted") is None

    time.sleep(INDEX_LAG_S + 0.05)
    shown = _index(client, table)
    assert set(shown) == {"moved", "kept", "in-txn"}
    assert shown["moved"]["state"] == {"S": "claimed"}
    assert lag_aws.fidelity_stats()["stats"]["index_versions_pending"] == 0  # nothing kept past the lag


# ------------------------------------------------------------------------------ throttled transactions


def _two_action_transaction(table: str) -> list[dict]:
    return [{"Put": {"TableName": table, "Item": _item("txn-a")}},
            {"Update": {"TableName": table, "Key": _key("txn-b"), "UpdateExpression": "SET fence = :f",
                        "ExpressionAttributeValues": {":f": {"N": "1"}}}},
            {"Put": {"TableName": table, "Item": _item("txn-c")}}]


def _assert_throttled_shape(error: ClientError, actions: int, code: str) -> None:
    response = error.response
    assert response["Error"]["Code"] == "TransactionCanceledException"
    assert error.operation_name == "TransactWriteItems"
    reasons = response["CancellationReasons"]
    assert len(reasons) == actions
    assert {reason["Code"] for reason in reasons} <= {code, "None"}
    assert any(reason["Code"] == code for reason in reasons)
    for reason in reasons:
        if reason["Code"] == "None":
            assert "Message" not in reason  # DynamoDB omits it for actions without an error
        else:
            assert reason["Message"]
    expected = ", ".join(reason["Code"] for reason in reasons)
    assert response["Error"]["Message"] == f"Transaction cancelled, please refer cancellation reasons for specific reasons [{expected}]"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize("mode, code", [(TXN_THROTTLE, "ThrottlingError"), (TXN_THROTTLE_PROVISIONED, "ProvisionedThroughputExceeded")])
def test_throttled_transaction_fault_has_dynamodbs_shape(aws, mode, code):
    client = aws.client()
    table = _table(aws)
    faulty = FaultyClient(client)
    faulty.fail_next("transact_write_items", mode)
    with pytest.raises(client.exceptions.TransactionCanceledException) as cancelled:
        faulty.transact_write_items(TransactItems=_two_action_transaction(table))
    _assert_throttled_shape(cancelled.value, 3, code)
    assert faulty.injected[mode] == 1
    assert _get(client, table, "txn-a") is None  # nothing was applied
    # The same keys as botocore's parse of a real cancellation (here: moto's condition failure).
    with pytest.raises(client.exceptions.TransactionCanceledException) as real:
        client.transact_write_items(TransactItems=[{"ConditionCheck": {"TableName": table, "Key": _key("none"),
                                                                       "ConditionExpression": "attribute_exists(fence)"}}])
    assert set(cancelled.value.response) == set(real.value.response)
    # Which actions report the throttle varies (seeded): "some actions", not always all or the same.
    patterns = set()
    for _ in range(8):
        faulty.fail_next("transact_write_items", mode)
        with pytest.raises(ClientError) as again:
            faulty.transact_write_items(TransactItems=_two_action_transaction(table))
        patterns.add(tuple(reason["Code"] for reason in again.value.response["CancellationReasons"]))
    assert len(patterns) > 1 and any("None" in pattern for pattern in patterns)


def test_endpoint_throttles_a_seeded_fraction_of_transactions():
    with EmbeddedAws(fidelity=Fidelity(ttl_deletion=False, index_lag_ms=0, txn_throttle_rate=0.5, seed=11)) as aws:
        client = aws.client()  # standard retry mode: botocore does not retry a cancelled transaction
        table = _table(aws)
        outcomes = []
        for i in range(30):
            items = [{"Put": {"TableName": table, "Item": _item(f"n{i}-{j}")}} for j in range(2)]
            try:
                client.transact_write_items(TransactItems=items)
                outcomes.append("ok")
            except client.exceptions.TransactionCanceledException as error:
                _assert_throttled_shape(error, 2, "ThrottlingError")
                assert error.response["ResponseMetadata"]["RetryAttempts"] == 0
                outcomes.append("throttled")
        committed = {i for i, outcome in enumerate(outcomes) if outcome == "ok"}
        assert 5 <= len(committed) <= 25  # both happen
        stored = [item["operation_id"]["S"] for item in client.scan(TableName=table)["Items"]]
        assert sorted(stored) == sorted(f"n{i}-{j}" for i in committed for j in range(2))  # all or nothing
        assert aws.fidelity_stats()["stats"]["txn_throttled"] == 30 - len(committed)


def test_engine_treats_a_throttled_transaction_as_retryable():
    from leasefence.errors import Unavailable
    from leasefence_tools.testing.faults import throttled_transaction_error
    from leasefence.store import translate

    assert isinstance(translate(throttled_transaction_error(2, [1])), Unavailable)


def test_fidelity_is_off_by_default_and_configurable_from_the_environment(monkeypatch):
    for name in ["LEASEFENCE_FIDELITY", *Fidelity.ENV.values()]:
        monkeypatch.delenv(name, raising=False)
    assert EmbeddedAws().fidelity is None
    assert Fidelity.from_env({"LEASEFENCE_FIDELITY_INDEX_LAG_MS": "9"}) is None  # needs the switch
    env = {"LEASEFENCE_FIDELITY": "1", "LEASEFENCE_FIDELITY_TTL_LAG_MS": "10", "LEASEFENCE_FIDELITY_INDEX_LAG_MS": "9",
           "LEASEFENCE_FIDELITY_TXN_THROTTLE_RATE": "0.25", "LEASEFENCE_FIDELITY_SEED": "4",
           "LEASEFENCE_FIDELITY_TTL_DELETION": "0"}
    assert Fidelity.from_env(env) == Fidelity(ttl_deletion=False, ttl_lag_ms=10, index_lag_ms=9,
                                              txn_throttle_rate=0.25, seed=4)
    monkeypatch.setenv("LEASEFENCE_FIDELITY", "1")
    assert EmbeddedAws().fidelity == Fidelity()
    assert EmbeddedAws(fidelity=False).fidelity is None
    assert EmbeddedAws(fidelity=True).fidelity == Fidelity()
    with pytest.raises(RuntimeError):
        EmbeddedAws(fidelity=False).set_time(T0)
