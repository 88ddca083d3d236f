"""The operations table, defined once.

The engine, the embedded DynamoDB, the tests and the CDK construct all read this module, so the
key names, the two sparse indexes and their projections cannot drift apart.

Layout (one item per operation):

* table key: ``tenant_id`` (HASH) + ``operation_id`` (RANGE). Two attributes, no separator, so no
  choice of characters in either id can make two identities collide. ``tenant_id`` holds the
  tenant's write shard of the operation (:func:`keys.operation_partition`: the bare tenant id
  for shard 0, ``<tenant>\t<n>`` above it; :attr:`TableSpec.operation_shards`).
* ``due`` index (sparse): holds an operation while it is ``queued`` or ``claimed`` with attempts
  left. Partition ``due_pk`` = ``<tenant>#<shard>#<job_type>`` (see :func:`keys.due_partition`:
  injective), sort ``due_at`` = when it becomes claimable (available time when queued, lease
  expiry when claimed). A claimer queries one shard of one job type of its tenant for
  ``due_at <= now``: the cost is the page it reads, never the queue depth, the table size or the
  amount of due work of other job types. The partition is kept in the item as ``due_home`` (set
  at enqueue, never changed), so a transition that puts an operation back in the index copies it
  (``SET due_pk = due_home``) without knowing the job type.
* ``sweep`` index (sparse): holds an operation while it is claimed on its last attempt. Partition
  ``sweep_pk`` = ``sweep#<shard>``, sort ``sweep_at`` = lease expiry. The sweeper reads only what is
  due there, across tenants.
* ``parked`` index (sparse): holds an operation while it is ``unknown`` or ``quarantined``.
  Partition ``parked_pk`` = ``<state>#<shard>``, sort ``parked_at``. One query per shard with
  ``Limit=1`` finds the oldest parked operation for the on-call alarm. Written only when an
  operation is parked or resolved, never on the hot path.

* ``purge`` index (sparse, keys only): holds an ended operation whose inline payload is still
  stored (in S3, or in the item itself: ``payload_json``, up to 1 KiB of canonical JSON, layout 1,
  which the purge removes with a conditional update and an erasure with its own write). Partition
  ``purge_pk`` = ``purge#<shard>`` (set at enqueue, for inline payloads in S3, and on items of
  layout 1; a payload item of layout 2 is deleted by DynamoDB's TTL instead, see
  :mod:`leasefence.engine._payload_items`), sort ``purge_at``
  = when the payload is due for deletion (set when the operation ends: its end plus the payload
  retention; at erasure: now, for an S3 object; an erasure of a payload kept in the item leaves
  the index at once). An operation without an inline payload gets ``purge_at`` but no
  ``purge_pk``, so it never enters the index (no index write).
* job-type directory: one item per tenant (sort key :data:`keys.DIRECTORY_ID`, which no operation
  id can take) listing the job types the tenant ever enqueued; it is in the ``parked`` index under
  :data:`keys.DIRECTORY_PARTITION`, so the sweeper finds every tenant's types without a scan.

* job-type catalogue: one entry item per catalogued job type (sort key
  :func:`keys.catalogue_id`) and one settings item (:data:`keys.SETTINGS_ID`) in the tenant's
  partition, in no index (see :mod:`leasefence.catalogue`). An operation of a catalogued type
  carries ``job_type_version``, ``lease_default_ms`` and ``lease_max_ms`` (not projected: the
  claim's write reads them from the item; the lease bounds until it ends, as everything only a
  live operation needs: :meth:`leasefence.engine._expr.Expr.end_of_life`).

Retention: an operation item carries no TTL while it can still change. When it ends
(``succeeded`` or ``failed_terminal``) it gets ``expires_at_epoch_s`` = end + the identity
retention (or none at all when identity retention is "forever"); DynamoDB deletes it some time
after that. Until then a replay of its id is a replay and its fences are never handed out again.

Heartbeats do not move index keys (that would cost an index delete plus put). A claimer that meets
a due entry whose lease was extended skips it (it reads the item once and remembers the lease) and
re-files it only where it may hide work (see ``Engine.claim_next``); the sweeper re-files such
entries of its own index.

Stream: the table's stream carries new and old images (:data:`STREAM_SPECIFICATION`). Every
transition writes ``transition``, ``actor`` and ``seq`` on the item, so its record tells what
happened; the worker (stream dispatch) and the publisher (history, outcome events) read it
(:mod:`leasefence.streams`). An operation's history is an item next to it (sort key
:func:`keys.history_id`), in no index.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Final, TypedDict

PARTITION_KEY: Final = "tenant_id"
SORT_KEY: Final = "operation_id"

DUE_INDEX: Final = "due"
DUE_PK: Final = "due_pk"
DUE_SK: Final = "due_at"

SWEEP_INDEX: Final = "sweep"
SWEEP_PK: Final = "sweep_pk"
SWEEP_SK: Final = "sweep_at"

PARKED_INDEX: Final = "parked"
PARKED_PK: Final = "parked_pk"
PARKED_SK: Final = "parked_at"

PURGE_INDEX: Final = "purge"
PURGE_PK: Final = "purge_pk"
PURGE_SK: Final = "purge_at"

#: The item's own due partition, copied into ``due_pk`` whenever the operation becomes due again.
DUE_HOME: Final = "due_home"

#: TTL attribute (DynamoDB requires epoch *seconds* here; everything else in the item is ms).
TTL_ATTRIBUTE: Final = "expires_at_epoch_s"


class OperationItem(TypedDict, total=False):
    """An operation's item, as the engine writes and reads it (names are the attribute names).

    ``total=False``: an index entry carries the keys and :data:`INDEX_PROJECTION` only, a
    compacted ended item drops what only a live operation needs, and a refused write's
    ``ALL_OLD`` item is whatever the item was. Times are integer milliseconds (but
    ``expires_at_epoch_s``); JSON-valued attributes (``checkpoint``, ``intent``) are stored as
    their compact JSON text. :data:`OPERATION_ATTRIBUTES` lists the names.
    """

    # identity (kept for the identity retention, whatever else is erased or compacted)
    tenant_id: str
    operation_id: str
    job_type: str
    target_class: str
    payload_hash: str
    payload_ref: str | None
    #: The payload is one leasefence stores: in S3 (``payload_ref`` names the object) or, when
    #: ``payload_ref`` is absent, in this item (``payload_json``).
    payload_inline: bool
    #: A stored payload kept in the item: its canonical JSON (RFC 8785) as text, whose SHA-256 is
    #: ``payload_hash``; at most :data:`~leasefence.limits.MAX_ITEM_PAYLOAD_BYTES`. Written only
    #: by the enqueue's conditional put, removed by the purge or the erasure; in no index.
    payload_json: str
    job_type_version: int
    #: The producer's W3C trace context (:mod:`leasefence.tracecontext`), when the enqueue
    #: carried one: written by the enqueue's put, never changed after, handed on by every claim.
    traceparent: str
    tracestate: str
    created_at: int
    # state and fences
    state: str
    fence: int
    attempts: int
    max_attempts: int
    attempt_budget: int
    updated_at: int
    # the last transition (see leasefence.model.Transition): name, who, sequence number
    transition: str
    actor: str | None
    seq: int
    # the sparse indexes (see the module docstring)
    due_home: str
    due_pk: str
    due_at: int
    sweep_pk: str
    sweep_at: int
    parked_pk: str
    parked_at: int
    purge_pk: str
    purge_at: int
    expires_at_epoch_s: int
    # the claim
    lease_owner: str
    lease_expires_at: int
    lease_ms: int
    lease_default_ms: int
    lease_max_ms: int
    claimed_at: int
    claimed_from: str
    claim_token: str
    checkpoint: str
    intent: str
    requeued: bool
    # how it ended (or was parked)
    closed_fence: int
    closed_by: str
    outcome_code: str
    reason: str
    # the approval gate
    enqueued_by: str | None
    approval_expires_at: int
    approved_by: str
    approved_at: int
    # operator decisions, payload retention, erasure
    resolution_note: str
    resolved_as: str
    resolve_token: str
    payload_purged_at: int
    erased_at: int
    #: The layout the item was written under (:data:`LAYOUT`); absent: layout 1 (main 4f60178 and
    #: before: a stored payload up to 1 KiB in ``payload_json``, no payload item).
    lv: int
    # the history, written by each transition's own write (leasefence.history): its compact
    # entries, how many compaction dropped, and the mark of an item that has no history item
    h: list[dict[str, Any]]
    hd: int
    hv: int
    #: The history list's bytes (an upper bound: :func:`leasefence.history.start`).
    hb: int


#: The table layout new operation items are written under, recorded on each (``lv``). Layout 2:
#: a stored payload of up to :data:`~leasefence.limits.MAX_ITEM_PAYLOAD_BYTES` lives in a payload
#: item of its own (:func:`leasefence.keys.payload_id`), never in the operation item, so every
#: write of the operation item stays under 1 KB with ordinary ids. Items without ``lv`` are
#: layout 1 and stay readable, completable and erasable.
LAYOUT: Final = 2
LAYOUT_ATTRIBUTE: Final = "lv"
#: The payload item's one attribute besides its key (and its expiry): the payload's canonical
#: JSON as text, or packed (:func:`leasefence.payloads.pack`: binary, raw DEFLATE) where that is
#: shorter. A writer of this release leaves one of the two (a writer from before packing that
#: rewrites an expired packed item leaves both, of the same bytes: a reader takes either).
PAYLOAD_BODY: Final = "payload_json"
PAYLOAD_PACKED: Final = "payload_z"

#: Every attribute an operation item may carry.
OPERATION_ATTRIBUTES: Final = frozenset(OperationItem.__annotations__)

#: Non-key attributes copied into both indexes: enough for a claimer to build its conditional
#: write without reading the item. None of them changes on a heartbeat, so heartbeats never
#: write to an index.
INDEX_PROJECTION = ("state", "fence", "attempts", "max_attempts", "job_type")

#: The table's stream: new and old images (the publisher compares them; a takeover is told from
#: the old image's holder). The CDK table sets ``stream=NEW_AND_OLD_IMAGES``.
STREAM_SPECIFICATION = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}

DEFAULT_TABLE_NAME = "leasefence-operations"
DEFAULT_DUE_SHARDS = 64
DEFAULT_SWEEP_SHARDS = 4
#: No counts set for the deployment: each tenant's are recorded at its first enqueue
#: (:mod:`leasefence.engine._layout`): :data:`NEW_TENANT_WRITE_SHARDS` for a tenant with no
#: operation yet, 1 for one whose operations are at the bare tenant id already.
DEFAULT_OPERATION_SHARDS: Final = None
#: A new tenant's write shards when the deployment sets none (10,000 lifecycles per second for
#: one tenant with 64 due shards: docs/scale.md).
NEW_TENANT_WRITE_SHARDS: Final = 64
#: The most write shards per tenant: a listing, a count or a tenant's erasure reads each.
MAX_OPERATION_SHARDS: Final = 256


@dataclass(frozen=True)
class TableSpec:
    """Names and shard counts for one deployment of the operations table."""

    table_name: str = DEFAULT_TABLE_NAME
    due_shards: int = DEFAULT_DUE_SHARDS
    sweep_shards: int = DEFAULT_SWEEP_SHARDS
    #: The base table's write shards per tenant (:func:`leasefence.keys.operation_partition`):
    #: the first count is where new operations go; any others are counts the deployment wrote
    #: with before (or will write with: see docs/scale.md, "Write shards"), whose keys an
    #: operation found by id alone may still have. ``(1,)``: the bare tenant id only. None (the
    #: default): each tenant's counts as recorded at its first enqueue
    #: (:mod:`leasefence.engine._layout`).
    operation_shards: tuple[int, ...] | None = DEFAULT_OPERATION_SHARDS

    def __post_init__(self) -> None:
        if self.due_shards < 1 or self.sweep_shards < 1:
            raise ValueError("shard counts must be at least 1")
        counts = self.operation_shards
        if counts is not None and (
            not counts or any(not 1 <= n <= MAX_OPERATION_SHARDS for n in counts)
        ):
            raise ValueError(f"write shard counts must be from 1 to {MAX_OPERATION_SHARDS}")


def attribute_definitions() -> list[dict[str, str]]:
    return [
        {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
        {"AttributeName": SORT_KEY, "AttributeType": "S"},
        {"AttributeName": DUE_PK, "AttributeType": "S"},
        {"AttributeName": DUE_SK, "AttributeType": "N"},
        {"AttributeName": SWEEP_PK, "AttributeType": "S"},
        {"AttributeName": SWEEP_SK, "AttributeType": "N"},
        {"AttributeName": PARKED_PK, "AttributeType": "S"},
        {"AttributeName": PARKED_SK, "AttributeType": "N"},
        {"AttributeName": PURGE_PK, "AttributeType": "S"},
        {"AttributeName": PURGE_SK, "AttributeType": "N"},
    ]


def key_schema() -> list[dict[str, str]]:
    return [
        {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
        {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
    ]


def global_secondary_indexes() -> list[dict[str, Any]]:
    projection = {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(INDEX_PROJECTION)}
    return [
        {
            "IndexName": DUE_INDEX,
            "KeySchema": [
                {"AttributeName": DUE_PK, "KeyType": "HASH"},
                {"AttributeName": DUE_SK, "KeyType": "RANGE"},
            ],
            "Projection": projection,
        },
        {
            "IndexName": SWEEP_INDEX,
            "KeySchema": [
                {"AttributeName": SWEEP_PK, "KeyType": "HASH"},
                {"AttributeName": SWEEP_SK, "KeyType": "RANGE"},
            ],
            "Projection": projection,
        },
        {
            "IndexName": PARKED_INDEX,
            "KeySchema": [
                {"AttributeName": PARKED_PK, "KeyType": "HASH"},
                {"AttributeName": PARKED_SK, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        },
        {
            "IndexName": PURGE_INDEX,
            "KeySchema": [
                {"AttributeName": PURGE_PK, "KeyType": "HASH"},
                {"AttributeName": PURGE_SK, "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        },
    ]


def create_table_request(spec: TableSpec | None = None, stream: bool = False) -> dict[str, Any]:
    """The ``CreateTable`` request for the embedded endpoint and tests (CDK mirrors it).
    ``stream``: with the table's stream (the local stack; tests that do not read it leave it off:
    recording it costs the embedded endpoint about a tenth more per write)."""
    spec = spec if spec is not None else TableSpec()
    request: dict[str, Any] = {
        "TableName": spec.table_name,
        "AttributeDefinitions": attribute_definitions(),
        "KeySchema": key_schema(),
        "GlobalSecondaryIndexes": global_secondary_indexes(),
        "BillingMode": "PAY_PER_REQUEST",
    }
    if stream:
        request["StreamSpecification"] = dict(STREAM_SPECIFICATION)
    return request


#: How long :func:`create_table` waits for the table to be ``ACTIVE`` (DynamoDB answers
#: ``CREATING`` first, and ``UPDATING`` after a stream is added), and how often it looks.
ACTIVE_TIMEOUT_S: Final = 300.0
ACTIVE_POLL_S: Final = 0.2


class TableNotReady(Exception):
    """The table did not become ``ACTIVE`` in time, is being deleted, or has a TTL setting of its
    own that :func:`create_table` will not change (the message says which and what to do)."""


def wait_until_active(
    client: Any, table_name: str, timeout_s: float = ACTIVE_TIMEOUT_S
) -> dict[str, Any]:
    """Poll ``DescribeTable`` until the table is ``ACTIVE``; its description. A table not (yet)
    visible is waited for too (an endpoint may list a new table a moment later)."""
    deadline = time.monotonic() + timeout_s
    status = "not found"
    while True:
        try:
            table: dict[str, Any] = client.describe_table(TableName=table_name)["Table"]
        except client.exceptions.ResourceNotFoundException:
            table, status = {}, "not found"
        else:
            status = table.get("TableStatus", "ACTIVE")  # an endpoint that omits it serves it
            if status == "ACTIVE":
                return table
            if status in (
                "DELETING",
                "ARCHIVING",
                "ARCHIVED",
                "INACCESSIBLE_ENCRYPTION_CREDENTIALS",
            ):
                raise TableNotReady(f"table {table_name} is {status}: it will not become ACTIVE")
        if time.monotonic() >= deadline:
            raise TableNotReady(
                f"table {table_name} is still {status} after {timeout_s:g} s (it must be ACTIVE)"
            )
        time.sleep(ACTIVE_POLL_S)


def ensure_ttl(client: Any, table_name: str) -> None:
    """TTL on :data:`TTL_ATTRIBUTE`: enabled when it is off (a table created without it, or
    before it was set); nothing when it is on or being switched on. A table whose TTL is on
    another attribute, or being switched off, is refused: DynamoDB lets a table change its TTL
    setting only once an hour, so that is an operator's decision, not this function's."""
    described = client.describe_time_to_live(TableName=table_name)["TimeToLiveDescription"]
    status = described.get("TimeToLiveStatus", "DISABLED")
    attribute = described.get("AttributeName")
    if status == "DISABLED":
        client.update_time_to_live(
            TableName=table_name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
        return
    if status in ("ENABLED", "ENABLING") and attribute == TTL_ATTRIBUTE:
        return
    raise TableNotReady(
        f"table {table_name} has TTL {status} on {attribute!r}; leasefence needs it on "
        f"{TTL_ATTRIBUTE!r}: disable it (UpdateTimeToLive) and start again"
    )


def create_table(
    client: Any,
    spec: TableSpec | None = None,
    stream: bool = False,
    ttl: bool = True,
    timeout_s: float = ACTIVE_TIMEOUT_S,
) -> dict[str, Any]:
    """Create the table unless it exists, wait until it is ``ACTIVE``, and make it what the
    engine needs: its stream when ``stream`` asks for one, TTL on :data:`TTL_ATTRIBUTE` (enabled
    on an existing table without it; ``ttl=False``: left as it is, for an endpoint without TTL).
    For local endpoints and tests (the CDK construct makes the deployed table). Returns the
    table's description."""
    spec = spec if spec is not None else TableSpec()
    name = spec.table_name
    with contextlib.suppress(client.exceptions.ResourceInUseException):
        client.create_table(**create_table_request(spec, stream=stream))
    table = wait_until_active(client, name, timeout_s)
    if stream and "LatestStreamArn" not in table:
        client.update_table(TableName=name, StreamSpecification=dict(STREAM_SPECIFICATION))
        table = wait_until_active(client, name, timeout_s)
    if ttl:
        ensure_ttl(client, name)
    return table
