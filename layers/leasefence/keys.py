"""Index key encoding and shard choice. The encodings are unambiguous by construction."""

from __future__ import annotations

import hashlib


def shard_of(tenant_id: str, operation_id: str, shards: int) -> int:
    """A stable shard for one identity (length-prefixed so ``("a#", "b")`` != ``("a", "#b")``)."""
    t, o = tenant_id.encode(), operation_id.encode()
    digest = hashlib.sha256(len(t).to_bytes(4, "big") + t + o).digest()
    return int.from_bytes(digest[:8], "big") % shards


def due_partition(tenant_id: str, shard: int) -> str:
    """``<tenant_id>#<shard>``: the shard is the text after the last ``#`` and is all digits, so
    the tenant is everything before it, whatever characters the tenant id contains."""
    return f"{tenant_id}#{shard}"


def parse_due_partition(value: str) -> tuple[str, int]:
    tenant_id, _, shard = value.rpartition("#")
    return tenant_id, int(shard)


def sweep_partition(shard: int) -> str:
    return f"sweep#{shard}"


def parked_partition(state: str, shard: int) -> str:
    return f"{state}#{shard}"
