"""Payload items (layout 2): a stored payload of up to 1 KiB in an item of its own, next to its
operation, so that the operation item stays under 1 KB and each of its writes costs one unit.

* **Written before the operation item**, by the enqueue (an unconditional put: the sort key holds
  the payload's hash, :func:`leasefence.keys.payload_id`, so two writes of one key write the same
  bytes and a different payload never lands on a live operation's item). The operation item's
  conditional put then decides, alone, whether this is a new operation, a replay or a conflict.
* **Kept only when its operation refers to it.** An enqueue refused by the operation item's put
  drops the payload item it wrote unless the existing operation is of layout 2, has the same
  hash and its payload was neither purged nor erased (:func:`keeps`). With the purge and the
  erasure marking the operation first and deleting after, every interleaving of a replay with a
  purge or an erasure leaves no payload item behind. A crash between the two writes leaves an
  orphan that no operation refers to: an erasure of that operation id and a tenant's erasure
  find it (:func:`delete_all`: every payload item under the operation's prefix).
* **Read** by :func:`read` with a strongly consistent ``GetItem`` (the claim answer, the payload
  route, the worker runtime), checked against the operation's hash like an S3 object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from leasefence import keys
from leasefence.engine._context import EngineContext
from leasefence.errors import PayloadMissing
from leasefence.payloads import read_kept
from leasefence.schema import LAYOUT, LAYOUT_ATTRIBUTE, PAYLOAD_BODY


def in_payload_item(item: Mapping[str, Any]) -> bool:
    """Whether the operation's stored payload lives (or lived, until purged or erased) in a
    payload item: an inline payload without a ``payload_ref``, written under layout 2."""
    return (
        int(item.get(LAYOUT_ATTRIBUTE, 1)) >= LAYOUT
        and bool(item.get("payload_inline"))
        and not item.get("payload_ref")
    )


def write(
    ctx: EngineContext, partition: str, operation_id: str, payload_hash: str, text: str
) -> None:
    """Put the payload item (before the operation item's put: see the module's docstring), in
    the operation's partition (``partition``: its write shard)."""
    key = keys.payload_key(partition, operation_id, payload_hash)
    ctx.store.put_plain({**key, PAYLOAD_BODY: text})


def keeps(existing: Mapping[str, Any], payload_hash: str) -> bool:
    """Whether an operation item that refused an enqueue refers to the payload item that enqueue
    wrote (same layout-2 payload, still stored): only then does the item stay."""
    return (
        in_payload_item(existing)
        and existing.get("payload_hash") == payload_hash
        and "payload_purged_at" not in existing
        and "erased_at" not in existing
    )


def drop(ctx: EngineContext, partition: str, operation_id: str, payload_hash: str) -> None:
    """Delete one payload item (harmless when already gone)."""
    ctx.store.delete_plain(keys.payload_key(partition, operation_id, payload_hash))


def delete_all(ctx: EngineContext, partition: str, operation_id: str) -> int:
    """Delete every payload item of the operation in ``partition`` (its own and any orphan): one
    query of its prefix and a delete each. Returns how many it deleted."""
    prefix = keys.payload_prefix(operation_id)
    deleted, start = 0, None
    while True:
        page = ctx.store.query(
            KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
            values={":t": partition, ":p": prefix},
            ProjectionExpression="tenant_id, operation_id",
            ConsistentRead=True,
            start=start,
        )
        for found in page.items:
            ctx.store.delete_plain(
                {"tenant_id": found["tenant_id"], "operation_id": found["operation_id"]}
            )
            deleted += 1
        if page.last_key is None:
            return deleted
        start = page.last_key


def read(ctx: EngineContext, partition: str, operation_id: str, payload_hash: str) -> bytes:
    """The payload an operation of layout 2 (in ``partition``) refers to, checked against its
    hash; :class:`PayloadMissing` when its item is gone (purged, erased) or does not match."""
    found = ctx.store.get(keys.payload_key(partition, operation_id, payload_hash))
    if found is None or PAYLOAD_BODY not in found:
        raise PayloadMissing("the payload was purged or erased")
    return read_kept(str(found[PAYLOAD_BODY]), payload_hash)
