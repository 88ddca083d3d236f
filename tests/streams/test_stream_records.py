"""The table's stream as the functions see it: which records pass each event source mapping's
filter (real records from real transitions, each expectation written out by hand), what the
publisher makes of them (history, events valid against the published schema) and what stream
dispatch claims."""

from __future__ import annotations

import itertools
import json
import random
import threading
from pathlib import Path

import jsonschema
import pytest

from leasefence import Engine, hash_form, history, keys
from leasefence.clock import ManualClock
from leasefence_tools.local.events import Subscription
from leasefence_tools.local.streams import lambda_record
from leasefence.schema import TableSpec, create_table
from leasefence.streams import events, filters, mappings, records
from leasefence.streams.publisher import Publisher
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.backend import EngineBackend
from leasefence.worker.dispatch import StreamDispatch

H = "sha256:" + "4" * 64
SCHEMA = json.loads(
    (Path(__file__).parents[2] / "docs" / "events" / "operation-event.v1.schema.json").read_text()
)
_tables = itertools.count()


class Stream:
    """Reads the table's stream from its start, returning what is new on each call."""

    def __init__(self, aws, table):
        self.client = aws.client("dynamodbstreams")
        self.arn = aws.client().describe_table(TableName=table)["Table"]["LatestStreamArn"]
        shard = self.client.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"][0][
            "ShardId"
        ]
        self.iterator = self.client.get_shard_iterator(
            StreamArn=self.arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]

    def new(self):
        answer = self.client.get_records(ShardIterator=self.iterator)
        self.iterator = answer["NextShardIterator"]
        return [lambda_record(r, self.arn) for r in answer["Records"]]


@pytest.fixture
def table(aws):
    spec = TableSpec(table_name=f"stream-{next(_tables)}", due_shards=2, sweep_shards=1, operation_shards=(1,))
    create_table(aws.client(), spec, stream=True)
    return spec


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def engine(aws, table, clock):
    return Engine(client=aws.client(), spec=table, clock=clock, rng=random.Random(3))


def test_filters_pass_exactly_the_records_each_function_needs(aws, table, engine, clock):
    stream = Stream(aws, table.table_name)
    dispatch, dispatch_acme = filters.dispatch_filters(), filters.dispatch_filters(["acme"])
    publisher = filters.publisher_filters()
    steps = []  # (what, record, dispatch passes, publisher passes)

    def step(what, action, expected):
        action()
        got = stream.new()
        assert len(got) == len(expected), (what, [r["eventName"] for r in got])
        for record, (to_worker, to_publisher) in zip(got, expected, strict=True):
            steps.append((what, record, to_worker, to_publisher))

    # The job type's directory item first: moto records an update that creates an item twice (its
    # keys, then the item; DynamoDB once). Neither is an operation's.
    step(
        "enqueue",
        lambda: engine.enqueue("acme", "op-1", "refund", H),
        [(False, False), (False, False), (True, False)],
    )
    claim = engine.claim("acme", "op-1", "w1", lease_ms=5_000)
    step("claim", lambda: None, [(False, False)])
    step("heartbeat", lambda: engine.heartbeat("acme", "op-1", claim.fence, "w1"), [(False, False)])
    step(
        "retry at once",
        lambda: engine.fail("acme", "op-1", claim.fence, True, "flaky", retry_after_ms=0),
        [(True, True)],
    )
    claim = engine.claim("acme", "op-1", "w2", lease_ms=5_000)
    step("claim", lambda: None, [(False, False)])
    step(
        "retry later",
        lambda: engine.fail("acme", "op-1", claim.fence, True, "busy", retry_after_ms=1_000),
        [(False, True)],
    )
    clock.advance(1_000)
    claim = engine.claim("acme", "op-1", "w3", lease_ms=5_000)
    step("claim", lambda: None, [(False, False)])
    step(
        "unknown",
        lambda: engine.park_unknown("acme", "op-1", claim.fence, "timeout"),
        [(False, True)],
    )
    step("operator requeue", lambda: engine.resolve("acme", "op-1", "requeue"), [(True, True)])
    claim = engine.claim("acme", "op-1", "w4", lease_ms=5_000)
    step("claim", lambda: None, [(False, False)])
    step("complete", lambda: engine.complete("acme", "op-1", claim.fence, "ok"), [(False, True)])
    step("erase (its history in the item: no other write)", lambda: engine.erase("acme", "op-1"), [(False, False)])
    step(
        "another tenant's enqueue",
        lambda: engine.enqueue("globex", "op-9", "refund", H),
        [(False, False), (False, False), (True, False)],
    )
    step(
        # Its hold (the settings item: created by an update, so twice in moto), then the
        # operation; the directory goes only after the settle time.
        "tenant erasure (hold, operation)",
        lambda: engine.erase_tenant("globex"),
        [(False, False), (False, False), (False, False)],  # its history went with it
    )

    # Without outcome events (the construct's default) the one mapping of a worker serving acme
    # passes its work and nothing of the publisher's: no operation here was enqueued before.
    shared_off = filters.shared_filters(events=False, tenants=["acme"])
    publisher_off = filters.publisher_filters(events=False)
    for what, record, to_worker, to_publisher in steps:
        assert filters.passes(dispatch, record) is to_worker, what
        assert filters.passes(publisher, record) is to_publisher, what
        tenant = record["dynamodb"]["Keys"]["tenant_id"]["S"]
        assert filters.passes(dispatch_acme, record) is (to_worker and tenant == "acme"), what
        assert filters.passes(shared_off, record) is (to_worker and tenant == "acme"), what
        assert not filters.passes(publisher_off, record), what
    # The CDK renders the same patterns as FilterCriteria.
    criteria = filters.filter_criteria(mappings.worker(["acme"]).filters)
    assert [json.loads(f["Pattern"]) for f in criteria["Filters"]] == dispatch_acme


def test_evaluator_semantics():
    pattern = {
        "a": {"b": ["x", {"prefix": "pre-"}]},
        "c": [{"exists": False}],
        "d": [{"anything-but": ["no"]}],
    }
    assert filters.matches(pattern, {"a": {"b": "x"}, "d": "yes"})
    assert filters.matches(pattern, {"a": {"b": "pre-fix"}, "d": "yes"})
    assert not filters.matches(pattern, {"a": {"b": "x"}, "c": 1, "d": "yes"})  # c must be absent
    assert not filters.matches(pattern, {"a": {"b": "y"}, "d": "yes"})
    assert not filters.matches(pattern, {"a": {"b": "x"}, "d": "no"})
    assert not filters.matches(pattern, {"a": {"b": "x"}})  # anything-but needs a value
    assert not filters.matches(
        {"a": {"b": [{"exists": True}]}}, {"a": {"b": {"S": "object, not a leaf"}}}
    )
    assert filters.matches({"n": [1]}, {"n": 1}) and not filters.matches({"n": ["1"]}, {"n": 1})


def test_publisher_records_history_and_publishes_valid_events(aws, table, engine, clock):
    stream = Stream(aws, table.table_name)
    bus = f"bus-{table.table_name}"
    aws.client("events").create_event_bus(Name=bus)
    publisher = Publisher(engine.store, lambda: aws.client("events"), bus)
    with Subscription(aws.client, events.subscription_pattern("acme"), bus=bus) as all_of_acme:
        engine.enqueue("acme", "op-1", "refund", H, actor="producer-7")
        first = engine.claim("acme", "op-1", "zombie", lease_ms=1_000)
        clock.advance(1_000)
        second = engine.claim("acme", "op-1", "rescuer", lease_ms=5_000)
        engine.heartbeat("acme", "op-1", second.fence, "rescuer")
        engine.complete("acme", "op-1", second.fence, "refunded")
        engine.enqueue("globex", "op-1", "refund", H)  # another tenant: not in this subscription
        got = stream.new()
        outcomes = [publisher.handle(r) for r in got]
        directory = ["skipped", "skipped"]  # a tenant's job-type directory (recorded twice by moto)
        assert outcomes == [
            *directory,
            "recorded",
            "recorded",
            "published",
            "skipped",
            "published",
            *directory,
            "recorded",
        ]
        assert [publisher.handle(r) for r in got] == outcomes  # delivered again: history unchanged
        received = all_of_acme.receive(wait_s=2) + all_of_acme.receive(wait_s=0.2)
    assert first.fence == 1
    assert [e["detail-type"] for e in received] == [
        "Operation Taken Over",
        "Operation Succeeded",
    ] * 2
    for event in received:
        jsonschema.validate(event, SCHEMA, format_checker=jsonschema.FormatChecker())
        assert not {"payload", "payload_ref", "payload_hash"} & set(event["detail"])
    takeover = received[0]["detail"]
    assert (
        takeover["fence"],
        takeover["actor"],
        takeover["previous_actor"],
        takeover["previous_state"],
    ) == (2, "rescuer", "zombie", "claimed")
    done = received[1]["detail"]
    assert (done["state"], done["outcome_code"], done["sequence"], done["tenant_id"]) == (
        "succeeded",
        "refunded",
        4,
        "acme",
    )
    entries = engine.history("acme", "op-1").entries
    assert [(e["transition"], e["fence"], e.get("actor")) for e in entries] == [
        ("enqueue", 0, "producer-7"),
        ("claim", 1, "zombie"),
        ("takeover", 2, "rescuer"),
        ("complete", 2, "rescuer"),
    ]
    assert entries[2]["previous_actor"] == "zombie"


def test_the_schema_names_every_detail_type_and_transition_the_code_publishes():
    assert set(SCHEMA["properties"]["detail-type"]["enum"]) == events.ALL_DETAIL_TYPES
    assert set(SCHEMA["$defs"]["detail"]["properties"]["transition"]["enum"]) == {
        t.value for t in events.DETAIL_TYPES
    } | {"enqueue"}  # an enqueue publishes only when it awaits approval
    assert SCHEMA["$defs"]["detail"]["properties"]["version"]["const"] == events.SCHEMA_VERSION
    assert events.subscription_pattern("acme") == {
        "source": ["leasefence"],
        "detail": {"tenant_id": ["acme"]},
    }
    with pytest.raises(ValueError):
        events.subscription_pattern(detail_types=["Operation Exploded"])


@pytest.mark.parametrize(
    "broken",
    [
        {"eventName": "MODIFY"},  # no dynamodb section
        {
            "eventName": "INSERT",
            "dynamodb": {
                "Keys": {"tenant_id": {"S": "t"}},
                "SequenceNumber": "1",
                "NewImage": {"tenant_id": {"S": "t"}},
            },
        },  # half a key
        {
            "eventName": "INSERT",
            "dynamodb": {
                "Keys": {"tenant_id": {"S": "t"}, "operation_id": {"S": "o"}},
                "SequenceNumber": "2",
                "NewImage": {
                    "tenant_id": {"S": "t"},
                    "operation_id": {"S": "o"},
                    "transition": {"S": "enqueue"},
                    "seq": {"N": "1"},
                },
            },
        },  # no state
        {
            "eventName": "MODIFY",
            "dynamodb": {
                "Keys": {"tenant_id": {"S": "t"}, "operation_id": {"S": "o\u0007"}},
                "SequenceNumber": "3",
                "NewImage": {},
                "OldImage": {},
            },
        },  # bad id
    ],
)
def test_malformed_records_are_refused(broken):
    with pytest.raises(records.MalformedRecord):
        records.parse(broken)


def test_dispatch_claims_what_became_claimable_and_nothing_else(aws, table, engine, clock):
    stream = Stream(aws, table.table_name)
    ran = []
    worker = Worker(
        EngineBackend(engine, ["acme"]),
        {"refund": FunctionHandler(lambda job: ran.append(job.fence))},
        worker_id="stream-worker",
        lease_ms=5_000,
    )
    dispatch = StreamDispatch(worker, engine, ["acme"])
    engine.enqueue("acme", "op-1", "refund", H)
    engine.enqueue("acme", "op-2", "mail", H)  # a job type this worker has no handler for
    engine.enqueue("globex", "op-3", "refund", H)  # a tenant it does not serve
    got = [r for r in stream.new() if filters.passes(filters.dispatch_filters(), r)]
    outcomes = [dispatch.claim(r) for r in got]
    assert [o for o, _ in outcomes] == ["claimed", "not_served", "not_served"]
    assert [o for o, _ in [dispatch.claim(got[0])]] == ["taken"]  # delivered again: already claimed
    dispatch.run([c for _, c in outcomes if c is not None])
    assert ran == [1] and engine.get("acme", "op-1").state == "succeeded"
    engine.enqueue("acme", "op-4", "refund", H)
    (record,) = [r for r in stream.new() if filters.passes(filters.dispatch_filters(), r)]
    assert (
        dispatch.claim(record, remaining_ms=lambda: 6_000)[0] == "deferred"
    )  # no time for a lease
    assert engine.get("acme", "op-4").state == "queued"


def test_a_batch_runs_its_jobs_side_by_side(aws, table, engine):
    stream = Stream(aws, table.table_name)
    together = threading.Barrier(2, timeout=5)  # a job waits here for the other one

    def meet(job):
        together.wait()
        return "met"

    worker = Worker(
        EngineBackend(engine, ["acme"]), {"refund": FunctionHandler(meet)}, lease_ms=10_000
    )
    dispatch = StreamDispatch(worker, engine, ["acme"])
    engine.enqueue("acme", "op-1", "refund", H)
    engine.enqueue("acme", "op-2", "refund", H)
    got = [r for r in stream.new() if filters.passes(filters.dispatch_filters(), r)]
    claims = [claim for _, claim in (dispatch.claim(r) for r in got)]
    dispatch.run(claims)
    assert [engine.get("acme", op).outcome_code for op in ("op-1", "op-2")] == ["met", "met"]


def _envelope(entry):
    """The event a rule target receives for a ``PutEvents`` entry (as EventBridge wraps it)."""
    return {
        "version": "0",
        "id": "1",
        "detail-type": entry["DetailType"],
        "source": entry["Source"],
        "account": "000000000000",
        "time": entry["Time"].strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": entry["Resources"],
        "detail": json.loads(entry["Detail"]),
    }


def test_the_approval_gate_and_cancel_on_the_stream(aws, table, engine, clock):
    """What each step of the gate sends on: an operation awaiting approval reaches no worker until
    it is approved; every step is recorded and each end publishes a valid event."""
    stream = Stream(aws, table.table_name)
    publisher = Publisher(engine.store, lambda: None, None)
    gated = {"actor": "producer-1", "approval_required": True, "approval_valid_ms": 5_000,
             "payload_ref": "stored/1", "payload_inline": True}
    for op in ("ok", "no", "late", "drop"):
        engine.enqueue("acme", op, "refund", H, **gated)
    engine.approve("acme", "ok", H, actor="approver-1")
    engine.reject("acme", "no", actor="approver-1", note="too large")
    engine.cancel("acme", "drop", actor="producer-1")
    clock.advance(5_000)
    assert engine.sweep().approvals_expired == 1
    got = [r for r in stream.new() if records.parse(r).is_operation]
    changes = [records.parse(r) for r in got]
    named = [(c.operation_id, c.transition.value) for c in changes]
    assert named == [
        ("ok", "enqueue"),
        ("no", "enqueue"),
        ("late", "enqueue"),
        ("drop", "enqueue"),
        ("ok", "approve"),
        ("no", "reject"),
        ("drop", "cancel"),
        ("late", "approval_expire"),
    ]
    # Only the approval makes work claimable: the worker's filter passes it and nothing else.
    assert [filters.passes(filters.dispatch_filters(), r) for r in got] == [False] * 4 + [True] + [False] * 3
    assert all(filters.passes(filters.publisher_filters(), r) for r in got)
    assert [publisher.handle(r) for r in got] == ["recorded"] * 8
    entries = {op: engine.history("acme", op).entries for op in ("ok", "no", "late", "drop")}
    assert [(e["transition"], e["state"], e["actor"]) for e in entries["ok"]] == [
        ("enqueue", "awaiting_approval", "producer-1"),
        ("approve", "queued", "approver-1"),
    ]
    assert entries["no"][-1] | {"seq": 0, "at": 0} == {
        "seq": 0, "at": 0, "transition": "reject", "previous_state": "awaiting_approval",
        "state": "failed_terminal", "fence": 0, "attempt": 0, "actor": "approver-1",
        "outcome_code": "rejected", "reason": "too large",
    }
    assert (entries["late"][-1]["outcome_code"], entries["late"][-1]["actor"]) == (
        "approval_expired", "leasefence-sweeper",
    )
    assert (entries["drop"][-1]["state"], entries["drop"][-1]["outcome_code"]) == ("cancelled", "cancelled")
    published = [events.entry(c, "bus") for c in changes]
    assert [p["DetailType"] for p in published] == ["Operation Awaiting Approval"] * 4 + [
        "Operation Approved",
        "Operation Rejected",
        "Operation Cancelled",
        "Operation Approval Expired",
    ]
    for entry in published:
        event = _envelope(entry)
        jsonschema.validate(event, SCHEMA, format_checker=jsonschema.FormatChecker())
    waiting = json.loads(published[0]["Detail"])
    assert (waiting["state"], waiting["previous_state"], waiting["actor"]) == ("awaiting_approval", None, "producer-1")
    # An enqueue straight into queued publishes nothing (the API's answer told its caller).
    engine.enqueue("acme", "plain", "refund", H)
    (plain,) = [records.parse(r) for r in stream.new() if records.parse(r).is_operation]
    assert events.entry(plain, "bus") is None
    details = {json.loads(p["Detail"])["operation_id"]: json.loads(p["Detail"]) for p in published[4:]}
    assert (details["ok"]["actor"], details["ok"]["outcome_code"], details["ok"]["reason"]) == ("approver-1", None, None)
    assert (details["no"]["outcome_code"], details["no"]["reason"]) == ("rejected", "too large")
    assert (details["late"]["outcome_code"], details["late"]["state"]) == ("approval_expired", "failed_terminal")
    assert (details["drop"]["previous_state"], details["drop"]["state"]) == ("awaiting_approval", "cancelled")


class NoPayloads:
    """A payload store that deletes nothing (the purge's own write is what the filter sees)."""

    def delete(self, ref):
        del ref


def test_the_publisher_filter_drops_heartbeats_purges_and_what_the_item_records(aws, table, clock):
    """Judged by the evaluator the local stream emulation runs (``filters.passes``), on real
    records: of an operation that keeps its history in its item, the publisher gets only the
    records that publish an event (and there compacts a history past its bound); of one enqueued
    before (no ``hv``), every transition and its deletion, as before."""
    engine = Engine(
        client=aws.client(), spec=table, clock=clock, rng=random.Random(3),
        payloads=NoPayloads(), payload_retention_ms=0,
    )  # fmt: skip
    stream = Stream(aws, table.table_name)
    publisher = filters.publisher_filters()
    assert len(publisher) <= 5  # Lambda's limit of filters per event source mapping
    # Without outcome events: only the records of an operation enqueued before, as with them.
    publisher_off, enqueued_before = filters.publisher_filters(events=False), []

    def passed(action):
        action()
        got = [r for r in stream.new() if records.parse(r).is_operation]
        for r in got:
            assert filters.passes(publisher_off, r) is (bool(enqueued_before) and filters.passes(publisher, r))
        return [filters.passes(publisher, r) for r in got]

    inline = {"payload_ref": "stored/1", "payload_inline": True}
    assert passed(lambda: engine.enqueue("acme", "op-1", "refund", H, max_attempts=3, **inline)) == [False]
    claim = engine.claim("acme", "op-1", "zombie", lease_ms=1_000)
    assert passed(lambda: engine.heartbeat("acme", "op-1", claim.fence, "zombie")) == [False, False]
    clock.advance(1_000)
    claim = engine.claim("acme", "op-1", "rescuer", lease_ms=1_000)
    assert passed(lambda: None) == [True]  # a takeover publishes its event
    # A heartbeat of the one who took over still shows the takeover's image: it passes, and the
    # publisher skips it (no new seq). Takeovers are rare; every other heartbeat invokes nothing.
    assert passed(lambda: engine.heartbeat("acme", "op-1", claim.fence, "rescuer")) == [True]
    assert passed(lambda: engine.complete("acme", "op-1", claim.fence, "ok")) == [True]
    clock.advance(1)
    assert engine.purge_payloads().purged == 1
    # The payload's purge invokes nothing: neither its marking write (which slims the item) nor
    # the one that takes it out of the purge index once its object is deleted.
    assert passed(lambda: None) == [False, False]
    gated = {"actor": "producer-1", "approval_required": True, "approval_valid_ms": 5_000, **inline}
    assert passed(lambda: engine.enqueue("acme", "op-2", "refund", H, **gated)) == [True]
    assert passed(lambda: engine.approve("acme", "op-2", H, actor="approver-1")) == [True]
    assert passed(lambda: engine.claim("acme", "op-2", "w1")) == [False]
    # The end of retention (TTL, tenant erasure): the history went with the item.
    key = {"tenant_id": {"S": "acme"}, "operation_id": {"S": "op-1"}}
    assert passed(lambda: aws.client().delete_item(TableName=table.table_name, Key=key)) == [False]

    # An operation enqueued before: every transition (heartbeats too, as before) and its deletion.
    engine.enqueue("acme", "old", "refund", H)
    engine.store.update(
        {"tenant_id": "acme", "operation_id": "old"}, "REMOVE hv, h", "attribute_exists(hv)", {}, {}
    )
    stream.new()
    enqueued_before.append("old")
    claim = engine.claim("acme", "old", "w1", lease_ms=1_000)
    assert passed(lambda: engine.heartbeat("acme", "old", claim.fence, "w1")) == [True, True]
    assert passed(lambda: engine.complete("acme", "old", claim.fence, "ok")) == [True]
    key = {"tenant_id": {"S": "acme"}, "operation_id": {"S": "old"}}
    assert passed(lambda: aws.client().delete_item(TableName=table.table_name, Key=key)) == [True]


def test_the_publisher_compacts_a_long_history_on_the_records_it_gets(aws, table, engine):
    stream = Stream(aws, table.table_name)
    publisher = Publisher(engine.store, lambda: None, None)
    engine.enqueue("acme", "op-1", "refund", H, max_attempts=1)
    for _ in range(25):  # 76 entries: compaction is due (no publisher ran yet)
        claim = engine.claim("acme", "op-1", "w1")
        engine.park_unknown("acme", "op-1", claim.fence, "timeout")
        engine.resolve("acme", "op-1", "requeue")
    before = engine.history("acme", "op-1")
    got = [r for r in stream.new() if filters.passes(filters.publisher_filters(), r)]
    assert len(got) == 50  # the parks and the requeues; no enqueue, no claim
    assert {publisher.handle(r) for r in got} == {"recorded"}
    item = engine.store.get({"tenant_id": "acme", "operation_id": "op-1"})
    assert len(item["h"]) <= history.COMPACT_AT and item["hd"] == 76 - len(item["h"])
    assert engine.history("acme", "op-1") == before  # the same answer
    assert engine.store.get({"tenant_id": "acme", "operation_id": keys.history_id("op-1")}) is None


def test_a_digest_payload_hash_reads_as_text_in_the_records(aws, table, engine):
    """An item whose payload hash is stored as its 32-byte digest (leasefence.hash_form): its
    records' images (binary values base64-encoded, as Lambda delivers them) read it as text."""
    stream = Stream(aws, table.table_name)
    engine.enqueue("acme", "op-1", "refund", H)
    engine.store.client.update_item(
        TableName=table.table_name,
        Key={"tenant_id": {"S": "acme"}, "operation_id": {"S": "op-1"}},
        UpdateExpression="SET payload_hash = :b",
        ExpressionAttributeValues={":b": {"B": hash_form.as_digest(H)}},
    )
    claim = engine.claim("acme", "op-1", "w1", lease_ms=5_000)
    engine.complete("acme", "op-1", claim.fence, "done")
    changes = [records.parse(r) for r in stream.new()]
    images = [c.new for c in changes if c.is_operation and c.new is not None]
    stored = [r for r in images if r.get("seq", 0) >= 2]  # the claim's and the completion's
    assert len(stored) == 2 and {i["payload_hash"] for i in images} == {H}
