"""One stream reader for both consumers (issue 33, "Streams within their limits"): the shared
mapping's filter, and the router that dispatches work and publishes outcomes from one batch with
neither consumer's failure reaching the other. Real records from real transitions (moto's
stream); the publisher and the worker runtime are the functions' own code."""

from __future__ import annotations

import json
import threading

import pytest
from tests.streams.test_stream_records import H, Stream, clock, engine, table  # noqa: F401

from leasefence.errors import Unavailable
from leasefence.streams import filters, mappings
from leasefence.worker import stream_router as router
from leasefence.streams.publisher import Publisher
from leasefence.worker.stream_router import StreamRouter
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.handler import Reconciled
from leasefence.worker.backend import EngineBackend
from leasefence.worker.dispatch import StreamDispatch
from leasefence.worker.handoff import claim_event, claim_from_event


class Events:
    """An EventBridge client that records what is put (and can refuse it)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.put: list[dict] = []

    def put_events(self, Entries):  # noqa: N803 - boto3's name
        if self.fail:
            raise ConnectionError("EventBridge unreachable")
        self.put += Entries
        return {"FailedEntryCount": 0, "Entries": [{"EventId": str(i)} for i in range(len(Entries))]}


def _batch(engine, clock, stream):
    """A batch as the shared mapping delivers it: op-a's completion (for the publisher only),
    op-b's enqueue (the worker only), op-c's immediate retry (both), and what passes neither."""
    engine.enqueue("acme", "op-a", "refund", H)
    engine.enqueue("acme", "op-c", "refund", H)
    a = engine.claim("acme", "op-a", "earlier", lease_ms=5_000)
    c = engine.claim("acme", "op-c", "earlier", lease_ms=5_000)
    stream.new()  # what came before this batch
    engine.complete("acme", "op-a", a.fence, "done")
    engine.enqueue("acme", "op-b", "refund", H)
    engine.fail("acme", "op-c", c.fence, True, "flaky", retry_after_ms=0)
    records = stream.new()
    dispatch, publish = filters.dispatch_filters(["acme"]), filters.publisher_filters()
    ops = lambda wanted: [  # noqa: E731
        r["dynamodb"]["Keys"]["operation_id"]["S"] for r in records if filters.passes(wanted, r)
    ]
    assert ops(dispatch) == ["op-b", "op-c"] and ops(publish) == ["op-a", "op-c"]
    return {"Records": records}


def _router(engine, handler, publish, keep, handoff=None, events=True):
    worker = Worker(
        EngineBackend(engine, ["acme"]),
        # op-c is a retry: reconciled first (nothing was done), then run.
        {"refund": FunctionHandler(handler, lambda job: Reconciled.not_done())},
        worker_id="stream-worker",
        lease_ms=10_000,
    )
    counted: dict[str, float] = {}

    def count(name, value):
        counted[name] = counted.get(name, 0) + value

    dispatch = StreamDispatch(worker, engine, ["acme"], count=count, handoff=handoff)
    slept: list[float] = []
    return (
        StreamRouter(dispatch, publish, keep, count=count, sleep=slept.append, events=events),
        counted,
        slept,
    )


def test_the_shared_mapping_reads_once_for_both_within_five_filters(aws, table, engine, clock):
    shared = mappings.shared(batch_size=25, parallelization_factor=5)
    assert len(shared.filters) == 5  # Lambda's default quota of filters per mapping
    assert (shared.function, shared.batch_size, shared.parallelization_factor) == ("worker", 25, 5)
    # The publisher's retries: no record it needs is dropped or skipped; the worker's mapping's
    # starting position, so that the upgrade from two mappings updates that one in place.
    assert (shared.max_retries, shared.max_record_age_s) == (10, -1)
    assert shared.starting_position == mappings.worker(["acme"]).starting_position == "LATEST"
    assert (shared.bisect, shared.failure_destination) == (True, "s3")
    stream = Stream(aws, table.table_name)
    records = [*_batch(engine, clock, stream)["Records"]]
    engine.park_unknown("acme", "op-c", engine.claim("acme", "op-c", "w", 5_000).fence, "t/o")
    engine.resolve("acme", "op-c", "requeue")
    engine.enqueue("globex", "op-g", "refund", H)
    records += stream.new()
    dispatch, publish = filters.dispatch_filters(), filters.publisher_filters()
    wanted = [r for r in records if filters.passes(dispatch, r) or filters.passes(publish, r)]
    passed = [r for r in records if filters.passes(shared.filters, r)]
    assert len(wanted) == 6 and all(r in passed for r in wanted)  # a superset of both
    assert len(passed) < len(records)  # and still a filter (claims, heartbeats, directory: out)


def test_without_events_the_router_hands_the_publisher_only_operations_enqueued_before(
    aws, table, engine, clock
):
    """events=False: the batch's work is dispatched as ever, and the publisher gets none of the
    records the batch brought (op-c's retry came for dispatch; op-a's end would not come at
    all without events): what its own mapping would pass it."""
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    published: list[str] = []

    def publish(record):
        published.append(record["dynamodb"]["Keys"]["operation_id"]["S"])
        return "recorded"

    route, counted, _ = _router(engine, lambda job: "ran", publish, lambda records: None, events=False)
    assert route.handle(event) == {"batchItemFailures": []}
    assert [engine.get("acme", op).outcome_code for op in ("op-b", "op-c")] == ["ran", "ran"]
    assert published == [] and counted["StreamDispatched"] == 2  # with events: op-a and op-c


def test_a_publisher_failure_does_not_delay_a_dispatch(aws, table, engine, clock):
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    jobs_started = threading.Semaphore(0)
    seen_started: list[bool] = []
    kept: list[list[str]] = []

    def job(j):
        jobs_started.release()
        return "ran"

    def publish(record):
        # Both jobs of the batch started before anything was published.
        seen_started.append(jobs_started.acquire(timeout=2) and jobs_started.acquire(timeout=2))
        raise ConnectionError("EventBridge unreachable")

    def keep(records):
        kept.append([r["dynamodb"]["Keys"]["operation_id"]["S"] for r in records])

    route, counted, slept = _router(engine, job, publish, keep)
    answer = route.handle(event)
    assert answer == {"batchItemFailures": []}  # the shard moves on
    assert seen_started[0] is True
    assert [engine.get("acme", op).outcome_code for op in ("op-b", "op-c")] == ["ran", "ran"]
    # The first record failed its attempts (backoff between them); it and the later publisher
    # record are kept, in order, for `leasefence publisher redrive`.
    assert len(seen_started) == router.PUBLISH_ATTEMPTS and slept == [0.1, 0.2]
    assert kept == [["op-a", "op-c"]]
    assert counted["PublishFailuresKept"] == 2 and counted["StreamDispatched"] == 2


def test_when_nothing_can_be_kept_the_publisher_records_are_retried_not_the_dispatch(
    aws, table, engine, clock
):
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    ran: list[str] = []

    def keep(records):
        raise ConnectionError("S3 unreachable")

    def publish(record):
        raise ConnectionError("EventBridge unreachable")

    route, counted, _ = _router(engine, lambda j: ran.append(j.operation_id), publish, keep)
    failures = route.handle(event)["batchItemFailures"]
    publisher_seqs = [
        r["dynamodb"]["SequenceNumber"]
        for r in event["Records"]
        if filters.passes(filters.publisher_filters(), r)
    ]
    assert [f["itemIdentifier"] for f in failures] == publisher_seqs
    assert sorted(ran) == ["op-b", "op-c"]
    # Delivered again from there (the mapping's retry): nothing runs twice.
    redelivered = {"Records": [r for r in event["Records"] if r["dynamodb"]["SequenceNumber"] >= failures[0]["itemIdentifier"]]}
    route.handle(redelivered)
    assert sorted(ran) == ["op-b", "op-c"] and counted["StreamDispatchTaken"] >= 1


def test_a_dispatch_failure_does_not_lose_an_outcome_event(aws, table, engine, clock, monkeypatch):
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    bus = Events()
    publisher = Publisher(engine.store, lambda: bus, "bus")

    def throttled(*args, **kwargs):
        raise Unavailable("the table is throttling")

    monkeypatch.setattr(engine, "claim_seen", throttled)
    kept: list = []
    route, counted, _ = _router(engine, lambda j: "ran", publisher.handle, kept.append)
    assert route.handle(event) == {"batchItemFailures": []}
    assert [e["DetailType"] for e in bus.put] == ["Operation Succeeded", "Operation Retrying"]
    assert [json.loads(e["Detail"])["operation_id"] for e in bus.put] == ["op-a", "op-c"]
    assert kept == [] and counted["StreamDispatchFailed"] == 2
    # The work is not lost either: still queued, for the scheduled drain.
    assert [engine.get("acme", op).state for op in ("op-b", "op-c")] == ["queued", "queued"]


def test_the_invoke_mode_hands_claims_over_and_the_invocation_runs_them(
    aws, table, engine, clock
):
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    handed: list[str] = []
    ran: list[str] = []
    route, counted, _ = _router(
        engine,
        lambda j: ran.append(j.operation_id) or "ran",
        Publisher(engine.store, Events, None).handle,
        lambda records: None,
        handoff=lambda claim: handed.append(json.dumps(claim_event(claim))),
    )
    assert route.handle(event) == {"batchItemFailures": []}
    assert ran == [] and len(handed) == 2  # claimed, not run inside the batch
    assert [engine.get("acme", op).state for op in ("op-b", "op-c")] == ["claimed", "claimed"]
    claims = [claim_from_event(json.loads(e)) for e in handed]
    for claim in claims:
        route.dispatch.run_handed_off(claim)
    assert sorted(ran) == ["op-b", "op-c"] and counted["StreamHandedOff"] == 2
    assert [engine.get("acme", op).state for op in ("op-b", "op-c")] == ["succeeded"] * 2


def test_a_claim_crosses_an_invocation_unchanged(aws, table, engine):
    engine.enqueue("acme", "op-1", "refund", H)
    claim = engine.claim("acme", "op-1", "w1", lease_ms=5_000)
    again = claim_from_event(json.loads(json.dumps(claim_event(claim))))
    assert again == claim and again.target_class is claim.target_class
    assert type(again.fence) is int and again.payload_json is None


@pytest.mark.parametrize("mode", ["fleet", "", "RUN"])
def test_an_unknown_dispatch_mode_is_refused(mode):
    from leasefence.settings import Settings

    with pytest.raises(ValueError, match="LEASEFENCE_WORKER_DISPATCH"):
        Settings(worker_dispatch=mode)


def test_what_the_router_keeps_the_redrive_replays(aws, table, engine, clock):
    """The kept object is the one Lambda itself writes (``leasefence publisher redrive`` reads
    it); a whole batch of the shared mapping in the bucket (a failed invocation) is replayed
    for its publisher records only."""
    from leasefence.streams import kept
    from leasefence.streams.redrive import redrive

    s3 = aws.client("s3")
    bucket = f"kept-{table.table_name}"
    s3.create_bucket(Bucket=bucket)
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)

    def keep(records):
        kept.put_kept(s3, bucket, records, mapping_id="worker-publishing",
                      function_arn="leasefence-worker", condition="PublishingFailed", attempts=3)

    def unreachable(record):
        raise ConnectionError("EventBridge unreachable")

    route, _, _ = _router(engine, lambda j: "ran", unreachable, keep)
    assert route.handle(event) == {"batchItemFailures": []}
    # A whole batch as the mapping writes it after its retries: the worker's records in it too.
    keep(event["Records"])
    bus = Events()
    report = redrive(s3, bucket, Publisher(engine.store, lambda: bus, "bus").handle)
    assert (report.objects, report.failed, report.kept) == (2, [], [])
    assert report.records == 4  # 2 kept by the router + the batch's 2 publisher records
    # Each operation's records in its order (the two objects' copies together).
    assert [json.loads(e["Detail"])["operation_id"] for e in bus.put] == ["op-a", "op-a", "op-c", "op-c"]
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0


def test_records_older_than_ten_minutes_are_published_not_dispatched(aws, table, engine, clock):
    """A mapping that starts at TRIM_HORIZON (created again, or the upgrade from two mappings)
    replays up to a day of records: their work is the drain's, their outcomes still go out."""
    stream = Stream(aws, table.table_name)
    event = _batch(engine, clock, stream)
    created = max(r["dynamodb"]["ApproximateCreationDateTime"] for r in event["Records"])
    bus = Events()
    route, counted, _ = _router(engine, lambda j: "ran", Publisher(engine.store, lambda: bus, "bus").handle, list)
    route.now = lambda: created + router.DISPATCH_MAX_AGE_S + 1
    assert route.handle(event) == {"batchItemFailures": []}
    assert [engine.get("acme", op).state for op in ("op-b", "op-c")] == ["queued", "queued"]
    assert "StreamDispatched" not in counted and len(bus.put) == 2
    route.now = lambda: created + router.DISPATCH_MAX_AGE_S - 1  # younger: dispatched
    route.handle(event)
    assert [engine.get("acme", op).state for op in ("op-b", "op-c")] == ["succeeded", "succeeded"]
