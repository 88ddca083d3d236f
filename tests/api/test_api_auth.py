"""Tokens (401), scopes (403) and tenant isolation (404 for another tenant's ids)."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from tests.support.api import Api, claim, claimed, enqueue, new_tenant, op_path

from leasefence.api.security import APPROVE, OPERATE, PRODUCE, ROUTES, WORK
from leasefence_tools.local.tokens import ALL_SCOPES, mint

SAMPLE_BODIES = {
    "enqueueOperation": {"operation_id": "s-1", "job_type": "job", "payload": 1},
    "claimOperation": {"worker_id": "w"},
    "heartbeat": {"fence": 1, "worker_id": "w"},
    "completeOperation": {"fence": 1, "outcome_code": "ok"},
    "failOperation": {"fence": 1, "retryable": False, "reason": "r"},
    "parkUnknown": {"fence": 1, "reason": "r"},
    "quarantineOperation": {"fence": 1, "reason": "r"},
    "resolveOperation": {"resolution": "requeue"},
    "eraseOperation": {},
    "putJobType": {"target_class": "C"},
    "putSettings": {"strict_job_types": False},
    "approveOperation": {"payload_hash": "sha256:" + "0" * 64},
    "rejectOperation": {"note": "no"},
    "cancelOperation": {},
    "enqueueBatch": {"items": [{"operation_id": "s-1", "job_type": "job", "payload": 1}]},
    "claimBatch": {"items": [{"worker_id": "w", "job_types": ["job"], "claim_token": "t"}]},
    "heartbeatBatch": {"items": [{"operation_id": "s-1", "fence": 1, "worker_id": "w"}]},
    "finishBatch": {"items": [{"action": "complete", "operation_id": "s-1", "fence": 1, "outcome_code": "ok"}]},
}
PROTECTED = [r for r in ROUTES if r.scope is not None]


def _path(route, operation_id: str = "s-1") -> str:
    path = route.template.replace("{id}", operation_id).replace("{job_type}", "s-job")
    # An approver lists only what awaits approval (every other scope may ask for it too).
    return path + "?state=awaiting_approval" if route.operation_id == "listOperations" else path


def _send(api: Api, route, token, body=None, operation_id: str = "s-1"):
    body = SAMPLE_BODIES.get(route.operation_id) if body is None else body
    return api.call(route.method, _path(route, operation_id), body if route.method in ("POST", "PUT") else None, token=token)


def _error(reply, status, code):
    assert reply.status == status, reply.text
    assert reply.json["error"]["code"] == code, reply.text


def _forged(claims: dict) -> str:
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}."


# ---------------------------------------------------------------------------------- 401


@pytest.mark.parametrize("route", PROTECTED, ids=lambda r: r.operation_id)
def test_every_protected_route_needs_a_token(stack, route):
    _error(_send(Api(stack.base_url, None), route, token=None), 401, "unauthorized")


def test_bad_tokens_are_401(stack, tenant):
    api = Api(stack.base_url, None)
    good = stack.token(tenant)
    expired = mint(tenant, ALL_SCOPES, ttl_seconds=1, secret=stack.secret, now=time.time() - 3600)
    other_key = mint(tenant, ALL_SCOPES, secret="a-different-secret-of-enough-length")
    claims = jwt.decode(good, options={"verify_signature": False})
    no_tenant = jwt.encode({k: v for k, v in claims.items() if k != "tenant_id"}, stack.secret, algorithm="HS256")
    tampered = good.rsplit(".", 1)[0] + "." + base64.urlsafe_b64encode(b"x" * 32).rstrip(b"=").decode()
    cases = {
        "expired": expired,
        "bad-signature": other_key,
        "tampered": tampered,
        "alg-none": _forged(claims),
        "no-tenant": no_tenant,
        "garbage": "not.a.jwt",
        "empty": "",
    }
    for name, token in cases.items():
        reply = api.call("GET", "/v1/operations", headers={"Authorization": f"Bearer {token}"}, token=None)
        assert reply.status == 401, (name, reply.text)
        assert reply.json["error"]["code"] == "unauthorized", name
    for header in (f"Basic {good}", good, f"Bearer  "):
        reply = api.call("GET", "/v1/operations", headers={"Authorization": header}, token=None)
        assert reply.status == 401, header
    assert api.get("/v1/operations", token=good).status == 200


def test_handler_refuses_an_event_without_authorizer_context(stack):
    """Defence in depth: the handler does not trust that an authorizer ran."""
    from leasefence_tools.local.server import http_api_event

    event = http_api_event("GET", "/v1/operations", [], None, claims=None)
    result = stack.invoker.invoke("api", event)
    assert result["statusCode"] == 401
    assert json.loads(result["body"])["error"]["code"] == "unauthorized"
    event = http_api_event("GET", "/v1/operations", [], None, claims={"scope": OPERATE})  # no tenant_id
    assert stack.invoker.invoke("api", event)["statusCode"] == 401


# ---------------------------------------------------------------------------------- 403


@pytest.mark.parametrize("route", PROTECTED, ids=lambda r: r.operation_id)
def test_every_route_checks_its_scope(stack, tenant, route):
    others = [s for s in ALL_SCOPES if s not in route.scopes]
    api = Api(stack.base_url, None)
    _error(_send(api, route, stack.token(tenant, others)), 403, "forbidden")
    _error(_send(api, route, stack.token(tenant, [])), 403, "forbidden")
    # The scope is checked before the body: a caller without it learns nothing about the rules.
    if route.method in ("POST", "PUT"):
        _error(_send(api, route, stack.token(tenant, others), body={"nonsense": True}), 403, "forbidden")
    # With only its own scope (or one of the others it admits) the route is reachable (whatever
    # the answer).
    for scope in route.scopes:
        reply = _send(api, route, stack.token(tenant, [scope]))
        assert reply.status not in (401, 403), reply.text


def test_scope_table_is_the_contracts():
    scopes = {(r.method, r.template): r.scope for r in ROUTES}
    assert scopes == {
        ("GET", "/v1/health"): None,
        ("POST", "/v1/operations"): PRODUCE,
        ("GET", "/v1/operations/{id}"): PRODUCE,
        ("POST", "/v1/claims"): WORK,
        ("POST", "/v1/operations/{id}/heartbeat"): WORK,
        ("POST", "/v1/operations/{id}/complete"): WORK,
        ("POST", "/v1/operations/{id}/fail"): WORK,
        ("POST", "/v1/operations/{id}/unknown"): WORK,
        ("POST", "/v1/operations/{id}/quarantine"): WORK,
        ("GET", "/v1/operations/{id}/payload"): WORK,
        ("GET", "/v1/operations"): OPERATE,
        ("POST", "/v1/operations/{id}/resolve"): OPERATE,
        ("POST", "/v1/operations/{id}/erase"): OPERATE,  # extension: docs/api-contract-extensions.md
        ("GET", "/v1/operations/{id}/history"): OPERATE,  # extension, as the erase route
        # The job-type catalogue, settings and the go/no-go report (extensions, operators only).
        ("GET", "/v1/job-types"): OPERATE,
        ("GET", "/v1/job-types/{job_type}"): OPERATE,
        ("PUT", "/v1/job-types/{job_type}"): OPERATE,
        ("DELETE", "/v1/job-types/{job_type}"): OPERATE,
        ("GET", "/v1/settings"): OPERATE,
        ("PUT", "/v1/settings"): OPERATE,
        ("GET", "/v1/controls"): OPERATE,
        ("POST", "/v1/operations/{id}/approve"): APPROVE,  # extensions: the approval gate
        ("POST", "/v1/operations/{id}/reject"): APPROVE,
        ("POST", "/v1/operations/{id}/cancel"): PRODUCE,
        # Batches (issue 33): each item under its own route's scope.
        ("POST", "/v1/batch/enqueue"): PRODUCE,
        ("POST", "/v1/batch/claim"): WORK,
        ("POST", "/v1/batch/heartbeat"): WORK,
        ("POST", "/v1/batch/finish"): WORK,
        ("POST", "/v1/batch/work"): WORK,
        # The operator's bulk routes (issue 37): the approvers' inbox, bulk triage.
        ("GET", "/v1/approvals"): APPROVE,
        ("POST", "/v1/batch/triage"): OPERATE,
        # The operator console (issue 25): counts for operators, an open table, the page's files.
        ("GET", "/v1/state-counts"): OPERATE,
        ("GET", "/v1/target-classes"): None,
        ("GET", "/"): None,
        ("GET", "/console"): None,
        ("GET", "/console/{asset}"): None,
    }
    # An approver reads what it approves (the routes serve it gated operations only) and lists
    # what awaits approval (its inbox: the route refuses any other state); an operator reads any
    # one operation, as it lists them all (issue 25: the console's operation view).
    assert {(r.method, r.template): r.also for r in ROUTES if r.also} == {
        ("GET", "/v1/operations"): (APPROVE,),
        ("GET", "/v1/operations/{id}"): (OPERATE, APPROVE),
        ("GET", "/v1/operations/{id}/payload"): (APPROVE,),
        ("GET", "/v1/operations/{id}/history"): (APPROVE,),
        ("GET", "/v1/approvals"): (OPERATE,),
    }


# ---------------------------------------------------------------------------------- tenants


def test_same_operation_id_under_two_tenants_is_two_operations(make_api):
    alice, bob = make_api(new_tenant()), make_api(new_tenant())
    a = enqueue(alice, "shared-id", {"who": "alice"})
    b = enqueue(bob, "shared-id", {"who": "bob"})
    assert a.status == b.status == 201  # not a replay, not a conflict
    assert a.json["operation"]["payload_hash"] != b.json["operation"]["payload_hash"]
    grant = claimed(alice, "shared-id")
    assert grant["fence"] == 1
    assert bob.get(op_path("shared-id")).json["state"] == "queued"
    assert bob.get(op_path("shared-id", "payload")).json == {"who": "bob"}
    assert alice.get(op_path("shared-id", "payload")).json == {"who": "alice"}
    assert claimed(bob, "shared-id")["fence"] == 1


def test_another_tenants_id_answers_exactly_like_a_missing_one(stack, make_api):
    owner, stranger = make_api(new_tenant()), make_api(new_tenant())
    enqueue(owner, "private-1", {"secret": 1})
    fence = claimed(owner, "private-1")["fence"]
    for route in ROUTES:
        if "{id}" not in route.template:
            continue
        theirs = _send(stranger, route, stranger.token, operation_id="private-1")
        missing = _send(stranger, route, stranger.token, operation_id="never-created-anywhere")
        assert theirs.status == 404, (route.key, theirs.text)
        assert (theirs.status, theirs.json) == (missing.status, missing.json), route.key
    assert claim(stranger, operation_id="private-1").status == 404
    assert claim(stranger).status == 204
    assert stranger.get("/v1/operations").json == {"operations": [], "next_cursor": None}
    # Nothing the stranger did touched the owner's operation.
    op = owner.get(op_path("private-1")).json
    assert op["state"] == "claimed" and op["fence"] == fence


def test_a_tenant_id_with_separator_characters_cannot_reach_another_tenant(make_api):
    """Identity is (tenant_id, operation_id) as two key attributes: no string trick joins them."""
    plain, tricky = make_api("acme"), make_api("acme#0")
    enqueue(plain, "op")
    assert tricky.get(op_path("op")).status == 404
    assert claim(tricky).status == 204
    tricky2 = make_api("acme/op")
    assert tricky2.get(op_path("op")).status == 404


def test_cursor_cannot_cross_tenants(make_api):
    owner, stranger = make_api(new_tenant()), make_api(new_tenant())
    for i in range(3):
        enqueue(owner, f"cur-{i}")
    cursor = owner.get("/v1/operations?limit=1").json["next_cursor"]
    assert cursor
    page = stranger.get(f"/v1/operations?limit=5&cursor={cursor}")
    assert page.status == 200 and page.json["operations"] == []


def test_scope_gate_also_works_under_a_named_stage(stack):
    from leasefence_tools.local.server import http_api_event

    event = http_api_event("POST", "/prod/v1/operations", [], b'{"nonsense": 1}',
                           claims={"tenant_id": "t", "scope": WORK})
    event["requestContext"]["stage"] = "prod"
    result = stack.invoker.invoke("api", event)
    assert result["statusCode"] == 403, result
