"""Shadow mode over the HTTP API (the SDK path), and `leasefence shadow report` reading it."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from leasefence_tools.local.tokens import ALL_SCOPES
from leasefence_tools.cli import app
from leasefence.settings import runtime
from leasefence.shadow import Shadow, api_store, shadow_tenant

#: The scope that makes a token for a shadow tenant a shadow token (the contract's string).
SHADOW = "leasefence/shadow"
#: A shadow token's scopes (leasefence.shadow.SHADOW_TOKEN_SCOPES).
SHADOW_TOKEN_SCOPES = ("leasefence/produce", "leasefence/work", "leasefence/operate", SHADOW)


def test_a_repeat_and_a_conflict_are_reported_by_the_cli(stack) -> None:
    tenant = shadow_tenant(f"acme-{uuid.uuid4().hex[:8]}")
    token = stack.token(tenant, SHADOW_TOKEN_SCOPES)
    # Shadow mode's own 0.5 s request timeout is what it ships; this test is about what the report
    # says, not about timeouts, so it gives a loaded test machine room (a timed-out request is a
    # "gap", as tests/test_shadow.py checks).
    shadow = Shadow(api_store(stack.base_url, token, timeout_s=10), "refund",
                    operation_id=lambda message: message["refund_id"],
                    payload=lambda message: {"refund_id": message["refund_id"],
                                             "cents": message["cents"]},
                    execution_id=lambda message: message["delivery"],
                    heartbeat_thread=False)
    consume = shadow.wrap(lambda message: f"refunded {message['refund_id']}")
    assert consume({"refund_id": "r1", "cents": 500, "delivery": "d1"}) == "refunded r1"
    assert consume({"refund_id": "r1", "cents": 500, "delivery": "d2"}) == "refunded r1"
    assert consume({"refund_id": "r1", "cents": 999, "delivery": "d3"}) == "refunded r1"
    assert (shadow.stats["claims"], shadow.stats["duplicates"], shadow.stats["conflicts"]) == (1, 1, 1)
    assert shadow.stats["gaps"] == 0

    result = CliRunner().invoke(
        app, ["shadow", "report", "--base-url", stack.base_url, "--token", token, "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["tenant"] == tenant
    (job,) = report["job_types"]
    assert (job["job_type"], job["operations"], job["claims"]) == ("refund", 1, 1)
    assert [e["execution_id"] for e in job["duplicate"]["examples"]] == ["d2"]
    assert job["duplicate"]["examples"][0]["seen_state"] == "succeeded"
    assert [e["execution_id"] for e in job["conflict"]["examples"]] == ["d3"]
    assert job["ran_more_than_once"] == 1


def _error(reply) -> tuple[int, str]:
    body = reply.json()
    assert set(body) == {"error"} and isinstance(body["error"]["message"], str), body
    return reply.status_code, body["error"]["code"]


def test_an_ordinary_token_for_a_shadow_tenant_is_refused_everywhere(stack) -> None:
    """The shadow: namespace is reserved: a token for a shadow tenant without the shadow scope
    (whatever else it carries) is 403 on every route and writes nothing; its queued shadow
    operation cannot be claimed."""
    import requests

    tenant = shadow_tenant(f"acme-{uuid.uuid4().hex[:8]}")
    runtime().engine.enqueue(tenant, "queued-1", "refund", "sha256:" + "1" * 64)
    headers = {"Authorization": f"Bearer {stack.token(tenant, ALL_SCOPES)}"}
    base = stack.base_url
    calls = [
        ("POST", "/v1/claims", {"worker_id": "w1"}),
        ("POST", "/v1/claims", {"worker_id": "w1", "operation_id": "queued-1"}),
        ("POST", "/v1/operations", {"operation_id": "new-1", "job_type": "refund", "payload": {"a": 1}}),
        ("GET", "/v1/operations/queued-1", None),
        ("GET", "/v1/operations", None),
    ]
    for method, path, body in calls:
        reply = requests.request(method, base + path, json=body, headers=headers, timeout=10)
        assert _error(reply) == (403, "forbidden"), (method, path, reply.text)
        assert SHADOW in reply.json()["error"]["message"]
    operation = runtime().engine.get(tenant, "queued-1")
    assert (operation.state, operation.fence) == ("queued", 0)
    assert [o.operation_id for o in runtime().engine.list(tenant).operations] == ["queued-1"]


def test_a_shadow_token_claims_only_the_operation_it_names(stack) -> None:
    """Even a shadow token never has "the next due operation" dispatched to it: shadow
    operations are never a worker's. Naming the operation (what shadow mode does) works."""
    import requests

    tenant = shadow_tenant(f"acme-{uuid.uuid4().hex[:8]}")
    headers = {"Authorization": f"Bearer {stack.token(tenant, SHADOW_TOKEN_SCOPES)}"}
    base = stack.base_url
    enqueued = requests.post(base + "/v1/operations", headers=headers, timeout=10, json={
        "operation_id": "r1", "job_type": "refund", "payload_ref": "shadow:not-stored",
        "payload_hash": "sha256:" + "2" * 64})
    assert enqueued.status_code == 201, enqueued.text
    for body in ({"worker_id": "w1"}, {"worker_id": "w1", "job_types": ["refund"]}):
        refused = requests.post(base + "/v1/claims", json=body, headers=headers, timeout=10)
        assert _error(refused) == (403, "forbidden"), refused.text
    assert runtime().engine.get(tenant, "r1").fence == 0
    named = requests.post(base + "/v1/claims", headers=headers, timeout=10,
                          json={"worker_id": "w1", "operation_id": "r1"})
    assert named.status_code == 200 and named.json()["claim"]["fence"] == 1, named.text


def test_the_shadow_scope_changes_nothing_for_an_ordinary_tenant(stack) -> None:
    import requests

    tenant = f"acme-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {stack.token(tenant, (*ALL_SCOPES, SHADOW))}"}
    base = stack.base_url
    requests.post(base + "/v1/operations", headers=headers, timeout=10,
                  json={"operation_id": "o1", "job_type": "refund", "payload": {"a": 1}})
    claimed = requests.post(base + "/v1/claims", json={"worker_id": "w1"}, headers=headers, timeout=10)
    assert claimed.status_code == 200 and claimed.json()["claim"]["operation_id"] == "o1"


def test_the_shadow_token_scopes_are_the_librarys() -> None:
    from leasefence.shadow import SHADOW_TOKEN_SCOPES as library

    assert set(library) == set(SHADOW_TOKEN_SCOPES)
