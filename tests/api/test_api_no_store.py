"""``Cache-Control: no-store`` on every answer that carries customer data (a payload, an outcome,
an intent or a checkpoint): the routes are read from the response models
(:func:`leasefence.api._docs.no_store`), each is called here over HTTP, and the document states
the header on them. A shared cache or a browser never keeps an operation after a token expires."""

from __future__ import annotations

import json

from leasefence.api._docs import ROUTE_DOCS, no_store
from leasefence.api.security import APPROVE
from tests.support import ROOT
from tests.support.api import Api, claimed, enqueue, op_path

CUSTOMER_ROUTES = {
    "enqueueOperation",
    "listOperations",
    "getOperation",
    "claimOperation",
    "completeOperation",
    "failOperation",
    "parkUnknown",
    "quarantineOperation",
    "getPayload",
    "resolveOperation",
    "eraseOperation",
    "approveOperation",
    "rejectOperation",
    "cancelOperation",
    "getHistory",
    "enqueueBatch",  # issue 33: the batches whose items answer operations or claims
    "claimBatch",
    "finishBatch",
    "workBatch",
    "listApprovals",  # issue 37: the approvers' inbox (payload summaries) and bulk triage
    "triageBatch",
}


def test_the_routes_come_from_the_response_models():
    """Every answer schema with an operation, a claim, a payload or a history: the list above is
    what the models give, not a hand list the code follows (a new field or route changes it)."""
    assert {o for o in ROUTE_DOCS if no_store(o)} == CUSTOMER_ROUTES
    assert not no_store("heartbeat")  # a lease's expiry: no checkpoint comes back
    assert not no_store("unknownRoute")


def test_every_route_with_customer_data_answers_no_store(stack, api, tenant):
    seen: dict[str, dict[str, str]] = {}

    def call(route, method, path, body=None, client=api, status=200):
        reply = client.call(method, path, body)
        assert reply.status == status, (route, reply.text)
        seen[route] = reply.headers
        return reply

    payload = {"amount": 12}
    made = call(
        "enqueueOperation",
        "POST",
        "/v1/operations",
        {"operation_id": "n-1", "job_type": "job", "payload": payload},
        status=201,
    )
    grant = call(
        "claimOperation", "POST", "/v1/claims", {"worker_id": "w1", "operation_id": "n-1"}
    ).json["claim"]
    assert grant["payload"] == payload
    call("getPayload", "GET", op_path("n-1", "payload"))
    call(
        "completeOperation",
        "POST",
        op_path("n-1", "complete"),
        {"fence": grant["fence"], "outcome_code": "paid"},
    )
    call("getOperation", "GET", op_path("n-1"))
    call("listOperations", "GET", "/v1/operations")
    call("getHistory", "GET", op_path("n-1", "history"))
    call("eraseOperation", "POST", op_path("n-1", "erase"), {})
    for op, route, body in (
        ("n-2", "failOperation", {"retryable": False, "reason": "no"}),
        ("n-3", "parkUnknown", {"reason": "lost"}),
        ("n-4", "quarantineOperation", {"reason": "bad input"}),
    ):
        enqueue(api, op)
        held = claimed(api, op)
        action = {
            "failOperation": "fail",
            "parkUnknown": "unknown",
            "quarantineOperation": "quarantine",
        }[route]
        call(route, "POST", op_path(op, action), {"fence": held["fence"], **body})
    call(
        "resolveOperation",
        "POST",
        op_path("n-3", "resolve"),
        {"resolution": "succeeded", "note": "checked"},
    )
    enqueue(api, "n-5")
    call("cancelOperation", "POST", op_path("n-5", "cancel"), {})
    assert (
        api.call(
            "PUT", "/v1/job-types/payout", {"target_class": "C", "approval_required": True}
        ).status
        == 200
    )
    approver = Api(stack.base_url, stack.token(tenant, [APPROVE], subject="approver-1"))
    for op in ("n-6", "n-7"):
        enqueue(api, op, payload, job_type="payout")
    call("listApprovals", "GET", "/v1/approvals")
    call(
        "approveOperation",
        "POST",
        op_path("n-6", "approve"),
        {"payload_hash": made.json["operation"]["payload_hash"]},
        client=approver,
    )
    call("rejectOperation", "POST", op_path("n-7", "reject"), {"note": "no"}, client=approver)
    item = {"operation_id": "n-9", "job_type": "job", "payload": payload}
    call("enqueueBatch", "POST", "/v1/batch/enqueue", {"items": [item]})
    granted = call("claimBatch", "POST", "/v1/batch/claim", {"items": [{"worker_id": "w9", "operation_id": "n-9", "job_types": ["job"]}]})
    held = granted.json["results"][0]["body"]["claim"]
    done = {"action": "complete", "operation_id": "n-9", "fence": held["fence"], "outcome_code": "ok"}
    call("finishBatch", "POST", "/v1/batch/finish", {"items": [done]})
    call("workBatch", "POST", "/v1/batch/work", {"claim": [{"worker_id": "w9", "job_types": ["none"]}]})
    enqueue(api, "n-10")
    held = claimed(api, "n-10")
    api.post(op_path("n-10", "unknown"), {"fence": held["fence"], "reason": "outage"})
    seen_item = {"operation_id": "n-10", "expected_state": "unknown", "expected_fence": held["fence"]}
    triage = {"action": "resolve", "resolution": "succeeded", "note": "checked",
              "request_token": "b2a7c3e0-0d43-4c1c-9b8e-5f0f3c2a1d10", "items": [seen_item]}
    triaged = call("triageBatch", "POST", "/v1/batch/triage", triage)
    assert triaged.json["results"][0]["status"] == 200, triaged.text
    assert set(seen) == CUSTOMER_ROUTES
    for route, headers in seen.items():
        assert headers.get("Cache-Control") == "no-store", route
    # The rest may be cached as before: no no-store where no customer data is.
    assert api.get("/v1/health").headers.get("Cache-Control") is None
    enqueue(api, "n-8")
    held = claimed(api, "n-8")
    beat = api.post(op_path("n-8", "heartbeat"), {"fence": held["fence"], "worker_id": "worker-1"})
    assert beat.status == 200 and beat.headers.get("Cache-Control") is None


def test_the_document_states_the_header_on_those_answers():
    document = json.loads((ROOT / "openapi.json").read_text())
    stated = {
        operation["operationId"]
        for methods in document["paths"].values()
        for operation in methods.values()
        if any(
            "Cache-Control" in (answer.get("headers") or {})
            for status, answer in operation["responses"].items()
            if status.startswith("2")
        )
    }
    assert stated == CUSTOMER_ROUTES
