"""The job-type catalogue over HTTP: routes, enqueue under an entry, the CLI and the go/no-go report."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import UTC, datetime

import pytest
from tests.support.payload_items import noise
from tests.support.api import claimed, enqueue, op_path
from typer.testing import CliRunner

from leasefence_tools.local.tokens import ALL_SCOPES
from leasefence_tools.cli import app as cli
from leasefence.settings import runtime

REFUND = {
    "target_class": "B",
    "max_attempts": 3,
    "lease_seconds": 30,
    "max_lease_seconds": 120,
    "owner": "payments-oncall",
    "runbook_url": "https://runbooks.example/refund",
    "payload_schema": {
        "type": "object",
        "required": ["amount"],
        "properties": {"amount": {"type": "integer", "minimum": 1}},
    },
}


def test_catalogue_routes(api, make_api, tenant):
    put = api.call("PUT", "/v1/job-types/refund", REFUND)
    assert put.status == 200, put.text
    assert (put.json["changed"], put.json["job_type"]["version"]) == (True, 1)
    assert put.json["job_type"]["updated_by"] is not None
    again = api.call("PUT", "/v1/job-types/refund", REFUND)
    assert (again.json["changed"], again.json["job_type"]["version"]) == (False, 1)
    stale = api.call(
        "PUT", "/v1/job-types/refund", {**REFUND, "max_attempts": 4, "expected_version": 0}
    )
    assert (stale.status, stale.error_code) == (409, "version_conflict")
    assert api.call("PUT", "/v1/job-types/refund", {**REFUND, "max_atempts": 4}).status == 422
    assert api.call("PUT", "/v1/job-types/refund", {**REFUND, "target_class": "D"}).status == 422
    listed = api.get("/v1/job-types").json["job_types"]
    assert [(e["job_type"], e["version"], e["target_class"]) for e in listed] == [
        ("refund", 1, "B")
    ]
    assert api.get("/v1/job-types/refund").json["payload_schema"] == REFUND["payload_schema"]
    assert api.get("/v1/job-types/nope").status == 404
    # Operator scope only; another tenant sees nothing.
    producer = make_api(tenant, ["leasefence/produce"])
    assert producer.call("PUT", "/v1/job-types/refund", REFUND).status == 403
    assert make_api("someone-else").get("/v1/job-types").json["job_types"] == []
    deleted = api.call("DELETE", "/v1/job-types/refund?expected_version=1")
    assert (deleted.status, deleted.json["version"]) == (200, 2)
    assert api.call("DELETE", "/v1/job-types/refund").status == 404
    assert api.get("/v1/job-types").json["job_types"] == []


def test_enqueue_under_an_entry(api, stack, tenant):
    assert api.call("PUT", "/v1/job-types/refund", REFUND).status == 200
    memo = noise(1500)  # past what a payload item keeps: these payloads would be stored in S3
    reply = enqueue(api, "r-1", {"amount": 5, "memo": memo}, job_type="refund")
    op = reply.json["operation"]
    assert (op["target_class"], op["max_attempts"], op["job_type_version"]) == ("B", 3, 1)
    # The entry's default lease when the claim names none.
    grant = claimed(api, "r-1")
    expires = datetime.fromisoformat(grant["lease_expires_at"].replace("Z", "+00:00"))
    assert 20 < (expires - datetime.now(UTC)).total_seconds() <= 30  # not the contract's 60
    contradiction = api.post(
        "/v1/operations",
        {
            "operation_id": "r-2",
            "job_type": "refund",
            "payload": {"amount": 5, "memo": memo},
            "target_class": "C",
        },
    )
    assert (contradiction.status, contradiction.error_code) == (422, "invalid_request")
    # A payload that fails the schema: 422, and neither the operation nor its payload is stored.
    bad = api.post(
        "/v1/operations",
        {"operation_id": "r-3", "job_type": "refund", "payload": {"amount": 0, "memo": memo}},
    )
    assert (bad.status, bad.error_code) == (422, "invalid_request"), bad.text
    by_ref = api.post(
        "/v1/operations",
        {
            "operation_id": "r-4",
            "job_type": "refund",
            "payload_ref": "s3://x",
            "payload_hash": "sha256:" + "0" * 64,
        },
    )
    assert by_ref.status == 422 and "inline" in by_ref.text
    for op_id in ("r-2", "r-3", "r-4"):
        assert api.get(op_path(op_id)).status == 404
    payloads = runtime().payloads
    stored = {
        o["Key"]
        for o in stack.aws.client("s3")
        .list_objects_v2(Bucket=stack.bucket, Prefix=payloads.tenant_prefix(tenant))
        .get("Contents", [])
    }
    assert stored == {payloads.key_for(tenant, "r-1", op["payload_hash"])}  # r-1's only


def test_schema_patterns_over_http(api):
    """An invalid pattern is 422 at the PUT (it answered 500); a catastrophic one is evaluated in
    linear time: the enqueue is 422 at once, and nothing is stored."""
    invalid = {**REFUND, "payload_schema": {"properties": {"code": {"pattern": "("}}}}
    put = api.call("PUT", "/v1/job-types/coded", invalid)
    assert (put.status, put.error_code) == (422, "invalid_request"), put.text
    assert "#/properties/code/pattern" in put.json["error"]["message"]
    assert api.get("/v1/job-types/coded").status == 404
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}}
    assert api.call("PUT", "/v1/job-types/coded", {**REFUND, "payload_schema": schema}).status == 200
    started = time.perf_counter()
    slow = api.post(
        "/v1/operations",
        {"operation_id": "c-1", "job_type": "coded", "payload": {"code": "a" * 25 + "!"}},
    )
    assert (slow.status, slow.error_code) == (422, "invalid_request"), slow.text
    assert time.perf_counter() - started < 1.0
    assert api.get(op_path("c-1")).status == 404
    assert enqueue(api, "c-2", {"code": "a" * 25}, job_type="coded").status == 201


def test_a_put_sent_again_tells_the_truth_about_changed(api):
    """A PUT sent again because its answer was lost said changed: false for the change it made.
    With its request token, or the version it was based on, it says changed: true."""
    path = "/v1/job-types/twice"
    assert api.call("PUT", path, {"target_class": "C"}).json["changed"] is True
    body = {"target_class": "C", "max_attempts": 4, "request_token": "put-7"}
    first = api.call("PUT", path, body).json
    again = api.call("PUT", path, body).json
    assert (first["changed"], first["job_type"]["version"]) == (True, 2)
    assert again == first
    other = api.call("PUT", path, {**body, "request_token": "put-8"}).json
    assert (other["changed"], other["job_type"]["version"]) == (False, 2)
    based = {"target_class": "C", "max_attempts": 2, "expected_version": 2}
    assert api.call("PUT", path, based).json["changed"] is True
    again = api.call("PUT", path, based).json
    assert (again["changed"], again["job_type"]["version"]) == (True, 3)
    current = api.call("PUT", path, {**based, "expected_version": 3}).json
    assert (current["changed"], current["job_type"]["version"]) == (False, 3)


def test_a_claim_answers_the_lease_the_entry_granted(api):
    """A claim asking for more than max_lease_seconds is granted the maximum, and the answer
    says so (lease_ms, lease_seconds, claimed_at), so a worker never runs on the lease it asked
    for; a claim naming none gets the entry's default, also stated."""
    assert api.call("PUT", "/v1/job-types/refund", REFUND).status == 200
    for op_id in ("g-1", "g-2"):
        enqueue(api, op_id, {"amount": 5}, job_type="refund")
    cut = claimed(api, "g-1", lease_seconds=600)
    default = claimed(api, "g-2")
    for grant, seconds in ((cut, 120), (default, 30)):
        assert (grant["lease_seconds"], grant["lease_ms"]) == (seconds, seconds * 1000)
        claimed_at = datetime.fromisoformat(grant["claimed_at"].replace("Z", "+00:00"))
        expires = datetime.fromisoformat(grant["lease_expires_at"].replace("Z", "+00:00"))
        assert (expires - claimed_at).total_seconds() == seconds
        assert abs((claimed_at - datetime.now(UTC)).total_seconds()) < 10


def test_strict_mode(api):
    enqueue(api, "u-1", job_type="misc")  # non-strict: as without a catalogue
    # With the deployment's retention, read-only (issue 25).
    retention = {"identity_retention_days": 400, "payload_retention_days": 30}
    assert api.get("/v1/settings").json == {"strict_job_types": False, **retention}
    assert api.call("PUT", "/v1/settings", {"strict_job_types": True}).json == {
        "strict_job_types": True,
        **retention,
    }
    refused = api.post("/v1/operations", {"operation_id": "u-2", "job_type": "misc", "payload": 1})
    assert (refused.status, refused.error_code) == (422, "unknown_job_type")
    assert api.get(op_path("u-2")).status == 404
    # A retry of what was accepted before the switch is still a replay, not a refusal.
    replay = enqueue(api, "u-1", job_type="misc")
    assert (replay.status, replay.json["created"]) == (200, False)
    assert api.call("PUT", "/v1/job-types/misc", {"target_class": "C"}).status == 200
    assert enqueue(api, "u-2", job_type="misc").status == 201


@pytest.fixture
def cli_env(stack, tenant, monkeypatch):
    monkeypatch.setenv("LEASEFENCE_BASE_URL", stack.base_url)
    monkeypatch.setenv("LEASEFENCE_TOKEN", stack.token(tenant, ALL_SCOPES))
    return CliRunner()


def test_cli_apply_is_idempotent_and_shows_the_diff(cli_env, tmp_path, api):
    catalogue = tmp_path / "catalogue.yaml"
    catalogue.write_text(
        "strict_job_types: true\n"
        "job_types:\n"
        "  refund:\n    target_class: B\n    max_attempts: 3\n    owner: payments\n"
        "  email:\n    target_class: C\n"
    )
    dry = cli_env.invoke(cli, ["job-types", "apply", str(catalogue), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "+ email (added)" in dry.output and "dry run" in dry.output
    assert api.get("/v1/job-types").json["job_types"] == []
    first = cli_env.invoke(cli, ["job-types", "apply", str(catalogue)])
    assert first.exit_code == 0, first.output
    assert (
        "+ refund (added)" in first.output and "~ strict_job_types: false -> true" in first.output
    )
    assert (
        cli_env.invoke(cli, ["job-types", "apply", str(catalogue)]).output.strip() == "no changes"
    )
    edited = tmp_path / "catalogue.json"
    edited.write_text(
        json.dumps(
            {"job_types": {"refund": {"target_class": "B", "max_attempts": 4, "owner": "payments"}}}
        )
    )
    second = cli_env.invoke(cli, ["job-types", "apply", str(edited)])
    assert second.exit_code == 0, second.output
    assert "- email (removed)" in second.output
    assert "~ refund (changed)\n    max_attempts: 3 -> 4" in second.output
    listed = cli_env.invoke(cli, ["job-types", "list", "--json"])
    assert json.loads(listed.output)["refund"]["version"] == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("job_types:\n  x:\n    target_class: Z\n")
    refused = cli_env.invoke(cli, ["job-types", "apply", str(bad)])
    assert refused.exit_code == 1 and "target_class" in refused.output


def test_controls_report_one_no_go(cli_env, api, monkeypatch):
    rt = runtime()
    monkeypatch.setattr(
        rt,
        "settings",
        dataclasses.replace(rt.settings, alarm_topic="arn:aws:sns:eu-west-1:1:alarms"),
    )
    api.call(
        "PUT",
        "/v1/job-types/refund",
        {"target_class": "B", "owner": "payments", "runbook_url": "https://rb.example/r"},
    )
    api.call("PUT", "/v1/job-types/email", {"target_class": "C", "owner": "growth"})  # no runbook
    enqueue(api, "x-1", job_type="legacy")  # enqueued, never catalogued
    report = api.get("/v1/controls").json
    verdicts = {j["job_type"]: j["go"] for j in report["job_types"]}
    assert verdicts == {"email": False, "legacy": False, "refund": True} and report["go"] is False
    email = next(j for j in report["job_types"] if j["job_type"] == "email")
    failed = [c["control"] for c in email["controls"] if not c["go"]]
    assert failed == [7]
    legacy = next(j for j in report["job_types"] if j["job_type"] == "legacy")
    assert [c["control"] for c in legacy["controls"] if not c["go"]] == [5, 7, 9]
    result = cli_env.invoke(cli, ["controls"])
    assert result.exit_code == 1
    assert "refund: GO (catalogue v1)" in result.output and "email: NO-GO" in result.output
    assert "missing: no runbook_url" in result.output
    api.call(
        "PUT",
        "/v1/job-types/email",
        {"target_class": "C", "owner": "growth", "runbook_url": "https://rb.example/e"},
    )
    api.call(
        "PUT",
        "/v1/job-types/legacy",
        {"target_class": "D", "owner": "ops", "runbook_url": "https://rb.example/l"},
    )
    assert cli_env.invoke(cli, ["controls"]).exit_code == 0
