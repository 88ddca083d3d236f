"""The ``fenced`` record decorator under Powertools' BatchProcessor: signature, partial batch
failures, a redelivery during the lease, a poison message, an ``unknown`` outcome, a stalled
handler whose stale class-B write is refused."""

from __future__ import annotations

import inspect
import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from leasefence import Engine
from leasefence.engine._rules import backoff_ceiling_ms
from leasefence.errors import InvalidInput, SelfApproval
from leasefence.model import State
from leasefence.payloads import PayloadStore
from leasefence.targets import fenced_table, same_table, single_shot
from leasefence.worker import Ambiguous, EngineBackend, Job, Permanent, Reconciled
from leasefence.worker.fenced import (
    FenceConfig,
    NotFinished,
    Parked,
    PoisonMessage,
    TryLater,
    fenced,
)
from tests.support.payload_items import noise
from tests.support.sqs import process, sqs_record

TENANT = "acme"
LEASE_S = 30
BY_REFUND = "powertools_json(body).refund_id"


@pytest.fixture
def backend(engine):
    return EngineBackend(engine, [TENANT])


def test_the_handler_keeps_its_name_and_signature_less_job(backend):
    seen = {}

    @fenced(backend, FenceConfig(job_type="refund", lease_seconds=LEASE_S))
    def record_handler(record: SQSRecord, lambda_context: Any, job: Job) -> str:
        """Refund one order."""
        seen["context"], seen["fence"] = lambda_context, job.fence
        return "refunded"

    assert record_handler.__name__ == "record_handler"
    assert record_handler.__doc__ == "Refund one order."
    assert list(inspect.signature(record_handler).parameters) == ["record", "lambda_context"]
    context = object()
    # BatchProcessor passes lambda_context only when the signature it inspects declares it.
    assert process([sqs_record({"refund_id": "r-1"})], record_handler, context) == []
    assert seen == {"context": context, "fence": 1}


def test_partial_batch_failures_as_powertools_reports_them(backend, engine, clock):
    runs: list[str] = []

    @fenced(
        backend,
        FenceConfig(job_type="refund", operation_id=BY_REFUND, lease_seconds=LEASE_S),
        reconcile=lambda job: Reconciled.not_done(),  # it raises before any side effect
    )
    def record_handler(record: SQSRecord) -> str:
        body = record.json_body
        runs.append(body["refund_id"])
        if body["refund_id"] == "r-bug":
            raise RuntimeError("a bug in the handler")
        return "refunded"

    ok, bug = sqs_record({"refund_id": "r-ok", "cents": 100}), sqs_record({"refund_id": "r-bug"})
    failed = process([ok, bug], record_handler)
    assert failed == [bug["messageId"]]
    assert engine.get(TENANT, "r-ok").state == State.SUCCEEDED
    assert engine.get(TENANT, "r-ok").outcome_code == "refunded"
    assert engine.get(TENANT, "r-bug").state == State.QUEUED  # a retryable failure: a later try
    with pytest.raises(TryLater):  # redelivered before the retry's backoff ended: not run
        record_handler(record=SQSRecord(bug))
    clock.advance(backoff_ceiling_ms(1) + 1)
    with pytest.raises(NotFinished, match="retryable"):
        record_handler(record=SQSRecord(bug))
    # The succeeded one delivered again: acknowledged without a second run.
    assert process([ok], record_handler) == []
    assert runs == ["r-ok", "r-bug", "r-bug"]


def test_a_redelivery_during_the_lease_goes_back_to_the_queue_and_does_not_run(backend, engine):
    runs: list[int] = []
    message = sqs_record({"refund_id": "r-1"})
    answers: list[BaseException] = []

    @fenced(backend, FenceConfig(job_type="refund", operation_id=BY_REFUND, lease_seconds=LEASE_S))
    def record_handler(record: SQSRecord, job: Job) -> None:
        runs.append(job.fence)
        if len(runs) == 1:  # SQS delivers the message again while this delivery holds the lease
            try:
                record_handler(record=SQSRecord(message))
            except TryLater as kept:
                answers.append(kept)

    assert process([message], record_handler) == []
    assert runs == [1] and len(answers) == 1  # the redelivery ran nothing and kept its message
    assert "r-1" not in str(answers[0])  # named by its keyed hash only
    # The same redelivery as Powertools sees it while the lease is held: a batch item failure.
    engine.enqueue(TENANT, "r-2", "refund", _hash({"refund_id": "r-2"}))
    held = engine.claim(TENANT, "r-2", "another-delivery", lease_ms=LEASE_S * 1000)
    second = sqs_record({"refund_id": "r-2"})
    assert process([second], record_handler) == [second["messageId"]]
    assert engine.get(TENANT, "r-2").fence == held.fence and runs == [1]


def _hash(payload: Any) -> str:
    from leasefence.payloads import canonicalize

    return canonicalize(payload).hash


def test_a_poison_message_is_a_batch_item_failure_that_never_runs(backend, engine):
    runs: list[int] = []

    @fenced(backend, FenceConfig(job_type="refund", operation_id=BY_REFUND, lease_seconds=LEASE_S))
    def record_handler(record: SQSRecord) -> None:
        runs.append(record.json_body["cents"])

    first = sqs_record({"refund_id": "r-1", "cents": 100})
    poison = sqs_record({"refund_id": "r-1", "cents": 999_999})  # the same id, another payload
    assert process([first, poison], record_handler) == [poison["messageId"]]
    for _ in range(3):  # every receive until the redrive policy moves it to the DLQ
        with pytest.raises(PoisonMessage, match="payload_conflict"):
            record_handler(record=SQSRecord(poison))
    assert runs == [100]
    assert engine.get(TENANT, "r-1").state == State.SUCCEEDED  # the first one, unchanged


def test_unknown_keeps_the_message_until_an_operator_decides(backend, engine):
    runs: list[int] = []
    reconciles: list[int] = []

    def reconcile(job: Job) -> Reconciled:
        reconciles.append(job.fence)
        return Reconciled.done("looked-up")

    @fenced(
        backend,
        FenceConfig(job_type="sms", operation_id=BY_REFUND, lease_seconds=LEASE_S),
        reconcile=reconcile,
    )
    def record_handler(record: SQSRecord, job: Job) -> None:
        runs.append(job.fence)
        raise Ambiguous("the gateway timed out after the request was sent")

    message = sqs_record({"refund_id": "r-1"})
    assert process([message], record_handler) == [message["messageId"]]
    assert engine.get(TENANT, "r-1").state == State.UNKNOWN
    with pytest.raises(Parked, match="unknown"):
        record_handler(record=SQSRecord(message))  # redelivered: still parked, not run
    assert runs == [1]
    # The operator requeues; the message (redriven from the DLQ) is reconciled, not run again.
    engine.resolve(TENANT, "r-1", "requeue", actor="operator")
    assert process([message], record_handler) == []
    assert runs == [1] and reconciles == [2]
    assert engine.get(TENANT, "r-1").outcome_code == "looked-up"


def test_a_stalled_handler_s_stale_write_is_refused_by_a_class_b_table(backend, engine, clock, ddb):
    ddb.create_table(
        TableName="fenced-ledger",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ledger = fenced_table.FencedTable(ddb, "fenced-ledger")
    stalled, wake = threading.Event(), threading.Event()
    counts: Counter[str] = Counter()

    def account(job: Job) -> dict[str, str]:
        return {"pk": job.payload["account"]}

    def posted(job: Job) -> Reconciled:
        entries = (ledger.read(account(job)) or {}).get("entries", [])
        return Reconciled.done("posted") if entries else Reconciled.not_done()

    @fenced(
        backend,
        FenceConfig(job_type="post", operation_id=BY_REFUND, target_class="B", lease_seconds=5),
        reconcile=posted,
        on_claim=lambda job: ledger.raise_fence(job, account(job)),
        events=lambda name, value: counts.update({name: int(value)}),
    )
    def record_handler(record: SQSRecord, job: Job) -> str:
        if job.fence == 1:  # the first delivery stalls past its lease before its write
            stalled.set()
            wake.wait(10)
        ledger.write(job, account(job), {}, append={"entries": [job.fence]})
        return "posted"

    message = sqs_record({"refund_id": "r-1", "account": "acct-9"})
    first: list[BaseException] = []

    def deliver_first() -> None:
        try:
            record_handler(record=SQSRecord(message))
        except NotFinished as kept:
            first.append(kept)

    thread = threading.Thread(target=deliver_first)
    thread.start()
    assert stalled.wait(10)
    clock.advance(5_001)  # the lease lapsed; SQS delivers the message again
    assert process([message], record_handler) == []
    wake.set()
    thread.join(10)
    assert len(first) == 1 and "lost ownership" in first[0].reason
    assert ledger.read({"pk": "acct-9"})["entries"] == [2]  # the stale write never landed
    assert counts["LostOwnership"] == 1 and counts["Reconciles"] == 1  # the runtime's metrics
    assert engine.get(TENANT, "r-1").state == State.SUCCEEDED
    assert process([message], record_handler) == []  # the stalled one's message, acknowledged


def test_a_result_that_is_no_outcome_code_completes_as_ok(backend, engine):
    long_result = "x" * 300

    @fenced(backend, FenceConfig(job_type="refund", lease_seconds=LEASE_S))
    def record_handler(record: SQSRecord) -> str:
        return long_result if record.json_body["long"] else "refunded"

    long_one, short_one = sqs_record({"long": True}), sqs_record({"long": False})
    assert record_handler(record=SQSRecord(long_one)) == long_result  # Powertools keeps it
    assert process([short_one], record_handler) == []
    assert engine.get(TENANT, long_one["messageId"]).outcome_code == "ok"
    assert engine.get(TENANT, short_one["messageId"]).outcome_code == "refunded"
    # A redelivery of an ended operation runs nothing and has no result of its own.
    assert record_handler(record=SQSRecord(long_one)) is None


def test_in_process_a_large_body_goes_to_the_payload_store(aws, spec, clock, engine):
    bucket = f"fenced-{uuid.uuid4().hex[:8]}"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    with_store = Engine(
        client=aws.client(), spec=spec, clock=clock, payloads=PayloadStore(bucket, client=s3)
    )
    seen: list[Any] = []
    config = FenceConfig(job_type="refund", operation_id=BY_REFUND, lease_seconds=LEASE_S)

    def handler(record: SQSRecord, job: Job) -> None:
        seen.append(job.payload)

    big = {"refund_id": "r-big", "note": noise(4096)}  # packs to over 1 KiB: not in an item
    fenced_handler = fenced(EngineBackend(with_store, [TENANT]), config)(handler)
    assert process([sqs_record(big)], fenced_handler) == []
    assert seen == [big]  # loaded back from S3 by the worker runtime
    with pytest.raises(PoisonMessage):  # the same id, another large body: nothing left behind
        fenced_handler(record=SQSRecord(sqs_record({**big, "note": noise(4096, seed=1)})))
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    # Without a payload store (the engine fixture's), a body over the item's limit is refused.
    with pytest.raises(InvalidInput, match="payload store"):
        fenced(EngineBackend(engine, [TENANT]), config)(handler)(record=SQSRecord(sqs_record(big)))


def test_a_permanent_failure_ends_the_operation_and_is_acknowledged(backend, engine):
    runs: list[int] = []
    config = FenceConfig(
        job_type="refund",
        operation_id=lambda record: record.json_body["refund_id"],  # a function of the record
        lease_seconds=LEASE_S,
    )

    @fenced(backend, config)
    def record_handler(record: SQSRecord, job: Job) -> None:
        runs.append(job.fence)
        raise Permanent("the account is closed")

    message = sqs_record({"refund_id": "r-1"})
    assert process([message], record_handler) == []  # ended: SQS deletes it, no DLQ round
    assert engine.get(TENANT, "r-1").state == State.FAILED_TERMINAL
    assert process([message], record_handler) == [] and runs == [1]  # never runs again


def test_a_record_without_a_body_needs_a_payload_named(backend, engine):
    event_record = {"eventID": "e-1", "detail": {"order": "A-1"}}  # not SQS: no body
    runs: list[Any] = []

    def handler(record: dict[str, Any], job: Job) -> None:
        runs.append(job.payload)

    with pytest.raises(InvalidInput, match="no body"):
        fenced(backend, FenceConfig(job_type="sync", operation_id="eventID"))(handler)(
            record=event_record
        )
    named = FenceConfig(job_type="sync", operation_id="eventID", payload="detail")
    fenced(backend, named)(handler)(record=event_record)
    assert runs == [{"order": "A-1"}] and engine.get(TENANT, "e-1").state == State.SUCCEEDED


def test_class_a_and_class_d_helpers_take_the_job(backend, engine, ddb):
    ddb.create_table(
        TableName="fenced-orders",
        AttributeDefinitions=[{"AttributeName": "order_id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "order_id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(
        TableName="fenced-orders", Item={"order_id": {"S": "A-1"}, "status": {"S": "paid"}}
    )
    sent: list[str] = []

    @fenced(backend, FenceConfig(job_type="refund", operation_id=BY_REFUND, target_class="A"))
    def refund(record: SQSRecord, job: Job) -> None:  # class A: commits with the completion
        order = {"order_id": record.json_body["order"]}
        paid_to_refunded = same_table.update(
            "fenced-orders",
            order,
            "SET #s = :refunded",
            condition="#s = :paid",
            names={"#s": "status"},
            values={":paid": "paid", ":refunded": "refunded"},
        )
        job.complete_with("refunded", [paid_to_refunded])

    @fenced(backend, FenceConfig(job_type="sms", operation_id=BY_REFUND, target_class="D"))
    def sms(record: SQSRecord, job: Job) -> str:  # class D: intent first, one call
        single_shot.call_once(job, lambda: sent.append(record.json_body["to"]), what="sms")
        return "sent"

    a = sqs_record({"refund_id": "r-a", "order": "A-1"})
    d = sqs_record({"refund_id": "r-d", "to": "+100"})
    assert process([a], refund) == [] and process([d], sms) == []
    order = ddb.get_item(TableName="fenced-orders", Key={"order_id": {"S": "A-1"}})["Item"]
    assert order["status"]["S"] == "refunded"
    assert engine.get(TENANT, "r-a").outcome_code == "refunded"
    assert engine.get(TENANT, "r-d").state == State.SUCCEEDED and sent == ["+100"]
    assert engine.get(TENANT, "r-d").target_class == "D"


def test_a_job_type_that_requires_approval_waits_for_it(backend, engine):
    engine.catalogue.put(TENANT, "payout", {"target_class": "D", "approval_required": True})
    runs: list[int] = []

    @fenced(backend, FenceConfig(job_type="payout", operation_id=BY_REFUND, worker_id="consumer"))
    def record_handler(record: SQSRecord, job: Job) -> None:
        runs.append(job.fence)

    message = sqs_record({"refund_id": "p-1", "cents": 500})
    assert process([message], record_handler) == [message["messageId"]]  # TryLater: not yet
    operation = engine.get(TENANT, "p-1")
    assert operation.state == State.AWAITING_APPROVAL and runs == []
    with pytest.raises(SelfApproval):  # the consumer enqueued it: it can never approve it
        engine.approve(TENANT, "p-1", operation.payload_hash, actor="consumer")
    engine.approve(TENANT, "p-1", operation.payload_hash, actor="approver")
    assert process([message], record_handler) == [] and runs == [1]
