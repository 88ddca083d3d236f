"""Shadow mode over the HTTP API (the SDK path), and `leasefence shadow report` reading it."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from leasefence.auth import ALL_SCOPES
from leasefence.cli import app
from leasefence.shadow import Shadow, api_store, shadow_tenant


def test_a_repeat_and_a_conflict_are_reported_by_the_cli(stack) -> None:
    tenant = shadow_tenant(f"acme-{uuid.uuid4().hex[:8]}")
    token = stack.token(tenant, ALL_SCOPES)
    shadow = Shadow(api_store(stack.base_url, token), "refund",
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
