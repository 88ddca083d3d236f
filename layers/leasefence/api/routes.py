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
from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from leasefence import resources
from leasefence.api import errors, models
from leasefence.api._docs import ROUTE_DOCS
from leasefence.api.app import JSON, strict_json_loads
from leasefence.api.errors import Forbidden
from leasefence.api.security import ROUTES, Caller, caller_from_event, route
from leasefence.clock import to_rfc3339
from leasefence.cursor import HISTORY_CURSOR_PATTERN, OPERATION_CURSOR_PATTERN
from leasefence.engine import MISSING, validate_id
from leasefence.errors import InvalidInput, PayloadConflict
from leasefence.keys import is_shadow_tenant
from leasefence.model import EnqueueResult
from leasefence.observability import record_claim_latency
from leasefence.payloads import canonicalize
from leasefence.settings import runtime


def _json_body(text: str) -> Any:
    """The request body (:func:`strict_json_loads`), refused here when it is an array: every body
    is an object (or, where a route takes none, null), and the resolver would otherwise validate
    an array's first item in place of the body."""
    body = strict_json_loads(text)
    if isinstance(body, list):
        raise RequestValidationError(
            [
                {
                    "type": "model_type",
                    "loc": ("body",),
                    "msg": "the request body must be a JSON object, not an array",
                    "input": None,
                }
            ]
        )
    return body


app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=_json_body)


@app.exception_handler(Exception)
def _any_error(exc: Exception) -> Response:
    return errors.to_response(exc)


@app.not_found
def _no_route(_exc: Exception) -> Response:
    return errors.to_response(errors.RouteNotFound("no such route"))


# ---------------------------------------------------------------------------------- helpers


def _register(operation_id: str):
    """Register the route ``operation_id`` (:data:`~leasefence.api.security.ROUTES`) with what
    the document says of it (:data:`~leasefence.api._docs.ROUTE_DOCS`)."""
    doc = ROUTE_DOCS[operation_id]
    spec = route(operation_id)
    # One alternative per scope that opens the route (OpenAPI: any one of them suffices).
    security = [{"bearerAuth": [scope]} for scope in spec.scopes] or None
    return app.route(
        spec.rule,
        spec.method,
        summary=doc.summary,
        description=doc.description,
        operation_id=operation_id,
        responses=doc.responses,
        security=security,
        tags=[
            "operator"
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
    """The Operation resource (:class:`leasefence.resources.Operation`) of an engine record."""
    return resources.dump(resources.Operation, operation)


def _public_claim(grant: Any) -> dict[str, Any]:
    """The Claim resource (:class:`leasefence.resources.Claim`) of the engine's grant."""
    return resources.dump(resources.Claim, grant, lease_seconds=grant.lease_ms // 1000)


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


@_register("health")
def health():
    return _json(200, {"status": "ok"})


@_register("enqueueOperation")
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


@_register("listOperations")
def list_operations(
    state: Annotated[
        resources.StateName | None, Query(description="Only operations in this state")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size (1-500)")] = 50,
    cursor: Annotated[
        str | None,
        Query(
            pattern=OPERATION_CURSOR_PATTERN,
            description="next_cursor of the previous page (any string of this pattern names a "
            "position: the page starts after it)",
        ),
    ] = None,
):
    tenant = _caller("listOperations").tenant_id
    page = (
        runtime().engine_for(tenant).list(tenant, state=state, limit=limit, cursor=cursor or None)
    )
    return _json(
        200,
        {"operations": [_public(op) for op in page.operations], "next_cursor": page.next_cursor},
    )


@_register("getOperation")
def get_operation(id: _OperationPath):
    caller = _caller("getOperation")
    tenant = caller.tenant_id
    operation = runtime().engine_for(tenant).get(tenant, _path_id(id))
    return _json(200, _public(_readable(caller, "getOperation", operation)))


@_register("claimOperation")
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


@_register("heartbeat")
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


@_register("completeOperation")
def complete(id: _OperationPath, body: models.CompleteRequest):
    tenant = _caller("completeOperation").tenant_id
    return _operation(
        runtime().engine_for(tenant).complete(tenant, _path_id(id), body.fence, body.outcome_code)
    )


@_register("failOperation")
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


@_register("parkUnknown")
def unknown(id: _OperationPath, body: models.ParkRequest):
    tenant = _caller("parkUnknown").tenant_id
    return _operation(
        runtime().engine_for(tenant).park_unknown(tenant, _path_id(id), body.fence, body.reason)
    )


@_register("quarantineOperation")
def quarantine(id: _OperationPath, body: models.ParkRequest):
    tenant = _caller("quarantineOperation").tenant_id
    return _operation(
        runtime().engine_for(tenant).quarantine(tenant, _path_id(id), body.fence, body.reason)
    )


@_register("getPayload")
def payload(id: _OperationPath):
    caller = _caller("getPayload")
    tenant = caller.tenant_id
    op_id = _path_id(id)
    engine = runtime().engine_for(tenant)
    body = engine.payload(_readable(caller, "getPayload", engine.get(tenant, op_id)))
    return Response(status_code=200, content_type=JSON, body=body.decode("utf-8"))


@_register("resolveOperation")
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


@_register("eraseOperation")
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


@_register("approveOperation")
def approve(id: _OperationPath, body: models.ApproveRequest):
    caller = _approver("approveOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    return _operation(
        runtime()
        .engine_for(tenant)
        .approve(tenant, _path_id(id), body.payload_hash, actor=caller.subject)
    )


@_register("rejectOperation")
def reject(id: _OperationPath, body: models.RejectRequest | None = None):
    caller = _approver("rejectOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    note = body.note if body is not None else ""
    return _operation(
        runtime().engine_for(tenant).reject(tenant, _path_id(id), actor=caller.subject, note=note)
    )


@_register("cancelOperation")
def cancel(id: _OperationPath, body: models.CancelRequest | None = None):  # noqa: ARG001 - validated and documented, no fields
    caller = _caller("cancelOperation")
    tenant = caller.tenant_id
    return _operation(
        runtime().engine_for(tenant).cancel(tenant, _path_id(id), actor=caller.subject)
    )


def _history_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A HistoryEntry resource (:class:`leasefence.resources.HistoryEntry`) of a stored entry."""
    return resources.dump(resources.HistoryEntry, entry, sequence=entry["seq"], time=entry["at"])


@_register("getHistory")
def history(
    id: _OperationPath,
    limit: Annotated[int, Query(ge=1, le=50, description="Entries per page (1-50)")] = 50,
    cursor: Annotated[
        str | None,
        Query(
            pattern=HISTORY_CURSOR_PATTERN,
            description="next_cursor of the previous page (the sequence number the next page "
            "starts after)",
        ),
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


@_register("listJobTypes")
def list_job_types():
    tenant = _caller("listJobTypes").tenant_id
    entries = runtime().engine_for(tenant).catalogue.list(tenant)
    return _json(200, {"job_types": [e.to_public() for e in entries]})


@_register("getJobType")
def get_job_type(job_type: _JobTypePath):
    tenant = _caller("getJobType").tenant_id
    entry = runtime().engine_for(tenant).catalogue.get(tenant, _path_id(job_type, "job_type"))
    return _json(200, entry.to_public())


@_register("putJobType")
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


@_register("deleteJobType")
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


@_register("getSettings")
def get_settings():
    tenant = _caller("getSettings").tenant_id
    return _json(200, {"strict_job_types": runtime().engine_for(tenant).catalogue.strict(tenant)})


@_register("putSettings")
def put_settings(body: models.SettingsRequest):
    caller = _caller("putSettings")
    strict = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.set_strict(caller.tenant_id, body.strict_job_types, actor=caller.subject)
    )
    return _json(200, {"strict_job_types": strict})


@_register("getControls")
def get_controls():
    from leasefence.controls import assess

    tenant = _caller("getControls").tenant_id
    report = assess(runtime().engine_for(tenant), tenant, runtime().settings.alarm_topic)
    return _json(
        200,
        {"go": all(r.go for r in report), "job_types": [r.to_public() for r in report]},
    )


# Every route is declared in ROUTES (Powertools keeps its routes in private lists).
assert {r.operation_id for r in ROUTES} == {
    r.operation_id for r in app._static_routes + app._dynamic_routes
}
