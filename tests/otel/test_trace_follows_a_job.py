"""One trace from the producer's enqueue through a takeover to the class-B target write, in
process and over HTTP: the spans of the SDK's in-memory exporter, their parents and links."""

from __future__ import annotations

import time
import uuid

import pytest
from opentelemetry import trace

from leasefence import otel
from leasefence.errors import InvalidInput, NotFound
from leasefence.privacy import keyed_hash
from leasefence.targets.fenced_table import FencedTable
from leasefence.tracecontext import TraceContext
from leasefence.worker import EngineBackend, FunctionHandler, LostOwnership, Reconciled, Worker
from leasefence.worker.http_backend import HttpBackend

H1 = "sha256:" + "6" * 64
PAYLOAD = {"amount": 1234, "customer": "secret-customer"}


def _ledger(ddb, name):
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return FencedTable(ddb, name)


def _stalling_handler(table, stall, refused):
    """Fence 1 stalls (``stall``: its lease lapses and another worker takes over) and then
    writes: refused. Every later fence writes at once."""

    def run(job):
        if job.fence == 1:
            stall()
            try:
                table.write(job, {"pk": "acct-1"}, {"balance": job.fence})
            except LostOwnership:
                refused.append(job.fence)
                raise
        table.write(job, {"pk": "acct-1"}, {"balance": job.fence})
        return "written"

    # The target is class B: whatever an earlier holder did, its fence keeps the write safe.
    return FunctionHandler(run, lambda _job: Reconciled.not_done())


def _one(spans, name, **attributes):
    found = [
        s
        for s in spans
        if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, (name, attributes, [(s.name, dict(s.attributes)) for s in spans])
    return found[0]


def _assert_one_trace(spans, root, tenant, op, poll):
    """enqueue -> claim (fence 1) -> process -> refused write; enqueue -> claim (fence 2, a
    takeover, linked to the poll it was made in) -> process -> the write that counts."""
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    enqueue = _one(spans, "leasefence enqueue ledger")
    assert enqueue.parent.span_id == root.context.span_id
    assert enqueue.kind is trace.SpanKind.PRODUCER
    for fence in (1, 2):
        claim = _one(spans, "leasefence claim ledger", **{"leasefence.fence": fence})
        # a child of the producer's context (not a link): one trace, one tree
        assert claim.parent.span_id == enqueue.context.span_id
        assert claim.attributes["leasefence.takeover"] is (fence == 2)
        assert claim.attributes["leasefence.op"] == keyed_hash(tenant, op)
        process = _one(spans, "leasefence process ledger", **{"leasefence.fence": fence})
        assert process.parent.span_id == claim.context.span_id
        write = _one(spans, "leasefence fenced write", **{"leasefence.fence": fence})
        assert write.parent.span_id == process.context.span_id
        assert write.kind is trace.SpanKind.CLIENT
        assert write.attributes.get("leasefence.fence.refused", False) is (fence == 1)
        if fence == 1:
            assert write.attributes["leasefence.fence.seen"] == 2
            assert (
                write.end_time
                > _one(spans, "leasefence fenced write", **{"leasefence.fence": 2}).end_time
            )
        if fence == 2 and poll is not None:
            assert [link.context.span_id for link in claim.links] == [poll.context.span_id]
    # No raw tenant id, operation id or payload in any attribute.
    for span in spans:
        for value in span.attributes.values():
            text = str(value)
            assert tenant not in text and op not in text and "secret-customer" not in text


def test_one_trace_from_enqueue_through_a_takeover_to_the_target_write(engine, clock, ddb, spans):
    table = _ledger(ddb, "ledger-otel")
    tracer = trace.get_tracer("test")
    backend = EngineBackend(engine, ["acme"])
    second = Worker(backend, {}, worker_id="w2")
    refused: list[int] = []

    def stall():
        clock.advance(1_001)  # the lease lapsed: w2 takes over, writes and completes
        with tracer.start_as_current_span("w2 poll"):
            assert second.run_once()

    second.handlers["ledger"] = _stalling_handler(table, stall, refused)
    first = Worker(
        backend,
        {"ledger": _stalling_handler(table, stall, refused)},
        worker_id="w1",
        lease_ms=1_000,
        heartbeat_interval_ms=60_000,
    )
    second.lease_ms = 1_000
    with (
        tracer.start_as_current_span("checkout") as root,
        otel.producer_span("ledger", "acme", "refund-7"),
    ):
        engine.enqueue(
            "acme", "refund-7", "ledger", H1, target_class="B",
            trace_context=otel.current_trace_context(),
        )  # fmt: skip
    assert engine.get("acme", "refund-7").state == "queued"
    assert first.run_once()
    assert refused == [1]
    assert table.read({"pk": "acct-1"})["balance"] == 2
    assert engine.get("acme", "refund-7").state == "succeeded"
    finished = spans.get_finished_spans()
    poll = _one(finished, "w2 poll")
    _assert_one_trace([s for s in finished if s is not poll], root, "acme", "refund-7", poll)


def test_over_http_the_sdk_sends_it_the_api_keeps_it_and_the_claim_carries_it(
    sdk, tenant, ddb, spans
):
    """The SDK's enqueue sends ``traceparent``; the API (served in process here, so its claim
    spans land in the same exporter) keeps it and answers each claim with the claim span's
    context; the HTTP worker continues it. The first lease (1 s) lapses for real."""
    table = _ledger(ddb, f"ledger-otel-{uuid.uuid4().hex[:8]}")
    tracer = trace.get_tracer("test")
    backend = HttpBackend(sdk, tenant)
    refused: list[int] = []
    second = Worker(backend, {}, worker_id="w2", lease_ms=1_000)

    def stall():
        time.sleep(1.2)
        with tracer.start_as_current_span("w2 poll"):
            assert second.run_once()

    handler = _stalling_handler(table, stall, refused)
    second.handlers["ledger"] = handler
    first = Worker(
        backend, {"ledger": handler}, worker_id="w1", lease_ms=1_000, heartbeat_interval_ms=60_000
    )
    with tracer.start_as_current_span("checkout") as root:
        sdk.enqueue("refund-8", "ledger", PAYLOAD, target_class="B")
    assert first.run_once()
    assert refused == [1]
    assert sdk.get("refund-8").state == "succeeded"
    finished = spans.get_finished_spans()
    # The API's claim span is made in the API's request (no span there to link): no poll link.
    _assert_one_trace(
        [s for s in finished if s.name != "w2 poll"], root, tenant, "refund-8", poll=None
    )


def test_a_malformed_traceparent_is_ignored_and_a_valid_one_is_carried_as_sent(sdk):
    """The header as any HTTP client sends it (no producer span). A malformed one enqueues
    without a trace context (201, not a 4xx); an oversized tracestate is dropped."""
    raw = sdk
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    bad = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-zzzz-01", "tracestate": "a=b"}
    status, _ = raw.request(
        "POST",
        "/v1/operations",
        {"operation_id": "bad", "job_type": "j", "payload": 1},
        headers=bad,
    )
    assert status == 201
    long_state = {"traceparent": parent, "tracestate": "k=" + "v" * 600}
    raw.request(
        "POST", "/v1/operations", {"operation_id": "ok", "job_type": "j", "payload": 2},
        headers=long_state,
    )  # fmt: skip
    claims = {c.operation_id: c for c in (raw.claim("w"), raw.claim("w"))}
    assert set(claims) == {"bad", "ok"}
    assert claims["bad"].traceparent is None or claims["bad"].traceparent.split("-")[1] != (
        "0af7651916cd43dd8448eb211c80319c"
    )
    ok = claims["ok"]
    assert ok.traceparent is not None and ok.traceparent.split("-")[1] == parent.split("-")[1]
    assert ok.tracestate is None


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", True),
        (" 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 ", True),
        ("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later", True),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-more", False),
        ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", False),
        ("00-00000000000000000000000000000000-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", False),
        ("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", False),
        ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", False),
        ("x" * 10_000, False),
        (None, False),
    ],
)
def test_what_a_receiver_keeps_of_a_traceparent(header, kept):
    context = TraceContext.from_headers(header, "vendor=1")
    assert (context is not None) is kept
    if context is not None:
        assert len(context.traceparent) == 55 and context.tracestate == "vendor=1"


def test_the_engine_refuses_a_malformed_trace_context(engine):
    with pytest.raises(InvalidInput):
        engine.enqueue("acme", "op", "j", H1, trace_context=TraceContext("00-nope"))
    with pytest.raises(InvalidInput):
        engine.enqueue(
            "acme", "op", "j", H1,
            trace_context=TraceContext(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "s" * 513
            ),
        )  # fmt: skip
    with pytest.raises(NotFound):
        engine.get("acme", "op")


def test_a_batch_enqueue_keeps_the_producer_context_with_every_item(sdk, spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("import") as root:
        results = sdk.enqueue_batch(
            [{"operation_id": f"b-{i}", "job_type": "mail", "payload": i} for i in range(3)]
        )
    assert all(r.error is None for r in results)
    batch = _one(spans.get_finished_spans(), "leasefence enqueue batch")
    assert batch.parent.span_id == root.context.span_id
    for _ in range(3):
        claim = sdk.claim("w")
        assert claim is not None
        # the claim span's context, in the producer's trace
        assert claim.traceparent.split("-")[1] == format(root.context.trace_id, "032x")
    claims = [s for s in spans.get_finished_spans() if s.name == "leasefence claim mail"]
    assert len(claims) == 3
    assert {s.parent.span_id for s in claims} == {batch.context.span_id}
