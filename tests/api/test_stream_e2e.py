"""Push, not poll, end to end on the local stack: the table's stream drives the worker function
(no scheduled drain runs here), the publisher (in the worker function: one reader) publishes outcome
events, the history route serves it; poison records end in the failure destinations while the
records after them are processed. One mapping reads the stream (the worker function dispatches
and publishes: issue 33)."""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path

import jsonschema
import pytest
from tests.support import stream_jobs
from tests.support.api import Api, op_path
from tests.support.stack import STREAM_TENANTS

from leasefence_tools.local import tokens as auth
from leasefence.api.security import OPERATE, PRODUCE, WORK
from leasefence_tools.local.events import Subscription
from leasefence.streams.events import subscription_pattern

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "events" / "operation-event.v1.schema.json").read_text())
TENANT = STREAM_TENANTS[0]


@pytest.fixture(scope="module")
def streams(stack):
    # From the tip: the session's table holds the other API tests' records, not this module's
    # (a new publisher mapping would otherwise replay them all, as its TRIM_HORIZON says).
    stack.start_streams(starting_position="LATEST")
    yield stack
    stack.stop_streams()


@pytest.fixture
def events(streams):
    with Subscription(
        streams.aws.client, subscription_pattern(TENANT), bus=streams.event_bus
    ) as subscription:
        yield Inbox(subscription)


def api_as(stack, subject: str, *scopes: str) -> Api:
    return Api(
        stack.base_url,
        auth.mint(TENANT, scopes or (PRODUCE, WORK, OPERATE), secret=stack.secret, subject=subject),
    )


def wait_for(check, timeout_s=15.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def history(api: Api, op: str):
    reply = api.get(op_path(op, "history"))
    assert reply.status == 200, reply.text
    return reply.json["entries"]


def history_of(api: Api, op: str, count: int):
    """The history once it has ``count`` entries (it trails the operation by the stream's lag)."""

    def ready():
        entries = history(api, op)
        return entries if len(entries) >= count else None

    return wait_for(ready, what=f"{count} history entries of {op}")


class Inbox:
    """A subscription's events, kept: each test waits for the events of its own operations."""

    def __init__(self, subscription):
        self.subscription = subscription
        self.received: list[dict] = []

    def of(self, op: str, count: int) -> list[dict]:
        def enough():
            self.received.extend(self.subscription.receive(wait_s=0.2))
            mine = [e for e in self.received if e["detail"]["operation_id"] == op]
            return mine if len(mine) >= count else None

        return wait_for(enough, what=f"{count} event(s) of {op}")


def test_enqueue_is_run_from_the_stream_and_reported_by_event_and_history(streams, events):
    api = api_as(streams, "producer-1")
    op = f"quick-{uuid.uuid4().hex[:8]}"
    sent = time.time()
    reply = api.post(
        "/v1/operations", {"operation_id": op, "job_type": "stream-quick", "payload": {"n": 1}}
    )
    assert reply.status == 201
    wait_for(lambda: api.get(op_path(op)).json["state"] == "succeeded", what="the job to succeed")
    ((fence, started),) = stream_jobs.STARTED[(TENANT, op)]
    assert fence == 1 and started - sent < 5  # no schedule runs here: the stream started it

    (event,) = events.of(op, 1)
    jsonschema.validate(event, SCHEMA)
    assert event["detail-type"] == "Operation Succeeded"
    d = event["detail"]
    assert (d["tenant_id"], d["state"], d["previous_state"], d["fence"], d["outcome_code"]) == (
        TENANT,
        "succeeded",
        "claimed",
        1,
        "done",
    )

    entries = history_of(api, op, 3)
    assert [(e["transition"], e["previous_state"], e["state"], e["fence"]) for e in entries] == [
        ("enqueue", None, "queued", 0),
        ("claim", "queued", "claimed", 1),
        ("complete", "claimed", "succeeded", 1),
    ]
    assert (
        entries[0]["actor"] == "producer-1"
        and entries[1]["actor"] == entries[2]["actor"] == d["actor"]
    )
    assert entries[2]["outcome_code"] == "done" and [e["sequence"] for e in entries] == [1, 2, 3]


def test_a_zombie_takeover_and_an_operator_requeue_show_in_history_and_events(streams, events):
    api = api_as(streams, "producer-1")
    operator = api_as(streams, "ops-alice", OPERATE)
    zombie, parked = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("zombie", "parked"))
    # 1. A stalled holder is taken over: the first attempt stalls past its 1 s lease.
    assert (
        api.post(
            "/v1/operations", {"operation_id": zombie, "job_type": "stream-stall", "payload": {}}
        ).status
        == 201
    )
    wait_for(lambda: (TENANT, zombie) in stream_jobs.STARTED, what="the first attempt to start")
    time.sleep(1.2)  # its lease lapses (no progress, no heartbeat)
    reply = api.post(
        "/v1/claims", {"worker_id": "rescuer", "operation_id": zombie, "lease_seconds": 30}
    )
    assert (
        reply.status == 200
        and reply.json["claim"]["fence"] == 2
        and reply.json["claim"]["reconcile_required"]
    )
    assert (
        api.post(op_path(zombie, "complete"), {"fence": 2, "outcome_code": "rescued"}).status == 200
    )
    # 2. An ambiguous attempt parks as unknown; an operator requeues it; the stream runs it again.
    assert (
        api.post(
            "/v1/operations",
            {"operation_id": parked, "job_type": "stream-ambiguous", "payload": {}},
        ).status
        == 201
    )
    wait_for(lambda: api.get(op_path(parked)).json["state"] == "unknown", what="the unknown park")
    reply = operator.post(
        op_path(parked, "resolve"), {"resolution": "requeue", "note": "provider says not sent"}
    )
    assert reply.status == 200
    wait_for(lambda: api.get(op_path(parked)).json["state"] == "succeeded", what="the requeued run")

    history_of(operator, zombie, 4)
    time.sleep(stream_jobs.STALL_S)  # the zombie wakes up and tries to complete: refused, no write
    taken = history(operator, zombie)
    assert [(e["transition"], e["fence"], e["actor"]) for e in taken] == [
        ("enqueue", 0, "producer-1"),
        ("claim", 1, taken[1]["actor"]),
        ("takeover", 2, "rescuer"),
        ("complete", 2, "rescuer"),
    ]
    assert taken[2]["previous_actor"] == taken[1]["actor"] != "rescuer"
    assert api.get(op_path(zombie)).json["outcome_code"] == "rescued"

    requeued = history_of(operator, parked, 6)
    assert [(e["transition"], e["state"], e["fence"]) for e in requeued] == [
        ("enqueue", "queued", 0),
        ("claim", "claimed", 1),
        ("unknown", "unknown", 1),
        ("requeue", "queued", 1),
        ("claim", "claimed", 2),
        ("complete", "succeeded", 2),
    ]
    assert requeued[2]["reason"] == "provider timed out"
    assert (requeued[3]["actor"], requeued[3]["reason"]) == ("ops-alice", "provider says not sent")

    kinds = [
        (e["detail-type"], e["detail"]["fence"], e["detail"]["actor"]) for e in events.of(zombie, 2)
    ]
    assert kinds == [("Operation Taken Over", 2, "rescuer"), ("Operation Succeeded", 2, "rescuer")]
    parked_events = events.of(parked, 3)
    assert [e["detail-type"] for e in parked_events] == [
        "Operation Unknown",
        "Operation Requeued",
        "Operation Succeeded",
    ]
    assert parked_events[1]["detail"]["actor"] == "ops-alice"
    for event in parked_events:
        jsonschema.validate(event, SCHEMA)


def test_a_poison_record_is_kept_whole_and_later_records_still_run(streams):
    stack, ddb = streams, streams.aws.client()
    api = api_as(stack, "producer-1")
    poison, good = f"poison-{uuid.uuid4().hex[:8]}", f"after-{uuid.uuid4().hex[:8]}"
    for mapping in stack.mappings.values():
        mapping.stop()  # so that both records arrive in one batch when they resume
    # An item no engine wrote (straight into the table): it passes both filters, and no function
    # can read it.
    ddb.put_item(
        TableName=stack.table_name,
        Item={
            "tenant_id": {"S": TENANT},
            "operation_id": {"S": poison},
            "state": {"S": "queued"},
            "transition": {"S": "enqueue"},
        },
    )
    assert (
        api.post(
            "/v1/operations", {"operation_id": good, "job_type": "stream-quick", "payload": {}}
        ).status
        == 201
    )
    for mapping in stack.mappings.values():
        mapping.start()
    try:
        wait_for(
            lambda: api.get(op_path(good)).json["state"] == "succeeded",
            what="the record after the poison",
        )
        s3 = stack.aws.client("s3")
        # One reader (the worker's mapping, which also publishes): no queue of the worker's; the
        # claim that failed is left to the drain, never reported, so the batch is not held.
        assert list(stack.mappings) == ["worker"] and stack.failure_queues == {}
        # The publisher's bucket: the record itself, whole, kept by the function after its
        # attempts (not by the mapping after its retries: the shard moved on at once).
        bucket = stack.failure_buckets["publisher"]

        def kept():
            return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]

        (key,) = wait_for(kept, what="the publisher's failed batch")
        document = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert document["requestContext"]["condition"] == "PublishingFailed"
        (record,) = document["payload"]["Records"]
        assert record["dynamodb"]["Keys"]["operation_id"]["S"] == poison
        assert record["dynamodb"]["NewImage"]["transition"] == {"S": "enqueue"}
        s3.delete_object(Bucket=bucket, Key=key)  # (unreadable for good: nothing to redrive)
        assert [e["transition"] for e in history_of(api, good, 3)] == [
            "enqueue",
            "claim",
            "complete",
        ]
        assert stack.mappings["worker"].stats.records_to_destination == 0
    finally:
        ddb.delete_item(
            TableName=stack.table_name,
            Key={"tenant_id": {"S": TENANT}, "operation_id": {"S": poison}},
        )


def test_history_route_is_paged_tenant_scoped_and_operators_only(streams, make_api):
    api = api_as(streams, "producer-1")
    op = f"paged-{uuid.uuid4().hex[:8]}"
    assert (
        api.post(
            "/v1/operations", {"operation_id": op, "job_type": "stream-quick", "payload": {}}
        ).status
        == 201
    )
    history_of(api, op, 3)
    first = api.get(op_path(op, "history") + "?limit=2")
    assert first.status == 200 and len(first.json["entries"]) == 2 and first.json["dropped"] == 0
    rest = api.get(op_path(op, "history") + f"?limit=2&cursor={first.json['next_cursor']}")
    assert [e["sequence"] for e in rest.json["entries"]] == [3] and rest.json["next_cursor"] is None
    other = make_api(STREAM_TENANTS[1])
    missing = other.get(op_path(op, "history"))
    unknown = other.get(op_path("no-such-op", "history"))
    assert (missing.status, missing.json) == (
        unknown.status,
        unknown.json,
    ) and missing.error_code == "not_found"
    assert api_as(streams, "p", PRODUCE, WORK).get(op_path(op, "history")).status == 403
    assert api.get(op_path(op, "history") + "?limit=0").error_code == "invalid_request"
    assert api.get(op_path(op, "history") + "?cursor=zzz").error_code == "invalid_request"
    sdk_entries = list(streams_sdk(streams).iter_history(op, page_size=2))
    assert [(e.sequence, e.transition) for e in sdk_entries] == [
        (1, "enqueue"),
        (2, "claim"),
        (3, "complete"),
    ]


def streams_sdk(stack):
    from leasefence.client import LeaseFenceClient

    return LeaseFenceClient(stack.base_url, stack.token(TENANT), retries=1, backoff=0.01)


def _sample(name: str, tenant: str) -> dict:
    event = copy.deepcopy(json.loads((ROOT / "events" / name).read_text()))
    for record in event["Records"]:
        body = record["dynamodb"]
        for image in (body["Keys"], body.get("NewImage") or {}, body.get("OldImage") or {}):
            image["tenant_id"] = {"S": tenant}
    return event


def test_sample_stream_events_invoke_their_functions(streams):
    """events/worker-stream.json and events/publisher-stream.json through their handlers."""
    from leasefence.settings import runtime

    stack, engine = streams, runtime().engine
    worker_event = _sample("worker-stream.json", STREAM_TENANTS[1])
    # Written just now (a record older than 10 minutes is published, not dispatched: the drain's).
    worker_event["Records"][0]["dynamodb"]["ApproximateCreationDateTime"] = time.time()
    op = worker_event["Records"][0]["dynamodb"]["Keys"]["operation_id"]["S"]
    stack.stop_streams()  # this test invokes the functions itself
    try:
        engine.enqueue(
            STREAM_TENANTS[1],
            op,
            "demo-receipt",
            "sha256:" + "0" * 64,
            "s3://leasefence-payloads/sample",
        )
        assert stack.invoker.invoke("worker", worker_event) == {"batchItemFailures": []}
        assert engine.get(STREAM_TENANTS[1], op).state == "succeeded"
        assert stack.invoker.invoke("worker", worker_event) == {
            "batchItemFailures": []
        }  # again: taken, no claim
        publisher_event = _sample("publisher-stream.json", STREAM_TENANTS[1])
        with Subscription(
            stack.aws.client, subscription_pattern(STREAM_TENANTS[1]), bus=stack.event_bus
        ) as sub:
            assert stack.invoker.invoke("publisher", publisher_event) == {"batchItemFailures": []}
            (event,) = sub.receive(wait_s=2)
        jsonschema.validate(event, SCHEMA)
        assert (
            event["detail"]["outcome_code"] == "sent:effect-1" and event["detail"]["sequence"] == 3
        )
    finally:
        stack.start_streams()
