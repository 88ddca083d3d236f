"""The approval gate and cancel over HTTP (docs/api-contract-extensions.md): the routes, their
scopes, the approver's identity, the SDK and the CLI. An operation awaiting approval is enqueued
through the engine the API serves (the API's enqueue takes approval from a job type's catalogue
entry, not from the request)."""

from __future__ import annotations

import re

import pytest
from tests.support.api import Api, claim, claimed, enqueue, new_tenant, op_path
from typer.testing import CliRunner

from leasefence.api.errors import Forbidden
from leasefence.api.security import APPROVE, OPERATE, PRODUCE, WORK
from leasefence_tools.local.tokens import mint
from leasefence_tools.cli import app as cli
from leasefence.errors import InvalidTransition, PayloadMismatch
from leasefence.payloads import canonicalize
from leasefence.settings import runtime

PAYLOAD = {"refund": {"order": "o-7", "cents": 1250}}
H = canonicalize(PAYLOAD).hash
OTHER = "sha256:" + "b" * 64


def assert_error(reply, status: int, code: str) -> None:
    assert reply.status == status, reply.text
    assert reply.json["error"]["code"] == code, reply.text


def awaiting(tenant: str, operation_id: str, by: str | None = None) -> None:
    """Enqueued by the tenant's default dev identity (``dev:<tenant>``), as its producer token,
    with the payload stored inline (as the API's enqueue stores it)."""
    stored = runtime().payloads.put(tenant, operation_id, canonicalize(PAYLOAD))
    runtime().engine_for(tenant).enqueue(
        tenant,
        operation_id,
        "refund",
        H,
        payload_ref=stored.ref,
        payload_inline=True,
        actor=by or f"dev:{tenant}",
        approval_required=True,
        approval_valid_ms=3_600_000,
    )


@pytest.fixture
def approver(stack, tenant) -> Api:
    return Api(stack.base_url, stack.token(tenant, [APPROVE], subject="approver-1"))


def test_approve_over_http(stack, api, tenant, approver):
    awaiting(tenant, "ap-1")
    shown = api.get(op_path("ap-1")).json
    assert shown["state"] == "awaiting_approval" and shown["approved_by"] is None
    assert re.match(r"^\d{4}-\d\d-\d\dT", shown["approval_expires_at"])
    assert claim(api).status == 204 and claim(api, operation_id="ap-1").status == 204
    # The producer's own identity cannot approve it, whatever its scopes.
    assert_error(api.post(op_path("ap-1", "approve"), {"payload_hash": H}), 403, "forbidden")
    assert_error(approver.post(op_path("ap-1", "approve"), {"payload_hash": OTHER}), 409, "payload_mismatch")
    no_scope = Api(stack.base_url, stack.token(tenant, [PRODUCE, WORK, OPERATE], subject="approver-2"))
    assert_error(no_scope.post(op_path("ap-1", "approve"), {"payload_hash": H}), 403, "forbidden")
    # A token that names nobody cannot approve: there is no one to record, nor to compare.
    nobody = Api(stack.base_url, mint(tenant, [APPROVE], secret=stack.secret, extra_claims={"sub": ""}))
    assert_error(nobody.post(op_path("ap-1", "approve"), {"payload_hash": H}), 403, "forbidden")
    assert_error(approver.post(op_path("ap-1", "approve"), {}), 422, "invalid_request")
    assert_error(approver.post(op_path("ap-1", "approve"), {"payload_hash": "md5:1"}), 422, "invalid_request")
    assert api.get(op_path("ap-1")).json == shown  # nothing changed
    done = approver.post(op_path("ap-1", "approve"), {"payload_hash": H})
    assert done.status == 200, done.text
    op = done.json["operation"]
    assert (op["state"], op["approved_by"], op["approval_expires_at"]) == ("queued", "approver-1", None)
    again = approver.post(op_path("ap-1", "approve"), {"payload_hash": H})
    assert (again.status, again.json) == (200, done.json)  # a replay
    # ... for the approver: the enqueuer asking the same is refused as before (by who asks).
    assert_error(api.post(op_path("ap-1", "approve"), {"payload_hash": H}), 403, "forbidden")
    assert claimed(api, "ap-1")["fence"] == 1
    assert_error(approver.post(op_path("missing", "approve"), {"payload_hash": H}), 404, "not_found")


def test_an_approval_gated_job_type_refuses_payloads_by_reference_and_anonymous_producers(
    stack, api, tenant
):
    """The approver approves bytes leasefence stores, and the enqueuer is always on record (so
    self-approval is always decided): by reference, 422 inline_payload_required; from a token
    that names nobody, 403 forbidden. Nothing is written either way."""
    gate = {"target_class": "C", "approval_required": True}
    assert api.call("PUT", "/v1/job-types/payout", gate).status == 200
    by_ref = api.post(
        "/v1/operations",
        {"operation_id": "g-1", "job_type": "payout", "payload_ref": "s3://theirs/1", "payload_hash": H},
    )
    assert_error(by_ref, 422, "inline_payload_required")
    nobody = Api(stack.base_url, mint(tenant, [PRODUCE], secret=stack.secret, extra_claims={"sub": ""}))
    anonymous = nobody.post("/v1/operations", {"operation_id": "g-1", "job_type": "payout", "payload": PAYLOAD})
    assert_error(anonymous, 403, "forbidden")
    assert api.get(op_path("g-1")).status == 404
    stored = stack.aws.client("s3").list_objects_v2(
        Bucket=stack.bucket, Prefix=runtime().payloads.tenant_prefix(tenant)
    )
    assert stored.get("KeyCount", 0) == 0  # the refusals came before the payload was stored
    made = enqueue(api, "g-1", PAYLOAD, job_type="payout")
    assert (made.status, made.json["operation"]["state"]) == (201, "awaiting_approval")
    # A retry of it is a replay, whoever sends it.
    again = nobody.post("/v1/operations", {"operation_id": "g-1", "job_type": "payout", "payload": PAYLOAD})
    assert (again.status, again.json["created"]) == (200, False), again.text


def test_an_approver_reads_what_it_approves_without_the_work_scope(stack, api, tenant, approver):
    """With only leasefence/approve: the operation, its payload and its history, for operations
    that went through the approval gate; not other operations (403), not another tenant's
    (404), and no claim."""
    awaiting(tenant, "rd-1")
    shown = approver.get(op_path("rd-1"))
    assert shown.status == 200, shown.text
    assert shown.json["payload_hash"] == H and shown.json["state"] == "awaiting_approval"
    payload = approver.get(op_path("rd-1", "payload"))
    assert (payload.status, payload.json) == (200, PAYLOAD)
    assert canonicalize(payload.json).hash == shown.json["payload_hash"]  # what it approves
    history = approver.get(op_path("rd-1", "history"))
    assert history.status == 200 and "entries" in history.json, history.text
    assert approver.post(op_path("rd-1", "approve"), {"payload_hash": H}).status == 200
    # Approved (then ended): still readable, it went through the gate.
    assert approver.get(op_path("rd-1", "payload")).json == PAYLOAD
    enqueue(api, "plain-1", {"n": 1})
    for path in (op_path("plain-1"), op_path("plain-1", "payload"), op_path("plain-1", "history")):
        assert_error(approver.get(path), 403, "forbidden")
    assert_error(approver.get(op_path("missing")), 404, "not_found")
    elsewhere = Api(stack.base_url, stack.token(new_tenant(), [APPROVE], subject="approver-1"))
    for path in (op_path("rd-1"), op_path("rd-1", "payload"), op_path("rd-1", "history")):
        assert_error(elsewhere.get(path), 404, "not_found")
    assert_error(claim(approver), 403, "forbidden")
    assert_error(approver.get("/v1/operations"), 403, "forbidden")


def test_an_erased_payload_cannot_be_approved(api, tenant, approver):
    awaiting(tenant, "er-1")
    assert api.post(op_path("er-1", "erase"), {}).status == 200
    shown = api.get(op_path("er-1")).json
    assert_error(approver.post(op_path("er-1", "approve"), {"payload_hash": H}), 410, "payload_missing")
    assert api.get(op_path("er-1")).json == shown and shown["state"] == "awaiting_approval"
    assert approver.post(op_path("er-1", "reject"), {"note": "erased"}).status == 200


def test_reject_and_what_comes_after(stack, api, tenant, approver):
    awaiting(tenant, "rj-1")
    rejected = approver.post(op_path("rj-1", "reject"), {"note": "too large"})
    assert rejected.status == 200, rejected.text
    op = rejected.json["operation"]
    assert (op["state"], op["outcome_code"]) == ("failed_terminal", "rejected")
    assert approver.post(op_path("rj-1", "reject")).json == rejected.json  # a replay; no body needed
    assert_error(approver.post(op_path("rj-1", "approve"), {"payload_hash": H}), 409, "invalid_transition")
    assert_error(api.post(op_path("rj-1", "cancel"), {}), 409, "invalid_transition")
    assert_error(approver.post(op_path("rj-1", "reject"), {"why": "x"}), 422, "invalid_request")
    assert_error(api.post(op_path("rj-1", "reject"), {}, token=stack.token(tenant, [OPERATE])), 403, "forbidden")
    assert runtime().engine.get(tenant, "rj-1").reason == "too large"


def test_cancel_over_http(api, tenant, make_api):
    created = enqueue(api, "cx-1", {"n": 1})
    cancelled = api.post(op_path("cx-1", "cancel"), {})
    assert cancelled.status == 200, cancelled.text
    assert cancelled.json["operation"]["state"] == "cancelled"
    assert api.post(op_path("cx-1", "cancel")).json == cancelled.json  # again: a replay, no body needed
    replay = enqueue(api, "cx-1", {"n": 1})
    assert (replay.status, replay.json["created"]) == (200, False)
    assert replay.json["operation"]["state"] == "cancelled"
    assert created.json["operation"]["payload_hash"] == replay.json["operation"]["payload_hash"]
    assert claim(api).status == 204
    awaiting(tenant, "cx-2")
    assert api.post(op_path("cx-2", "cancel"), {}).json["operation"]["state"] == "cancelled"
    enqueue(api, "cx-3", {"n": 3})
    claimed(api, "cx-3")
    assert_error(api.post(op_path("cx-3", "cancel"), {}), 409, "invalid_transition")
    assert_error(api.post(op_path("cx-3", "cancel"), {"reason": "x"}), 422, "invalid_request")
    assert_error(make_api(tenant, [WORK, OPERATE, APPROVE]).post(op_path("cx-3", "cancel"), {}), 403, "forbidden")
    assert_error(make_api(new_tenant()).post(op_path("cx-1", "cancel"), {}), 404, "not_found")


def test_sdk_and_cli(stack, sdk, tenant, token):
    from leasefence.client import LeaseFenceClient

    awaiting(tenant, "sd-1")
    awaiting(tenant, "sd-2")
    with pytest.raises(Forbidden):
        sdk.approve("sd-1", H)  # the producer's own identity
    approver = LeaseFenceClient(stack.base_url, stack.token(tenant, [APPROVE], subject="approver-1"), retries=0)
    with pytest.raises(PayloadMismatch) as mismatch:
        approver.approve("sd-1", OTHER)
    assert mismatch.value.status == 409
    op = approver.approve("sd-1", H)
    assert (op.state, op.approved_by, op.approval_expires_at) == ("queued", "approver-1", None)
    assert approver.reject("sd-2", "no").outcome_code == "rejected"
    assert sdk.cancel("sd-1").state == "cancelled"
    with pytest.raises(InvalidTransition):
        sdk.cancel("sd-2")
    runner = CliRunner()
    base = ["--base-url", stack.base_url]
    awaiting(tenant, "sd-3")
    awaiting(tenant, "sd-4")
    own = runner.invoke(cli, ["ops", "approve", "sd-3", "--payload-hash", H, *base, "--token", token])
    assert own.exit_code == 1 and "403 forbidden" in own.output
    approver_token = stack.token(tenant, [APPROVE], subject="approver-7")
    shown = runner.invoke(cli, ["ops", "approve", "sd-3", "--payload-hash", H, *base, "--token", approver_token])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"approved_by\s+approver-7", shown.output)
    rejected = runner.invoke(cli, ["ops", "reject", "sd-4", "--note", "no", *base, "--token", approver_token])
    assert rejected.exit_code == 0 and re.search(r"outcome_code\s+rejected", rejected.output)
    cancelled = runner.invoke(cli, ["ops", "cancel", "sd-3", *base, "--token", token])
    assert cancelled.exit_code == 0 and re.search(r"state\s+cancelled", cancelled.output)
    refused = runner.invoke(cli, ["ops", "cancel", "sd-4", *base, "--token", token])
    assert refused.exit_code == 1 and "409 invalid_transition" in refused.output
