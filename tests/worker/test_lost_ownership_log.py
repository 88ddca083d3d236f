"""The worker's lost-ownership log line says, in its message, which operation (its keyed hash),
which fence and what was refused: a post-mortem read through a default ``logging.Formatter``
(which drops ``extra``) tells a refused heartbeat from a refused target write. No raw id."""

from __future__ import annotations

import io
import logging

import pytest

from leasefence.privacy import keyed_hash
from leasefence.targets import fenced_table
from leasefence.worker import (
    Ambiguous,
    EngineBackend,
    FunctionHandler,
    Job,
    LostOwnership,
    Retry,
    Uninterpretable,
    Worker,
)

T = "tenant-7c1e"
OP = "order-4711-raw-id"
H = "sha256:" + "8" * 64
LEASE = 1_000


@pytest.fixture
def lines():
    """What a default formatter writes for the worker's logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    records: list[logging.LogRecord] = []
    handler.addFilter(lambda record: records.append(record) or True)
    logger = logging.getLogger("leasefence.worker")
    logger.addHandler(handler)
    try:
        yield stream, records
    finally:
        logger.removeHandler(handler)


def _take_over(engine, clock) -> None:
    clock.advance(LEASE)
    grant = engine.claim_next(T, "w2", lease_ms=60_000)
    assert grant is not None and grant.fence == 2


def _run(engine, handler) -> Job:
    worker = Worker(EngineBackend(engine, [T]), {"job": FunctionHandler(handler)}, worker_id="w1",
                    lease_ms=LEASE, heartbeat_interval_ms=50, idle_sleep_ms=20)
    return worker.process(engine.claim_next(T, "w1", lease_ms=LEASE))


def _heartbeat(engine, clock, job):
    _take_over(engine, clock)
    job.progress()  # the next renewal sends a heartbeat, refused
    assert job.cancelled.wait(10)


def _complete(engine, clock, job):
    _take_over(engine, clock)
    return "done"  # no progress: no heartbeat; the closing complete is refused


def _fail(engine, clock, job):
    _take_over(engine, clock)
    raise Retry("the provider said try later")


def _unknown(engine, clock, job):
    _take_over(engine, clock)
    raise Ambiguous("no answer from the provider")


def _quarantine(engine, clock, job):
    _take_over(engine, clock)
    raise Uninterpretable("the payload names no account")


def _intent(engine, clock, job):
    _take_over(engine, clock)
    job.record_intent("charge")


CASES = {
    "heartbeat": (_heartbeat, "heartbeat refused: stale_fence"),
    "complete": (_complete, "complete refused: stale_fence"),
    "fail": (_fail, "fail refused: stale_fence"),
    "unknown": (_unknown, "park as unknown refused: stale_fence"),
    "quarantine": (_quarantine, "quarantine refused: stale_fence"),
    "class-d-intent": (_intent, "class D intent (heartbeat) refused: stale_fence"),
}


def _the_line(stream: io.StringIO, records: list[logging.LogRecord]) -> str:
    lost = [r for r in records if r.getMessage().startswith("lost ownership")]
    assert len(lost) == 1, [r.getMessage() for r in records]
    written = [line for line in stream.getvalue().splitlines() if "lost ownership" in line]
    assert len(written) == 1
    assert OP not in stream.getvalue() and T not in stream.getvalue()
    return written[0]


@pytest.mark.parametrize("case", CASES)
def test_the_line_names_the_operations_hash_the_fence_and_what_was_refused(engine, clock, lines, case):
    act, why = CASES[case]
    engine.enqueue(T, OP, "job", H)
    job = _run(engine, lambda job: act(engine, clock, job))
    assert job.cancelled.is_set() and job.lost_reason == why
    stream, records = lines
    line = _the_line(stream, records)
    assert line == f"WARNING:leasefence.worker:lost ownership of operation {keyed_hash(T, OP)} at fence 1: {why}"
    # The fields stay, for a structured formatter.
    record = next(r for r in records if r.getMessage().startswith("lost ownership"))
    assert (record.op, record.fence, record.why) == (keyed_hash(T, OP), 1, why)


def test_a_class_b_target_refusal_says_so(ddb, engine, clock, lines):
    ddb.create_table(
        TableName="ledger-lost-log",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    table = fenced_table.FencedTable(ddb, "ledger-lost-log")
    backend = EngineBackend(engine, [T])
    engine.enqueue(T, OP, "ledger", H, target_class="B")
    stale = Job(engine.claim_next(T, "w1", lease_ms=LEASE), backend, lambda name, value: None)
    clock.advance(LEASE)
    fresh = Job(engine.claim_next(T, "w2", lease_ms=LEASE), backend, lambda name, value: None)
    table.raise_fence(fresh, {"pk": "acct-1"})
    with pytest.raises(LostOwnership):
        table.write(stale, {"pk": "acct-1"}, {"balance": 0})
    line = _the_line(*lines)
    assert line.endswith(
        f"lost ownership of operation {keyed_hash(T, OP)} at fence 1: "
        "class B target write refused: it has seen fence 2"
    )
