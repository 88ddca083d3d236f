"""A metering boto3 client: counts requests and refusals, and computes request units.

:class:`MeteringClient` wraps a DynamoDB client (the same proxy pattern as
:class:`leasefence_tools.testing.faults.FaultyClient`) and records every call into a :class:`Meter` under the
calling thread's current phase (``with meter.phase("claim"): ...``).

Two modes:

* ``units=True``: request units are computed with :mod:`leasefence_tools.bench.units` from the real
  request and the real items. For a write the meter reads the item before and after it with an
  unmetered, strongly consistent GetItem on a separate client (so the images are exact when
  nothing else writes the same item at the same moment: use it for sequential measurements).
  For a Query with a filter or a projection it re-reads the same page without them, because
  DynamoDB charges for every item it evaluated, not for what it returned.
* ``units=False``: requests and refusals are counted (no extra requests; use it under
  concurrency and wherever timing matters), and the read units of reads whose answer holds
  everything they evaluated (a GetItem or a Query without a filter or a projection); writes carry
  no units.

moto's ``ConsumedCapacity`` figures are placeholders and are never used.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from leasefence_tools.bench import units as U

_WRITES = ("put_item", "update_item", "delete_item")
_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


@dataclass
class Call:
    """One metered request."""

    op: str
    table: str
    wcu: float = 0.0
    rcu: float = 0.0
    wcu_index: float = 0.0
    refused: bool = False
    index_ops: list[tuple[str, str]] = field(default_factory=list)
    items_read: int = 0
    #: Where the units landed (the table's or an index's partitions), for the scale simulation.
    partitions: list[U.PartitionUnits] = field(default_factory=list)

    def describe(self) -> str:
        parts = [self.op + (" (refused)" if self.refused else "")]
        if self.rcu:
            parts.append(f"{self.rcu:g} RCU over {self.items_read} item(s)")
        if self.wcu:
            text = f"{self.wcu:g} WCU"
            if self.index_ops:
                text += " (" + ", ".join(f"{i} {k}" for i, k in self.index_ops) + ")"
            parts.append(text)
        return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]


@dataclass
class Usage:
    """What one phase consumed."""

    requests: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)
    wcu: float = 0.0
    wcu_index: float = 0.0
    rcu: float = 0.0
    items_read: int = 0
    calls: list[Call] = field(default_factory=list)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_refused(self) -> int:
        return sum(self.refused.values())

    def add(self, call: Call, keep: bool) -> None:
        self.requests[call.op] += 1
        if call.refused:
            self.refused[call.op] += 1
        self.wcu += call.wcu
        self.wcu_index += call.wcu_index
        self.rcu += call.rcu
        self.items_read += call.items_read
        if keep:
            self.calls.append(call)

    def merged(self, other: Usage) -> Usage:
        out = Usage(
            requests=self.requests + other.requests,
            refused=self.refused + other.refused,
            wcu=self.wcu + other.wcu,
            wcu_index=self.wcu_index + other.wcu_index,
            rcu=self.rcu + other.rcu,
            items_read=self.items_read + other.items_read,
        )
        out.calls = self.calls + other.calls
        return out


class Meter:
    """Thread-safe ledger of metered calls, by phase."""

    def __init__(self, raw_client: Any, units: bool = True, keep_calls: bool = True) -> None:
        self.raw = raw_client
        self.units = units
        self.keep_calls = keep_calls
        self.tx_index_multiplier = U.TX_INDEX_MULTIPLIER
        self._lock = threading.Lock()
        self._local = threading.local()
        self._usage: dict[str, Usage] = {}
        self._models: dict[str, U.TableModel] = {}

    # -------------------------------------------------------------- phases

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous = getattr(self._local, "phase", None)
        self._local.phase = name
        try:
            yield
        finally:
            self._local.phase = previous

    @property
    def current(self) -> str:
        return getattr(self._local, "phase", None) or "other"

    def usage(self, *phases: str) -> Usage:
        with self._lock:
            total = Usage()
            for name in phases:
                if name in self._usage:
                    total = total.merged(self._usage[name])
            return total

    def reset(self) -> None:
        with self._lock:
            self._usage.clear()

    def record(self, call: Call) -> None:
        with self._lock:
            self._usage.setdefault(self.current, Usage()).add(call, self.keep_calls)

    # -------------------------------------------------------------- models and peeks

    def model(self, table: str) -> U.TableModel:
        model = self._models.get(table)
        if model is None:
            model = U.TableModel.from_description(self.raw.describe_table(TableName=table)["Table"])
            self._models[table] = model
        return model

    def peek(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        return self.raw.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")

    def client(self, inner: Any) -> MeteringClient:
        return MeteringClient(inner, self)


def _strip_unused(kwargs: dict[str, Any], keep_expressions: tuple[str, ...]) -> dict[str, Any]:
    """Drop placeholders no remaining expression uses (DynamoDB rejects unused ones)."""
    used = set()
    for name in keep_expressions:
        if kwargs.get(name):
            used.update(_PLACEHOLDER.findall(kwargs[name]))
    out = dict(kwargs)
    for attr in ("ExpressionAttributeNames", "ExpressionAttributeValues"):
        if attr in out:
            kept = {k: v for k, v in out[attr].items() if k in used}
            if kept:
                out[attr] = kept
            else:
                del out[attr]
    return out


_EQUALS = re.compile(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)")


def _queried_partition(meter: Meter, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The partition key value a Query reads (from its key condition), or None if not found."""
    if not meter.units:
        return None
    model = meter.model(kwargs["TableName"])
    index = next((i for i in model.indexes if i.name == kwargs.get("IndexName")), None)
    hash_key = index.key_attrs[0] if index is not None else model.key_attrs[0]
    names = kwargs.get("ExpressionAttributeNames") or {}
    values = kwargs.get("ExpressionAttributeValues") or {}
    for name, value in _EQUALS.findall(kwargs.get("KeyConditionExpression") or ""):
        if names.get(name, name) == hash_key and value in values:
            found: dict[str, Any] = values[value]
            return found
    return None


class MeteringClient:
    """A boto3 DynamoDB client proxy that records every data-plane call in a :class:`Meter`."""

    def __init__(self, client: Any, meter: Meter) -> None:
        self._client = client
        self._meter = meter

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        handler = getattr(self, f"_m_{name}", None)
        if handler is None or not callable(target):
            return target

        def call(**kwargs: Any) -> Any:
            return handler(target, kwargs)

        return call

    # -------------------------------------------------------------- writes

    def _single_write(self, op: str, target: Any, kwargs: dict[str, Any]) -> Any:
        meter = self._meter
        table = kwargs["TableName"]
        if not meter.units:
            return self._count_only(op, table, target, kwargs)
        model = meter.model(table)
        key = kwargs["Key"] if "Key" in kwargs else model.key_of(kwargs["Item"])
        before = meter.peek(table, key)
        try:
            response = target(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                cost = U.write_cost(model, before, None, refused=True)
                landed = U.write_partitions(model, key, cost)
                meter.record(Call(op, table, wcu=cost.total, refused=True, partitions=landed))
            else:
                meter.record(Call(op, table))
            raise
        after = meter.peek(table, key)
        cost = U.write_cost(model, before, after)
        meter.record(
            Call(
                op,
                table,
                wcu=cost.total,
                wcu_index=cost.index,
                index_ops=cost.index_ops,
                partitions=U.write_partitions(model, key, cost),
            )
        )
        return response

    def _count_only(self, op: str, table: str, target: Any, kwargs: dict[str, Any]) -> Any:
        try:
            response = target(**kwargs)
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code")
            refused = code in ("ConditionalCheckFailedException", "TransactionCanceledException")
            self._meter.record(Call(op, table, refused=refused))
            raise
        self._meter.record(Call(op, table))
        return response

    def _m_put_item(self, target: Any, kwargs: dict[str, Any]) -> Any:
        return self._single_write("put_item", target, kwargs)

    def _m_update_item(self, target: Any, kwargs: dict[str, Any]) -> Any:
        return self._single_write("update_item", target, kwargs)

    def _m_delete_item(self, target: Any, kwargs: dict[str, Any]) -> Any:
        return self._single_write("delete_item", target, kwargs)

    def _m_transact_write_items(self, target: Any, kwargs: dict[str, Any]) -> Any:
        meter = self._meter
        actions = kwargs["TransactItems"]
        if not meter.units:
            return self._count_only("transact_write_items", "*", target, kwargs)
        plan = []
        for action in actions:
            ((kind, body),) = action.items()
            model = meter.model(body["TableName"])
            key = body["Key"] if "Key" in body else model.key_of(body["Item"])
            plan.append((kind, body["TableName"], model, key, meter.peek(body["TableName"], key)))
        try:
            response = target(**kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                costs = [
                    (
                        model,
                        key,
                        U.write_cost(model, before, None, transactional=True, refused=True),
                    )
                    for _kind, _table, model, key, before in plan
                ]
                meter.record(
                    Call(
                        "transact_write_items",
                        "*",
                        wcu=sum(cost.total for _m, _k, cost in costs),
                        refused=True,
                        partitions=[
                            p
                            for model, key, cost in costs
                            for p in U.write_partitions(model, key, cost)
                        ],
                    )
                )
            else:
                meter.record(Call("transact_write_items", "*"))
            raise
        total = U.WriteCost()
        landed: list[U.PartitionUnits] = []
        for kind, table, model, key, before in plan:
            if kind == "ConditionCheck":
                # A condition check is charged like a write of the item it checks.
                checked = U.WriteCost(table=2 * U.write_units_for(U.item_size(before)))
                total.table += checked.table
                landed.extend(U.write_partitions(model, key, checked))
                continue
            after = meter.peek(table, key)
            cost = U.write_cost(
                model,
                before,
                after,
                transactional=True,
                tx_index_multiplier=meter.tx_index_multiplier,
            )
            total.table += cost.table
            total.index += cost.index
            total.index_ops.extend(cost.index_ops)
            landed.extend(U.write_partitions(model, key, cost))
        meter.record(
            Call(
                "transact_write_items",
                ",".join(sorted({p[1] for p in plan})),
                wcu=total.total,
                wcu_index=total.index,
                index_ops=total.index_ops,
                partitions=landed,
            )
        )
        return response

    def _m_batch_write_item(self, target: Any, kwargs: dict[str, Any]) -> Any:
        meter = self._meter
        if not meter.units:
            return self._count_only("batch_write_item", "*", target, kwargs)
        plan = []
        for table, requests in kwargs["RequestItems"].items():
            model = meter.model(table)
            for request in requests:
                key = (
                    request["DeleteRequest"]["Key"]
                    if "DeleteRequest" in request
                    else model.key_of(request["PutRequest"]["Item"])
                )
                plan.append((table, model, key, meter.peek(table, key)))
        response = target(**kwargs)
        total = U.WriteCost()
        landed: list[U.PartitionUnits] = []
        for table, model, key, before in plan:
            cost = U.write_cost(model, before, meter.peek(table, key))
            total.table += cost.table
            total.index += cost.index
            total.index_ops.extend(cost.index_ops)
            landed.extend(U.write_partitions(model, key, cost))
        meter.record(
            Call(
                "batch_write_item",
                "*",
                wcu=total.total,
                wcu_index=total.index,
                index_ops=total.index_ops,
                partitions=landed,
            )
        )
        return response

    # -------------------------------------------------------------- reads

    def _m_get_item(self, target: Any, kwargs: dict[str, Any]) -> Any:
        meter = self._meter
        response = target(**kwargs)
        narrowed = kwargs.get("ProjectionExpression") or kwargs.get("AttributesToGet")
        if not meter.units and narrowed:
            meter.record(Call("get_item", kwargs["TableName"]))
            return response
        item = response.get("Item")
        if narrowed:
            item = meter.peek(kwargs["TableName"], kwargs["Key"])  # charged on the whole item
        rcu = U.read_units_for(U.item_size(item), bool(kwargs.get("ConsistentRead")))
        landed = (
            [U.item_partition(meter.model(kwargs["TableName"]), kwargs["Key"], "Read", rcu)]
            if meter.units
            else []
        )
        meter.record(
            Call(
                "get_item",
                kwargs["TableName"],
                rcu=rcu,
                items_read=1 if item else 0,
                partitions=landed,
            )
        )
        return response

    def _page_read(self, op: str, target: Any, kwargs: dict[str, Any], key_expr: str | None) -> Any:
        meter = self._meter
        response = target(**kwargs)
        evaluated = response.get("Items", [])
        narrowed = any(
            kwargs.get(k)
            for k in ("FilterExpression", "ProjectionExpression", "AttributesToGet", "Select")
        )
        if not meter.units and narrowed:
            meter.record(Call(op, kwargs["TableName"]))
            return response
        if narrowed:
            again = {
                k: v
                for k, v in kwargs.items()
                if k
                not in ("FilterExpression", "ProjectionExpression", "AttributesToGet", "Select")
            }
            again = _strip_unused(again, (key_expr,) if key_expr else ())
            evaluated = getattr(meter.raw, op)(**again).get("Items", [])
        consistent = bool(kwargs.get("ConsistentRead")) and not kwargs.get("IndexName")
        rcu = U.query_read_units(evaluated, consistent)
        landed = []
        partition = _queried_partition(meter, kwargs) if key_expr else None
        if partition is not None:
            landed.append(U.PartitionUnits(kwargs.get("IndexName"), partition, "Read", rcu))
        meter.record(
            Call(op, kwargs["TableName"], rcu=rcu, items_read=len(evaluated), partitions=landed)
        )
        return response

    def _m_query(self, target: Any, kwargs: dict[str, Any]) -> Any:
        return self._page_read("query", target, kwargs, "KeyConditionExpression")

    def _m_scan(self, target: Any, kwargs: dict[str, Any]) -> Any:
        return self._page_read("scan", target, kwargs, None)
