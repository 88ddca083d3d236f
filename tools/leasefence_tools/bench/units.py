"""DynamoDB request-unit arithmetic, computed from items (never from moto's placeholder figures).

Pure functions over wire-format items (``{"name": {"S": "..."}}``); the meter
(:mod:`leasefence_tools.bench.meter`) feeds them the real requests and the item images before and
after each write. The rules, as DynamoDB documents them:

* **Item size**: for each attribute, the UTF-8 length of its name plus the size of its value.
  String: UTF-8 bytes. Binary: raw bytes. Number: 1 byte per two significant digits (leading and
  trailing zeros trimmed) plus 1. Boolean and Null: 1 byte. List and Map: 3 bytes plus 1 byte
  per element plus the elements (a map element counts its name). Sets: the sum of the elements.
* **Writes**: 1 write unit per KB (1,024 bytes, rounded up, at least 1) of the larger of the item
  before and after the write (PutItem replacing an item, UpdateItem), or of the deleted item.
  A refused conditional write still costs the existing item's size (at least 1) and writes no
  index.
* **Global secondary indexes**: an item is in a (sparse) index when it has every index key
  attribute. Its index entry is the table key, the index key and the projected attributes.
  Entering the index is one put; leaving it one delete; changing an index key value a delete
  plus a put; changing only projected values one update (the larger entry); otherwise nothing.
  Each costs 1 write unit per KB of the entry (at least 1). The 100-byte per-entry overhead that
  DynamoDB adds for *storage* is not counted here (it would not change any figure below 1 KB).
* **Transactions** (``TransactWriteItems``): every item write costs twice. Whether the index
  writes a transaction causes are also doubled is not documented; :data:`TX_INDEX_MULTIPLIER`
  (default 2) counts them doubled too, which is the upper bound.
* **Reads**: GetItem costs 0.5 read unit per 4 KB (rounded up, at least one 4 KB block)
  eventually consistent, 1 strongly consistent. Query and Scan sum the sizes of every item
  they evaluated (before any filter) and round the total up to 4 KB. Index queries are always
  eventually consistent.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

KB = 1024
READ_BLOCK = 4096

#: How many times a transaction's index writes are counted (2 = upper bound; see module doc).
TX_INDEX_MULTIPLIER = 2


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: one per two significant digits, plus one."""
    try:
        value = Decimal(text)
    except InvalidOperation as error:  # pragma: no cover - boto3 validates numbers first
        raise ValueError(f"not a number: {text!r}") from error
    digits = value.as_tuple().digits
    significant = "".join(str(d) for d in digits).strip("0")
    return math.ceil(max(len(significant), 1) / 2) + 1


def _binary_len(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    # Wire format (JSON) carries binary base64-encoded.
    return len(base64.b64decode(value))


def value_size(value: dict[str, Any]) -> int:
    """Size in bytes of one attribute value in wire format (``{"S": "x"}`` and so on)."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return number_size(inner)
    if kind == "B":
        return _binary_len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in inner)
    if kind == "NS":
        return sum(number_size(n) for n in inner)
    if kind == "BS":
        return sum(_binary_len(b) for b in inner)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in inner)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(v) for k, v in inner.items())
    raise ValueError(f"unknown attribute type {kind!r}")


def item_size(item: dict[str, Any] | None) -> int:
    """Size in bytes of a whole item (0 for no item)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units_for(size: int) -> int:
    """Write units for writing ``size`` bytes once: 1 per KB, rounded up, at least 1."""
    return max(1, math.ceil(size / KB))


def read_units_for(total_size: int, consistent: bool) -> float:
    """Read units for reading ``total_size`` bytes (one item, or a query page's sum)."""
    blocks = max(1, math.ceil(total_size / READ_BLOCK))
    return blocks * (1.0 if consistent else 0.5)


@dataclass(frozen=True)
class IndexModel:
    """A global secondary index as the meter needs it."""

    name: str
    key_attrs: tuple[str, ...]
    projection: str = "ALL"  # ALL, KEYS_ONLY or INCLUDE
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableModel:
    """A table's key and its global secondary indexes."""

    name: str
    key_attrs: tuple[str, ...]
    indexes: tuple[IndexModel, ...] = ()

    @classmethod
    def from_description(cls, table: dict[str, Any]) -> TableModel:
        """From ``DescribeTable``'s ``Table`` (or a ``CreateTable`` request)."""
        indexes = []
        for gsi in table.get("GlobalSecondaryIndexes") or []:
            projection = gsi.get("Projection") or {}
            indexes.append(
                IndexModel(
                    name=gsi["IndexName"],
                    key_attrs=tuple(k["AttributeName"] for k in gsi["KeySchema"]),
                    projection=projection.get("ProjectionType", "ALL"),
                    include=tuple(projection.get("NonKeyAttributes") or ()),
                )
            )
        return cls(
            name=table["TableName"],
            key_attrs=tuple(k["AttributeName"] for k in table["KeySchema"]),
            indexes=tuple(indexes),
        )

    def key_of(self, item: dict[str, Any]) -> dict[str, Any]:
        return {name: item[name] for name in self.key_attrs}

    def index_entry(self, index: IndexModel, item: dict[str, Any] | None) -> dict[str, Any] | None:
        """The item's entry in ``index``, or None when the item is not in it (sparse)."""
        if not item or any(attr not in item for attr in index.key_attrs):
            return None
        if index.projection == "ALL":
            return dict(item)
        wanted = set(self.key_attrs) | set(index.key_attrs)
        if index.projection == "INCLUDE":
            wanted |= set(index.include)
        return {name: value for name, value in item.items() if name in wanted}


@dataclass(frozen=True)
class PartitionUnits:
    """Units one request consumed on one partition: the table's (``index`` None) or an index's,
    named by its partition key value (wire format); ``sort_key`` the table item's, where known."""

    index: str | None
    partition: dict[str, Any]
    kind: str  # "Read" or "Write"
    units: float
    sort_key: dict[str, Any] | None = None


def item_partition(
    model: TableModel, key: dict[str, Any], kind: str, units: float
) -> PartitionUnits:
    """``units`` on the table partition of the item with ``key``."""
    sort = key.get(model.key_attrs[1]) if len(model.key_attrs) > 1 else None
    return PartitionUnits(None, key[model.key_attrs[0]], kind, units, sort)


def write_partitions(
    model: TableModel, key: dict[str, Any], cost: WriteCost
) -> list[PartitionUnits]:
    """Where one item write's units land: the item's table partition and each index write's."""
    out = [item_partition(model, key, "Write", cost.table)]
    out.extend(PartitionUnits(w.index, w.partition, "Write", w.units) for w in cost.index_writes)
    return out


@dataclass(frozen=True)
class IndexWrite:
    """One write an item write causes in an index: where it lands and what it costs."""

    index: str
    kind: str  # put, delete or update
    units: float
    partition: dict[str, Any]  # the entry's index partition key value (wire format)


@dataclass
class WriteCost:
    """The units one item write costs, split into the table and its indexes."""

    table: float = 0.0
    index: float = 0.0
    index_ops: list[tuple[str, str]] = field(default_factory=list)  # (index, put|delete|update)
    #: The same index writes with their units and index partitions (the per-partition meter's).
    index_writes: list[IndexWrite] = field(default_factory=list)

    @property
    def total(self) -> float:
        return self.table + self.index


def write_cost(
    model: TableModel,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    transactional: bool = False,
    refused: bool = False,
    tx_index_multiplier: int = TX_INDEX_MULTIPLIER,
) -> WriteCost:
    """Units for one item write that turned ``before`` into ``after`` (None: absent).

    ``refused``: the write's condition failed; the existing item's size is charged (at least 1)
    and no index is written.
    """
    table_factor = 2 if transactional else 1
    if refused:
        return WriteCost(table=table_factor * write_units_for(item_size(before)))
    cost = WriteCost(table=table_factor * write_units_for(max(item_size(before), item_size(after))))
    index_factor = tx_index_multiplier if transactional else 1
    for index in model.indexes:
        old = model.index_entry(index, before)
        new = model.index_entry(index, after)
        if old is None and new is None:
            continue
        if old is None:
            assert new is not None
            ops = [("put", write_units_for(item_size(new)), new)]
        elif new is None:
            ops = [("delete", write_units_for(item_size(old)), old)]
        elif any(old.get(k) != new.get(k) for k in index.key_attrs):
            ops = [
                ("delete", write_units_for(item_size(old)), old),
                ("put", write_units_for(item_size(new)), new),
            ]
        elif old != new:
            ops = [("update", write_units_for(max(item_size(old), item_size(new))), new)]
        else:
            ops = []
        for kind, units, entry in ops:
            cost.index += index_factor * units
            cost.index_ops.append((index.name, kind))
            cost.index_writes.append(
                IndexWrite(index.name, kind, index_factor * units, entry[index.key_attrs[0]])
            )
    return cost


def query_read_units(evaluated: Iterable[dict[str, Any]], consistent: bool) -> float:
    """Units for one Query/Scan page: the sizes of every evaluated item, summed, then rounded."""
    return read_units_for(sum(item_size(i) for i in evaluated), consistent)


def write_count(raw: Any, table: str, tenant: str) -> int:
    """The tenant's write shard count as the engine decides it: its recorded count
    (:mod:`leasefence.engine._layout`), or one write shard when none is recorded. One unmetered
    read (``raw``)."""
    from leasefence import keys
    from leasefence.engine._layout import COUNTS

    record = raw.get_item(
        TableName=table,
        Key={"tenant_id": {"S": tenant}, "operation_id": {"S": keys.LAYOUT_ID}},
        ConsistentRead=True,
    ).get("Item")
    return int(record[COUNTS]["L"][0]["N"]) if record else 1


def operation_partition(raw: Any, table: str, tenant: str, operation_id: str) -> str:
    """Where an operation's items are (the operation, its history and payload items)."""
    from leasefence import keys

    return keys.operation_partition(tenant, operation_id, write_count(raw, table, tenant))
