"""The profiles' measurement tells apart the stream invocations that only outcome events cause
(what a deployment without events never makes): tallied as ``<function>+events``."""

from __future__ import annotations

from leasefence.streams import mappings
from leasefence_tools.bench.allin import EVENTS_ONLY
from leasefence_tools.bench.profiles import _Invocations


def _record(tenant: str, transition: str, state: str) -> dict:
    image = {
        "tenant_id": {"S": tenant}, "operation_id": {"S": "op-1"}, "hv": {"N": "1"},
        "transition": {"S": transition}, "state": {"S": state}, "purge_at": {"N": "1"},
    }  # fmt: skip
    keys = {k: image[k] for k in ("tenant_id", "operation_id")}
    return {"eventName": "MODIFY", "dynamodb": {"Keys": keys, "NewImage": image}}


def test_a_batch_no_record_of_which_a_mapping_without_events_passes_is_events_only() -> None:
    invocations = _Invocations(("api", "worker", "publisher"))
    invocations.events_off = {
        "worker": mappings.shared(events=False, tenants=["acme"]).filters,
        "publisher": mappings.publisher(events=False).filters,
    }
    enqueue = _record("acme", "enqueue", "queued")
    complete = _record("acme", "complete", "succeeded")
    other_enqueue = _record("globex", "enqueue", "queued")  # a tenant of HTTP workers
    assert invocations.label("worker", {"Records": [complete]}) == "worker" + EVENTS_ONLY
    assert invocations.label("worker", {"Records": [other_enqueue, complete]}) == "worker" + EVENTS_ONLY
    assert invocations.label("worker", {"Records": [complete, enqueue]}) == "worker"
    assert invocations.label("publisher", {"Records": [complete]}) == "publisher" + EVENTS_ONLY
    # Not a stream batch (an API request, a schedule's tick): the function's own name.
    assert invocations.label("api", {"body": "{}"}) == "api"
    assert invocations.label("worker", {"source": "aws.scheduler"}) == "worker"
