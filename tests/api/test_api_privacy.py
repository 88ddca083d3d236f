"""No log line, metric or printed output of a request carries a raw tenant id, operation id,
worker id or payload: only keyed hashes."""

from __future__ import annotations

import io
import logging

import pytest
from tests.support.api import Api, op_path

from leasefence import observability
from leasefence.privacy import keyed_hash
from leasefence.settings import runtime

TENANT = "tenant-SECRET-7f3a"
OPERATION = "order-SECRET-91c2"
WORKER = "worker-SECRET-55aa"
PAYLOAD_MARK = "card-SECRET-4111111111111111"
SECRETS = (TENANT, OPERATION, WORKER, PAYLOAD_MARK, "SECRET")


@pytest.fixture
def captured_logs():
    """Every record the service logs (formatted exactly as in Lambda), while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(observability.logger.registered_formatter)
    root = logging.getLogger(observability.SERVICE)
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def test_requests_log_only_keyed_hashes(stack, captured_logs, capfd, monkeypatch):
    api = Api(stack.base_url, stack.token(TENANT))
    payload = {"card": PAYLOAD_MARK, "nested": [{"k": PAYLOAD_MARK}]}
    steps = [
        api.post("/v1/operations", {"operation_id": OPERATION, "job_type": "charge", "payload": payload}),
        api.post("/v1/operations", {"operation_id": OPERATION, "job_type": "charge", "payload": payload}),  # replay
        api.post("/v1/operations", {"operation_id": OPERATION, "job_type": "charge", "payload": {"x": PAYLOAD_MARK}}),
        api.post("/v1/operations", {"operation_id": OPERATION, "job_type": "charge", "payload": 1,
                                    "max_attemps": PAYLOAD_MARK}),  # 422 naming the field
        api.post("/v1/operations", raw='{"operation_id": "' + OPERATION + '", '),  # 400
        api.get(op_path(OPERATION)),
        api.get(op_path(OPERATION, "payload")),
        api.post("/v1/claims", {"worker_id": WORKER, "lease_seconds": 60}),
        api.post(op_path(OPERATION, "heartbeat"), {"fence": 1, "worker_id": WORKER, "checkpoint": PAYLOAD_MARK}),
        api.post(op_path(OPERATION, "heartbeat"), {"fence": 7, "worker_id": WORKER}),  # stale
        api.post(op_path(OPERATION, "complete"), {"fence": 1, "outcome_code": "ok"}),
        api.get(op_path(OPERATION + "-missing")),
        api.get("/v1/operations?state=succeeded"),
    ]
    assert [r.status for r in steps] == [201, 200, 409, 422, 400, 200, 200, 200, 200, 409, 200, 404, 200]

    # An unexpected failure whose message quotes the ids is logged without that message.
    def boom(*args, **kwargs):
        raise RuntimeError(f"exploded on {TENANT}/{OPERATION} with {PAYLOAD_MARK}")

    monkeypatch.setattr(runtime().engine, "get", boom)
    crashed = api.get(op_path(OPERATION))
    assert crashed.status == 500 and crashed.json == {"error": {"code": "internal_error", "message": "internal error"}}
    monkeypatch.undo()

    logs = captured_logs.getvalue()
    printed = capfd.readouterr()
    everything = logs + printed.out + printed.err
    assert logs.count('"message":"request"') == len(steps) + 1  # the access lines were captured
    assert '"message":"unhandled error"' in logs and "RuntimeError" in logs
    assert '"_aws"' in printed.out  # metrics were flushed (EMF on stdout)
    for secret in SECRETS:
        assert secret not in everything, secret
    # ... but the keyed hashes are there, so a record can still be correlated.
    assert keyed_hash(TENANT, OPERATION) in logs
