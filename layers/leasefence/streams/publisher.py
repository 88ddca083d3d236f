"""The publisher function's logic: outcome events, compaction of the history in the item, and
the history item of operations enqueued before the history moved into the item.

Each transition writes its own history entry into the operation's item (:mod:`leasefence.history`):
for such an operation (``hv`` on the item) the publisher writes no history; it compacts the list
when a record shows it past its bound (one write conditional on the record's ``seq``), then
publishes the outcome event. The mapping's filters (:mod:`leasefence.streams.filters`) hand it
only those records and the records of operations enqueued before (no ``hv``), for which it keeps
doing what it did: each record becomes an entry of the operation's history item, and the
deletion of the operation item deletes that history item.

Per record, in stream order (a shard's records for one operation arrive in the order of its
writes; the function stops its batch at the first failed record, so none overtakes it): the
history entry is written first (placed by ``seq``: idempotent, and a late one is inserted where
it belongs), then the outcome event is published. A failure raises, so the record (and every
later one of the batch) is reported in the partial batch response and delivered again from
there; the history write recognizes it, the event goes out again (at least once: events carry
``sequence``, consumers dedupe and order by it). A record that still fails after the mapping's
retries (one that can never be read, :class:`~leasefence.streams.records.MalformedRecord`, or a
fault that outlasts them) is kept whole in the mapping's on-failure destination, an S3 bucket,
and :mod:`leasefence.streams.redrive` replays it through this same code.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from leasefence import history
from leasefence.metrics import Metric
from leasefence.model import Transition
from leasefence.store import Store
from leasefence.streams import events, records

log = logging.getLogger("leasefence.publisher")


class Publisher:
    """History and events for one table; ``bus`` None records history only."""

    def __init__(
        self,
        store: Store,
        events_client: Callable[[], Any],
        bus: str | None,
        count: Callable[[str, float], None] | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self._events_client = events_client
        self.count = count if count is not None else (lambda _name, _value: None)

    def handle(self, record: Mapping[str, Any]) -> str:
        """Process one record; returns what was done (``recorded``, ``published``, ``removed``,
        ``skipped``). Raises to have the record delivered again."""
        change = records.parse(record)
        if change.event_name == "REMOVE":
            if (
                change.is_operation
                and change.old is not None
                and "created_at" in change.old
                and not history.in_item(change.old)
            ):
                history.remove(self.store, change.old)  # a history item written before
                return "removed"
            return "skipped"
        transition = change.transition
        if transition is None:
            return "skipped"  # a heartbeat, an index repair, a purge: no transition
        new = change.new
        assert new is not None
        if history.compact(self.store, new):
            self.count(Metric.HISTORY_COMPACTIONS, 1)
        if not history.in_item(new):
            # An operation enqueued before the history moved into its item: its history item.
            entry = history.entry_from(change.old, new)
            if history.record(self.store, new, entry, reset=transition is Transition.ERASE):
                self.count(Metric.HISTORY_ENTRIES, 1)
        if self.bus is None:
            return "recorded"
        published = events.entry(change, self.bus)
        if published is None:
            return "recorded"
        events.publish(self._events_client(), [published])
        self.count(Metric.EVENTS_PUBLISHED, 1)
        return "published"
