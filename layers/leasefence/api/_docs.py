"""What the OpenAPI document says of each route: its summary, its answers and their meaning.

Kept apart from the handlers (:mod:`leasefence.api.routes`), which register each route with its
entry here (``_register(operation_id)``). The request and response schemas come from the models
(:mod:`leasefence.api.models`), the links from :mod:`leasefence.api.links`.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

from pydantic import TypeAdapter

from leasefence.api import models, models_batch, models_triage
from leasefence.api.app import JSON


class RouteDoc(NamedTuple):
    summary: str
    responses: dict[int, Any]
    description: str | None = None
    #: The document's tag (default: from the route's scope).
    tag: str | None = None


#: Statuses API Gateway may answer itself on AWS (:class:`models.GatewayErrorOut`): their body is
#: leasefence's error or the gateway's own.
_GATEWAY_TOO = (401, 403, 503)


def _error_responses(*statuses: int) -> dict[int, dict[str, Any]]:
    meaning = {
        400: "Malformed JSON body",
        401: "Missing, malformed, badly signed or expired token (on AWS: the JWT authorizer's "
        "own body)",
        403: "The token lacks the route's scope (on AWS: possibly API Gateway's own body)",
        404: "No such operation for this tenant",
        409: "Conflict (see error.code)",
        410: "The payload is gone: purged after its retention, or erased (payload_missing)",
        413: "Payload too large",
        422: "Invalid request (invalid_request)",
        429: "Throttled by API Gateway (on AWS only; its own body); retry after a backoff",
        503: "Temporarily unavailable; safe to retry (on AWS also API Gateway's own 500, 503 or "
        "504 for a failed or timed-out invocation, with its own body)",
    }

    def model(status: int) -> Any:
        if status == 429:
            return models.GatewayErrorOut
        if status in _GATEWAY_TOO:
            return models.ErrorOut | models.GatewayErrorOut
        return models.ErrorOut

    return {
        status: {"description": meaning[status], "content": {JSON: {"model": model(status)}}}
        for status in statuses
    }


def _ok(status: int, description: str, model: Any) -> dict[int, dict[str, Any]]:
    return {status: {"description": description, "content": {JSON: {"model": model}}}}


_AUTH = (401, 403, 422, 429, 503)
_HTML = {"text/html": {"schema": {"type": "string"}}}
_FENCED = (400, 401, 403, 404, 409, 422, 429, 503)

_BATCH = (
    "Each item is its own conditional write, made in order, and gets its own answer in "
    "`results` (same place): `status` and `body` are what the item's one-at-a-time route would "
    "have answered, an error's body included (one stale fence among good ones: the others still "
    "succeed). The request answers 200 once every item was processed, whatever their statuses; "
    "a body that is malformed as a whole (any item invalid, more than 25 items) is refused (422 "
    "invalid_request) and nothing is written. An operation_id named twice is written twice, in "
    "order. A resend after a lost answer "
    "gets each item's answer again as its one-at-a-time route would (a replay), with no second "
    "effect. An item answered 503 may be sent again."
)

#: operationId -> what the document says of the route.
ROUTE_DOCS: dict[str, RouteDoc] = {
    "health": RouteDoc(
        "Liveness of the API",
        _ok(200, "Up", models.HealthOut),
    ),
    "enqueueOperation": RouteDoc(
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
        "A job type in the tenant's catalogue gives the class and the attempt budget "
        "(a target_class or max_attempts that differs from the entry: 422 invalid_request), may "
        "require inline payloads that match its JSON Schema (else 422, nothing stored), and its "
        "version is recorded as job_type_version. A tenant in strict mode refuses job types that "
        "are not in its catalogue: 422 unknown_job_type. An entry that requires approval refuses a "
        "payload by reference (422 inline_payload_required) and a token that names nobody (403 "
        "forbidden): the approver approves bytes leasefence stores, and the enqueuer is recorded.",
    ),
    "listOperations": RouteDoc(
        "List this tenant's operations (operators; approvers: those awaiting approval)",
        {**_ok(200, "A page of operations", models.OperationPage), **_error_responses(*_AUTH)},
        "In id order (a deployment with more than one write shard per tenant: shard by shard, "
        "each in id order). The filters (state, job_type, target_class, updated_after, "
        "updated_before, q) are applied to the items a page reads, so a page of a narrow filter may "
        "hold fewer than limit operations (even none) and still carry a next_cursor. With only the "
        "`leasefence/approve` scope (an approver's inbox): state=awaiting_approval only (anything "
        "else: 403 forbidden).",
    ),
    "getOperation": RouteDoc(
        "Read one operation",
        {**_ok(200, "The operation", models.OperationOut), **_error_responses(404, *_AUTH)},
        "With `leasefence/produce` or `leasefence/operate` (an operator reads any one, as it "
        "lists them all): any of the tenant's operations. With only the `leasefence/approve` "
        "scope (an approver): operations that went through the approval gate only (another: 403 "
        "forbidden), so an approver reads what it approves.",
    ),
    "claimOperation": RouteDoc(
        "Claim the next due operation (or a named one)",
        {
            **_ok(200, "Claimed: act under this fence", models.ClaimEnvelope),
            204: {"description": "Nothing is claimable now (no body)", "content": {}},
            **_error_responses(400, 404, *_AUTH),
        },
    ),
    "heartbeat": RouteDoc(
        "Extend the lease held by this fence (and keep a checkpoint)",
        {**_ok(200, "The new lease expiry", models.LeaseOut), **_error_responses(*_FENCED)},
    ),
    "completeOperation": RouteDoc(
        "Record success (the same fence repeating the same completion gets 200 again)",
        {**_ok(200, "Succeeded", models.OperationEnvelope), **_error_responses(*_FENCED)},
    ),
    "failOperation": RouteDoc(
        "Record a failure: retryable with attempts left requeues, otherwise failed_terminal",
        {
            **_ok(200, "Requeued or failed_terminal", models.OperationEnvelope),
            **_error_responses(*_FENCED),
        },
    ),
    "parkUnknown": RouteDoc(
        "The outcome is ambiguous: park as unknown for reconciliation",
        {**_ok(200, "Parked as unknown", models.OperationEnvelope), **_error_responses(*_FENCED)},
    ),
    "quarantineOperation": RouteDoc(
        "The input cannot be processed: park as quarantined",
        {**_ok(200, "Quarantined", models.OperationEnvelope), **_error_responses(*_FENCED)},
    ),
    "enqueueBatch": RouteDoc(
        "Record up to 25 operations, each as POST /v1/operations would",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_batch.EnqueueBatchOut,
            ),
            **_error_responses(400, 413, *_AUTH),
        },
        _BATCH,
    ),
    "claimBatch": RouteDoc(
        "Make up to 25 claims, each as POST /v1/claims would",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_batch.ClaimBatchOut,
            ),
            **_error_responses(400, *_AUTH),
        },
        _BATCH + " A claim item's `operation_id` is the operation claimed (or named); an item with "
        "nothing claimable is answered `status` 204 with a null `body` and `operation_id`. Each "
        "item is one claim with its own `claim_token`; a claimed job's lease runs from its own "
        "claim. A claim not begun within 5 s of the request is answered 503 (unavailable) in its "
        "place and not made: send it again.",
    ),
    "heartbeatBatch": RouteDoc(
        "Extend up to 25 leases, each as POST /v1/operations/{id}/heartbeat would",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_batch.HeartbeatBatchOut,
            ),
            **_error_responses(400, *_AUTH),
        },
        _BATCH,
    ),
    "listApprovals": RouteDoc(
        "The approvers' inbox: what awaits approval, with the summary its job type declares",
        {
            **_ok(200, "A page of operations awaiting approval", models_triage.ApprovalsPage),
            **_error_responses(*_AUTH),
        },
        "The operations awaiting approval, a page at a time (soonest deadline first within a "
        "page), each with `summary`: the payload fields its job type's catalogue entry names in "
        "`approval_summary` (validated against its `payload_schema` when declared). The summary "
        "is read only for a token that may read payloads (`leasefence/approve` or "
        "`leasefence/work`); `summary_state` says why there is none (`needs_scope`, "
        "`not_declared`, `erased`, `purged`, `external`, `missing`).",
    ),
    "triageBatch": RouteDoc(
        "Resolve, requeue or cancel up to 100 operations named by id, with one note",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_triage.TriageBatchOut,
            ),
            **_error_responses(400, *_AUTH),
        },
        "Each item is its own conditional write, pinned to the `expected_state` and "
        "`expected_fence` the operator saw (an operation that moved on since: 409 `stale_fence` "
        "in its place, nothing written), with the answer its one-at-a-time route would give "
        "(POST /v1/operations/{id}/resolve or /cancel). Each item's request token is derived "
        "from `request_token`, so the same request sent again after a lost answer is answered "
        "item by item as replays. A requeue of an operation whose class makes requeue dangerous "
        "for its facts (class D with an intent on record: `risks` in GET /v1/target-classes) is "
        "refused in its place (422) unless `accept_risks` names it. `cancel` needs "
        "`leasefence/produce` too (else 403 for the whole request).",
    ),
    "finishBatch": RouteDoc(
        "Complete, fail, park or quarantine up to 25 claims, each as its own route would",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_batch.FinishBatchOut,
            ),
            **_error_responses(400, *_AUTH),
        },
        _BATCH,
    ),
    "workBatch": RouteDoc(
        "A worker fleet's round trip: close, renew and claim, up to 25 of each in one request",
        {
            **_ok(
                200,
                "Every item processed: each result is its own answer",
                models_batch.WorkBatchOut,
            ),
            **_error_responses(400, *_AUTH),
        },
        "`finish`, `heartbeat` and `claim` (each optional, up to 25 items each, at least one item) are made in "
        "that order, each item as POST /v1/batch/finish, /heartbeat and /claim make it, and "
        "answered in the list of the same name, in the same place: so a worker closes the job "
        "it ran and claims its next one in one request, and a fleet's closes, renewals and "
        "claims of one moment share it. "
        + _BATCH.replace("in `results` (same place)", "in its list (same place)"),
    ),
    "getPayload": RouteDoc(
        "The inline payload as enqueued (its RFC 8785 canonical JSON)",
        {
            200: {"description": "The payload", "content": {JSON: {"schema": {}}}},
            **_error_responses(404, 410, *_AUTH),
        },
        "With only the `leasefence/approve` scope (an approver): operations that went "
        "through the approval gate only (another: 403 forbidden), so an approver reads what it "
        "approves without the scope that claims it.",
    ),
    "resolveOperation": RouteDoc(
        "Operator decision for an unknown or quarantined operation",
        {
            **_ok(200, "Resolved", models.OperationEnvelope),
            **_error_responses(400, 404, 409, *_AUTH),
        },
        "Sent again after it succeeded (its answer was lost), a resolve is a replay: 200 "
        "with the operation as it is now, nothing changed. With request_token the retry is "
        "recognized by it (and never applied twice); without one, while the operation's last "
        "transition is this decision (same resolution, identity and note). Otherwise, from any "
        "state but unknown or quarantined: 409 invalid_transition.",
    ),
    "eraseOperation": RouteDoc(
        "Erase an operation's payload and free text, keeping its identity (operators)",
        {
            **_ok(
                200,
                "Erased (erasing again is harmless): payload_state is erased",
                models.OperationEnvelope,
            ),
            **_error_responses(400, 404, 409, *_AUTH),
        },
        "Deletes the stored payload and the reasons, notes, checkpoint and the intent's description; "
        "keeps the id, the payload hash, the fences, the state, the outcome code and a class-D intent's fence "
        '(the intent reads {"fence": f, "what": "erased"}: a requeued operation still reconciles it and is '
        "never called again), so a replay of the enqueue is still a replay "
        "(200, created false, the payload is not stored again) and a different payload still a conflict. "
        "409 invalid_transition while the operation is claimed: erase it once it left claimed. A queued or "
        "parked operation keeps its state; a worker that claims it finds no payload and quarantines it.",
    ),
    "approveOperation": RouteDoc(
        "Approve an operation awaiting approval: it becomes queued, claimable at once",
        {
            **_ok(
                200,
                "Approved (approving again is a replay: 200, unchanged)",
                models.OperationEnvelope,
            ),
            **_error_responses(400, 404, 409, 410, *_AUTH),
        },
        "`payload_hash` is the hash of the payload the approver saw: another hash than the "
        "operation's is 409 payload_mismatch and changes nothing. The approver (the token's sub) is "
        "recorded as approved_by and cannot be the identity that enqueued the operation (403 "
        "forbidden, also once approved: an approve answers by who asks). After a reject, an expiry "
        "or a cancel: 409 invalid_transition. Once its payload was erased: 410 payload_missing "
        "(nothing left to approve: reject or cancel it). One conditional write decides all of it.",
    ),
    "rejectOperation": RouteDoc(
        "Reject an operation awaiting approval: it ends failed_terminal, outcome rejected",
        {
            **_ok(200, "Rejected (rejecting again is a replay)", models.OperationEnvelope),
            **_error_responses(400, 404, 409, *_AUTH),
        },
    ),
    "cancelOperation": RouteDoc(
        "Withdraw a queued operation no worker ever claimed, or one awaiting approval: it ends cancelled",
        {
            **_ok(200, "Cancelled (cancelling again is a replay)", models.OperationEnvelope),
            **_error_responses(400, 404, 409, *_AUTH),
        },
        "Only before any attempt: an operation queued again after one (a retryable failure, "
        "a takeover's retry, an operator's requeue from unknown) may have had its side effect and is 409 "
        "already_attempted (its next claim reconciles it); a claimed or ended operation is 409 "
        "invalid_transition. Decided inside the cancel's one conditional write. cancelled is final (kept "
        "and purged like the other final states); a replay of the enqueue afterwards is still a replay "
        "(200, created false).",
    ),
    "getHistory": RouteDoc(
        "What happened to an operation, oldest first (operators; approvers: gated ones)",
        {
            **_ok(200, "A page of the operation's history", models.HistoryOut),
            **_error_responses(404, *_AUTH),
        },
        "Each transition with its time, the state before and after, the fence, who made it "
        "(worker id, or the operator's or producer's identity from the token) and why (outcome code, "
        "reason or note). Written by each transition's own write into the operation's item, so it is "
        "complete as soon as the transition's answer is; the first entry and the 49 newest (dropped "
        "counts the others); kept for the payload retention after the operation ends (30 days by "
        "default), then an empty page with history_expired_at (the identity stays); an erasure "
        "replaces it with the erasure's own entry. 404 not_found for an id that is unknown or "
        "another tenant's (answered exactly alike). With only the `leasefence/approve` scope: "
        "operations that went through the approval gate only (another: 403 forbidden).",
    ),
    "listJobTypes": RouteDoc(
        "This tenant's job-type catalogue (operators)",
        {**_ok(200, "Every entry, by name", models.JobTypeList), **_error_responses(*_AUTH)},
    ),
    "getJobType": RouteDoc(
        "One catalogue entry (operators)",
        {**_ok(200, "The entry", models.JobTypeOut), **_error_responses(404, *_AUTH)},
    ),
    "putJobType": RouteDoc(
        "Declare a job type: its class, budget, leases, owner, runbook, approval, payload schema",
        {
            **_ok(
                200,
                "The entry (changed false: it already said exactly this)",
                models.JobTypeEnvelope,
            ),
            **_error_responses(400, 409, *_AUTH),
        },
        "One conditional write: the version rises by one when anything changes; the same "
        "declaration again is no write (changed: false). With expected_version, another writer's "
        "change in between is 409 version_conflict, and changed is relative to that version (a "
        "retry whose first write went through: changed true). With request_token, a retry of a "
        "declaration that went through answers changed: true. Operations enqueued from then on (within a few "
        "seconds on every API instance) run under the new version; earlier ones keep theirs.",
    ),
    "deleteJobType": RouteDoc(
        "Remove a job type from the catalogue (operators)",
        {
            **_ok(200, "Removed: the entry as it was, at its new version", models.JobTypeOut),
            **_error_responses(404, 409, *_AUTH),
        },
        "Kept as a tombstone: the version keeps rising, so a later declaration never "
        "reuses a version an operation recorded. Operations already enqueued keep what they were "
        "enqueued under. 404 when the entry does not exist (or was removed already).",
    ),
    "getSettings": RouteDoc(
        "This tenant's settings (operators)",
        {**_ok(200, "The settings", models.SettingsOut), **_error_responses(*_AUTH)},
    ),
    "putSettings": RouteDoc(
        "Change this tenant's settings (operators)",
        {**_ok(200, "The settings", models.SettingsOut), **_error_responses(400, *_AUTH)},
        "strict_job_types: true refuses enqueues of job types that are not in the "
        "catalogue (422 unknown_job_type), within a few seconds on every API instance.",
    ),
    "getControls": RouteDoc(
        "Go/no-go: the nine controls per job type, with the evidence leasefence holds",
        {**_ok(200, "The report", models.ControlsOut), **_error_responses(*_AUTH)},
        "Every job type of the tenant (catalogued, or ever enqueued). A job type is go "
        "only when all nine controls hold; controls 5, 7 and 9 need its catalogue entry (class; "
        "owner, runbook and the deployment's alert route; owner of the retention plan).",
    ),
    # The operator console's (docs/api-contract-extensions.md, section 14).
    "countOperations": RouteDoc(
        "How many of this tenant's operations are in each state (operators)",
        {**_ok(200, "Counts per state", models.StateCountsOut), **_error_responses(*_AUTH)},
        "Reads at most `limit` operations (default 1000, at most 5000) in id order (shard by "
        "shard with more than one write shard), only "
        "their state: complete is true when that was all of them (else the counts are a lower "
        "bound). The same filters as GET /v1/operations but state.",
    ),
    "listTargetClasses": RouteDoc(
        "What each target class guarantees, and what each resolution of a parked operation means",
        _ok(200, "The four target classes", models.TargetClassesOut),
        "A static table (no token needed): the operator console shows it beside every "
        "unknown or quarantined operation, before a resolution is chosen.",
        tag="console",
    ),
    "consoleRedirect": RouteDoc(
        "The operator console is at /console",
        {
            302: {"description": "Redirect to /console (no body)", "content": {}},
            **_error_responses(404),
        },
        tag="console",
    ),
    "consolePage": RouteDoc(
        "The operator console (a page; its data comes from this API with your token)",
        {200: {"description": "The page", "content": _HTML}, **_error_responses(404)},
        tag="console",
    ),
    "consoleAsset": RouteDoc(
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
    ),
}


# ------------------------------------------------------------------------------- no-store

#: Fields that hold the customer's data: a route whose answer's schema has one (at any depth), or
#: admits any JSON value (the payload itself), is answered with ``Cache-Control: no-store``.
CUSTOMER_FIELDS = frozenset({"payload", "outcome", "outcome_code", "intent", "checkpoint"})
NO_STORE = "no-store"
NO_STORE_HEADER = {
    "Cache-Control": {
        "description": "no-store: the answer carries customer data (a payload, an outcome, an "
        "intent or a checkpoint); no shared cache or browser may keep it",
        "schema": {"type": "string", "enum": [NO_STORE]},
    }
}


@cache
def no_store(operation_id: str) -> bool:
    """Whether the route's successful answers carry customer data, read from their models."""
    doc = ROUTE_DOCS.get(operation_id)
    if doc is None:
        return False
    for status, response in doc.responses.items():
        for media in (response.get("content") or {}).values() if 200 <= status < 300 else ():
            schema = TypeAdapter(media["model"]).json_schema() if "model" in media else media
            if media.get("schema") == {} or CUSTOMER_FIELDS & _property_names(schema):
                return True
    return False


def _property_names(schema: Any) -> set[str]:
    """Every property name a JSON schema declares, its ``$defs`` included."""
    if isinstance(schema, list):
        return set().union(*(_property_names(s) for s in schema))
    if not isinstance(schema, dict):
        return set()
    own = set(schema["properties"]) if isinstance(schema.get("properties"), dict) else set()
    return own.union(*(_property_names(v) for v in schema.values()))
