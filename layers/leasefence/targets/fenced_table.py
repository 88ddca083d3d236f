"""Class B: a DynamoDB table (or any store with conditional writes) that carries fences.

Each target item keeps, per operation that writes it, the highest fence it has seen, in an
attribute named after the operation's identity digest. Every write through :class:`FencedTable`
is conditional on that fence not being higher than the writer's, inside the write. Two
subtleties:

- fences are per operation, so an item written by several operations compares each operation's
  fence separately (one attribute each);
- a stale holder must be refused even before the new holder's first write, so a new holder calls
  :meth:`FencedTable.raise_fence` right after its claim (a write that only raises the fence) and
  before it reconciles or acts. A stale write that landed before the raise is visible to the new
  holder's reconcile; one that comes after it is refused.
"""

from __future__ import annotations

from typing import Any, Callable

from leasefence.errors import TargetRefused
from leasefence.store import ConditionFailed, Store
from leasefence.targets.identity import identity_digest
from leasefence.worker.runtime import Job, LostOwnership


def fence_attribute(tenant_id: str, operation_id: str) -> str:
    return "lf_fence_" + identity_digest(tenant_id, operation_id)[:40]


class FencedTable:
    """Fenced writes to one target table."""

    def __init__(self, client: Any, table_name: str, events: Callable[[str, float], None] | None = None) -> None:
        self.store = Store(table_name, client=client)
        self.events = events if events is not None else (lambda name, value: None)

    def raise_fence(self, job: Job, key: dict[str, Any]) -> None:
        """Make the target refuse every lower fence of this operation from now on."""
        attr = fence_attribute(job.tenant_id, job.operation_id)
        self._write(job, key, "SET #lf = :f", {"#lf": attr}, {":f": job.fence}, business=None)

    def write(
        self,
        job: Job,
        key: dict[str, Any],
        values: dict[str, Any],
        condition: str | None = None,
        names: dict[str, str] | None = None,
        condition_values: dict[str, Any] | None = None,
        append: dict[str, list[Any]] | None = None,
    ) -> None:
        """Set ``values`` (and append to the lists in ``append``) on the target item under this
        job's fence, plus an optional guard of the caller's."""
        job.guard()
        attr = fence_attribute(job.tenant_id, job.operation_id)
        all_names = {"#lf": attr, **(names or {})}
        all_values: dict[str, Any] = {":f": job.fence, **(condition_values or {})}
        sets = ["#lf = :f"]
        for i, (name, value) in enumerate(values.items()):
            all_names[f"#v{i}"] = name
            all_values[f":v{i}"] = value
            sets.append(f"#v{i} = :v{i}")
        for i, (name, items) in enumerate((append or {}).items()):
            all_names[f"#a{i}"] = name
            all_values[f":a{i}"] = list(items)
            all_values[":empty"] = []
            sets.append(f"#a{i} = list_append(if_not_exists(#a{i}, :empty), :a{i})")
        self._write(job, key, "SET " + ", ".join(sets), all_names, all_values, business=condition)

    def _write(self, job: Job, key: dict[str, Any], update: str, names: dict[str, str], values: dict[str, Any],
               business: str | None) -> None:
        job.guard()
        fence_ok = "(attribute_not_exists(#lf) OR #lf <= :f)"
        condition = f"{fence_ok} AND ({business})" if business else fence_ok
        try:
            self.store.update(key, update, condition, names, values, returns="NONE")
        except ConditionFailed as refused:
            seen = (refused.item or {}).get(names["#lf"])
            if seen is not None and int(seen) > job.fence:
                self.events("StaleTargetWritesRejected", 1)
                job.lose(f"target has seen fence {seen}")
                raise LostOwnership(f"target refused fence {job.fence}: it has seen {seen}") from None
            raise TargetRefused("the target's own condition was not met") from None

    def read(self, key: dict[str, Any]) -> dict[str, Any] | None:
        return self.store.get(key)
