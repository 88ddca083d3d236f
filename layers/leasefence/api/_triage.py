"""The operator's bulk routes (issue 37), registered by :mod:`leasefence.api.routes`:

* ``GET /v1/approvals``: the approvers' inbox, each operation awaiting approval with the summary
  its job type's catalogue entry declares (``approval_summary``: payload fields), read only for a
  token that may read the payload (the scopes of ``GET /v1/operations/{id}/payload``); answered
  ``no-store`` like every answer that carries an operation;
* ``POST /v1/batch/triage``: one decision (resolve, requeue or cancel) with one note for a list
  of operations named by id, each item its own conditional write pinned to the state and fence
  the operator saw, its own answer (the batch routes' per-item shape) and its own request token
  (derived from the request's, so a resend after a lost answer is a replay item by item). A
  bulk requeue never sweeps in an operation whose class makes requeue dangerous for its facts
  (:func:`leasefence.advice.risk`) unless the request names it in ``accept_risks``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query

from leasefence import advice
from leasefence.api import models_triage
from leasefence.api._batch import batch_answer
from leasefence.api._shared import JobTypeQuery, answer, filters_of, operation_answer, public
from leasefence.api.errors import Forbidden
from leasefence.api.security import PRODUCE, Caller, route
from leasefence.cursor import OPERATION_CURSOR_PATTERN
from leasefence.errors import InvalidInput, NotFound, PayloadMissing
from leasefence.model import Operation, State
from leasefence.settings import runtime

_PARKED = (State.UNKNOWN, State.QUARANTINED)


def _declared(engine: Any, tenant: str, job_type: str, seen: dict[str, Any]) -> Any:
    """The job type's approval_summary fields (None: none declared, or not catalogued)."""
    if job_type not in seen:
        try:
            seen[job_type] = engine.catalogue.get(tenant, job_type).spec.approval_summary
        except NotFound:
            seen[job_type] = None
    return seen[job_type]


def approval_row(engine: Any, op: Operation, fields: Any, may_read: bool) -> dict[str, Any]:
    """One row of the inbox: the operation, and its summary or why there is none."""
    summary: dict[str, Any] | None = None
    if not fields:
        state = "not_declared"
    elif not may_read:
        state = "needs_scope"
    elif op.payload_state != "stored":
        state = op.payload_state  # erased, purged or external
    else:
        try:
            value = json.loads(engine.payload(op))
            state = "shown"
            summary = {k: value[k] for k in fields if isinstance(value, dict) and k in value}
        except PayloadMissing:
            state = "missing"
    return {"operation": public(op), "summary": summary, "summary_state": state}


def item_token(request_token: str, operation_id: str) -> str:
    """Each item's own request token, derived from the bulk request's: the same on a resend."""
    digest = hashlib.sha256(f"{request_token}\0{operation_id}".encode()).hexdigest()
    return f"triage:{digest[:40]}"


def register_routes(register: Callable[[str], Any], caller_of: Callable[[str], Caller]) -> None:
    """Register the inbox and the bulk triage with ``register`` (the resolver's)."""

    @register("listApprovals")
    def list_approvals(
        limit: Annotated[int, Query(ge=1, le=200, description="Page size (1-200)")] = 50,
        cursor: Annotated[
            str | None,
            Query(pattern=OPERATION_CURSOR_PATTERN, description="next_cursor of the last page"),
        ] = None,
        job_type: JobTypeQuery = None,
    ):
        caller = caller_of("listApprovals")
        tenant = caller.tenant_id
        engine = runtime().engine_for(tenant)
        filters = filters_of("awaiting_approval", job_type, None, None, None, None)
        page = engine.list(tenant, limit=limit, cursor=cursor or None, filters=filters)
        may_read = not caller.scopes.isdisjoint(route("getPayload").scopes)
        seen: dict[str, Any] = {}
        ops = sorted(page.operations, key=lambda o: (o.approval_expires_at or 0, o.operation_id))
        rows = [
            approval_row(engine, op, _declared(engine, tenant, op.job_type, seen), may_read)
            for op in ops
        ]
        return answer(200, {"approvals": rows, "next_cursor": page.next_cursor})

    @register("triageBatch")
    def triage_batch(body: models_triage.TriageBatchRequest):
        caller = caller_of("triageBatch")
        tenant = caller.tenant_id
        if body.action == "cancel" and PRODUCE not in caller.scopes:
            raise Forbidden(f"a bulk cancel needs the scope {PRODUCE} too")
        if (body.action == "resolve") != (body.resolution is not None):
            raise InvalidInput("resolution is required with action resolve, and only with it")
        engine = runtime().engine_for(tenant)
        accepted = set(body.accept_risks)
        resolution = "requeue" if body.action == "requeue" else str(body.resolution)

        def one(item: models_triage.TriageItem):
            op_id = item.operation_id
            if body.action == "cancel":
                return operation_answer(
                    engine.cancel(
                        tenant, op_id, actor=caller.subject, expected_state=item.expected_state
                    )
                )
            if resolution == "requeue" and op_id not in accepted:
                seen = engine.get(tenant, op_id)
                danger = advice.risk(seen.target_class, "requeue", seen.intent)
                if danger and seen.state in _PARKED and seen.fence == item.expected_fence:
                    raise InvalidInput(
                        f"not requeued: {danger} Name it in accept_risks to requeue it anyway."
                    )
            return operation_answer(
                engine.resolve(
                    tenant,
                    op_id,
                    resolution,
                    note=body.note,
                    actor=caller.subject,
                    request_token=item_token(body.request_token, op_id),
                    expected_state=item.expected_state,
                    expected_fence=item.expected_fence,
                )
            )

        return batch_answer(body.items, one)
