"""The batch routes' one shape (``POST /v1/batch/...``): each item run by its one-at-a-time
route's own code, its answer or its error (mapped by :mod:`leasefence.api.errors`, as that route
would answer it) kept in the item's place, and the request answered 200 once every item was
processed. Partial success is normal: an item's refusal never undoes or skips another item."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from aws_lambda_powertools.event_handler import Response

from leasefence.api import errors, models_batch
from leasefence.api._shared import Traceparent, Tracestate, answer
from leasefence.api.security import Caller
from leasefence.engine import closing_round
from leasefence.errors import LeaseFenceError, Unavailable
from leasefence.limits import CLAIM_BATCH_BUDGET_MS
from leasefence.payloads import CanonicalPayload
from leasefence.tracecontext import TraceContext


def item_result(operation_id: str, one: Callable[[], Response]) -> dict[str, Any]:
    """``{"operation_id", "status", "body"}``: what ``one()`` answered, or its error's status and
    the contract's error body."""
    try:
        reply = one()
        status, body = reply.status_code, reply.body
    except Exception as exc:  # noqa: BLE001 - each item gets the answer its route would give
        status, body = errors.describe(exc)
    return {"operation_id": operation_id, "status": status, "body": body}


def results_of(items: Sequence[Any], one: Callable[[Any], Response]) -> list[dict[str, Any]]:
    """One result per item (:func:`item_result`), in the items' order."""
    return [item_result(item.operation_id, partial(one, item)) for item in items]


def batch_answer(items: Sequence[Any], one: Callable[[Any], Response]) -> Response:
    """200 with one result per item (:func:`item_result`), in the items' order."""
    return answer(200, {"results": results_of(items, one)})


def _raise(error: Exception) -> Response:
    raise error


#: A close made, whose payload's expiry could not be written (its resend, a replay, writes it).
UNWRITTEN = "closed, but its payload's expiry is not written yet: send it again"


@dataclass(frozen=True)
class OneAtATime:
    """The one-at-a-time routes' own code that the batches run per item."""

    enqueue: Callable[[Caller, Any, CanonicalPayload | None, TraceContext | None], Response]
    canonical: Callable[[Any], CanonicalPayload | None]
    claim: Callable[[str, Any], Response]
    heartbeat: Callable[[str, str, Any], Response]
    #: A finish item's ``action`` -> its route's code.
    finishes: Mapping[str, Callable[[str, str, Any], Response]]


def _claims(one: OneAtATime, tenant: str, items: Sequence[Any]) -> list[dict[str, Any]]:
    """Each claim in order, those not begun within the batch's time budget answered 503."""
    results = []
    ends = time.monotonic() + CLAIM_BATCH_BUDGET_MS / 1000
    for item in items:
        if time.monotonic() >= ends:
            late = Unavailable(
                "not claimed: the batch ran out of time before this claim; send it again"
            )
            result = item_result(item.operation_id, partial(_raise, late))
        else:
            result = item_result(item.operation_id, partial(one.claim, tenant, item))
        if result["status"] == 200:
            result["operation_id"] = result["body"]["claim"]["operation_id"]
        elif result["status"] == 204:
            result["body"] = None
        results.append(result)
    return results


def _finishes(one: OneAtATime, tenant: str, items: Sequence[Any]) -> list[dict[str, Any]]:
    return results_of(
        items, lambda item: one.finishes[item.action](tenant, item.operation_id, item)
    )


def _renewals(one: OneAtATime, tenant: str, items: Sequence[Any]) -> list[dict[str, Any]]:
    return results_of(items, lambda item: one.heartbeat(tenant, item.operation_id, item))


def register_routes(
    register: Callable[[str], Any], caller_of: Callable[[str], Caller], one: OneAtATime
) -> None:
    """Register the batch routes with ``register`` (the resolver's), each item run by ``one``."""

    @register("enqueueBatch")
    def enqueue_batch(
        body: models_batch.EnqueueBatchRequest,
        traceparent: Traceparent = None,
        tracestate: Tracestate = None,
    ):
        caller = caller_of("enqueueBatch")
        # The producer's trace context, kept with every item (malformed: ignored, as one at a time)
        trace = TraceContext.from_headers(traceparent, tracestate)
        # Every item's payload first: one the schema refuses (not I-JSON, a hash that is not its
        # own) or over the size limit refuses the whole request before anything is written.
        canonicals = {}
        for index, item in enumerate(body.items):
            try:
                canonicals[id(item)] = one.canonical(item)
            except LeaseFenceError as refused:
                refused.message = f"items.{index}: {refused.message}"
                raise
        return batch_answer(
            body.items, lambda item: one.enqueue(caller, item, canonicals[id(item)], trace)
        )

    @register("claimBatch")
    def claim_batch(body: models_batch.ClaimBatchRequest):
        return answer(200, {"results": _claims(one, caller_of("claimBatch").tenant_id, body.items)})

    @register("heartbeatBatch")
    def heartbeat_batch(body: models_batch.HeartbeatBatchRequest):
        return answer(
            200, {"results": _renewals(one, caller_of("heartbeatBatch").tenant_id, body.items)}
        )

    @register("finishBatch")
    def finish_batch(body: models_batch.FinishBatchRequest):
        return answer(
            200, {"results": _finishes(one, caller_of("finishBatch").tenant_id, body.items)}
        )

    @register("workBatch")
    def work_batch(body: models_batch.WorkBatchRequest):
        tenant = caller_of("workBatch").tenant_id
        # Closing writes first, then renewals, then claims: a worker's next claim comes after
        # the close of the job it just ran, and a claim's lease runs from its own claim. In one
        # round: a claim naming a close (`after`) writes its marker with that close's payload
        # expiry; the expiries no claim wrote are written when it ends.
        with closing_round() as closes:
            done = _finishes(one, tenant, body.finish)
            renewed = _renewals(one, tenant, body.heartbeat)
            claimed = _claims(one, tenant, body.claim)
        for index, result in enumerate(done):
            if result["status"] == 200 and result["operation_id"] in closes.unwritten:
                late = Unavailable(UNWRITTEN)
                done[index] = item_result(result["operation_id"], partial(_raise, late))
        return answer(200, {"finish": done, "heartbeat": renewed, "claim": claimed})
