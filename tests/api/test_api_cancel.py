"""Cancel over HTTP only before any attempt: an operation queued again after one is 409
``already_attempted`` (the SDK raises AlreadyAttempted) and nothing changes."""

from __future__ import annotations

import pytest
from tests.support.api import claimed, enqueue, op_path

from leasefence.errors import AlreadyAttempted


def test_cancel_of_an_operation_queued_again_after_an_attempt_is_409_already_attempted(api, sdk):
    enqueue(api, "rt-1", {"n": 1})
    grant = claimed(api, "rt-1")
    failed = api.post(
        op_path("rt-1", "fail"),
        {"fence": grant["fence"], "retryable": True, "reason": "timeout", "retry_after_seconds": 0},
    )
    assert failed.status == 200, failed.text
    assert failed.json["operation"]["state"] == "queued"
    before = api.get(op_path("rt-1")).json
    refused = api.post(op_path("rt-1", "cancel"), {})
    assert refused.status == 409, refused.text
    assert refused.json["error"]["code"] == "already_attempted"
    assert api.get(op_path("rt-1")).json == before  # nothing changed
    with pytest.raises(AlreadyAttempted):
        sdk.cancel("rt-1")
    assert claimed(api, "rt-1")["reconcile_required"] is True  # its next claim reconciles it
