"""Records the operation items main 4f60178 (table layout 1) writes, for the release record test
(``tests/engine/test_layout_release.py``). Run it with 4f60178's code, never this branch's:

    git -C <clone> archive 4f60178 layers tools | tar -x -C /tmp/lf-4f60178
    PYTHONPATH=/tmp/lf-4f60178/layers:/tmp/lf-4f60178/tools \\
        .venv/bin/python tests/engine/releases/record_layout1.py > tests/engine/releases/layout1-4f60178.json

Every item of the table (operations, history items, the directory, claim markers), in DynamoDB's
wire format, after: an operation enqueued (payload kept in the item), one claimed and holding a
lease, one parked ``unknown``, one succeeded, one failed terminally, one awaiting approval, one
with its payload in S3 (``payload_ref``) and one by reference.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import TableSpec
from leasefence_tools.local.embedded import EmbeddedAws

T = "release-tenant"


def main() -> None:
    spec = TableSpec(table_name="release-ops", due_shards=4, sweep_shards=2)
    with EmbeddedAws() as aws:
        aws.create_tables(spec)
        aws.client("s3").create_bucket(Bucket="release-payloads")
        store = PayloadStore("release-payloads", secret=b"release", client=aws.client("s3"))
        clock = ManualClock(1_796_000_000_000)
        engine = Engine(
            client=aws.client(), spec=spec, clock=clock, rng=random.Random(1), payloads=store
        )

        def kept(op: str, payload: dict, **kwargs) -> None:
            c = canonicalize(payload)
            engine.enqueue(T, op, "refund", c.hash, payload_json=c.body, **kwargs)

        kept("op-queued", {"order": "q", "cents": 100})
        kept("op-claimed", {"order": "c", "cents": 200})
        engine.claim(T, "op-claimed", "w-old", lease_ms=60_000, claim_token="tok-1")
        kept("op-unknown", {"order": "u", "cents": 300}, max_attempts=1, target_class="D")
        claim = engine.claim(T, "op-unknown", "w-old")
        engine.park_unknown(T, "op-unknown", claim.fence, "timeout")
        kept("op-succeeded", {"order": "s", "cents": 400})
        claim = engine.claim(T, "op-succeeded", "w-old")
        engine.complete(T, "op-succeeded", claim.fence, "refunded")
        kept("op-failed", {"order": "f", "cents": 500}, max_attempts=1)
        claim = engine.claim(T, "op-failed", "w-old")
        engine.fail(T, "op-failed", claim.fence, False, "card declined")
        kept("op-approval", {"order": "a", "cents": 600}, approval_required=True, actor="producer")
        big = canonicalize({"order": "big", "note": "x" * 2000})
        stored = store.put(T, "op-s3", big)
        engine.enqueue(T, "op-s3", "refund", big.hash, payload_ref=stored.ref, payload_inline=True)
        ref_hash = "sha256:" + hashlib.sha256(b"by-reference").hexdigest()
        engine.enqueue(T, "op-ref", "refund", ref_hash, payload_ref="s3://theirs/op-ref.json")
        clock.advance(1_000)
        items = aws.client().scan(TableName=spec.table_name, ConsistentRead=True)["Items"]
        objects = {
            o["Key"]: aws.client("s3")
            .get_object(Bucket="release-payloads", Key=o["Key"])["Body"]
            .read()
            .decode()
            for o in aws.client("s3").list_objects_v2(Bucket="release-payloads").get("Contents", [])
        }
    items.sort(key=lambda i: (i["tenant_id"]["S"], i["operation_id"]["S"]))
    json.dump(
        {"commit": "4f60178", "clock": clock(), "items": items, "objects": objects},
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
