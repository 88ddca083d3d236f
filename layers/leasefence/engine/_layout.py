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
new tenants get 64. Until a tenant's first enqueue records it, a command of the tenant reads
where the record would put it (nothing is cached, nothing is written). A deployment that sets its
counts (``LEASEFENCE_OPERATION_SHARDS``) uses them for every tenant, as before, and never reads a
record.
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
        """The tenant's counts; with ``record`` (an enqueue, before its first write), recorded
        first when they are not yet."""
        if self._spec.operation_shards is not None:
            return self._spec.operation_shards
        with self._lock:
            cached = self._recorded.get(tenant_id)
        if cached is not None:
            return cached
        key = keys.tenant_key(tenant_id, keys.LAYOUT_ID)
        item = self._store.get(key)
        if item is None:
            chosen = (1,) if self._has_bare_operations(tenant_id) else (NEW_TENANT_WRITE_SHARDS,)
            if not record:
                return chosen
            try:
                self._store.put_new(
                    {**key, COUNTS: list(chosen)},
                    "attribute_not_exists(#k)",
                    {"#k": "operation_id"},
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
