"""Reading a tenant's operations for people: the filters of ``GET /v1/operations`` and the bounded
counts per state of ``GET /v1/state-counts`` (the operator console's views).

Both read the tenant's write shards in order (``tenant_id`` = each of the caller's tenant's
partitions, :func:`leasefence.keys.tenant_partitions`; in each from the first possible operation
id: the tenant's directory, catalogue, claim-marker, payload and history items sort before it)
and apply the filters as a ``FilterExpression``: DynamoDB's ``Limit`` counts items read before the filter, so a
page of a narrow filter can be short (even empty) and still carry a cursor. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from leasefence import keys
from leasefence.errors import InvalidInput
from leasefence.model import State, TargetClass

#: How many operations a count reads at most (one page per 1 MB, about one read unit per 8 KB
#: read, eventually consistent): the counts say whether they covered the whole tenant.
MAX_COUNT_ITEMS = 5_000
DEFAULT_COUNT_ITEMS = 1_000
#: Longest text a list may search for (a substring of the id, the job type or the reason).
MAX_TEXT_QUERY = 256


@dataclass(frozen=True)
class Filters:
    """What a list (or a count) keeps; every field None keeps everything. Times are ms and bound
    ``updated_at`` (``updated_after`` inclusive, ``updated_before`` exclusive)."""

    state: State | None = None
    job_type: str | None = None
    target_class: TargetClass | None = None
    updated_after: int | None = None
    updated_before: int | None = None
    text: str | None = None

    @classmethod
    def of(
        cls,
        state: State | str | None = None,
        job_type: str | None = None,
        target_class: TargetClass | str | None = None,
        updated_after: int | None = None,
        updated_before: int | None = None,
        text: str | None = None,
    ) -> Filters:
        """Checked filters (:class:`InvalidInput` for a value that cannot match anything sane)."""
        try:
            state = None if state is None else State(state)
        except ValueError as error:
            raise InvalidInput("unknown state") from error
        try:
            target_class = None if target_class is None else TargetClass(target_class)
        except ValueError as error:
            raise InvalidInput("target_class must be A, B, C or D") from error
        for name, value in (("updated_after", updated_after), ("updated_before", updated_before)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidInput(f"{name} must be a time in ms")
        if text is not None and (not isinstance(text, str) or not 1 <= len(text) <= MAX_TEXT_QUERY):
            raise InvalidInput(f"the text to search for must be 1-{MAX_TEXT_QUERY} characters")
        if job_type is not None and (not isinstance(job_type, str) or not job_type):
            raise InvalidInput("job_type must be a job type")
        return cls(state, job_type, target_class, updated_after, updated_before, text)

    def without_state(self) -> Filters:
        return Filters(
            None,
            self.job_type,
            self.target_class,
            self.updated_after,
            self.updated_before,
            self.text,
        )

    def expression(self) -> tuple[str | None, dict[str, str], dict[str, Any]]:
        """``(FilterExpression or None, names, values)``."""
        parts: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        if self.state is not None:
            parts.append("#f_state = :f_state")
            names["#f_state"], values[":f_state"] = "state", self.state.value
        if self.job_type is not None:
            parts.append("#f_jt = :f_jt")
            names["#f_jt"], values[":f_jt"] = "job_type", self.job_type
        if self.target_class is not None:
            parts.append("#f_class = :f_class")
            names["#f_class"], values[":f_class"] = "target_class", self.target_class.value
        if self.updated_after is not None or self.updated_before is not None:
            names["#f_upd"] = "updated_at"
        if self.updated_after is not None:
            parts.append("#f_upd >= :f_after")
            values[":f_after"] = self.updated_after
        if self.updated_before is not None:
            parts.append("#f_upd < :f_before")
            values[":f_before"] = self.updated_before
        if self.text is not None:
            names.update({"#f_id": "operation_id", "#f_jt": "job_type", "#f_reason": "reason"})
            parts.append(
                "(contains(#f_id, :f_text) OR contains(#f_jt, :f_text) "
                "OR contains(#f_reason, :f_text))"
            )
            values[":f_text"] = self.text
        return (" AND ".join(parts) or None), names, values


@dataclass
class StateCounts:
    """How many of the tenant's operations (that match the filters) are in each state, among the
    first ``examined`` operations (write shard by write shard, each in id order); ``complete``:
    that was all of them."""

    counts: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in State})
    examined: int = 0
    complete: bool = False

    def to_public(self) -> dict[str, Any]:
        return {
            "counts": dict(self.counts),
            "total": sum(self.counts.values()),
            "examined": self.examined,
            "complete": self.complete,
        }


def partition_query(partition: str, filters: Filters) -> dict[str, Any]:
    """The ``Query`` of the operations of one of a tenant's write shards (strongly consistent),
    with ``filters``."""
    query: dict[str, Any] = {
        "KeyConditionExpression": "tenant_id = :t AND operation_id >= :first",
        "values": {":t": partition, ":first": keys.FIRST_OPERATION_ID},
        "ConsistentRead": True,
    }
    expression, names, values = filters.expression()
    if expression:
        query["FilterExpression"] = expression
        query["ExpressionAttributeNames"] = names
        query["values"].update(values)
    return query


def count_states(
    query_page: Callable[..., Any],
    partitions: Sequence[str],
    filters: Filters,
    limit: int = DEFAULT_COUNT_ITEMS,
) -> StateCounts:
    """Counts per state over at most ``limit`` operations of the tenant whose write shards are
    ``partitions`` (shard by shard, each in id order), reading only their state.
    ``query_page`` is the store's ``query``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_COUNT_ITEMS:
        raise InvalidInput(f"limit must be from 1 to {MAX_COUNT_ITEMS}")
    result = StateCounts()
    for partition in partitions:
        if result.examined >= limit:
            return result  # shards left unread
        query = partition_query(partition, filters.without_state())
        names = dict(query.get("ExpressionAttributeNames") or {})
        names["#c_state"] = "state"
        query["ExpressionAttributeNames"] = names
        query["ProjectionExpression"] = "#c_state"
        # Counting is a view: an eventually consistent read is half the price and good enough.
        query["ConsistentRead"] = False
        start: Any = None
        while True:
            page = query_page(
                start=start, Limit=limit - result.examined, Select="SPECIFIC_ATTRIBUTES", **query
            )
            for item in page.items:
                state = item.get("state")
                if state in result.counts:
                    result.counts[state] += 1
            result.examined += page.scanned if page.scanned else len(page.items)
            start = page.last_key
            if start is None:
                break
            if result.examined >= limit:
                return result  # stopped at the limit within this shard
    result.complete = True
    return result
