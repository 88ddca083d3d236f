"""A lifecycle (enqueue, claim, heartbeat, complete) through the client openapi-python-client
generates from openapi.json (the package ``leasefence_client``, on ``sys.path`` as the first
argument). Run by the generator's own interpreter (tests/generated_clients/.venv: httpx and attrs);
LEASEFENCE_URL, LEASEFENCE_TOKEN, OPERATION_ID: env. Prints what it saw as JSON."""

import json
import os
import sys

sys.path.insert(0, sys.argv[1])

from leasefence_client import AuthenticatedClient
from leasefence_client.api.operations import (
    claim_operation,
    complete_operation,
    enqueue_batch,
    enqueue_operation,
    heartbeat,
)
from leasefence_client.models import (
    ClaimEnvelope,
    ClaimRequest,
    CompleteRequest,
    EnqueueBatchOut,
    EnqueueBatchRequest,
    EnqueueByReference,
    EnqueueInline,
    EnqueueOut,
    ErrorDetail,
    ErrorOut,
    HeartbeatRequest,
    LeaseOut,
    OperationEnvelope,
)

client = AuthenticatedClient(
    base_url=os.environ["LEASEFENCE_URL"], token=os.environ["LEASEFENCE_TOKEN"]
)
operation_id = os.environ["OPERATION_ID"]

# The model refuses a body without operation_id (mypy refuses it too, and payload=None:
# python_types_check.py).
try:
    EnqueueInline(job_type="generated", payload=1)  # type: ignore[call-arg]
    refused = False
except TypeError:
    refused = True
# An error code the document does not list parses as a plain string (the list is open).
newer = ErrorDetail.from_dict({"code": "a_code_added_later", "message": "m"}).code

enqueued = enqueue_operation.sync_detailed(
    client=client,
    body=EnqueueInline(operation_id=operation_id, job_type="generated", payload=[1, "two"]),
)
assert isinstance(enqueued.parsed, EnqueueOut), enqueued
claimed = claim_operation.sync(
    client=client,
    body=ClaimRequest(worker_id="py-worker", operation_id=operation_id, lease_seconds=30),
)
assert isinstance(claimed, ClaimEnvelope), claimed
fence = claimed.claim.fence
beat = heartbeat.sync(
    client=client, id=operation_id, body=HeartbeatRequest(fence=fence, worker_id="py-worker")
)
assert isinstance(beat, LeaseOut), beat
stale = complete_operation.sync_detailed(
    client=client, id=operation_id, body=CompleteRequest(fence=fence + 1, outcome_code="done")
)
assert isinstance(stale.parsed, ErrorOut), stale
done = complete_operation.sync(
    client=client, id=operation_id, body=CompleteRequest(fence=fence, outcome_code="done")
)
assert isinstance(done, OperationEnvelope), done
# A batch: both alternatives of the body, and each item's own answer (201, then 409 for the id
# above with another payload), each body parsed as its alternative (EnqueueOut, ErrorOut).
batch = enqueue_batch.sync(
    client=client,
    body=EnqueueBatchRequest(
        items=[
            EnqueueByReference(
                operation_id=f"{operation_id}-ref",
                job_type="generated",
                payload_ref="s3://bucket/key",
                payload_hash="sha256:" + "0" * 64,
            ),
            EnqueueInline(operation_id=operation_id, job_type="generated", payload="another"),
        ]
    ),
)
assert isinstance(batch, EnqueueBatchOut), batch
batched = [[r.status, type(r.body).__name__] for r in batch.results]
print(
    json.dumps(
        {
            "enqueued": int(enqueued.status_code),
            "fence": fence,
            "lease_expires_at": beat.lease_expires_at.isoformat(),
            "stale": [int(stale.status_code), str(stale.parsed.error.code.value)],
            "state": done.operation.state.value,
            "refused_without_operation_id": refused,
            "newer_code": newer,
            "batched": batched,
        }
    )
)
