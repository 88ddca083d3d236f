"""The worker Lambda function, invoked with its sample scheduled event against the embedded stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.runtime import installed, local_environment
from leasefence import settings
from leasefence.schema import TableSpec

H = "sha256:" + "8" * 64
EVENT = json.loads((Path(__file__).parents[2] / "events" / "worker-scheduled.json").read_text())


class Context:
    function_name = "leasefence-worker"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:leasefence-worker"
    aws_request_id = "req-1"

    def __init__(self, remaining_ms):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self):
        return self.remaining_ms


@pytest.fixture
def worker_function(aws, spec, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    # What the function reads from its environment (LEASEFENCE_WORKER_HANDLERS, ..._TENANTS, ...).
    handlers = "functions.worker.demo_handlers:HANDLERS"
    more = {"WORKER_HANDLERS": handlers, "WORKER_TENANTS": "acme,globex", "WORKER_IDLE_MS": "10"}
    config = settings.Settings.from_env(local_environment(spec, aws.endpoint, **more))
    with installed(config) as rt:
        from functions.worker import handler

        handler._built = None
        yield handler, rt.engine
        handler._built = None


def test_worker_function_drains_every_tenant_it_serves(worker_function):
    handler, engine = worker_function
    for tenant in ("acme", "globex"):
        for i in range(3):
            engine.enqueue(tenant, f"receipt-{i}", "demo-receipt", H)
    engine.enqueue("initech", "receipt-0", "demo-receipt", H)  # a tenant this fleet does not serve
    result = handler.lambda_handler(EVENT, Context(remaining_ms=900_000))
    assert result == {"jobs": 6}
    for tenant in ("acme", "globex"):
        assert {engine.get(tenant, f"receipt-{i}").state for i in range(3)} == {"succeeded"}
    assert engine.get("initech", "receipt-0").state == "queued"


def test_worker_function_claims_nothing_without_time_for_a_lease(worker_function):
    handler, engine = worker_function
    engine.enqueue("acme", "receipt-0", "demo-receipt", H)
    assert handler.lambda_handler(EVENT, Context(remaining_ms=60_000)) == {"jobs": 0}
    assert engine.get("acme", "receipt-0").state == "queued"
