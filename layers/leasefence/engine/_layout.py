"""Each tenant's write shard counts, recorded once and never moved.

A deployment that sets no write shard counts (``TableSpec.operation_shards`` None, the default)
keeps each tenant's in an item of the tenant's bare partition (:data:`keys.LAYOUT_ID`), put by
the tenant's first enqueue with one conditional write (``attribute_not_exists``: the first
engine decides, every other reads its decision from the refusal):

* ``(NEW_TENANT_WRITE_SHARDS,)`` for a tenant with no operation yet;
* ``(1,)`` for a tenant that already has operations at the bare tenant id: every tenant of a
  deployment from before the recorded layout (whose engines wrote one write shard), found by one
  ``Query`` of the bare partition for an operation id (``Limit=1``).

The record never changes, so an engine keeps it for its life (one consistent ``GetItem`` per
engine and tenant), and no tenant's key function ever changes under its operations: an upgraded
deployment keeps its tenants where they are (no enqueue transaction, no extra read) while its
new tenants get 64.

Before a tenant's first enqueue records it, a command of the tenant decides the same way:

* operations found at the bare tenant id (a tenant of an upgraded deployment): the decision is
  ``(1,)``, the only one that keeps them reachable by id, and the one the tenant's next enqueue
  would record; so the command records it now, with the very conditional put an enqueue makes,
  and the engine caches what that put (or, refused, the record another engine put first) holds.
  Every later command of the tenant costs no layout read, in this engine or any other;
* none there (a brand-new tenant, or one whose operations are all gone): the command reads where
  the record would put it, ``(NEW_TENANT_WRITE_SHARDS,)``, and nothing is cached and nothing is
  written. That decision may still change (an operation put at the bare id by an engine of one
  write shard, during a rolling upgrade, makes the next decision ``(1,)``), so only a record may
  fix it; the tenant's next command reads again (one ``GetItem`` and one ``Query``).

What the cache may serve is only ever a record as stored, and a record never changes (an erasure
of the tenant keeps it: :mod:`leasefence.engine._erasure`), so a cached count is never stale.

A deployment that sets its counts (``LEASEFENCE_OPERATION_SHARDS``) uses them for every tenant, as
before, and never reads a record.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from leasefence import keys
from leasefence.limits import MEMORY_ENTRIES
from leasefence.schema import NEW_TENANT_WRITE_SHARDS, TableSpec
from leasefence.store import ConditionFailed, Store

#: The layout item's attribute holding the counts (the first: where new operations go).
COUNTS = "write_shards"


class TenantLayouts:
    """The write shard counts of each tenant (see the module's text)."""

    def __init__(self, store: Store, spec: TableSpec) -> None:
        self._store = store
        self._spec = spec
        self._lock = threading.Lock()
        self._recorded: OrderedDict[str, tuple[int, ...]] = OrderedDict()

    def counts(self, tenant_id: str, record: bool = False) -> tuple[int, ...]:
        """The tenant's counts; recorded first when they are not yet and either ``record`` (an
        enqueue, before its first write) or the tenant has operations at the bare id (see the
        module's text)."""
        if self._spec.operation_shards is not None:
            return self._spec.operation_shards
        with self._lock:
            cached = self._recorded.get(tenant_id)
        if cached is not None:
            return cached
        key = keys.tenant_key(tenant_id, keys.LAYOUT_ID)
        item = self._store.get(key)
        if item is None:
            upgraded = self._has_bare_operations(tenant_id)
            chosen = (1,) if upgraded else (NEW_TENANT_WRITE_SHARDS,)
            if not record and not upgraded:
                return chosen  # a brand-new tenant's decision may change: see the module's text
            try:
                # An UpdateItem that creates the item (not a PutItem): the worker function and the
                # sweeper, which never create operations, have no PutItem, yet run commands by id
                # of a tenant with no record yet.
                self._store.update(
                    key,
                    "SET #c = :c",
                    "attribute_not_exists(#k)",
                    {"#c": COUNTS, "#k": "operation_id"},
                    {":c": list(chosen)},
                    returns="NONE",
                )
                item = {COUNTS: list(chosen)}
            except ConditionFailed as refused:  # another engine recorded it first
                item = refused.item or self._store.get(key)
                if item is None:
                    raise
        counts = tuple(int(n) for n in item[COUNTS])
        with self._lock:
            self._recorded[tenant_id] = counts
            while len(self._recorded) > MEMORY_ENTRIES:
                self._recorded.popitem(last=False)
        return counts

    def _has_bare_operations(self, tenant_id: str) -> bool:
        """Whether an operation item is at the bare tenant id (one consistent query)."""
        return bool(
            self._store.query(
                KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                values={":t": tenant_id, ":first": keys.FIRST_OPERATION_ID},
                ProjectionExpression="operation_id",
                ConsistentRead=True,
                Limit=1,
            ).items
        )
