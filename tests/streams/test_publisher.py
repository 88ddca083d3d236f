"""The publisher function behind its event source mapping, as Lambda runs it: batches of one
shard's records, partial batch responses retried from the first failed record (bisected), an
on-failure destination after the retries, a mapping created again. The mapping is the local
stack's (:class:`leasefence_tools.local.streams.EventSourceMapping`, Lambda's rules) driving the real
function handler (``functions/publisher``) against the embedded table, stream, bus and bucket;
faults are injected into the function's own DynamoDB and EventBridge clients."""

from __future__ import annotations

import copy
import itertools
import json
import random

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from tests.support.runtime import installed, local_environment
from leasefence import Engine, history, settings
from leasefence.clock import ManualClock
from leasefence_tools.local.streams import EventSourceMapping
from leasefence.schema import TableSpec, create_table
from leasefence.streams import mappings
from leasefence.streams.publisher import Publisher
from leasefence.streams.redrive import redrive

H = "sha256:" + "6" * 64
T = "acme"
_names = itertools.count()


class Context:
    function_name = "leasefence-publisher"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:leasefence-publisher"
    aws_request_id = "req-1"

    def get_remaining_time_in_millis(self):
        return 60_000


class Faults:
    """Failures to inject, by the ``seq`` of the transition a call is for: how many times each
    still fails (-1: every time)."""

    def __init__(self):
        self.left: dict[int, int] = {}

    def hit(self, seq: int) -> bool:
        left = self.left.get(seq, 0)
        if left == 0:
            return False
        if left > 0:
            self.left[seq] = left - 1
        return True


class FlakyEvents:
    """The function's EventBridge client: PutEvents refused for the faulted seqs; what went out,
    in order."""

    def __init__(self, client):
        self._client = client
        self.faults = Faults()
        self.sent: list[tuple[str, int, str]] = []

    def put_events(self, Entries):
        details = [json.loads(e["Detail"]) for e in Entries]
        if any(self.faults.hit(d["sequence"]) for d in details):
            return {
                "FailedEntryCount": len(Entries),
                "Entries": [{"ErrorCode": "ThrottlingException"}],
            }
        answer = self._client.put_events(Entries=Entries)
        self.sent += [
            (d["operation_id"], d["sequence"], e["DetailType"])
            for d, e in zip(details, Entries, strict=True)
        ]
        return answer

    def __getattr__(self, name):
        return getattr(self._client, name)


class FlakyTable:
    """The function's DynamoDB client: the history write of a faulted seq is throttled."""

    def __init__(self, client):
        self._client = client
        self.faults = Faults()

    def update_item(self, **kwargs):
        seq = kwargs.get("ExpressionAttributeValues", {}).get(":s", {}).get("N")
        if (
            kwargs["Key"]["operation_id"]["S"].startswith("\x01")
            and seq
            and self.faults.hit(int(seq))
        ):
            raise ClientError(
                {
                    "Error": {
                        "Code": "ProvisionedThroughputExceededException",
                        "Message": "slow down",
                    }
                },
                "UpdateItem",
            )
        return self._client.update_item(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


class FunctionInvoker:
    """Invokes the publisher function's handler as Lambda does; keeps every event and answer."""

    def __init__(self, handler):
        self.handler = handler
        self.calls: list[tuple[list[int], dict]] = []

    def invoke(self, function, event, timeout_ms=None):
        del function, timeout_ms  # one function; it never nears its timeout here
        answer = self.handler.lambda_handler(copy.deepcopy(event), Context())
        seqs = [
            int(r["dynamodb"]["NewImage"]["seq"]["N"])
            for r in event["Records"]
            if "NewImage" in r["dynamodb"]
        ]
        self.calls.append((seqs, answer))
        return answer


class Env:
    def __init__(self, aws, spec, bus, bucket, engine, clock, events, table, handler):
        self.aws, self.spec, self.bus, self.bucket = aws, spec, bus, bucket
        self.engine, self.clock, self.events, self.table = engine, clock, events, table
        self.invoker = FunctionInvoker(handler)

    def before_upgrade(self):
        """Operations enqueued from now on are as an engine before the in-item history wrote
        them (no ``hv``, no ``h``): the publisher keeps their history item, from every record."""
        self.monkeypatch.setattr(history, "start", lambda item, now, actor: None)

    def mapping(self) -> EventSourceMapping:
        """A new mapping of the publisher's settings (created now: at its starting position)."""
        return EventSourceMapping(
            "publisher",
            mappings.publisher(),
            self.spec.table_name,
            self.aws.client,
            self.invoker,
            None,
            failure_bucket=self.bucket,
        ).open()

    def history(self, op="op-1"):
        item = self.engine.store.get({"tenant_id": T, "operation_id": "\x01" + op})
        return item

    def seqs(self, op="op-1"):
        return [e["seq"] for e in self.engine.history(T, op).entries]

    def kept(self):
        s3 = self.aws.client("s3")
        return [o["Key"] for o in s3.list_objects_v2(Bucket=self.bucket).get("Contents", [])]


@pytest.fixture
def env(aws, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    n = next(_names)
    spec = TableSpec(table_name=f"published-{n}", due_shards=2, sweep_shards=1, operation_shards=(1,))
    create_table(aws.client(), spec, stream=True)
    bus, bucket = f"bus-published-{n}", f"publisher-failures-{n}"
    aws.client("events").create_event_bus(Name=bus)
    aws.client("s3").create_bucket(Bucket=bucket)
    config = settings.Settings.from_env(
        local_environment(spec, aws.endpoint, EVENTS_ENDPOINT=aws.endpoint, EVENT_BUS=bus)
    )
    with installed(config) as rt:
        yield from _publisher_env(aws, spec, bus, bucket, rt, monkeypatch)


def _publisher_env(aws, spec, bus, bucket, rt, monkeypatch):
    events, table = FlakyEvents(rt.client("events")), FlakyTable(rt.client("dynamodb"))
    rt.install_client("events", events)
    rt.install_client("dynamodb", table)
    from functions.publisher import handler

    handler._built = None
    clock = ManualClock()
    engine = Engine(client=aws.client(), spec=spec, clock=clock, rng=random.Random(5))
    env = Env(aws, spec, bus, bucket, engine, clock, events, table, handler)
    env.monkeypatch = monkeypatch
    yield env
    handler._built = None


def _five_transitions(engine, clock):
    """claim, takeover, retry, claim, complete: seq 2 to 6 of op-1 (its enqueue was seq 1)."""
    engine.claim(T, "op-1", "w1", lease_ms=1_000)
    clock.advance(1_000)
    second = engine.claim(T, "op-1", "w2", lease_ms=5_000)  # a takeover: an event
    engine.fail(T, "op-1", second.fence, retryable=True, reason="flaky", retry_after_ms=0)
    third = engine.claim(T, "op-1", "w3", lease_ms=5_000)
    engine.complete(T, "op-1", third.fence, "refunded")


EVENTS = [
    ("op-1", 3, "Operation Taken Over"),
    ("op-1", 4, "Operation Retrying"),
    ("op-1", 6, "Operation Succeeded"),
]


@pytest.mark.parametrize("fault", ["history write", "event"])
def test_a_transient_failure_mid_batch_keeps_history_and_events_in_sequence_order(env, fault):
    """The 2nd of 5 records of one operation fails once: the batch stops there, the mapping
    delivers it and the records after it again, and every entry and event lands once, in order.
    (An operation enqueued before the history moved into its item: the publisher writes its
    history item from every record.)"""
    env.before_upgrade()
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    mapping.poll_once()  # the enqueue, alone
    _five_transitions(env.engine, env.clock)
    (env.table if fault == "history write" else env.events).faults.left[3] = 1
    mapping.poll_once()

    assert env.seqs() == [1, 2, 3, 4, 5, 6]
    assert env.events.sent == EVENTS
    batch_seqs, answer = env.invoker.calls[1]
    assert batch_seqs == [2, 3, 4, 5, 6]
    # Stopped at the failed record: it and every record after it reported, none handled.
    numbers = [f["itemIdentifier"] for f in answer["batchItemFailures"]]
    assert len(numbers) == 4 and numbers == sorted(numbers, key=int)


def test_with_the_history_in_the_item_only_outcome_records_reach_the_publisher_in_order(env):
    """The same five transitions of an operation that keeps its history in its item: the
    publisher is invoked with the three records that publish an event (none for the enqueue, the
    claims or the heartbeat), writes nothing to the table, and a failed event still stops the
    batch there and goes out again in order."""
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    mapping.poll_once()  # the enqueue, into queued: no invocation
    assert env.invoker.calls == []
    claim = env.engine.claim(T, "op-1", "w0", lease_ms=1_000)
    env.engine.heartbeat(T, "op-1", claim.fence, "w0")
    mapping.poll_once()  # a claim and a heartbeat: no invocation
    assert env.invoker.calls == []
    env.engine.fail(T, "op-1", claim.fence, retryable=True, reason="flaky", retry_after_ms=0)
    env.clock.advance(1)
    table_writes = []
    real_update = env.table.update_item
    env.table.update_item = lambda **kw: table_writes.append(kw) or real_update(**kw)
    _five_transitions(env.engine, env.clock)  # (seq 3 to 8 now)
    env.events.faults.left[5] = 1  # the takeover's event fails once
    mapping.poll_once()
    assert env.seqs() == [1, 2, 3, 4, 5, 6, 7, 8]  # in the item all along
    batches = [seqs for seqs, _ in env.invoker.calls]
    assert batches[0] == [3, 5, 6, 8] and batches[1][0] == 5  # then again from the failed one
    assert env.events.sent == [
        ("op-1", 3, "Operation Retrying"),
        ("op-1", 5, "Operation Taken Over"),
        ("op-1", 6, "Operation Retrying"),
        ("op-1", 8, "Operation Succeeded"),
    ]
    assert table_writes == [] and env.history() is None  # no history item, no history write


def test_records_that_exhaust_their_retries_are_kept_whole_and_the_command_redrives_them(env):
    env.before_upgrade()
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    mapping.poll_once()
    _five_transitions(env.engine, env.clock)
    env.table.faults.left[3] = -1  # its history write fails on every retry
    mapping.poll_once()

    # Given up after the retries: the batch (the takeover alone, bisected) is kept whole.
    (key,) = env.kept()
    assert key.startswith("aws/lambda/")
    kept = json.loads(env.aws.client("s3").get_object(Bucket=env.bucket, Key=key)["Body"].read())
    assert kept["requestContext"]["condition"] == "RetryAttemptsExhausted"
    assert kept["requestContext"]["approximateInvokeCount"] == mappings.publisher().max_retries + 1
    (record,) = kept["payload"]["Records"]
    assert record["dynamodb"]["NewImage"]["transition"]["S"] == "claim"
    assert record["dynamodb"]["NewImage"]["seq"]["N"] == "3"
    assert record["dynamodb"]["OldImage"]["lease_owner"]["S"] == "w1"  # both images, as delivered
    # The records behind it were not blocked: the history item without the takeover (the item's
    # own entries, merged in, show it all the same), its event not sent.
    assert [e["seq"] for e in env.history()["entries"]] == [1, 2, 4, 5, 6]
    assert env.seqs() == [1, 2, 3, 4, 5, 6]
    assert [s for _, s, _ in env.events.sent] == [4, 6]

    cli = CliRunner()
    from leasefence_tools.cli import app

    command = ["publisher", "redrive", "--bucket", env.bucket, "--json"]
    counted = cli.invoke(app, [*command, "--dry-run"])
    assert counted.exit_code == 0, counted.output
    assert json.loads(counted.output)["records"] == 1 and env.kept() == [key]  # nothing changed
    # Still failing: nothing is lost, the object stays, the command says so.
    failed = cli.invoke(app, command)
    assert failed.exit_code == 1, failed.output
    report = json.loads(failed.output)
    assert (report["records"], report["replayed"], report["kept"]) == (1, 0, [key])
    assert report["failed"][0]["sequence_number"] == record["dynamodb"]["SequenceNumber"]

    env.table.faults.left[3] = 0  # the fault is over
    done = cli.invoke(app, command)
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["outcomes"] == {"published": 1}
    assert [e["seq"] for e in env.history()["entries"]] == [1, 2, 3, 4, 5, 6]  # in its place
    assert env.seqs() == [1, 2, 3, 4, 5, 6]
    assert env.events.sent[-1] == ("op-1", 3, "Operation Taken Over")
    assert env.kept() == []
    again = cli.invoke(app, command)  # nothing left: nothing happens
    assert again.exit_code == 0 and json.loads(again.output)["objects"] == 0


def test_a_mapping_created_again_replays_the_stream_without_duplicating_history(env):
    env.before_upgrade()
    first = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    env.engine.claim(T, "op-1", "w1", lease_ms=1_000)
    first.poll_once()
    assert env.seqs() == [1, 2]
    versions = env.history().get("v")
    # The mapping is deleted; what is written meanwhile must not be lost when it is created again.
    env.clock.advance(1_000)
    taken = env.engine.claim(T, "op-1", "w2", lease_ms=5_000)
    env.engine.complete(T, "op-1", taken.fence, "refunded")
    second = env.mapping()  # TRIM_HORIZON: everything the stream holds
    second.poll_once()

    assert env.seqs() == [1, 2, 3, 4]
    assert env.history()["v"] == versions + 2  # the two replayed entries wrote nothing
    sent = env.events.sent
    assert sent[-2:] == [("op-1", 3, "Operation Taken Over"), ("op-1", 4, "Operation Succeeded")]
    assert {(op, seq) for op, seq, _ in sent} == {("op-1", 3), ("op-1", 4)}  # dedupe by sequence


def test_the_redrive_reads_back_from_the_stream_a_batch_kept_without_its_records(env):
    """An on-failure record holding only where the batch is (what an SQS destination gets, or a
    payload left out): the redrive reads the records back from the stream while it has them."""
    env.before_upgrade()
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    mapping.poll_once()
    env.table.faults.left[2] = -1
    env.engine.claim(T, "op-1", "w1", lease_ms=1_000)
    mapping.poll_once()
    (key,) = env.kept()
    s3 = env.aws.client("s3")
    kept = json.loads(s3.get_object(Bucket=env.bucket, Key=key)["Body"].read())
    metadata_only = {k: v for k, v in kept.items() if k != "payload"}
    s3.put_object(Bucket=env.bucket, Key=key, Body=json.dumps(metadata_only).encode())
    env.table.faults.left[2] = 0
    rt = settings.runtime()
    publisher = Publisher(rt.engine.store, lambda: rt.client("events"), env.bus)
    report = redrive(s3, env.bucket, publisher.handle, env.aws.client("dynamodbstreams"))
    assert (report.records, report.outcomes, report.deleted) == (1, {"recorded": 1}, [key])
    assert env.seqs() == [1, 2]


@pytest.mark.parametrize("since", ["deleted", "erased"])
def test_the_redrive_leaves_out_records_of_operations_deleted_or_erased_since(env, since):
    """What a kept record would say is gone once its operation was deleted (identity expired,
    tenant erased) or erased: replaying it would bring back a history or repeat erased text."""
    env.before_upgrade()
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    claim = env.engine.claim(T, "op-1", "w1", lease_ms=5_000)
    mapping.poll_once()
    env.table.faults.left[3] = -1
    env.engine.fail(T, "op-1", claim.fence, retryable=True, reason="card 4711 declined")
    mapping.poll_once()
    (key,) = env.kept()  # the retry, with its reason
    env.table.faults.left[3] = 0
    if since == "deleted":
        env.aws.client().delete_item(
            TableName=env.spec.table_name,
            Key={"tenant_id": {"S": T}, "operation_id": {"S": "op-1"}},
        )
        mapping.poll_once()  # its deletion removes the history
        assert env.history() is None
    else:
        env.engine.erase(T, "op-1", actor="ops-erin")
    sent = list(env.events.sent)

    from leasefence_tools.cli import app

    done = CliRunner().invoke(app, ["publisher", "redrive", "--bucket", env.bucket, "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["superseded"], report["replayed"], report["deleted"]) == (1, 0, 1)
    assert env.events.sent == sent  # no event repeats the reason
    if since == "deleted":
        assert env.history() is None  # no history comes back
    else:
        assert [e["transition"] for e in env.engine.history(T, "op-1").entries] == ["erase"]
    assert env.kept() == []


def test_a_lost_get_records_answer_does_not_stop_the_mapping_nor_skip_a_record(env):
    """The endpoint read the mapping's iterator but its answer was lost (the client timed out and
    sent it again): that iterator is gone. The mapping resumes after the last record it read, as
    Lambda's does: the next poll delivers every record once, in order."""
    mapping = env.mapping()
    env.engine.enqueue(T, "op-1", "refund", H)
    mapping.poll_once()  # the enqueue, read
    _five_transitions(env.engine, env.clock)
    (iterator,) = mapping._iterators.values()
    env.aws.client("dynamodbstreams").get_records(ShardIterator=iterator)  # its answer lost
    with pytest.raises(Exception):  # noqa: B017 - whatever the endpoint answers for a used iterator
        mapping.poll_once()
    mapping.poll_once()
    assert env.seqs() == [1, 2, 3, 4, 5, 6]
    assert env.events.sent == EVENTS
