"""Reads: one operation, a tenant's operations, an operation's history, a tenant's job types."""

from __future__ import annotations

import dataclasses
import threading

from leasefence import cursor as cursors
from leasefence import history as histories
from leasefence import keys, listing
from leasefence.engine import _payload_items as payload_items
from leasefence.engine._context import EngineContext
from leasefence.errors import NotFound
from leasefence.limits import DIRECTORY_CACHE_ENTRIES, DIRECTORY_CACHE_MS, MAX_LIST_PAGE
from leasefence.model import Operation, Page, State
from leasefence.validation import validate_id, validate_limit


class Reads:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        #: Per tenant: the job types its directory named, and when that was read.
        self._directories: dict[str, tuple[tuple[str, ...], int]] = {}
        self._lock = threading.Lock()

    def get(self, tenant_id: str, operation_id: str) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        item = self.ctx.find(tenant_id, operation_id)
        if item is None:
            raise NotFound("operation not found")
        return Operation.from_item(payload_items.as_read(item, self.ctx.clock()))

    def history(
        self, tenant_id: str, operation_id: str, limit: int, cursor: str | None
    ) -> histories.HistoryPage:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        found = self.ctx.find(tenant_id, operation_id)
        if found is None:
            raise NotFound("operation not found")
        item = payload_items.as_read(found, self.ctx.clock())
        # The history is in the item (written by each transition's own write); an operation
        # enqueued before that also has a history item, merged in.
        return histories.read(
            self.ctx.store,
            item["tenant_id"],  # the partition the operation (and its history item) is in
            operation_id,
            int(item["created_at"]),
            limit=limit,
            cursor=cursor,
            item=item,
        )

    def job_types(self, tenant_id: str) -> list[str]:
        validate_id("tenant_id", tenant_id)
        item = self.ctx.store.get(keys.tenant_key(tenant_id, keys.DIRECTORY_ID), consistent=False)
        return sorted((item or {}).get("job_types", []))

    def directory(self, tenant_id: str, fresh: bool = False) -> tuple[tuple[str, ...], bool]:
        """The tenant's job types for a claim, and whether they are what an earlier read found
        (within :data:`~leasefence.limits.DIRECTORY_CACHE_MS`; a directory that names no type is
        never kept): a claim that finds work in them reads no directory. ``fresh``: read it now."""
        now = self.ctx.clock()
        with self._lock:
            cached = self._directories.get(tenant_id)
        if not fresh and cached is not None and 0 <= now - cached[1] < DIRECTORY_CACHE_MS:
            return cached[0], True
        types = tuple(self.job_types(tenant_id))
        with self._lock:
            self._directories.pop(tenant_id, None)
            # In the order they were read: the oldest go first, past their time or over the cap.
            while self._directories and (
                len(self._directories) >= DIRECTORY_CACHE_ENTRIES
                or now - next(iter(self._directories.values()))[1] >= DIRECTORY_CACHE_MS
            ):
                self._directories.pop(next(iter(self._directories)))
            if types:
                self._directories[tenant_id] = (types, now)
        return types, False

    def forget(self, tenant_id: str) -> None:
        """Drop what this engine read of ``tenant_id``'s directory (its erasure)."""
        with self._lock:
            self._directories.pop(tenant_id, None)

    def list(
        self,
        tenant_id: str,
        state: State | str | None,
        limit: int,
        cursor: str | None,
        filters: listing.Filters | None = None,
    ) -> Page:
        validate_id("tenant_id", tenant_id)
        validate_limit(limit, MAX_LIST_PAGE)
        chosen = filters or listing.Filters()
        if state is not None:
            chosen = dataclasses.replace(chosen, state=listing.Filters.of(state=state).state)
        partitions = self.ctx.partitions(tenant_id)
        shard, position = cursors.decode_listing_position(cursor) if cursor else (0, "")
        found: list[Operation] = []
        # The tenant's write shards in order, each in id order; at most 20 queries per page
        # past one per shard (a tenant of 64 write shards with a few operations: one page).
        rounds = 20 + len(partitions)
        while shard < len(partitions) and rounds > 0:
            query = listing.partition_query(partitions[shard], chosen)
            start = _start_key(partitions[shard], position)
            while rounds > 0:
                rounds -= 1
                # Limit counts items read, so the page stops exactly where the cursor resumes.
                page = self.ctx.store.query(start=start, Limit=limit - len(found), **query)
                now = self.ctx.clock()
                found.extend(Operation.from_item(payload_items.as_read(i, now)) for i in page.items)
                start = page.last_key
                if start is None or len(found) >= limit:
                    break
            if start is not None:  # stopped inside this shard
                return Page(found, cursors.encode_listing_cursor(shard, start["operation_id"]))
            shard, position = shard + 1, ""
            if len(found) >= limit:
                break
        more = shard < len(partitions)
        return Page(found, cursors.encode_listing_cursor(shard, "") if more else None)

    def state_counts(
        self, tenant_id: str, filters: listing.Filters | None, limit: int
    ) -> listing.StateCounts:
        validate_id("tenant_id", tenant_id)
        return listing.count_states(
            self.ctx.store.query,
            self.ctx.partitions(tenant_id),
            filters or listing.Filters(),
            limit=limit,
        )


def _start_key(partition: str, position: str) -> dict[str, str] | None:
    """The key a listing of one write shard resumes after: any position the cursor's pattern
    admits (one before the first possible id: the shard's start, None). The cursor names only a
    position; the tenant always comes from the caller."""
    if position < keys.FIRST_OPERATION_ID:
        return None
    return {"tenant_id": partition, "operation_id": position}
