"""The local stack's calls to its embedded endpoint without the network, and the endpoint's and
the API's timings (what `leasefence bench --only local-stack` reads)."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from botocore.exceptions import EndpointConnectionError

from leasefence_tools.local.embedded import EmbeddedAws
from leasefence_tools.local.timings import Timings


def _get(url: str, method: str = "GET") -> tuple[int, dict]:
    request = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_timings_keep_counts_totals_and_percentiles():
    timings = Timings(keep=10)
    for ms in range(1, 21):  # only the last 10 samples make the percentiles
        timings.add("UpdateItem", ms / 1000)
    timings.add("Query", 0.004)
    shot = timings.snapshot()
    assert list(shot) == ["Query", "UpdateItem"]
    assert shot["UpdateItem"]["count"] == 20
    assert shot["UpdateItem"]["total_ms"] == pytest.approx(210.0)
    assert shot["UpdateItem"]["p50_ms"] == 16.0 and shot["UpdateItem"]["max_ms"] == 20.0
    assert shot["Query"] == {"count": 1, "total_ms": 4.0, "mean_ms": 4.0, "p50_ms": 4.0, "p90_ms": 4.0, "max_ms": 4.0}
    timings.reset()
    assert timings.snapshot() == {}


def test_an_attached_client_is_served_by_the_same_serialized_app_without_the_network():
    with EmbeddedAws(fidelity=True) as aws:  # fidelity: the app the local stack serves by default there
        plain, attached = aws.client(), aws.attach(aws.client())
        plain.create_table(
            TableName="direct", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        _get(aws.endpoint + "/__leasefence/timings/reset", "POST")
        over_http: list[bool] = []
        original = aws.app._serve

        def spy(environ, start_response):
            over_http.append("waitress.client_disconnected" in environ)  # waitress's own key
            assert aws.app.lock.locked()  # inside the one lock, like any HTTP request
            return original(environ, start_response)

        aws.app._serve = spy
        attached.put_item(TableName="direct", Item={"pk": {"S": "a"}, "blob": {"B": b"\x00\xff"}})
        with pytest.raises(attached.exceptions.ConditionalCheckFailedException):
            attached.put_item(TableName="direct", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
        assert plain.get_item(TableName="direct", Key={"pk": {"S": "a"}})["Item"]["blob"] == {"B": b"\x00\xff"}
        status, shot = _get(aws.endpoint + "/__leasefence/timings")
        assert status == 200 and set(shot) == {"held", "waited"}
        assert shot["held"]["PutItem"]["count"] == 2 and shot["held"]["GetItem"]["count"] == 1
        assert over_http == [False, False, True]  # the two attached calls, the plain one
    # Once the endpoint stopped, the attached client goes over HTTP, to nothing.
    with pytest.raises(EndpointConnectionError):
        attached.get_item(TableName="direct", Key={"pk": {"S": "a"}})


def test_the_stack_times_each_route_in_the_handler(stack, sdk):
    _get(stack.base_url + "/__leasefence/timings/reset", "POST")
    sdk.enqueue("timed-1", "timed-job", {"n": 1})
    assert sdk.claim("w", job_types=["timed-job"]) is not None
    status, shot = _get(stack.base_url + "/__leasefence/timings")
    assert status == 200
    handler = shot["handler"]
    assert handler["api POST /v1/operations"]["count"] == 1
    assert handler["api POST /v1/claims"]["count"] == 1
    assert handler["api POST /v1/claims"]["p50_ms"] > 0
    assert _get(stack.base_url + "/__leasefence/timings", "DELETE")[0] == 405


def test_the_records_reader_gives_the_mappings_what_the_streams_client_gives():
    from leasefence_tools.local.in_process import InProcessError, call_json
    from leasefence_tools.local.streams import lambda_record

    with EmbeddedAws() as aws:
        ddb, streams = aws.client(), aws.client("dynamodbstreams")
        arn = ddb.create_table(
            TableName="streamed", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]["LatestStreamArn"]
        reader = aws.records_reader()
        written = reader.written()
        assert not written.is_set()
        ddb.put_item(TableName="streamed", Item={"pk": {"S": "a"}, "n": {"N": "1"}})
        assert written.is_set()  # a record written: the reader's wake-up
        written.clear()
        ddb.get_item(TableName="streamed", Key={"pk": {"S": "a"}})
        assert not written.is_set()  # a read writes no record
        ddb.update_item(
            TableName="streamed", Key={"pk": {"S": "a"}}, UpdateExpression="SET h = :h, n = n + :one",
            ExpressionAttributeValues={":h": {"L": [{"M": {"s": {"S": "x"}}}]}, ":one": {"N": "1"}},
        )
        ddb.delete_item(TableName="streamed", Key={"pk": {"S": "a"}})
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]

        def iterator() -> str:
            found = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
            return found["ShardIterator"]

        read = reader.read
        raw = read(iterator(), 1000)
        parsed = streams.get_records(ShardIterator=iterator(), Limit=1000)
        assert [r["eventName"] for r in raw["Records"]] == ["INSERT", "MODIFY", "REMOVE"]
        ours = [lambda_record(r, arn) for r in raw["Records"]]
        theirs = [lambda_record(r, arn) for r in parsed["Records"]]
        for mine, botocores in zip(ours, theirs, strict=True):
            created = mine["dynamodb"].pop("ApproximateCreationDateTime")
            assert isinstance(created, float)
            assert created == pytest.approx(botocores["dynamodb"].pop("ApproximateCreationDateTime"), abs=1e-6)
            assert mine == botocores
        assert read(raw["NextShardIterator"], 1000)["Records"] == []  # the next iterator works
        # An iterator is used once (pruned): moto's error, raised in process as it is for an
        # attached client; the mapping takes a new iterator after any error.
        with pytest.raises((InProcessError, KeyError)):
            read(raw["NextShardIterator"], 1000)
        with pytest.raises(InProcessError) as refused:  # an error answer: its status and code
            call_json(aws.app, aws.endpoint, "DynamoDB_20120810.DescribeTable", {"TableName": "none"}, "dynamodb")
        assert (refused.value.status, refused.value.code) == (400, "ResourceNotFoundException")
    with pytest.raises(ConnectionError):  # once stopped, as a client of a stopped endpoint
        read("any", 1000)


def test_the_endpoints_cpu_on_a_callers_thread_is_counted_apart_for_that_thread_only():
    """What the endpoint computes serving an attached client's request runs on the caller's
    thread; ``served_cpu_s`` counts it, so the bench leaves it out of a function's CPU (on AWS it
    is DynamoDB's). A plain client's request (over HTTP: served on another thread) adds nothing."""
    import time

    from leasefence_tools.local.in_process import served_cpu_s

    with EmbeddedAws() as aws:
        plain, attached = aws.client(), aws.attach(aws.client())
        plain.create_table(
            TableName="spent", KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST",
        )
        before = served_cpu_s()
        for i in range(20):
            plain.put_item(TableName="spent", Item={"pk": {"S": f"p{i}"}})
        assert served_cpu_s() == before
        cpu = time.thread_time()
        for i in range(20):
            attached.put_item(TableName="spent", Item={"pk": {"S": f"a{i}"}})
        spent, served = time.thread_time() - cpu, served_cpu_s() - before
        assert 0 < served < spent  # the endpoint's share, the client's own work left over
        elsewhere: list[float] = []
        worker = threading.Thread(target=lambda: elsewhere.append(served_cpu_s()))
        worker.start()
        worker.join()
        assert elsewhere == [0.0]  # per thread
