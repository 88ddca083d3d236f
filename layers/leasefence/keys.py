"""Index key encoding and shard choice. The encodings are unambiguous by construction."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from leasefence.limits import MAX_PARTITION_KEY_BYTES, MAX_SORT_KEY_BYTES

#: Starts the digest that stands for the part of a key that would pass DynamoDB's key limits
#: (:func:`fit_key`): a control character, which no id has, so a digest never equals an id.
KEY_DIGEST_MARK = "\x1f"


def fit_key(prefix: str, part: str, max_bytes: int) -> str:
    """``prefix + part``, or when that is longer than ``max_bytes`` bytes of UTF-8 (DynamoDB's key
    limits are bytes: ids of 256 four-byte characters are 1 KiB), ``prefix`` +
    :data:`KEY_DIGEST_MARK` + the SHA-256 of ``part``. Keys that fit are unchanged, so every key
    written before stays where it is (a longer one could never be written)."""
    key = prefix + part
    if len(key.encode()) <= max_bytes:
        return key
    return prefix + KEY_DIGEST_MARK + hashlib.sha256(part.encode()).hexdigest()


#: Separates a tenant id from its write shard in the base table's partition key (shard ``n >= 1``
#: is ``<tenant>\t<n>``). A tab: a control character, which no tenant id has
#: (:data:`leasefence.validation.CONTROL_CHARACTERS`), so no shard's key can equal another
#: tenant's id (with ``#`` it could: tenant ``a``'s shard 1 would be tenant ``a#1``'s partition),
#: and the per-tenant IAM pattern ``<tenant>\t*`` reaches that tenant's shards and nobody else's.
#: Of the control characters, the one IAM policies name as allowed (with LF and CR), and one that
#: every JSON encoder writes escaped (``\t``), so templates stay ASCII (DEL, which IAM allows too,
#: is written raw and refused by YAML parsers such as cfn-lint's).
SHARD_MARK = "\t"


def shard_partition(tenant_id: str, shard: int) -> str:
    """The base table's partition key of a tenant's write shard: shard 0 is the bare tenant id,
    shard ``n >= 1`` is ``<tenant>`` + :data:`SHARD_MARK` + ``n``."""
    return tenant_id if shard == 0 else f"{tenant_id}{SHARD_MARK}{shard}"


def operation_partition(tenant_id: str, operation_id: str, shards: int = 1) -> str:
    """The base table's partition key of an operation item and its payload items, for a
    deployment that writes ``shards`` write shards per tenant: the shard is a hash of the
    identity modulo ``shards`` (:func:`shard_of`). With one shard it is the bare tenant id.
    Where an existing item lives is its own key (:func:`item_key`), which never moves; an
    engine that finds an operation by id alone looks where each of its deployment's shard
    counts would have put it (``Engine``'s ``locate``)."""
    return shard_partition(tenant_id, shard_of(tenant_id, operation_id, shards))


def operation_partitions(tenant_id: str, operation_id: str, counts: tuple[int, ...]) -> list[str]:
    """Where an operation may live in a deployment whose write shard counts are ``counts`` (the
    first: where new operations go; the others: counts it wrote with before, or will write
    with soon). Distinct, the write count's first."""
    return list(dict.fromkeys(operation_partition(tenant_id, operation_id, n) for n in counts))


def tenant_partitions(tenant_id: str, counts: tuple[int, ...]) -> list[str]:
    """Every write shard of the tenant a deployment with shard counts ``counts`` may have
    written: shards 0 to the largest count - 1 (what a listing, a count or an erasure reads)."""
    return [shard_partition(tenant_id, n) for n in range(max(counts))]


def tenant_of(partition: str) -> str:
    """The tenant id of a base-table partition key (a write shard's or the bare tenant's)."""
    return partition.split(SHARD_MARK, 1)[0]


def shard_in(partition: str) -> int:
    """The write shard of a base-table partition key (0 for the bare tenant id)."""
    _, mark, shard = partition.partition(SHARD_MARK)
    return int(shard) if mark else 0


def item_key(item: Mapping[str, Any]) -> dict[str, str]:
    """The key an item (or an index entry of it) is stored under: where it lives, never derived
    again (an item written under another shard count stays where it was written)."""
    return {"tenant_id": item["tenant_id"], "operation_id": item["operation_id"]}


def operation_key(tenant_id: str, operation_id: str, shards: int = 1) -> dict[str, str]:
    """The key a new operation item gets (``shards``: the deployment's write shard count)."""
    return {
        "tenant_id": operation_partition(tenant_id, operation_id, shards),
        "operation_id": operation_id,
    }


def tenant_key(tenant_id: str, sort_key: str) -> dict[str, str]:
    """The key of one of a tenant's own items (directory, catalogue, settings) or of the
    deployment's (:data:`FLEET_TENANT`): in the tenant's bare partition (shard 0), never sharded:
    each is written once per tenant and job type or by an operator, and read through caches."""
    return {"tenant_id": tenant_id, "operation_id": sort_key}


def shard_of(tenant_id: str, operation_id: str, shards: int) -> int:
    """A stable shard for one identity (length-prefixed so ``("a#", "b")`` != ``("a", "#b")``)."""
    t, o = tenant_id.encode(), operation_id.encode()
    digest = hashlib.sha256(len(t).to_bytes(4, "big") + t + o).digest()
    return int.from_bytes(digest[:8], "big") % shards


def escape_tenant(tenant_id: str) -> str:
    """The tenant id with ``\\`` and ``#`` escaped, so the first unescaped ``#`` ends it. Tenant ids
    usable with tenant isolation (IAM session tag values) contain neither, so for them this is
    the id itself and an IAM pattern ``<tenant>#*`` matches exactly that tenant's partitions."""
    return tenant_id.replace("\\", "\\\\").replace("#", "\\#")


def due_partition(tenant_id: str, shard: int, job_type: str) -> str:
    """``<tenant>#<shard>#<job_type>`` (tenant escaped): one claim partition per tenant, job type
    and shard. Injective: the escaped tenant ends at its first unescaped ``#``, the shard is all
    digits up to the next ``#``, the job type is the rest. A claim for a job type therefore reads
    only that type's partitions, however much due work of other types exists. A job type that
    would make it longer than DynamoDB's partition key limit is a digest (:func:`fit_key`)."""
    return fit_key(f"{escape_tenant(tenant_id)}#{shard}#", job_type, MAX_PARTITION_KEY_BYTES)


def parse_due_partition(value: str) -> tuple[str, int, str]:
    i = 0
    tenant: list[str] = []
    while value[i] != "#":
        if value[i] == "\\":
            i += 1
        tenant.append(value[i])
        i += 1
    shard, _, job_type = value[i + 1 :].partition("#")
    return "".join(tenant), int(shard), job_type


def sweep_partition(shard: int) -> str:
    return f"sweep#{shard}"


def parked_partition(state: str, shard: int) -> str:
    return f"{state}#{shard}"


def purge_partition(shard: int) -> str:
    return f"purge#{shard}"


#: The tenant namespace of shadow operations (:mod:`leasefence.shadow`): ``shadow:<tenant>``.
SHADOW_PREFIX = "shadow:"


def is_shadow_tenant(tenant_id: str) -> bool:
    return tenant_id.startswith(SHADOW_PREFIX)


#: The tenant's own items (its job-type directory, catalogue entries and settings) have sort keys
#: that start with this control character, which no operation id has.
TENANT_ITEM_PREFIX = "\x00"
#: The job-type directory of a tenant: an item in the tenant's own partition whose sort key no
#: operation id can take (operation ids have no control characters).
DIRECTORY_ID = "\x00job-types"
#: Directory items are listed (keys only) under this ``parked`` index partition, so the sweeper
#: can find every tenant's job types without scanning.
DIRECTORY_PARTITION = "directory#0"
#: A tenant's job-type catalogue: one entry item per job type under this prefix + the job type, and
#: one settings item (strict mode). Both start with ``\x00`` like the directory (no operation id
#: can take them; listings and the stream's operation records never meet them), and the prefix
#: differs from :data:`DIRECTORY_ID` at its tenth character, so no job type makes them collide.
CATALOGUE_PREFIX = "\x00job-type:"
SETTINGS_ID = "\x00settings"
#: A tenant's write shard counts, recorded at its first enqueue (:mod:`leasefence.engine._layout`):
#: in the bare partition like the settings, never changed and never erased (it holds no data of
#: the tenant's, and an engine caches it for its life).
LAYOUT_ID = "\x00layout"


def catalogue_id(job_type: str) -> str:
    return fit_key(CATALOGUE_PREFIX, job_type, MAX_SORT_KEY_BYTES)


#: The due spread hint of a job type (``engine._spread``): how many due shards its enqueues use
#: now. In the tenant's own partition under this prefix + the job type (no operation id can take
#: it; listings and the streams' filters never meet it; a tenant's erasure deletes it).
SPREAD_PREFIX = "\x00spread:"


def spread_id(job_type: str) -> str:
    return fit_key(SPREAD_PREFIX, job_type, MAX_SORT_KEY_BYTES)


#: A claim-next marker: which operation a claim request with a client claim token claimed, so a
#: resend of that request (its answer was lost) finds the same claim. In the tenant's partition
#: under this prefix + a digest of (worker id, claim token): no operation id can take that sort
#: key, listings never meet it, and the streams' filters drop it (it records no transition).
CLAIM_MARKER_PREFIX = "\x00claim:"


def claim_marker_id(worker_id: str, claim_token: str) -> str:
    w, t = worker_id.encode(), claim_token.encode()
    return CLAIM_MARKER_PREFIX + hashlib.sha256(len(w).to_bytes(4, "big") + w + t).hexdigest()


def claim_marker_key(tenant_id: str, marker_id: str, shards: int = 1) -> dict[str, str]:
    """A claim marker's key: written once per claim with a token, so it is spread over the
    tenant's write shards like operations (a hash of the marker's id: a resend of the request
    finds it with nothing but the worker id and the token). Growing the shard count moves where
    new markers go; a resend across the change finds no marker and claims anew, which is what a
    resend after the marker's expiry does too."""
    return {
        "tenant_id": operation_partition(tenant_id, marker_id, shards),
        "operation_id": marker_id,
    }


#: An operation's history item lives in its tenant's partition under this prefix + the operation
#: id: no operation id can take that sort key (no control characters), and it sorts before every
#: operation id, so listings never meet it.
HISTORY_PREFIX = "\x01"


def history_id(operation_id: str) -> str:
    return fit_key(HISTORY_PREFIX, operation_id, MAX_SORT_KEY_BYTES)


#: An operation's payload item (layout 2) lives in its operation's partition under this prefix,
#: the operation id (cut to a digest by :func:`fit_key` when long) and ``\x00`` +
#: the payload's SHA-256 in hex: no operation id can take that sort key (no control
#: characters), it sorts before every operation id (listings never meet it), and
#: :func:`payload_prefix` of one operation finds every payload item ever written for it (an
#: orphan of a refused or crashed enqueue included). The hash in the key makes a payload item
#: immutable: a different payload for the same id lands in another item, so writing it can never
#: change what a live operation reads; the operation item's payload hash decides which one counts.
PAYLOAD_PREFIX = "\x02"
_PAYLOAD_HASH_PART = 1 + 64  # "\x00" + SHA-256 in hex


def payload_prefix(operation_id: str) -> str:
    """What every payload item of ``operation_id`` starts with (a ``begins_with`` finds them)."""
    fitted = fit_key(PAYLOAD_PREFIX, operation_id, MAX_SORT_KEY_BYTES - _PAYLOAD_HASH_PART)
    return fitted + "\x00"


def payload_id(operation_id: str, payload_hash: str) -> str:
    """The sort key of the payload item holding the payload that hashes to ``payload_hash``
    (``sha256:<hex>``)."""
    return payload_prefix(operation_id) + payload_hash.removeprefix("sha256:")


def payload_key(partition: str, operation_id: str, payload_hash: str) -> dict[str, str]:
    """The key of the payload item holding ``payload_hash``'s payload of the operation whose
    item lives in ``partition`` (a payload item lives next to its operation item)."""
    return {
        "tenant_id": partition,
        "operation_id": payload_id(operation_id, payload_hash),
    }


#: Every operation id sorts at or after this (no control characters): listings start here.
FIRST_OPERATION_ID = " "

#: Items of the deployment itself, of no tenant: a partition no tenant id can take (tenant ids
#: have no control characters), so no tenant's query, listing or erasure ever meets it.
FLEET_TENANT = "\x00leasefence"
#: The sweeper's progress clearing the TTLs of ended identities once retention became forever.
RETENTION_ID = "\x00retention"
#: Where the sweeper's sample of due work (``OldestDueAgeSeconds``) resumes: a cursor over the
#: tenants' job-type directories, so that run after run every tenant is visited. Like
#: :data:`RETENTION_ID` it starts with :data:`TENANT_ITEM_PREFIX` (no operation id: the stream
#: functions skip it) and carries no index key.
OLDEST_DUE_CURSOR_ID = "\x00oldest-due-cursor"
