"""Every sample event in events/ invoked directly through its function's handler (as Lambda would),
with the state it needs arranged first and the answer checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from tests.support.api import new_tenant

from leasefence.settings import runtime

EVENTS = Path(__file__).resolve().parents[2] / "events"
SAMPLE_PAYLOAD = {"order": "sample-order-1", "amount_cents": 1299, "currency": "EUR"}


def _load(name: str, tenant: str) -> dict:
    event = json.loads((EVENTS / name).read_text())
    event = copy.deepcopy(event)
    claims = event.get("requestContext", {}).get("authorizer", {}).get("jwt", {}).get("claims")
    if claims is not None:
        claims["tenant_id"] = tenant  # a fresh tenant per test: the file's ids never collide
    return event


def _arrange(tenant: str, *steps: tuple[str, str]) -> None:
    """``("queued", id)``: enqueue; ``("claimed", id)``: enqueue and claim (fence 1, worker-1);
    ``("awaiting", id)``: enqueue by ``client-7`` awaiting approval."""
    engine = runtime().engine
    for state, operation_id in steps:
        engine.enqueue(
            tenant, operation_id, "charge-card", "sha256:" + "0" * 64, "s3://elsewhere/x", max_attempts=3,
            actor="client-7", approval_required=state == "awaiting", payload_inline=state == "awaiting",
        )
        if state == "claimed":
            assert engine.claim(tenant, operation_id, "worker-1", lease_ms=60_000).fence == 1


def _body(result: dict):
    return json.loads(result["body"]) if result.get("body") else None


def _api(stack, name: str, tenant: str) -> dict:
    return stack.invoker.invoke("api", _load(name, tenant))


# Each entry: arrange, then the expected status and a check of the body.
CASES = {
    "api-health.json": ((), 200, lambda b: b == {"status": "ok"}),
    "api-enqueue.json": ((), 201, lambda b: b["created"] is True and b["operation"]["max_attempts"] == 3),
    "api-get-operation.json": ("enqueued", 200, lambda b: b["operation_id"] == "sample-order-1"),
    "api-list-operations.json": (
        "enqueued", 200, lambda b: [o["operation_id"] for o in b["operations"]] == ["sample-order-1"]
    ),
    "api-get-payload.json": ("enqueued", 200, lambda b: b == SAMPLE_PAYLOAD),
    "api-claim.json": ("enqueued", 200, lambda b: b["claim"]["fence"] == 1 and b["claim"]["job_type"] == "charge-card"),
    "api-heartbeat.json": ((("claimed", "sample-order-1"),), 200, lambda b: "lease_expires_at" in b),
    "api-complete.json": ((("claimed", "sample-order-1"),), 200, lambda b: b["operation"]["outcome_code"] == "charged"),
    "api-fail.json": ((("claimed", "sample-order-2"),), 200, lambda b: b["operation"]["state"] == "queued"),
    "api-unknown.json": ((("claimed", "sample-order-3"),), 200, lambda b: b["operation"]["state"] == "unknown"),
    "api-quarantine.json": (
        (("claimed", "sample-order-4"),), 200, lambda b: b["operation"]["state"] == "quarantined"
    ),
    "api-resolve.json": ("quarantined", 200, lambda b: b["operation"]["state"] == "queued"),
    "api-erase.json": (
        "enqueued", 200, lambda b: b["operation"]["payload_state"] == "erased" and b["operation"]["state"] == "queued"
    ),
    "api-approve.json": (
        (("awaiting", "sample-order-5"),), 200,
        lambda b: (b["operation"]["state"], b["operation"]["approved_by"]) == ("queued", "approver-3"),
    ),
    "api-reject.json": (
        (("awaiting", "sample-order-6"),), 200,
        lambda b: (b["operation"]["state"], b["operation"]["outcome_code"]) == ("failed_terminal", "rejected"),
    ),
    "api-cancel.json": ("enqueued", 200, lambda b: b["operation"]["state"] == "cancelled"),
}


def test_every_api_and_sweeper_event_file_has_a_case():
    names = {p.name for p in EVENTS.glob("api-*.json")} | {p.name for p in EVENTS.glob("sweeper-*.json")}
    assert names == set(CASES) | {"sweeper-scheduled.json"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_api_event(stack, name):
    tenant = new_tenant()
    arrange, status, check = CASES[name]
    if arrange == "enqueued":
        assert _api(stack, "api-enqueue.json", tenant)["statusCode"] == 201
    elif arrange == "quarantined":
        _arrange(tenant, ("claimed", "sample-order-4"))
        assert _api(stack, "api-quarantine.json", tenant)["statusCode"] == 200
    else:
        _arrange(tenant, *arrange)
    result = _api(stack, name, tenant)
    assert result["statusCode"] == status, result
    assert result["headers"]["Content-Type"] == "application/json"
    assert check(_body(result)), result["body"]


def test_enqueue_event_twice_is_a_replay(stack):
    tenant = new_tenant()
    assert _api(stack, "api-enqueue.json", tenant)["statusCode"] == 201
    again = _api(stack, "api-enqueue.json", tenant)
    assert again["statusCode"] == 200 and _body(again)["created"] is False


def test_events_are_shaped_like_api_gateway_payload_v2():
    for path in EVENTS.glob("api-*.json"):
        event = json.loads(path.read_text())
        assert event["version"] == "2.0" and event["requestContext"]["stage"] == "$default"
        assert event["routeKey"] == event["requestContext"]["routeKey"] != "$default"
        assert event["rawPath"] == event["requestContext"]["http"]["path"]
        if event["routeKey"] != "GET /v1/health":
            jwt = event["requestContext"]["authorizer"]["jwt"]
            assert all(isinstance(v, str) for v in jwt["claims"].values())
            assert jwt["scopes"] == jwt["claims"]["scope"].split()


def test_sweeper_scheduled_event(stack):
    tenant = new_tenant()
    engine = runtime().engine
    # Enqueued and claimed two minutes ago (an injected clock) on its final attempt: the lease lapsed.
    past = type(engine)(
        spec=engine.spec, client=engine.store.client, clock=lambda: engine.clock() - 120_000, events=engine.events
    )
    past.enqueue(tenant, "sweep-me", "charge-card", "sha256:" + "1" * 64, "s3://elsewhere/y", max_attempts=1)
    assert past.claim(tenant, "sweep-me", "worker-1", lease_ms=60_000) is not None
    event = json.loads((EVENTS / "sweeper-scheduled.json").read_text())
    assert event["detail-type"] == "Scheduled Event"
    result = stack.invoker.invoke("sweeper", event)
    assert set(result) == {"batches", "examined", "swept", "repaired", "approvals_expired", "stopped",
                           "oldest_unknown_age_s",
                           "purge_batches", "payloads_purged", "purge_stopped", "oldest_due_age_s",
                           "ttl_pages", "ttls_cleared", "ttl_state"}
    assert result["swept"] >= 1 and result["stopped"] == "drained"
    assert engine.get(tenant, "sweep-me").state == "unknown"
    assert result["oldest_unknown_age_s"] >= 0
    # A window retention (the default): the sweeper clears no TTLs.
    assert result["ttl_state"] == "window" and result["ttls_cleared"] == 0
