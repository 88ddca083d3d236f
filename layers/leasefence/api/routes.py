"""The routes: parse (pydantic), call one engine method, shape the answer.

The validated resolver (Powertools ``APIGatewayHttpResolver`` with pydantic validation) and every
route. Nothing here decides ownership, state or retries; the engine does. Every failure goes
through :mod:`leasefence.api.errors`. Clients (DynamoDB, S3) and the engine are created on first
use and reused across invocations; importing this module connects to nothing.

Importing it costs about as much as ``import boto3`` (pydantic, the models, the resolver), so
:func:`leasefence.api.app.resolver` imports it on the first request that reaches the resolver, not
at the function's import: a request refused before validation never pays for it, and with
SnapStart it is imported before the snapshot (:mod:`leasefence.snapstart`).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from leasefence import listing
from leasefence.api import errors, models
from leasefence.api.app import JSON, strict_json_loads
from leasefence.api.errors import Forbidden
from leasefence.api.security import ROUTES, Caller, caller_from_event, route
from leasefence.clock import to_rfc3339
from leasefence.errors import InvalidInput, PayloadConflict
from leasefence.keys import is_shadow_tenant
from leasefence.model import EnqueueResult
from leasefence.observability import record_claim_latency
from leasefence.payloads import canonicalize
from leasefence.settings import runtime
from leasefence.validation import MISSING, validate_id

app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=strict_json_loads)


@app.exception_handler(Exception)
def _any_error(exc: Exception) -> Response:
    return errors.to_response(exc)


@app.not_found
def _no_route(_exc: Exception) -> Response:
    return errors.to_response(errors.RouteNotFound("no such route"))


# ---------------------------------------------------------------------------------- helpers


def _error_responses(*statuses: int) -> dict[int, dict[str, Any]]:
    meaning = {
        400: "Malformed JSON body",
        401: "Missing, malformed, badly signed or expired token",
        403: "The token lacks the route's scope",
        404: "No such operation for this tenant",
        409: "Conflict (see error.code)",
        410: "The payload is gone: purged after its retention, or erased (payload_missing)",
        413: "Payload too large",
        422: "Invalid request (invalid_request)",
        503: "Temporarily unavailable; safe to retry",
    }
    return {
        status: {"description": meaning[status], "content": {JSON: {"model": models.ErrorOut}}}
        for status in statuses
    }


def _ok(status: int, description: str, model: Any) -> dict[int, dict[str, Any]]:
    return {status: {"description": description, "content": {JSON: {"model": model}}}}


_AUTH = (401, 403, 422, 503)
_FENCED = (400, 401, 403, 404, 409, 422, 503)


def _register(
    operation_id: str,
    summary: str,
    responses: dict[int, Any],
    description: str | None = None,
    tag: str | None = None,
):
    spec = route(operation_id)
    # One alternative per scope that opens the route (OpenAPI: any one of them suffices).
    security = [{"bearerAuth": [scope]} for scope in spec.scopes] or None
    return app.route(
        spec.rule,
        spec.method,
        summary=summary,
        description=description,
        operation_id=operation_id,
        responses=responses,
        security=security,
        tags=[
            tag
            if tag is not None
            else "operator"
            if spec.scope == "leasefence/operate"
            else "approvals"
            if spec.scope == "leasefence/approve"
            else "health"
            if spec.scope is None
            else "operations"
        ],
    )


def _caller(operation_id: str) -> Caller:
    """The caller, checked against the route's scope (again: the gate in :func:`leasefence.api.app.handle` did too)."""
    caller = app.context.get("caller")
    if caller is None:
        caller = caller_from_event(app.current_event.raw_event)
    spec = route(operation_id)
    return caller.require(spec.scope, spec.also)


def _readable(caller: Caller, operation_id: str, operation: Any) -> Any:
    """``operation``, if the caller may read it through this route: any of its tenant's with the
    route's own scope; with only another scope the route admits (``leasefence/approve``), one
    that went through the approval gate: an approver reads what it approves (the operation, its
    payload, its history) and nothing else, and claims nothing (that takes ``leasefence/work``)."""
    spec = route(operation_id)
    if spec.scope in caller.scopes or operation.approval_gated:
        return operation
    raise Forbidden(
        f"without the scope {spec.scope}, a token reads only operations that went through the "
        "approval gate"
    )


def _path_id(raw: str, name: str = "operation_id") -> str:
    """A path id arrives percent-encoded (UTF-8); decode it exactly once."""
    try:
        value = unquote(raw, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} in the path is not valid percent-encoded UTF-8") from None
    return validate_id(name, value)


def _json(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type=JSON, body=body)


def _public(operation: Any) -> dict[str, Any]:
    """The Operation resource: the contract's fields plus the extensions (payload_state, erased_at)."""
    return {
        **operation.to_public(),
        "payload_state": operation.payload_state,
        "erased_at": to_rfc3339(operation.erased_at),
        "job_type_version": operation.job_type_version,
        "approval_expires_at": to_rfc3339(operation.approval_expires_at),
        "approved_by": operation.approved_by,
        "enqueued_by": operation.enqueued_by,
        "reason": operation.reason,
        "intent": operation.intent,
        "checkpoint": operation.checkpoint,
    }


def _public_claim(grant: Any) -> dict[str, Any]:
    """The Claim resource: the contract's fields plus the extensions ``intent`` and the lease
    as granted (``claimed_at``, ``lease_ms``, ``lease_seconds``)."""
    return {
        **grant.to_public(),
        "intent": grant.intent,
        "claimed_at": to_rfc3339(grant.claimed_at),
        "lease_ms": grant.lease_ms,
        "lease_seconds": grant.lease_ms // 1000,
    }


def _operation(operation: Any) -> Response:
    return _json(200, {"operation": _public(operation)})


_OperationPath = Annotated[
    str,
    Path(
        description="The operation id, percent-encoded (1-256 characters once decoded, no control characters)",
        json_schema_extra={"minLength": 1, "maxLength": 256, "pattern": models.NO_CONTROL},
    ),
]


# ---------------------------------------------------------------------------------- routes


@_register("health", "Liveness of the API", _ok(200, "Up", models.HealthOut))
def health():
    return _json(200, {"status": "ok"})


@_register(
    "enqueueOperation",
    "Record an operation (idempotent by operation_id and payload hash)",
    {
        **_ok(201, "Created", models.EnqueueOut),
        **_ok(
            200,
            "Replay: the same id with the same payload hash; nothing changed",
            models.EnqueueOut,
        ),
        **_error_responses(400, 409, 413, *_AUTH),
    },
    description="A job type in the tenant's catalogue gives the class and the attempt budget "
    "(a target_class or max_attempts that differs from the entry: 422 invalid_request), may "
    "require inline payloads that match its JSON Schema (else 422, nothing stored), and its "
    "version is recorded as job_type_version. A tenant in strict mode refuses job types that "
    "are not in its catalogue: 422 unknown_job_type. An entry that requires approval refuses a "
    "payload by reference (422 inline_payload_required) and a token that names nobody (403 "
    "forbidden): the approver approves bytes leasefence stores, and the enqueuer is recorded.",
)
def enqueue(body: models.EnqueueRequest):
    caller = _caller("enqueueOperation")
    tenant = caller.tenant_id
    engine = runtime().engine_for(tenant)
    inline = "payload" in body.model_fields_set
    canonical = canonicalize(body.payload) if inline else None
    if canonical is not None:
        if body.payload_hash is not None and body.payload_hash != canonical.hash:
            raise InvalidInput("payload_hash does not match the payload's canonical JSON")
        payload_hash = canonical.hash
    else:
        # EnqueueRequest's validator requires both when there is no inline payload.
        assert body.payload_ref is not None and body.payload_hash is not None
        payload_hash = body.payload_hash
    # The catalogue first: a refusal (strict mode, a contradiction, a payload that fails the
    # entry's schema) comes before anything is stored; a replay of an accepted enqueue is still a
    # replay (the engine answers it without storing anything).
    target_class = body.target_class if "target_class" in body.model_fields_set else None
    admission = engine.admit(
        tenant,
        body.operation_id,
        body.job_type,
        payload_hash,
        target_class=target_class,
        max_attempts=body.max_attempts,
        payload=body.payload,
        payload_given=inline,
        actor=caller.subject,
    )
    if isinstance(admission, EnqueueResult):
        return _json(200, {"operation": _public(admission.operation), "created": False})
    payloads = runtime().payloads
    stored = None
    payload_ref: str | None = body.payload_ref
    if canonical is not None:
        # The object first, then the record that points at it: a 2xx is never given for an
        # operation whose payload is not durable. A replay addresses the same key and writes nothing.
        stored = payloads.put(tenant, body.operation_id, canonical)
        payload_ref = stored.ref
    try:
        result = engine.enqueue(
            tenant,
            body.operation_id,
            body.job_type,
            payload_hash=payload_hash,
            payload_ref=payload_ref,
            max_attempts=body.max_attempts,
            target_class=target_class,
            payload_inline=stored is not None,
            actor=caller.subject,
            admission=admission,
        )
    except PayloadConflict:
        if stored is not None:
            payloads.delete_quietly(stored.key)  # another hash owns this id: nothing references it
        raise
    if (
        stored is not None
        and not result.created
        and (
            result.operation.payload_ref
            != stored.ref  # a replay of an operation whose payload lives elsewhere
            or (
                stored.created and result.operation.payload_state != "stored"
            )  # purged or erased: stay so
        )
    ):
        payloads.delete_quietly(stored.key)
    return _json(
        201 if result.created else 200,
        {"operation": _public(result.operation), "created": result.created},
    )


_JobTypeQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=256,
        pattern=models.NO_CONTROL,
        description="Only operations of this job type",
    ),
]
_ClassQuery = Annotated[
    models.TargetClassName | None, Query(description="Only operations of this target class")
]
_AfterQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only operations updated at or after this time (RFC 3339 with a time zone)",
        json_schema_extra={"format": "date-time"},
    ),
]
_BeforeQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only operations updated before this time (RFC 3339 with a time zone)",
        json_schema_extra={"format": "date-time"},
    ),
]
_TextQuery = Annotated[
    str | None,
    Query(
        max_length=listing.MAX_TEXT_QUERY,
        pattern=models.NO_CONTROL,
        description="Only operations whose id, job type or reason contains this text "
        "(case-sensitive)",
    ),
]


def _time_ms(value: str | None, name: str) -> int | None:
    """An RFC 3339 time with a zone, as ms since the epoch (None for none)."""
    if value is None or value == "":
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name} must be an RFC 3339 time, e.g. 2026-12-01T10:00:00Z") from None
    if parsed.tzinfo is None:
        raise InvalidInput(f"{name} needs a time zone (e.g. Z)")
    return int(parsed.timestamp() * 1000)


@_register(
    "listOperations",
    "List this tenant's operations (operators; approvers: those awaiting approval)",
    {**_ok(200, "A page of operations", models.OperationPage), **_error_responses(*_AUTH)},
    description="In id order. The filters (state, job_type, target_class, updated_after, "
    "updated_before, q) are applied to the items a page reads, so a page of a narrow filter may "
    "hold fewer than limit operations (even none) and still carry a next_cursor. With only the "
    "`leasefence/approve` scope (an approver's inbox): state=awaiting_approval only (anything "
    "else: 403 forbidden).",
)
def list_operations(
    state: Annotated[
        models.StateName | None, Query(description="Only operations in this state")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size (1-500)")] = 50,
    cursor: Annotated[
        str | None, Query(max_length=2048, description="next_cursor of the previous page")
    ] = None,
    job_type: _JobTypeQuery = None,
    target_class: _ClassQuery = None,
    updated_after: _AfterQuery = None,
    updated_before: _BeforeQuery = None,
    q: _TextQuery = None,
):
    caller = _caller("listOperations")
    tenant = caller.tenant_id
    if route("listOperations").scope not in caller.scopes and state != "awaiting_approval":
        # An approver's inbox: what awaits approval, nothing else.
        raise Forbidden(
            f"without the scope {route('listOperations').scope}, a token lists only operations "
            "awaiting approval (state=awaiting_approval)"
        )
    filters = listing.Filters.of(
        state=state,
        job_type=job_type,
        target_class=target_class,
        updated_after=_time_ms(updated_after, "updated_after"),
        updated_before=_time_ms(updated_before, "updated_before"),
        text=q or None,
    )
    page = (
        runtime()
        .engine_for(tenant)
        .list(tenant, limit=limit, cursor=cursor or None, filters=filters)
    )
    return _json(
        200,
        {"operations": [_public(op) for op in page.operations], "next_cursor": page.next_cursor},
    )


@_register(
    "getOperation",
    "Read one operation",
    {**_ok(200, "The operation", models.OperationOut), **_error_responses(404, *_AUTH)},
    description="With only the `leasefence/approve` scope (an approver): operations that went "
    "through the approval gate only (another: 403 forbidden), so an approver reads what it "
    "approves without the scope that claims it.",
)
def get_operation(id: _OperationPath):
    caller = _caller("getOperation")
    tenant = caller.tenant_id
    operation = runtime().engine_for(tenant).get(tenant, _path_id(id))
    return _json(200, _public(_readable(caller, "getOperation", operation)))


@_register(
    "claimOperation",
    "Claim the next due operation (or a named one)",
    {
        **_ok(200, "Claimed: act under this fence", models.ClaimEnvelope),
        204: {"description": "Nothing is claimable now (no body)", "content": {}},
        **_error_responses(400, 404, *_AUTH),
    },
)
def claim(body: models.ClaimRequest):
    tenant = _caller("claimOperation").tenant_id
    if body.operation_id is None and is_shadow_tenant(tenant):
        # Shadow operations record what an existing consumer did; no worker may be handed one.
        raise Forbidden(
            "shadow operations are never dispatched to workers: a shadow tenant claims only "
            "the operation it names (operation_id), as shadow mode does"
        )
    engine = runtime().engine_for(tenant)
    # No lease asked for: the job type's default (catalogue), else the contract's 60 s.
    lease_ms = body.lease_seconds * 1000 if "lease_seconds" in body.model_fields_set else None
    started = time.perf_counter()
    if body.operation_id is not None:
        grant = engine.claim(
            tenant,
            body.operation_id,
            body.worker_id,
            lease_ms=lease_ms,
            job_types=body.job_types,
            claim_token=body.claim_token,
        )
    else:
        grant = engine.claim_next(
            tenant,
            body.worker_id,
            lease_ms=lease_ms,
            job_types=body.job_types,
            claim_token=body.claim_token,
        )
    record_claim_latency((time.perf_counter() - started) * 1000)
    if grant is None:
        return Response(status_code=204, content_type=None, body="")
    return _json(200, {"claim": _public_claim(grant)})


@_register(
    "heartbeat",
    "Extend the lease held by this fence (and keep a checkpoint)",
    {**_ok(200, "The new lease expiry", models.LeaseOut), **_error_responses(*_FENCED)},
)
def heartbeat(id: _OperationPath, body: models.HeartbeatRequest):
    tenant = _caller("heartbeat").tenant_id
    checkpoint = body.checkpoint if "checkpoint" in body.model_fields_set else MISSING
    expires = (
        runtime()
        .engine_for(tenant)
        .heartbeat(
            tenant,
            _path_id(id),
            body.fence,
            body.worker_id,
            lease_ms=None if body.lease_seconds is None else body.lease_seconds * 1000,
            checkpoint=checkpoint,
            intent=body.intent,
        )
    )
    return _json(200, {"lease_expires_at": to_rfc3339(expires)})


@_register(
    "completeOperation",
    "Record success (the same fence repeating the same completion gets 200 again)",
    {**_ok(200, "Succeeded", models.OperationEnvelope), **_error_responses(*_FENCED)},
)
def complete(id: _OperationPath, body: models.CompleteRequest):
    tenant = _caller("completeOperation").tenant_id
    return _operation(
        runtime().engine_for(tenant).complete(tenant, _path_id(id), body.fence, body.outcome_code)
    )


@_register(
    "failOperation",
    "Record a failure: retryable with attempts left requeues, otherwise failed_terminal",
    {
        **_ok(200, "Requeued or failed_terminal", models.OperationEnvelope),
        **_error_responses(*_FENCED),
    },
)
def fail(id: _OperationPath, body: models.FailRequest):
    tenant = _caller("failOperation").tenant_id
    retry_after_ms = None if body.retry_after_seconds is None else body.retry_after_seconds * 1000
    return _operation(
        runtime()
        .engine_for(tenant)
        .fail(
            tenant,
            _path_id(id),
            body.fence,
            body.retryable,
            body.reason,
            retry_after_ms=retry_after_ms,
        )
    )


@_register(
    "parkUnknown",
    "The outcome is ambiguous: park as unknown for reconciliation",
    {**_ok(200, "Parked as unknown", models.OperationEnvelope), **_error_responses(*_FENCED)},
)
def unknown(id: _OperationPath, body: models.ParkRequest):
    tenant = _caller("parkUnknown").tenant_id
    return _operation(
        runtime().engine_for(tenant).park_unknown(tenant, _path_id(id), body.fence, body.reason)
    )


@_register(
    "quarantineOperation",
    "The input cannot be processed: park as quarantined",
    {**_ok(200, "Quarantined", models.OperationEnvelope), **_error_responses(*_FENCED)},
)
def quarantine(id: _OperationPath, body: models.ParkRequest):
    tenant = _caller("quarantineOperation").tenant_id
    return _operation(
        runtime().engine_for(tenant).quarantine(tenant, _path_id(id), body.fence, body.reason)
    )


@_register(
    "getPayload",
    "The inline payload as enqueued (its RFC 8785 canonical JSON)",
    {
        200: {"description": "The payload", "content": {JSON: {"schema": {}}}},
        **_error_responses(404, 410, *_AUTH),
    },
    description="With only the `leasefence/approve` scope (an approver): operations that went "
    "through the approval gate only (another: 403 forbidden), so an approver reads what it "
    "approves without the scope that claims it.",
)
def payload(id: _OperationPath):
    caller = _caller("getPayload")
    tenant = caller.tenant_id
    op_id = _path_id(id)
    engine = runtime().engine_for(tenant)
    body = engine.payload(_readable(caller, "getPayload", engine.get(tenant, op_id)))
    return Response(status_code=200, content_type=JSON, body=body.decode("utf-8"))


@_register(
    "resolveOperation",
    "Operator decision for an unknown or quarantined operation",
    {**_ok(200, "Resolved", models.OperationEnvelope), **_error_responses(400, 404, 409, *_AUTH)},
    description="Sent again after it succeeded (its answer was lost), a resolve is a replay: 200 "
    "with the operation as it is now, nothing changed. With request_token the retry is "
    "recognized by it (and never applied twice); without one, while the operation's last "
    "transition is this decision (same resolution, identity and note). Otherwise, from any "
    "state but unknown or quarantined: 409 invalid_transition.",
)
def resolve(id: _OperationPath, body: models.ResolveRequest):
    caller = _caller("resolveOperation")
    tenant = caller.tenant_id
    return _operation(
        runtime()
        .engine_for(tenant)
        .resolve(
            tenant,
            _path_id(id),
            body.resolution,
            note=body.note,
            actor=caller.subject,
            request_token=body.request_token,
        )
    )


@_register(
    "eraseOperation",
    "Erase an operation's payload and free text, keeping its identity (operators)",
    {
        **_ok(
            200,
            "Erased (erasing again is harmless): payload_state is erased",
            models.OperationEnvelope,
        ),
        **_error_responses(400, 404, 409, *_AUTH),
    },
    description="Deletes the stored payload and the reasons, notes, checkpoint and the intent's description; "
    "keeps the id, the payload hash, the fences, the state, the outcome code and a class-D intent's fence "
    '(the intent reads {"fence": f, "what": "erased"}: a requeued operation still reconciles it and is '
    "never called again), so a replay of the enqueue is still a replay "
    "(200, created false, the payload is not stored again) and a different payload still a conflict. "
    "409 invalid_transition while the operation is claimed: erase it once it left claimed. A queued or "
    "parked operation keeps its state; a worker that claims it finds no payload and quarantines it.",
)
def erase(id: _OperationPath, body: models.EraseRequest | None = None):  # noqa: ARG001 - validated and documented, no fields
    caller = _caller("eraseOperation")
    tenant = caller.tenant_id
    return _operation(
        runtime().engine_for(tenant).erase(tenant, _path_id(id), actor=caller.subject)
    )


def _approver(operation_id: str) -> Caller:
    caller = _caller(operation_id)
    if caller.subject is None:
        raise Forbidden("an approver's token must name who it is (sub)")
    return caller


@_register(
    "approveOperation",
    "Approve an operation awaiting approval: it becomes queued, claimable at once",
    {
        **_ok(
            200, "Approved (approving again is a replay: 200, unchanged)", models.OperationEnvelope
        ),
        **_error_responses(400, 404, 409, *_AUTH),
    },
    description="`payload_hash` is the hash of the payload the approver saw: another hash than the "
    "operation's is 409 payload_mismatch and changes nothing. The approver (the token's sub) is "
    "recorded as approved_by and cannot be the identity that enqueued the operation (403 "
    "forbidden). After a reject, an expiry or a cancel: 409 invalid_transition. One conditional "
    "write decides all of it.",
)
def approve(id: _OperationPath, body: models.ApproveRequest):
    caller = _approver("approveOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    return _operation(
        runtime()
        .engine_for(tenant)
        .approve(tenant, _path_id(id), body.payload_hash, actor=caller.subject)
    )


@_register(
    "rejectOperation",
    "Reject an operation awaiting approval: it ends failed_terminal, outcome rejected",
    {
        **_ok(200, "Rejected (rejecting again is a replay)", models.OperationEnvelope),
        **_error_responses(400, 404, 409, *_AUTH),
    },
)
def reject(id: _OperationPath, body: models.RejectRequest | None = None):
    caller = _approver("rejectOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    note = body.note if body is not None else ""
    return _operation(
        runtime().engine_for(tenant).reject(tenant, _path_id(id), actor=caller.subject, note=note)
    )


@_register(
    "cancelOperation",
    "Withdraw a queued operation no worker ever claimed, or one awaiting approval: it ends cancelled",
    {
        **_ok(200, "Cancelled (cancelling again is a replay)", models.OperationEnvelope),
        **_error_responses(400, 404, 409, *_AUTH),
    },
    description="Only before any attempt: an operation queued again after one (a retryable failure, "
    "a takeover's retry, an operator's requeue from unknown) may have had its side effect and is 409 "
    "already_attempted (its next claim reconciles it); a claimed or ended operation is 409 "
    "invalid_transition. Decided inside the cancel's one conditional write. cancelled is final (kept "
    "and purged like the other final states); a replay of the enqueue afterwards is still a replay "
    "(200, created false).",
)
def cancel(id: _OperationPath, body: models.CancelRequest | None = None):  # noqa: ARG001 - validated and documented, no fields
    caller = _caller("cancelOperation")
    tenant = caller.tenant_id
    return _operation(
        runtime().engine_for(tenant).cancel(tenant, _path_id(id), actor=caller.subject)
    )


def _history_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "sequence": entry["seq"],
        "time": to_rfc3339(entry["at"]),
        "transition": entry["transition"],
        "previous_state": entry.get("previous_state"),
        "state": entry["state"],
        "fence": entry["fence"],
        "attempt": entry["attempt"],
        "actor": entry.get("actor"),
        "previous_actor": entry.get("previous_actor"),
        "outcome_code": entry.get("outcome_code"),
        "reason": entry.get("reason"),
        "available_at": to_rfc3339(entry.get("available_at")),
    }


@_register(
    "getHistory",
    "What happened to an operation, oldest first (operators; approvers: gated ones)",
    {
        **_ok(200, "A page of the operation's history", models.HistoryOut),
        **_error_responses(404, *_AUTH),
    },
    description="Each transition with its time, the state before and after, the fence, who made it "
    "(worker id, or the operator's or producer's identity from the token) and why (outcome code, "
    "reason or note). Recorded from the table's stream, so it trails the operation by about a "
    "second; kept as long as the operation's identity; an erasure replaces it with the erasure's "
    "own entry. 404 not_found for an id that is unknown or another tenant's (answered exactly "
    "alike). With only the `leasefence/approve` scope: operations that went through the approval "
    "gate only (another: 403 forbidden).",
)
def history(
    id: _OperationPath,
    limit: Annotated[int, Query(ge=1, le=50, description="Entries per page (1-50)")] = 50,
    cursor: Annotated[
        str | None, Query(max_length=256, description="next_cursor of the previous page")
    ] = None,
):
    caller = _caller("getHistory")
    tenant = caller.tenant_id
    engine = runtime().engine_for(tenant)
    op_id = _path_id(id)
    if route("getHistory").scope not in caller.scopes:  # an approver's: gated operations only
        _readable(caller, "getHistory", engine.get(tenant, op_id))
    page = engine.history(tenant, op_id, limit=limit, cursor=cursor or None)
    return _json(
        200,
        {
            "entries": [_history_entry(e) for e in page.entries],
            "next_cursor": page.next_cursor,
            "dropped": page.dropped,
        },
    )


# ---------------------------------------------------------------------------------- job types

_JobTypePath = Annotated[
    str,
    Path(
        description="The job type, percent-encoded (1-256 characters once decoded, no control characters)",
        json_schema_extra={"minLength": 1, "maxLength": 256, "pattern": models.NO_CONTROL},
    ),
]


@_register(
    "listJobTypes",
    "This tenant's job-type catalogue (operators)",
    {**_ok(200, "Every entry, by name", models.JobTypeList), **_error_responses(*_AUTH)},
)
def list_job_types():
    tenant = _caller("listJobTypes").tenant_id
    entries = runtime().engine_for(tenant).catalogue.list(tenant)
    return _json(200, {"job_types": [e.to_public() for e in entries]})


@_register(
    "getJobType",
    "One catalogue entry (operators)",
    {**_ok(200, "The entry", models.JobTypeOut), **_error_responses(404, *_AUTH)},
)
def get_job_type(job_type: _JobTypePath):
    tenant = _caller("getJobType").tenant_id
    entry = runtime().engine_for(tenant).catalogue.get(tenant, _path_id(job_type, "job_type"))
    return _json(200, entry.to_public())


@_register(
    "putJobType",
    "Declare a job type: its class, budget, leases, owner, runbook, approval, payload schema",
    {
        **_ok(
            200, "The entry (changed false: it already said exactly this)", models.JobTypeEnvelope
        ),
        **_error_responses(400, 409, *_AUTH),
    },
    description="One conditional write: the version rises by one when anything changes; the same "
    "declaration again is no write (changed: false). With expected_version, another writer's "
    "change in between is 409 version_conflict, and changed is relative to that version (a "
    "retry whose first write went through: changed true). With request_token, a retry of a "
    "declaration that went through answers changed: true. Operations enqueued from then on (within a few "
    "seconds on every API instance) run under the new version; earlier ones keep theirs.",
)
def put_job_type(job_type: _JobTypePath, body: models.JobTypeRequest):
    caller = _caller("putJobType")
    spec = body.model_dump(exclude_none=True, exclude={"expected_version", "request_token"})
    entry, changed = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.put(
            caller.tenant_id,
            _path_id(job_type, "job_type"),
            spec,
            expected_version=body.expected_version,
            actor=caller.subject,
            request_token=body.request_token,
        )
    )
    return _json(200, {"job_type": entry.to_public(), "changed": changed})


@_register(
    "deleteJobType",
    "Remove a job type from the catalogue (operators)",
    {
        **_ok(200, "Removed: the entry as it was, at its new version", models.JobTypeOut),
        **_error_responses(404, 409, *_AUTH),
    },
    description="Kept as a tombstone: the version keeps rising, so a later declaration never "
    "reuses a version an operation recorded. Operations already enqueued keep what they were "
    "enqueued under. 404 when the entry does not exist (or was removed already).",
)
def delete_job_type(
    job_type: _JobTypePath,
    expected_version: Annotated[
        int | None, Query(ge=1, description="Remove only if the entry is at this version")
    ] = None,
):
    caller = _caller("deleteJobType")
    entry = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.delete(
            caller.tenant_id,
            _path_id(job_type, "job_type"),
            expected_version=expected_version,
            actor=caller.subject,
        )
    )
    return _json(200, entry.to_public())


def _settings(strict: bool) -> dict[str, Any]:
    """The tenant's settings, with the deployment's retention (read-only: the deployment's)."""
    deployment = runtime().settings
    return {
        "strict_job_types": strict,
        "identity_retention_days": deployment.identity_retention_days,
        "payload_retention_days": deployment.payload_retention_days,
    }


@_register(
    "getSettings",
    "This tenant's settings (operators)",
    {**_ok(200, "The settings", models.SettingsOut), **_error_responses(*_AUTH)},
)
def get_settings():
    tenant = _caller("getSettings").tenant_id
    return _json(200, _settings(runtime().engine_for(tenant).catalogue.strict(tenant)))


@_register(
    "putSettings",
    "Change this tenant's settings (operators)",
    {**_ok(200, "The settings", models.SettingsOut), **_error_responses(400, *_AUTH)},
    description="strict_job_types: true refuses enqueues of job types that are not in the "
    "catalogue (422 unknown_job_type), within a few seconds on every API instance.",
)
def put_settings(body: models.SettingsRequest):
    caller = _caller("putSettings")
    strict = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.set_strict(caller.tenant_id, body.strict_job_types, actor=caller.subject)
    )
    return _json(200, _settings(strict))


@_register(
    "getControls",
    "Go/no-go: the nine controls per job type, with the evidence leasefence holds",
    {**_ok(200, "The report", models.ControlsOut), **_error_responses(*_AUTH)},
    description="Every job type of the tenant (catalogued, or ever enqueued). A job type is go "
    "only when all nine controls hold; controls 5, 7 and 9 need its catalogue entry (class; "
    "owner, runbook and the deployment's alert route; owner of the retention plan).",
)
def get_controls():
    from leasefence.controls import assess

    tenant = _caller("getControls").tenant_id
    report = assess(runtime().engine_for(tenant), tenant, runtime().settings.alarm_topic)
    return _json(
        200,
        {"go": all(r.go for r in report), "job_types": [r.to_public() for r in report]},
    )


# ---------------------------------------------------------------------------------- console


@_register(
    "countOperations",
    "How many of this tenant's operations are in each state (operators)",
    {**_ok(200, "Counts per state", models.StateCountsOut), **_error_responses(*_AUTH)},
    description="Reads at most `limit` operations (default 1000, at most 5000) in id order, only "
    "their state: complete is true when that was all of them (else the counts are a lower "
    "bound). The same filters as GET /v1/operations but state.",
)
def count_operations(
    job_type: _JobTypeQuery = None,
    target_class: _ClassQuery = None,
    updated_after: _AfterQuery = None,
    updated_before: _BeforeQuery = None,
    q: _TextQuery = None,
    limit: Annotated[
        int,
        Query(ge=1, le=listing.MAX_COUNT_ITEMS, description="Operations read at most (1-5000)"),
    ] = listing.DEFAULT_COUNT_ITEMS,
):
    tenant = _caller("countOperations").tenant_id
    filters = listing.Filters.of(
        job_type=job_type,
        target_class=target_class,
        updated_after=_time_ms(updated_after, "updated_after"),
        updated_before=_time_ms(updated_before, "updated_before"),
        text=q or None,
    )
    counts = runtime().engine_for(tenant).state_counts(tenant, filters, limit=limit)
    return _json(200, counts.to_public())


@_register(
    "listTargetClasses",
    "What each target class guarantees, and what each resolution of a parked operation means",
    _ok(200, "The four target classes", models.TargetClassesOut),
    description="A static table (no token needed): the operator console shows it beside every "
    "unknown or quarantined operation, before a resolution is chosen.",
    tag="console",
)
def list_target_classes():
    from leasefence.advice import target_classes

    return _json(200, {"target_classes": target_classes()})


def _console(name: str) -> Response:
    from leasefence import console

    if not console.enabled():
        return errors.to_response(errors.RouteNotFound("no such route"))
    status, content_type, body = console.answer(name)
    return Response(
        status_code=status,
        content_type=content_type,
        body=body.decode("utf-8"),
        headers=console.security_headers(),
    )


_HTML = {"text/html": {"schema": {"type": "string"}}}


@_register(
    "consoleRedirect",
    "The operator console is at /console",
    {
        302: {"description": "Redirect to /console (no body)", "content": {}},
        **_error_responses(404),
    },
    tag="console",
)
def console_redirect():
    from leasefence import console

    if not console.enabled():
        return errors.to_response(errors.RouteNotFound("no such route"))
    return Response(
        status_code=302,
        content_type=None,
        body="",
        headers={"Location": console.PATH, "Cache-Control": "no-cache"},
    )


@_register(
    "consolePage",
    "The operator console (a page; its data comes from this API with your token)",
    {200: {"description": "The page", "content": _HTML}, **_error_responses(404)},
    tag="console",
)
def console_page():
    return _console("index.html")


@_register(
    "consoleAsset",
    "The operator console's files (script, style sheet, sign-in configuration)",
    {
        200: {
            "description": "The file: the page, its script, its style sheet, or its sign-in "
            "settings (config.json)",
            "content": {
                "text/html": {"schema": {"type": "string"}},
                "text/javascript": {"schema": {"type": "string"}},
                "text/css": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        },
        **_error_responses(404),
    },
    tag="console",
)
def console_asset(
    asset: Annotated[
        str,
        Path(
            description="console.js, console.css, index.html or config.json",
            json_schema_extra={"minLength": 1, "maxLength": 64, "pattern": models.NO_CONTROL},
        ),
    ],
):
    return _console(asset)


# Every route is declared in ROUTES (Powertools keeps its routes in private lists).
assert {r.operation_id for r in ROUTES} == {
    r.operation_id for r in app._static_routes + app._dynamic_routes
}
