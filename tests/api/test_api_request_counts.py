"""The DynamoDB requests the API function makes for a busy tenant's lifecycles through the batch
routes, on the default layout (as the construct deploys it): each item costs its own writes and
its own per-item reads, and what every item shares (the tenant's layout, its settings, the job
type's catalogue entry and spread hint) is read at most once per batch (twice when a cache period
ends in the middle of one), never once per item. ``leasefence bench`` measures the same
(``profiles``, ``http_workers_batched``) with the units; this keeps the counts from creeping back.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from leasefence import keys
from leasefence.client import LeaseFenceClient

#: Lifecycles per batch request (the bench's fleet of batched workers).
BATCH = 8
TENANT = "counted"
JOB = "counted-job"


class Recording:
    """A DynamoDB client that records each data request: (phase, method, sort key kind, consistent)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.phase = "setup"
        self.calls: list[tuple[str, str, str, bool]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in (
            "get_item",
            "put_item",
            "update_item",
            "delete_item",
            "query",
            "transact_write_items",
        ):
            return target

        def call(**kwargs: Any) -> Any:
            key = kwargs.get("Key") or kwargs.get("Item") or {}
            sort_key = key.get("operation_id", {}).get("S", kwargs.get("IndexName", "table"))
            self.calls.append(
                (self.phase, name, _kind(sort_key), bool(kwargs.get("ConsistentRead")))
            )
            return target(**kwargs)

        return call

    def of(self, phase: str) -> list[tuple[str, str, bool]]:
        return [
            (method, kind, consistent) for p, method, kind, consistent in self.calls if p == phase
        ]


def _kind(sort_key: str) -> str:
    """What an item is: a tenant's item by its id (layout, settings, a catalogue entry, a spread
    hint, ...), else one of an operation's (its own, its payload, a claim marker)."""
    if sort_key.startswith(keys.CLAIM_MARKER_PREFIX):
        return "marker"
    if sort_key.startswith(keys.PAYLOAD_PREFIX):
        return "payload"
    if sort_key.startswith(keys.TENANT_ITEM_PREFIX) or sort_key in ("due", "table"):
        return sort_key
    return "operation"


def test_a_batch_reads_what_its_items_share_once_and_each_item_costs_the_engines_requests(
    default_stack,
):
    runtime = default_stack.runtime
    recording = Recording(runtime.client("dynamodb"))
    runtime.install_client("dynamodb", recording)  # before the first request makes the engine
    sdk = LeaseFenceClient(default_stack.base_url, default_stack.token(TENANT), retries=1)

    def lifecycles(tag: str) -> None:
        ids = [f"{tag}-{i}" for i in range(BATCH)]
        recording.phase = f"{tag}:enqueue"
        enqueued = sdk.enqueue_batch(
            [{"operation_id": op, "job_type": JOB, "payload": {"n": op}} for op in ids]
        )
        assert all(r.ok for r in enqueued)
        recording.phase = f"{tag}:claim"
        claims = sdk.claim_batch(
            [{"worker_id": f"w-{i}", "lease_seconds": 30, "job_types": [JOB]} for i in range(BATCH)]
        )
        made = [r.result() for r in claims]
        assert sorted(c.operation_id for c in made) == ids and all(c.payload for c in made)
        recording.phase = f"{tag}:heartbeat"
        renewed = sdk.heartbeat_batch(
            [
                {
                    "operation_id": c.operation_id,
                    "fence": c.fence,
                    "worker_id": f"w-{i}",
                    "lease_seconds": 30,
                }
                for i, c in enumerate(made)
            ]
        )
        assert all(r.ok for r in renewed)
        recording.phase = f"{tag}:finish"
        finished = sdk.finish_batch(
            [
                {
                    "action": "complete",
                    "operation_id": c.operation_id,
                    "fence": c.fence,
                    "outcome_code": "ok",
                }
                for c in made
            ]
        )
        assert all(r.ok for r in finished)

    lifecycles("first")  # the tenant's first: its layout recorded, its job type filed
    lifecycles("busy")

    enqueue, claim = recording.of("busy:enqueue"), recording.of("busy:claim")
    heartbeat, finish = recording.of("busy:heartbeat"), recording.of("busy:finish")
    # Per item: the payload item and the operation (enqueue); the marker's write (a first send
    # does not read it), the due query, the claim write and the payload read for the answer
    # (claim); one write (heartbeat);
    # the closing write and the payload's expiry (finish).
    per_item = {
        "enqueue": Counter({("update_item", "payload"): 1, ("put_item", "operation"): 1}),
        "claim": Counter(
            {
                ("query", "due"): 1,
                ("update_item", "marker"): 1,
                ("update_item", "operation"): 1,
                ("get_item", "payload"): 1,
            }
        ),
        "heartbeat": Counter({("update_item", "operation"): 1}),
        "finish": Counter({("update_item", "operation"): 1, ("update_item", "payload"): 1}),
    }
    for phase, calls in (
        ("enqueue", enqueue),
        ("claim", claim),
        ("heartbeat", heartbeat),
        ("finish", finish),
    ):
        made = Counter((method, kind) for method, kind, _ in calls)
        expected = Counter({call: n * BATCH for call, n in per_item[phase].items()})
        shared = made - expected
        assert not expected - made, (phase, made)
        # What is left is what the items share, read at most twice per batch, never per item.
        assert all(n <= 2 for n in shared.values()), (phase, shared)
        assert all(kind.startswith(keys.TENANT_ITEM_PREFIX) for _, kind in shared), (phase, shared)
        assert sum(shared.values()) <= 4, (phase, shared)
    # No layout read once recorded; the claim answer's payload read is eventually consistent (half
    # the units of a consistent one); no marker read (tests/engine/test_claim_token_once.py: a
    # resend's is consistent).
    assert not [c for c in recording.calls if c[0].startswith("busy") and c[2] == keys.LAYOUT_ID]
    assert {
        consistent
        for method, kind, consistent in claim
        if (method, kind) == ("get_item", "payload")
    } == {False}
    assert not [c for c in claim if c[:2] == ("get_item", "marker")]
