"""OpenTelemetry spans that follow a job, when OpenTelemetry is installed (the ``otel`` extra, or
an ADOT layer); without it every function here does nothing and imports nothing more.

One trace runs from the producer to the target write:

* ``leasefence enqueue <job type>`` (PRODUCER): :func:`producer_span`, around an enqueue by the
  SDK (which sends its context as the ``traceparent`` header) or an in-process producer (which
  passes :func:`current_trace_context` to ``Engine.enqueue``). The operation keeps that context
  (:mod:`leasefence.tracecontext`).
* ``leasefence claim <job type>`` (CONSUMER): :func:`claim_span`, made by the engine for every
  claim it grants (``claim_next``, ``claim``, a stream's ``claim_seen``; in the API function too).
  It is a CHILD of the producer's context, not a root with a link: a claim takes exactly one
  operation, so the producer's context is its one natural parent, and only a child keeps enqueue,
  claims and target writes in one trace that a tracing backend shows as one tree (a link would
  start a trace per claim, joined only where the backend follows links). What the claimer was
  doing (its poll, the API request) is kept as a LINK of that span. A takeover's claim is one
  more child of the producer's context, beside the stalled one (``leasefence.takeover``: true).
  The claim hands on the claim span's context (``Claim.traceparent``); an operation enqueued
  without one gets a claim span in the claimer's current context.
* ``leasefence process <job type>`` (CONSUMER): :func:`process_span`, the worker runtime's span
  around reconcile, the handler and the closing write, a child of the claim's context; current
  while the handler runs, so the handler's own spans (and the target helpers') are its children.
* ``leasefence fenced write`` (CLIENT): :func:`target_write_span`, a class-B
  :class:`~leasefence.targets.fenced_table.FencedTable` write, with the fence as an attribute.

Attributes never carry a raw tenant id, operation id or payload: the operation is
``leasefence.op``, the keyed hash the logs use (:func:`leasefence.privacy.keyed_hash`).
The X-Ray tracing of :mod:`leasefence.tracing` (Powertools) is separate and unchanged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from leasefence.privacy import keyed_hash
from leasefence.tracecontext import TraceContext

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, SpanKind
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the extra is not installed: nothing is traced
    trace = None  # type: ignore[assignment]

#: The instrumentation scope of every span here.
SCOPE = "leasefence"

C = TypeVar("C")


def enabled() -> bool:
    """Whether OpenTelemetry's API is importable here (spans are recorded only when an SDK's
    tracer provider is set, by the application or an ADOT layer)."""
    return trace is not None


def _tracer() -> Any:
    return trace.get_tracer(SCOPE)


def _propagator() -> Any:
    return TraceContextTextMapPropagator()


def _context_of(trace_context: TraceContext | None) -> Any:
    """The OpenTelemetry context of a stored trace context (None: none, or not valid)."""
    if trace_context is None:
        return None
    extracted = _propagator().extract(trace_context.headers())
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def _trace_context_in(ctx: Any = None) -> TraceContext | None:
    carrier: dict[str, str] = {}
    _propagator().inject(carrier, context=ctx)
    return TraceContext.from_headers(carrier.get("traceparent"), carrier.get("tracestate"))


def current_trace_context() -> TraceContext | None:
    """The current span's context as an operation keeps it (None: no OpenTelemetry, or no
    valid span): what an in-process producer passes to ``Engine.enqueue(trace_context=...)``."""
    if trace is None:
        return None
    return _trace_context_in()


def _operation_attributes(claim_or_op: Any) -> dict[str, Any]:
    return {
        "leasefence.op": keyed_hash(claim_or_op.tenant_id, claim_or_op.operation_id),
        "leasefence.job_type": claim_or_op.job_type,
    }


@contextmanager
def producer_span(
    job_type: str | None, tenant_id: str | None = None, operation_id: str = ""
) -> Iterator[None]:
    """``leasefence enqueue <job type>`` around an enqueue (``job_type`` None: ``leasefence
    enqueue batch``, a batch's); inside it, :func:`current_trace_context` is the context the
    operation keeps. ``leasefence.op`` (the operation's keyed hash) only when the tenant is known
    (an in-process producer): the SDK's caller is a token, whose tenant the client does not
    know."""
    if trace is None:
        yield
        return
    attributes = {} if job_type is None else {"leasefence.job_type": job_type}
    if tenant_id is not None:
        attributes["leasefence.op"] = keyed_hash(tenant_id, operation_id)
    with _tracer().start_as_current_span(
        f"leasefence enqueue {job_type or 'batch'}", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield


@contextmanager
def claim_span() -> Iterator[Callable[[C], C]]:
    """Times a claim call; the function it yields turns the claim granted (or None) into the
    claim continued in a ``leasefence claim`` span (see the module's docstring): started when
    the call started, ended when the claim is handed on, its context in the claim's
    ``traceparent``. Without OpenTelemetry the claim is handed on unchanged."""
    if trace is None:
        yield lambda claim: claim
        return
    started = time.time_ns()
    caller = trace.get_current_span().get_span_context()

    def continued(claim: Any) -> Any:
        if claim is None:
            return claim
        producer = _context_of(claim.trace_context)
        links = [Link(caller)] if producer is not None and caller.is_valid else []
        span = _tracer().start_span(
            f"leasefence claim {claim.job_type}",
            context=producer,
            kind=SpanKind.CONSUMER,
            links=links,
            start_time=started,
            attributes={
                **_operation_attributes(claim),
                "leasefence.fence": claim.fence,
                "leasefence.attempt": claim.attempts,
                "leasefence.takeover": bool(claim.takeover),
                "leasefence.target_class": str(claim.target_class),
            },
        )
        span.end()
        handed_on = _trace_context_in(trace.set_span_in_context(span)) or claim.trace_context
        return dataclasses.replace(claim, trace_context=handed_on)

    yield continued


@contextmanager
def process_span(claim: Any) -> Iterator[None]:
    """``leasefence process <job type>``, current while the worker runtime runs the claim: a
    child of the claim's context (the claim span's, or the producer's when no claim span was
    made), else of the current one."""
    if trace is None:
        yield
        return
    with _tracer().start_as_current_span(
        f"leasefence process {claim.job_type}",
        context=_context_of(getattr(claim, "trace_context", None)),
        kind=SpanKind.CONSUMER,
        attributes={
            **_operation_attributes(claim),
            "leasefence.fence": claim.fence,
            "leasefence.attempt": claim.attempts,
            "leasefence.takeover": bool(claim.takeover),
        },
    ):
        yield


@contextmanager
def target_write_span(job: Any, table_name: str) -> Iterator[Any]:
    """``leasefence fenced write``: one class-B target write under the job's fence (a child of
    the current span: the handler's). Yields the span (None without OpenTelemetry) so that the
    caller can say a write was refused (``leasefence.fence.refused``)."""
    if trace is None:
        yield None
        return
    with _tracer().start_as_current_span(
        "leasefence fenced write",
        kind=SpanKind.CLIENT,
        attributes={
            "leasefence.op": keyed_hash(job.tenant_id, job.operation_id),
            "leasefence.fence": job.fence,
            "db.system.name": "aws.dynamodb",
            "db.operation.name": "UpdateItem",
            "aws.dynamodb.table_names": [table_name],
        },
    ) as span:
        yield span


def refused(span: Any, by_fence: int | None) -> None:
    """Mark a target write span refused (``by_fence``: the higher fence the target has seen)."""
    if span is None:
        return
    span.set_attribute("leasefence.fence.refused", True)
    if by_fence is not None:
        span.set_attribute("leasefence.fence.seen", by_fence)
