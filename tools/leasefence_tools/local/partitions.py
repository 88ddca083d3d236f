"""DynamoDB's per-partition throughput limits, for the embedded endpoint (a :class:`Fidelity` option).

DynamoDB serves at most 1,000 write units and 3,000 read units per second per partition, for the
base table and for each global secondary index alike, on-demand tables included; one partition
key value starts on one partition. Past that a request fails with ``ThrottlingException``
(``ProvisionedThroughputExceededException`` on a provisioned table) whose throttling reasons
(``throttlingReasons``; ``ThrottlingReasons`` in the latter)
name ``TableWriteKeyRangeThroughputExceeded``, ``IndexReadKeyRangeThroughputExceeded`` and so on
(``<Table|Index><Read|Write>KeyRangeThroughputExceeded``), and a transaction is cancelled with
``ThrottlingError`` reasons (``ProvisionedThroughputExceeded`` on a provisioned table).

:class:`PartitionMeter` meters the units each partition key value consumes per one-second window
of its clock (injectable; the endpoint's clock by default, which tests freeze and advance), with
the unit rules of :mod:`leasefence_tools.bench.units` (the bench's meter uses the same):

* a write: 1 unit per KB of the larger of the item before and after it (a transaction 2x); a
  refused conditional write the existing item's size; each index write (a put, a delete, both
  when the index key changes, an update when only projected values change) 1 unit per KB of the
  projected entry, charged to the entry's own index partition key value;
* a GetItem: 1 unit per 4 KB strongly consistent, half eventually consistent; a Query: the sizes
  of every item it read (before any filter or projection) summed, then rounded to 4 KB; an index
  Query reads projected entries, always eventually consistent.

Admission, per partition the request is known to touch before it runs (the table partition; for
an index, the entry the item has before the write and, for a put, after it; the partition a
query reads): refused when that partition has already used its limit in the current window, or
when it has used some of it and the units known before the request runs would pass the limit (a
request always passes on a fresh window, so an item larger than a scaled-down limit can still be
written). What a request actually consumed is charged after it ran, so an update that grows an
item, or that moves an index key to a new partition, can take a partition past its limit by that
one request. No split for heat, no burst capacity, no adaptive capacity.

``time_scale``: every limit divided by it, so a run on this machine at ``1/time_scale`` of an
offered load stands for that load (a scale of 100 makes 10 write units a second per partition).

Not metered: Scan, BatchGetItem, TransactGetItems (the engine's paths use none of them per
lifecycle); BatchWriteItem's puts and deletes are metered item by item and a throttled one fails
the whole request (DynamoDB would return it in ``UnprocessedItems``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from leasefence_tools.bench import units as U

#: DynamoDB's per-partition limits, units per second.
PARTITION_WCU = 1000.0
PARTITION_RCU = 3000.0

_ERROR_PREFIX = "com.amazonaws.dynamodb.v20120810#"


@dataclass(frozen=True)
class Charge:
    """Units a request consumes (or is known to consume) on one partition."""

    table: str
    index: str | None  # None: the base table
    partition: str  # the partition key value, as JSON of its wire form
    kind: str  # "Read" or "Write"
    units: float

    @property
    def slot(self) -> tuple[str, str | None, str, str]:
        return self.table, self.index, self.partition, self.kind

    @property
    def reason(self) -> str:
        return f"{'Index' if self.index else 'Table'}{self.kind}KeyRangeThroughputExceeded"


def partition_of(value: Any) -> str:
    """A partition key value (wire form, or a moto ``DynamoType``) as a stable string."""
    if hasattr(value, "type") and hasattr(value, "value"):
        value = value.to_json()
    return json.dumps(value, sort_keys=True)


class PartitionMeter:
    """Units consumed per (table or index, partition key value, read or write) in the current
    one-second window of ``clock`` (seconds). Thread-safe; the endpoint calls it under its
    request lock anyway."""

    def __init__(
        self,
        time_scale: float = 1.0,
        clock: Callable[[], float] = time.time,
        wcu_limit: float = PARTITION_WCU,
        rcu_limit: float = PARTITION_RCU,
    ) -> None:
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.clock = clock
        self.limits = {"Write": wcu_limit / time_scale, "Read": rcu_limit / time_scale}
        self._lock = threading.RLock()
        self._window: int | None = None
        self._used: dict[tuple[str, str | None, str, str], float] = {}
        #: Charges of the transaction being applied (counted only if it commits).
        self.staging: list[Charge] | None = None
        self.stats: dict[str, Any] = {
            "partition_throttled": 0,
            "partition_throttled_by_reason": {},
            "partition_peak_units": {"Table Write": 0.0, "Table Read": 0.0},
            "partition_windows_over_limit": 0,
        }
        self._over_in_window: set[tuple[str, str | None, str, str]] = set()

    # ------------------------------------------------------------------ windows

    def _roll(self) -> None:
        window = int(self.clock() // 1)
        if window != self._window:
            self._window = window
            self._used = {}
            self._over_in_window = set()

    def used(self, table: str, index: str | None, partition: str, kind: str) -> float:
        """Units used in the current window (``partition`` as :func:`partition_of` gives it)."""
        with self._lock:
            self._roll()
            return self._used.get((table, index, partition, kind), 0.0)

    # ------------------------------------------------------------------ admission and charges

    def refusal(self, charges: list[Charge]) -> Charge | None:
        """The first charge its partition cannot take now (see the module doc), or ``None``."""
        with self._lock:
            self._roll()
            pending: dict[tuple[str, str | None, str, str], float] = {}
            for charge in self.staging or ():
                pending[charge.slot] = pending.get(charge.slot, 0.0) + charge.units
            for charge in charges:
                used = self._used.get(charge.slot, 0.0) + pending.get(charge.slot, 0.0)
                limit = self.limits[charge.kind]
                if used >= limit or (used > 0 and used + charge.units > limit):
                    self.stats["partition_throttled"] += 1
                    by_reason = self.stats["partition_throttled_by_reason"]
                    by_reason[charge.reason] = by_reason.get(charge.reason, 0) + 1
                    where = self.stats.setdefault("partition_throttled_by_partition", {})
                    name = f"{charge.index or 'table'} {charge.kind.lower()} {charge.partition}"
                    where[name] = where.get(name, 0) + 1
                    # In which meter window (its number from the meter clock's zero).
                    windows = self.stats.setdefault("partition_throttled_by_window", {})
                    windows[str(self._window)] = windows.get(str(self._window), 0) + 1
                    return charge
                pending[charge.slot] = pending.get(charge.slot, 0.0) + charge.units
            return None

    def charge(self, charges: list[Charge]) -> None:
        """Count what a request consumed (into the transaction being applied, if any)."""
        with self._lock:
            if self.staging is not None:
                self.staging.extend(charges)
                return
            self._roll()
            for charge in charges:
                used = self._used.get(charge.slot, 0.0) + charge.units
                self._used[charge.slot] = used
                name = f"{'Index' if charge.index else 'Table'} {charge.kind}"
                peaks = self.stats["partition_peak_units"]
                peaks[name] = max(peaks.get(name, 0.0), used)
                if used > self.limits[charge.kind] and charge.slot not in self._over_in_window:
                    self._over_in_window.add(charge.slot)
                    self.stats["partition_windows_over_limit"] += 1

    def begin(self) -> None:
        self.staging = []

    def commit(self) -> None:
        staged, self.staging = self.staging, None
        self.charge(staged or [])

    def discard(self) -> None:
        self.staging = None


# ---------------------------------------------------------------------------- costs of requests


def table_model(table: Any) -> U.TableModel:
    """The bench's :class:`~leasefence_tools.bench.units.TableModel` of a moto table (cached)."""
    signature = tuple(map(id, table.global_indexes or ()))
    cached = table.__dict__.get("_leasefence_units_model")
    if cached is None or cached[0] != signature:
        indexes = tuple(
            U.IndexModel(
                name=index.name,
                key_attrs=tuple(index.schema_key_attrs),
                projection=(index.projection or {}).get("ProjectionType", "ALL"),
                include=tuple((index.projection or {}).get("NonKeyAttributes") or ()),
            )
            for index in table.global_indexes or ()
        )
        keys = (table.hash_key_attr,) + ((table.range_key_attr,) if table.range_key_attr else ())
        cached = table._leasefence_units_model = (
            signature,
            U.TableModel(name=table.name, key_attrs=keys, indexes=indexes),
        )
    model: U.TableModel = cached[1]
    return model


def wire(item: Any) -> dict[str, Any] | None:
    """A moto item in wire format (``None`` for no item)."""
    if item is None:
        return None
    attributes: dict[str, Any] = item.to_json()["Attributes"]
    return attributes


def write_charges(
    table: Any,
    key: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    transactional: bool,
    refused: bool = False,
) -> list[Charge]:
    """The partitions one item write (of the item with ``key``) lands on and its units there."""
    model = table_model(table)
    cost = U.write_cost(model, before, after, transactional=transactional, refused=refused)
    charges = [
        Charge(table.name, None, partition_of(key[table.hash_key_attr]), "Write", cost.table)
    ]
    for write in cost.index_writes:
        charges.append(
            Charge(table.name, write.index, partition_of(write.partition), "Write", write.units)
        )
    return charges


def read_charge(
    table: Any, index: str | None, partition: Any, items: list[dict[str, Any]], consistent: bool
) -> Charge:
    units = U.query_read_units(items, consistent and index is None)
    return Charge(table.name, index, partition_of(partition), "Read", units)


# ---------------------------------------------------------------------------- throttling errors


def _throttle_error_class(provisioned: bool) -> type[Exception]:
    """The moto error class to raise: its name is the cancellation reason code inside a
    transaction (moto reports ``type(error).__name__``), its body the DynamoDB error shape."""
    from moto.core.exceptions import JsonRESTError

    name = "ProvisionedThroughputExceeded" if provisioned else "ThrottlingError"
    error_type = "ProvisionedThroughputExceededException" if provisioned else "ThrottlingException"
    # As DynamoDB's service model spells the member in each (botocore 1.44).
    reasons_member = "ThrottlingReasons" if provisioned else "throttlingReasons"

    class _Throttled(JsonRESTError):
        def __init__(self, charge: Charge, arn: str) -> None:
            message = (
                "The level of configured provisioned throughput for one or more partition key "
                "values was exceeded"
                if provisioned
                else "Throughput exceeds the current throughput limit for one or more partition "
                "key values"
            ) + f" ({charge.reason})"
            super().__init__(_ERROR_PREFIX + error_type, message)
            resource = arn + (f"/index/{charge.index}" if charge.index else "")
            self.description = json.dumps(
                {
                    "__type": _ERROR_PREFIX + error_type,
                    "message": message,
                    reasons_member: [{"reason": charge.reason, "resource": resource}],
                }
            )

    _Throttled.__name__ = _Throttled.__qualname__ = name
    return _Throttled


_ERRORS: dict[bool, type[Exception]] = {}


def throttled(table: Any, charge: Charge) -> Exception:
    """The error a request refused by ``charge``'s partition raises inside moto."""
    provisioned = getattr(table, "billing_mode", "") == "PROVISIONED"
    if provisioned not in _ERRORS:
        _ERRORS[provisioned] = _throttle_error_class(provisioned)
    return _ERRORS[provisioned](charge, table.table_arn)


# ---------------------------------------------------------------------------- moto hooks


def install_partition_hooks(active: threading.local) -> None:
    """Meter and throttle the item writes, GetItems and Queries of requests served by an endpoint
    whose fidelity state (``active.state``, set per request by the endpoint) has a
    :class:`PartitionMeter` (``state.partitions``). Every other request runs moto's code as is.
    Installed over the endpoint's other fidelity hooks (it wraps whatever is there)."""
    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.responses import DynamoHandler

    backend_class = models.DynamoDBBackend
    if getattr(backend_class, "_leasefence_partitions", False):
        return
    original_put, original_delete = backend_class.put_item, backend_class.delete_item
    original_update, original_transact = (
        backend_class.update_item,
        backend_class.transact_write_items,
    )
    original_query, original_get = Table.query, DynamoHandler.get_item

    def meter_of(backend: Any, name: Any) -> tuple[PartitionMeter, Any] | None:
        state: Any = getattr(active, "state", None)
        meter = getattr(state, "partitions", None)
        if meter is None or not isinstance(name, str):
            return None
        table = backend.tables.get(name)
        if table is None or state.owned.get(table.name) is not backend:
            return None
        return meter, table

    def current(table: Any, values: dict[str, Any]) -> Any:
        try:
            hash_key = DynamoType(values[table.hash_key_attr])
            range_key = DynamoType(values[table.range_key_attr]) if table.range_key_attr else None
        except (KeyError, TypeError, IndexError, AttributeError):
            return None
        return table.get_item(hash_key, range_key)

    def metered_write(
        self: Any, original: Any, key_values: Any, new: Any, args: Any, kwargs: Any
    ) -> Any:
        """An item write (``new``: a put's item; ``None``: an update; ``False``: a delete)."""
        found = meter_of(self, args[0] if args else kwargs.get("table_name"))
        if found is None or not isinstance(key_values, dict):
            return original(self, *args, **kwargs)
        meter, table = found
        if table.hash_key_attr not in key_values:
            return original(self, *args, **kwargs)  # moto refuses it, as DynamoDB does
        transactional = meter.staging is not None
        before = wire(current(table, key_values))
        # Known before it runs: a put's or a delete's whole cost; an update's item as it is (the
        # index partitions it moves to then cost nothing yet: refused only once full).
        known_after = None if new is False else before if new is None else new
        known = write_charges(table, key_values, before, known_after, transactional)
        refused = meter.refusal(known)
        if refused is not None:
            raise throttled(table, refused)
        try:
            result = original(self, *args, **kwargs)
        except Exception as error:
            if type(error).__name__ == "ConditionalCheckFailed":
                refusal = write_charges(table, key_values, before, None, transactional, True)
                meter.charge(refusal)
            raise
        after = None if new is False else wire(current(table, key_values))
        meter.charge(write_charges(table, key_values, before, after, transactional))
        return result

    def put_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        item = _positional(args, kwargs, 1, "item_attrs")
        return metered_write(self, original_put, item, item, args, kwargs)

    def update_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = _positional(args, kwargs, 1, "key")
        return metered_write(self, original_update, key, None, args, kwargs)

    def delete_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = _positional(args, kwargs, 1, "key")
        return metered_write(self, original_delete, key, False, args, kwargs)

    def transact_write_items(self: Any, *args: Any, **kwargs: Any) -> Any:
        meter = getattr(getattr(active, "state", None), "partitions", None)
        if meter is None:
            return original_transact(self, *args, **kwargs)
        meter.begin()  # the actions' units count only if the whole transaction commits
        try:
            result = original_transact(self, *args, **kwargs)
        except BaseException:
            meter.discard()
            raise
        meter.commit()
        return result

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        state: Any = getattr(active, "state", None)
        meter = getattr(state, "partitions", None)
        hash_key = args[0] if args else kwargs.get("hash_key")
        if meter is None or hash_key is None or state.owned.get(self.name) is None:
            return original_query(self, *args, **kwargs)
        index = _positional(args, kwargs, 7, "index_name") or None
        consistent = bool(_positional(args, kwargs, 8, "consistent_read"))
        refused = meter.refusal([read_charge(self, index, hash_key, [], consistent)])
        if refused is not None:
            raise throttled(self, refused)
        # DynamoDB charges for every item read, before any filter or projection: ask moto for
        # the page without them, charge it, then filter and project as moto would have.
        filter_expression = _positional(args, kwargs, 9, "filter_expression")
        projection = _positional(args, kwargs, 6, "projection_expressions")
        args, kwargs = _without(args, kwargs, {6: "projection_expressions", 9: "filter_expression"})
        results, scanned, last_key = original_query(self, *args, **kwargs)
        evaluated = [wire(item) or {} for item in results]
        meter.charge([read_charge(self, index, hash_key, evaluated, consistent)])
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection:
            results = [item.project(projection) for item in results]
        return results, scanned, last_key

    def get_item(self: Any) -> Any:
        body = self.body if isinstance(self.body, dict) else {}
        found = meter_of(self.dynamodb_backend, body.get("TableName"))
        key = body.get("Key")
        if found is None or not isinstance(key, dict):
            return original_get(self)
        meter, table = found
        item = wire(current(table, key))
        charge = read_charge(
            table,
            None,
            key.get(table.hash_key_attr),
            [item] if item else [],
            bool(body.get("ConsistentRead")),
        )
        refused = meter.refusal([charge])
        if refused is not None:
            raise throttled(table, refused)
        result = original_get(self)
        meter.charge([charge])
        return result

    backend_class.put_item = put_item  # type: ignore[method-assign]
    backend_class.update_item = update_item  # type: ignore[method-assign]
    backend_class.delete_item = delete_item  # type: ignore[method-assign]
    backend_class.transact_write_items = transact_write_items  # type: ignore[method-assign]
    Table.query = query  # type: ignore[method-assign]
    DynamoHandler.get_item = get_item  # type: ignore[method-assign]
    backend_class._leasefence_partitions = True  # type: ignore[attr-defined]


def _positional(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def _without(
    args: tuple[Any, ...], kwargs: dict[str, Any], drop: dict[int, str]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args``/``kwargs`` with the parameters in ``drop`` (position: name) set to ``None``."""
    listed = list(args)
    named = dict(kwargs)
    for position, name in drop.items():
        if len(listed) > position:
            listed[position] = None
        elif name in named:
            named[name] = None
    return tuple(listed), named
