"""The routes: parse (pydantic), call one engine method, shape the answer.

The validated resolver (Powertools ``APIGatewayHttpResolver`` with pydantic validation) and every
route: those of the operations, the job types and the settings here, the operator console's from
:mod:`leasefence.api._console`; what the document says of each route is in
:mod:`leasefence.api._docs`, what the handlers share in :mod:`leasefence.api._shared`. Nothing
here decides ownership, state or retries; the engine does. Every failure goes through
:mod:`leasefence.api.errors`. Clients (DynamoDB, S3) and the engine are created on first use and
reused across invocations; importing this module connects to nothing.

Importing it costs about as much as ``import boto3`` (pydantic, the models, the resolver), so
:func:`leasefence.api.app.resolver` imports it on the first request that reaches the resolver, not
at the function's import: a request refused before validation never pays for it, and with
SnapStart it is imported before the snapshot (:mod:`leasefence.snapstart`).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from leasefence import resources
from leasefence.api import _batch, _console, _triage, errors, models, models_catalogue
from leasefence.api._shared import (
    AfterQuery,
    BeforeQuery,
    ClassQuery,
    JobTypeQuery,
    OperationPath,
    TextQuery,
    Traceparent,
    Tracestate,
    answer,
    claim_payload,
    filters_of,
    json_body,
    operation_answer,
    path_id,
    public,
    public_claim,
    readable,
    register_on,
)
from leasefence.api.app import JSON
from leasefence.api.errors import Forbidden
from leasefence.api.security import ROUTES, Caller, caller_from_event, route
from leasefence.clock import to_rfc3339
from leasefence.cursor import HISTORY_CURSOR_PATTERN, OPERATION_CURSOR_PATTERN
from leasefence.errors import InvalidInput, PayloadConflict
from leasefence.keys import is_shadow_tenant
from leasefence.model import EnqueueResult
from leasefence.observability import record_claim_latency
from leasefence.payloads import CanonicalPayload, canonicalize
from leasefence.settings import runtime
from leasefence.tracecontext import TraceContext
from leasefence.validation import MISSING

app = APIGatewayHttpResolver(enable_validation=True, json_body_deserializer=json_body)


@app.exception_handler(Exception)
def _any_error(exc: Exception) -> Response:
    return errors.to_response(exc)


@app.not_found
def _no_route(_exc: Exception) -> Response:
    return errors.to_response(errors.RouteNotFound("no such route"))


def register(operation_id: str) -> Any:
    """Register the route ``operation_id`` on this module's resolver (:func:`register_on`)."""
    return register_on(app, operation_id)


def caller_of(operation_id: str) -> Caller:
    """The caller, checked against the route's scope (again: the gate in
    :func:`leasefence.api.app.handle` did too)."""
    caller = app.context.get("caller")
    if caller is None:
        caller = caller_from_event(app.current_event.raw_event)
    spec = route(operation_id)
    return caller.require(spec.scope, spec.also)


# ---------------------------------------------------------------------------------- routes


@register("health")
def health():
    return answer(200, {"status": "ok"})


@register("enqueueOperation")
def enqueue(
    body: models.EnqueueRequest, traceparent: Traceparent = None, tracestate: Tracestate = None
):
    trace = TraceContext.from_headers(traceparent, tracestate)  # malformed: ignored (W3C)
    return _enqueue(caller_of("enqueueOperation"), body, _canonical(body), trace)


def _canonical(body: models.EnqueueRequest) -> CanonicalPayload | None:
    """The inline payload's canonical JSON (None: by reference), checked against the hash sent
    beside it."""
    if "payload" not in body.model_fields_set:
        return None
    canonical = canonicalize(body.payload)
    if body.payload_hash is not None and body.payload_hash != canonical.hash:
        raise InvalidInput("payload_hash does not match the payload's canonical JSON")
    return canonical


def _enqueue(
    caller: Caller,
    body: models.EnqueueRequest,
    canonical: CanonicalPayload | None,
    trace: Any = None,
) -> Response:
    tenant = caller.tenant_id
    engine = runtime().engine_for(tenant)
    inline = canonical is not None
    if canonical is not None:
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
        return answer(200, {"operation": public(admission.operation), "created": False})
    payloads = runtime().payloads
    stored = None
    payload_ref: str | None = body.payload_ref
    kept = canonical is not None and engine.keeps_in_item(canonical)
    if canonical is not None and not kept:
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
            # A small payload is kept in the operation's item, written by the same put.
            payload_json=canonical.body if kept and canonical is not None else None,
            trace_context=trace,
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
    return answer(
        201 if result.created else 200,
        {"operation": public(result.operation), "created": result.created},
    )


@register("listOperations")
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
    job_type: JobTypeQuery = None,
    target_class: ClassQuery = None,
    updated_after: AfterQuery = None,
    updated_before: BeforeQuery = None,
    q: TextQuery = None,
):
    caller = caller_of("listOperations")
    tenant = caller.tenant_id
    if route("listOperations").scope not in caller.scopes and state != "awaiting_approval":
        # An approver's inbox: what awaits approval, nothing else.
        raise Forbidden(
            f"without the scope {route('listOperations').scope}, a token lists only operations "
            "awaiting approval (state=awaiting_approval)"
        )
    filters = filters_of(state, job_type, target_class, updated_after, updated_before, q)
    page = (
        runtime()
        .engine_for(tenant)
        .list(tenant, limit=limit, cursor=cursor or None, filters=filters)
    )
    return answer(
        200,
        {"operations": [public(op) for op in page.operations], "next_cursor": page.next_cursor},
    )


@register("getOperation")
def get_operation(id: OperationPath):
    caller = caller_of("getOperation")
    tenant = caller.tenant_id
    operation = runtime().engine_for(tenant).get(tenant, path_id(id))
    return answer(200, public(readable(caller, "getOperation", operation)))


@register("claimOperation")
def claim(body: models.ClaimRequest):
    return _claim(caller_of("claimOperation").tenant_id, body)


def _claim(tenant: str, body: models.ClaimRequest) -> Response:
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
            after=body.after,
        )
    record_claim_latency((time.perf_counter() - started) * 1000)
    if grant is None:
        return Response(status_code=204, content_type=None, body="")
    return answer(200, {"claim": public_claim(grant, payload=claim_payload(engine, grant))})


@register("heartbeat")
def heartbeat(id: OperationPath, body: models.HeartbeatRequest):
    return _heartbeat(caller_of("heartbeat").tenant_id, path_id(id), body)


def _heartbeat(tenant: str, operation_id: str, body: models.HeartbeatRequest) -> Response:
    checkpoint = body.checkpoint if "checkpoint" in body.model_fields_set else MISSING
    expires = (
        runtime()
        .engine_for(tenant)
        .heartbeat(
            tenant,
            operation_id,
            body.fence,
            body.worker_id,
            lease_ms=None if body.lease_seconds is None else body.lease_seconds * 1000,
            checkpoint=checkpoint,
            intent=body.intent,
        )
    )
    return answer(200, {"lease_expires_at": to_rfc3339(expires)})


@register("completeOperation")
def complete(id: OperationPath, body: models.CompleteRequest):
    return _complete(caller_of("completeOperation").tenant_id, path_id(id), body)


def _complete(tenant: str, operation_id: str, body: models.CompleteRequest) -> Response:
    return operation_answer(
        runtime().engine_for(tenant).complete(tenant, operation_id, body.fence, body.outcome_code)
    )


@register("failOperation")
def fail(id: OperationPath, body: models.FailRequest):
    return _fail(caller_of("failOperation").tenant_id, path_id(id), body)


def _fail(tenant: str, operation_id: str, body: models.FailRequest) -> Response:
    retry_after_ms = None if body.retry_after_seconds is None else body.retry_after_seconds * 1000
    return operation_answer(
        runtime()
        .engine_for(tenant)
        .fail(
            tenant,
            operation_id,
            body.fence,
            body.retryable,
            body.reason,
            retry_after_ms=retry_after_ms,
        )
    )


@register("parkUnknown")
def unknown(id: OperationPath, body: models.ParkRequest):
    return _unknown(caller_of("parkUnknown").tenant_id, path_id(id), body)


def _unknown(tenant: str, operation_id: str, body: models.ParkRequest) -> Response:
    return operation_answer(
        runtime().engine_for(tenant).park_unknown(tenant, operation_id, body.fence, body.reason)
    )


@register("quarantineOperation")
def quarantine(id: OperationPath, body: models.ParkRequest):
    return _quarantine(caller_of("quarantineOperation").tenant_id, path_id(id), body)


def _quarantine(tenant: str, operation_id: str, body: models.ParkRequest) -> Response:
    return operation_answer(
        runtime().engine_for(tenant).quarantine(tenant, operation_id, body.fence, body.reason)
    )


@register("getPayload")
def payload(id: OperationPath):
    caller = caller_of("getPayload")
    tenant = caller.tenant_id
    op_id = path_id(id)
    engine = runtime().engine_for(tenant)
    body = engine.payload(readable(caller, "getPayload", engine.get(tenant, op_id)))
    return Response(status_code=200, content_type=JSON, body=body.decode("utf-8"))


@register("resolveOperation")
def resolve(id: OperationPath, body: models.ResolveRequest):
    caller = caller_of("resolveOperation")
    tenant = caller.tenant_id
    return operation_answer(
        runtime()
        .engine_for(tenant)
        .resolve(
            tenant,
            path_id(id),
            body.resolution,
            note=body.note,
            actor=caller.subject,
            request_token=body.request_token,
        )
    )


@register("eraseOperation")
def erase(id: OperationPath, body: models.EraseRequest | None = None):  # noqa: ARG001 - validated and documented, no fields
    caller = caller_of("eraseOperation")
    tenant = caller.tenant_id
    return operation_answer(
        runtime().engine_for(tenant).erase(tenant, path_id(id), actor=caller.subject)
    )


def _approver(operation_id: str) -> Caller:
    caller = caller_of(operation_id)
    if caller.subject is None:
        raise Forbidden("an approver's token must name who it is (sub)")
    return caller


@register("approveOperation")
def approve(id: OperationPath, body: models.ApproveRequest):
    caller = _approver("approveOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    return operation_answer(
        runtime()
        .engine_for(tenant)
        .approve(tenant, path_id(id), body.payload_hash, actor=caller.subject)
    )


@register("rejectOperation")
def reject(id: OperationPath, body: models.RejectRequest | None = None):
    caller = _approver("rejectOperation")
    tenant = caller.tenant_id
    assert caller.subject is not None
    note = body.note if body is not None else ""
    return operation_answer(
        runtime().engine_for(tenant).reject(tenant, path_id(id), actor=caller.subject, note=note)
    )


@register("cancelOperation")
def cancel(id: OperationPath, body: models.CancelRequest | None = None):  # noqa: ARG001 - validated and documented, no fields
    caller = caller_of("cancelOperation")
    tenant = caller.tenant_id
    return operation_answer(
        runtime().engine_for(tenant).cancel(tenant, path_id(id), actor=caller.subject)
    )


def _history_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """A HistoryEntry resource (:class:`leasefence.resources.HistoryEntry`) of a stored entry."""
    return resources.dump(resources.HistoryEntry, entry, sequence=entry["seq"], time=entry["at"])


@register("getHistory")
def history(
    id: OperationPath,
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
    caller = caller_of("getHistory")
    tenant = caller.tenant_id
    engine = runtime().engine_for(tenant)
    op_id = path_id(id)
    if route("getHistory").scope not in caller.scopes:  # an approver's: gated operations only
        readable(caller, "getHistory", engine.get(tenant, op_id))
    page = engine.history(tenant, op_id, limit=limit, cursor=cursor or None)
    return answer(
        200,
        {
            "entries": [_history_entry(e) for e in page.entries],
            "next_cursor": page.next_cursor,
            "dropped": page.dropped,
            "history_expired_at": None if page.expired_at is None else to_rfc3339(page.expired_at),
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


@register("listJobTypes")
def list_job_types():
    tenant = caller_of("listJobTypes").tenant_id
    entries = runtime().engine_for(tenant).catalogue.list(tenant)
    return answer(200, {"job_types": [e.to_public() for e in entries]})


@register("getJobType")
def get_job_type(job_type: _JobTypePath):
    tenant = caller_of("getJobType").tenant_id
    entry = runtime().engine_for(tenant).catalogue.get(tenant, path_id(job_type, "job_type"))
    return answer(200, entry.to_public())


@register("putJobType")
def put_job_type(job_type: _JobTypePath, body: models_catalogue.JobTypeRequest):
    caller = caller_of("putJobType")
    spec = body.model_dump(exclude_none=True, exclude={"expected_version", "request_token"})
    entry, changed = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.put(
            caller.tenant_id,
            path_id(job_type, "job_type"),
            spec,
            expected_version=body.expected_version,
            actor=caller.subject,
            request_token=body.request_token,
        )
    )
    return answer(200, {"job_type": entry.to_public(), "changed": changed})


@register("deleteJobType")
def delete_job_type(
    job_type: _JobTypePath,
    expected_version: Annotated[
        int | None, Query(ge=1, description="Remove only if the entry is at this version")
    ] = None,
):
    caller = caller_of("deleteJobType")
    entry = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.delete(
            caller.tenant_id,
            path_id(job_type, "job_type"),
            expected_version=expected_version,
            actor=caller.subject,
        )
    )
    return answer(200, entry.to_public())


def _settings(strict: bool) -> dict[str, Any]:
    """The tenant's settings, with the deployment's retention (read-only: the deployment's)."""
    deployment = runtime().settings
    return {
        "strict_job_types": strict,
        "identity_retention_days": deployment.identity_retention_days,
        "payload_retention_days": deployment.payload_retention_days,
    }


@register("getSettings")
def get_settings():
    tenant = caller_of("getSettings").tenant_id
    return answer(200, _settings(runtime().engine_for(tenant).catalogue.strict(tenant)))


@register("putSettings")
def put_settings(body: models.SettingsRequest):
    caller = caller_of("putSettings")
    strict = (
        runtime()
        .engine_for(caller.tenant_id)
        .catalogue.set_strict(caller.tenant_id, body.strict_job_types, actor=caller.subject)
    )
    return answer(200, _settings(strict))


@register("getControls")
def get_controls():
    from leasefence.controls import assess

    tenant = caller_of("getControls").tenant_id
    report = assess(runtime().engine_for(tenant), tenant, runtime().settings.alarm_topic)
    return answer(
        200,
        {"go": all(r.go for r in report), "job_types": [r.to_public() for r in report]},
    )


_console.register_routes(register, caller_of)
_triage.register_routes(register, caller_of)
_batch.register_routes(
    register,
    caller_of,
    _batch.OneAtATime(
        enqueue=_enqueue,
        canonical=_canonical,
        claim=_claim,
        heartbeat=_heartbeat,
        finishes={
            "complete": _complete,
            "fail": _fail,
            "unknown": _unknown,
            "quarantine": _quarantine,
        },
    ),
)

# Every route is declared in ROUTES (Powertools keeps its routes in private lists).
assert {r.operation_id for r in ROUTES} == {
    r.operation_id for r in app._static_routes + app._dynamic_routes
}
