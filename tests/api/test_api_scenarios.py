"""End-to-end stories over HTTP: the zombie worker, exhausted attempts parked by the sweeper and
resolved by an operator (through the ``leasefence ops`` commands)."""

from __future__ import annotations

import time
from datetime import datetime

from tests.support.api import claim, claimed, enqueue, op_path
from typer.testing import CliRunner

from leasefence_tools.cli import app as cli


def _wait_past(rfc3339: str, margin: float = 0.05) -> None:
    expires = datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    delay = expires - time.time() + margin
    if delay > 0:
        time.sleep(delay)


def test_zombie_worker_cannot_finish_after_a_takeover(api):
    enqueue(api, "zombie-1", {"charge": 100})
    # 3 s, not 1: on a loaded machine two local requests once took longer than a 1 s lease.
    first = claimed(api, "zombie-1", worker="worker-a", lease_seconds=3)
    assert first["fence"] == 1 and first["reconcile_required"] is False
    # Not yet expired: nobody else can take it.
    assert claim(api, "worker-b").status == 204
    _wait_past(first["lease_expires_at"])

    second = claim(api, "worker-b", lease_seconds=60)
    assert second.status == 200, second.text
    grant = second.json["claim"]
    assert grant["operation_id"] == "zombie-1"
    assert grant["fence"] == 2 and grant["attempts"] == 2 and grant["reconcile_required"] is True

    # The first worker wakes up: every fenced write it tries is refused.
    late = api.post(op_path("zombie-1", "complete"), {"fence": 1, "outcome_code": "charged-by-a"})
    assert late.status == 409 and late.json["error"]["code"] == "stale_fence"
    beat = api.post(op_path("zombie-1", "heartbeat"), {"fence": 1, "worker_id": "worker-a"})
    assert beat.status == 409 and beat.json["error"]["code"] == "stale_fence"
    for action, body in (("fail", {"retryable": True, "reason": "x"}), ("unknown", {"reason": "x"}),
                         ("quarantine", {"reason": "x"})):
        reply = api.post(op_path("zombie-1", action), {"fence": 1, **body})
        assert reply.status == 409 and reply.json["error"]["code"] == "stale_fence", action

    done = api.post(op_path("zombie-1", "complete"), {"fence": 2, "outcome_code": "charged-by-b"})
    assert done.status == 200, done.text
    op = done.json["operation"]
    assert op["state"] == "succeeded" and op["fence"] == 2 and op["outcome_code"] == "charged-by-b"
    # The zombie retrying changes nothing.
    assert api.post(op_path("zombie-1", "complete"), {"fence": 1, "outcome_code": "charged-by-a"}).status == 409
    assert api.get(op_path("zombie-1")).json["outcome_code"] == "charged-by-b"


def test_a_lapsed_lease_alone_does_not_refuse_the_holder(api):
    enqueue(api, "lapsed-1")
    grant = claimed(api, "lapsed-1", lease_seconds=1)
    _wait_past(grant["lease_expires_at"])
    beat = api.post(op_path("lapsed-1", "heartbeat"), {"fence": 1, "worker_id": "worker-1", "lease_seconds": 60})
    assert beat.status == 200, beat.text
    assert claim(api, "worker-2").status == 204  # renewed: no takeover
    assert api.post(op_path("lapsed-1", "complete"), {"fence": 1, "outcome_code": "ok"}).status == 200


def test_exhausted_attempts_are_swept_to_unknown_and_resolved_by_an_operator(stack, api, token):
    enqueue(api, "last-try", max_attempts=1)
    enqueue(api, "class-d", target_class="D")
    a = claimed(api, "last-try", lease_seconds=1)
    b = claimed(api, "class-d", lease_seconds=1)
    _wait_past(max(a["lease_expires_at"], b["lease_expires_at"]))
    # Expired, but no attempt left: never claimed again ...
    assert claim(api, "worker-2").status == 204
    assert claim(api, "worker-2", operation_id="last-try").status == 204
    # ... and never failed or succeeded by the clock: the sweeper parks it as unknown.
    result = stack.sweep_now()
    assert result["swept"] >= 2 and result["stopped"] in ("drained", "max_batches")
    for operation_id in ("last-try", "class-d"):
        op = api.get(op_path(operation_id)).json
        assert op["state"] == "unknown", op
        assert op["outcome_code"] is None
    # The holder arrives too late.
    late = api.post(op_path("last-try", "complete"), {"fence": 1, "outcome_code": "ok"})
    assert late.status == 409 and late.json["error"]["code"] == "stale_fence"
    assert stack.sweep_now()["swept"] == 0  # idempotent

    # The operator finds them and decides.
    runner = CliRunner()
    common = ["--base-url", stack.base_url, "--token", token]
    listed = runner.invoke(cli, ["ops", "list", "--state", "unknown", "--json", *common])
    assert listed.exit_code == 0, listed.output
    assert "last-try" in listed.output and "class-d" in listed.output
    shown = runner.invoke(cli, ["ops", "show", "class-d", *common])
    assert shown.exit_code == 0 and "unknown" in shown.output
    done = runner.invoke(cli, ["ops", "resolve", "class-d", "--resolution", "succeeded", "--note", "ledger says paid",
                               *common])
    assert done.exit_code == 0, done.output
    assert api.get(op_path("class-d")).json["state"] == "succeeded"
    again = runner.invoke(cli, ["ops", "resolve", "class-d", "--resolution", "requeue", *common])
    assert again.exit_code == 1 and "invalid_transition" in again.output

    requeued = runner.invoke(cli, ["ops", "resolve", "last-try", "--resolution", "requeue", "--note", "retry", *common])
    assert requeued.exit_code == 0, requeued.output
    grant = claimed(api, "last-try")
    assert grant["fence"] == 2 and grant["reconcile_required"] is True  # fence keeps rising
    assert api.post(op_path("last-try", "complete"), {"fence": 2, "outcome_code": "ok"}).status == 200
