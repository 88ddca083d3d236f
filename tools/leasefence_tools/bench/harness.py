"""The embedded endpoint as the benchmarks use it, and the setup shortcuts they need.

Everything measured goes over HTTP to the embedded (serialized) moto server, exactly as
``leasefence local`` serves it, running in its own process (:class:`ServerProcess`, see
:mod:`leasefence_tools.bench.server`) so the benchmark's client threads do not share an interpreter
lock with it. Two shortcuts exist, both named in the report wherever they are used:

* **populate**: large queues (10,000 to 100,000 operations) are written straight into moto's
  backend inside the server process, because moto takes about half a millisecond per item even
  in-process and far more over HTTP. The items are exactly what :meth:`Engine.enqueue` writes
  (the engine builds them; only the transport is skipped). Setup only, never measured.
* **accelerated index queries** (:func:`accelerated_queries`): moto answers an index Query by
  sorting the whole table with slow per-attribute comparisons and projecting each result with
  several full-item conversions (about 1 s per query at 100,000 items). The accelerator finds and
  orders the candidates with plain Python values and projects top-level attributes directly; moto's
  own code still decides the page, its limit and its last key. :func:`self_check` compares its
  answers with stock moto's on claim-shaped queries. Used where only request counts and units
  are measured (contention, depth, fairness, sweeper), never for a throughput figure.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from botocore.config import Config

from leasefence import keys
from leasefence.clock import ManualClock
from leasefence.engine import Engine
from leasefence.schema import DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK, TableSpec
from leasefence_tools.local.embedded import LOCAL_REGION, EmbeddedAws, use_local_credentials

ACCOUNT = "123456789012"
HASH = "sha256:" + "a" * 64


class _CaptureClient:
    """Stands in for boto3 under an Engine whose writes we only want to build, not send."""

    def __init__(self, sink: list[dict[str, Any]]) -> None:
        self.sink = sink
        self.directory: list[dict[str, Any]] = []

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        item = kwargs["Item"]
        if item["operation_id"]["S"].startswith(keys.SPREAD_PREFIX):
            return {}  # a new type's hint: the items below were filed without it (no reads here)
        self.sink.append(item)
        return {}

    def query(self, **_kwargs: Any) -> dict[str, Any]:
        return {"Items": [], "Count": 0, "ScannedCount": 0}  # no operation yet: a new tenant

    def update_item(self, **kwargs: Any) -> dict[str, Any]:
        """The tenant's recorded write shard counts (``SET #c = :c`` on a new item) or its
        job-type directory (``Store.add_to_set``: ``ADD #set :m SET #e0 = :e0, ...`` on a new
        item), kept as the item that upsert leaves."""
        names, values = kwargs["ExpressionAttributeNames"], kwargs["ExpressionAttributeValues"]
        if kwargs["Key"]["operation_id"]["S"] == keys.LAYOUT_ID:
            self.directory.append(dict(kwargs["Key"], **{names["#c"]: values[":c"]}))
            return {}
        item = dict(kwargs["Key"], **{names["#set"]: values[":m"]})
        item.update(
            {name: values[":" + ph[1:]] for ph, name in names.items() if ph.startswith("#e")}
        )
        self.directory.append(item)
        return {}

    def get_item(self, **_kwargs: Any) -> dict[str, Any]:
        return {}  # the job type's catalogue entry and the tenant's settings: none (uncatalogued)


def engine_items(
    spec: TableSpec,
    tenant_id: str,
    count: int,
    clock: Any,
    job_type: str = "refund",
    prefix: str = "op",
    directory: bool = True,
) -> list[dict[str, Any]]:
    """The exact items :meth:`Engine.enqueue` writes for ``count`` new operations (wire format),
    and (``directory``) the tenant's job-type directory it keeps, so claimers that ask for any
    job type find the type (without it they find nothing to claim)."""
    sink: list[dict[str, Any]] = []
    capture = _CaptureClient(sink)
    engine = Engine(client=capture, spec=spec, clock=clock)
    for i in range(count):
        engine.enqueue(tenant_id, f"{prefix}-{i:07d}", job_type, HASH, target_class="B")
    return sink + capture.directory if directory else sink


def final_claim_items(
    spec: TableSpec,
    tenant_id: str,
    count: int,
    clock: Any,
    lease_expires_at: int,
    prefix: str = "fin",
) -> list[dict[str, Any]]:
    """Items as a claim on the final attempt leaves them: in the sweep index, out of the due index
    (what ``Engine._try_claim`` writes when ``attempts + 1 >= max_attempts``)."""
    items = engine_items(spec, tenant_id, count, clock, prefix=prefix, directory=False)
    for item in items:
        op = item["operation_id"]["S"]
        item.pop(DUE_PK)
        item.pop(DUE_SK)
        item.update(
            {
                "state": {"S": "claimed"},
                "claimed_from": {"S": "queued"},
                "fence": {"N": "1"},
                "attempts": {"N": "1"},
                "max_attempts": {"N": "1"},
                "attempt_budget": {"N": "1"},
                "lease_owner": {"S": "worker-gone"},
                "lease_expires_at": {"N": str(lease_expires_at)},
                "lease_ms": {"N": "30000"},
                "claim_token": {"S": "0" * 32},
                SWEEP_PK: {
                    "S": keys.sweep_partition(keys.shard_of(tenant_id, op, spec.sweep_shards))
                },
                SWEEP_SK: {"N": str(lease_expires_at)},
            }
        )
    return items


class BenchAws:
    """An in-process :class:`EmbeddedAws` plus direct access to its moto backend."""

    def __init__(self) -> None:
        self.aws = EmbeddedAws()

    def __enter__(self) -> BenchAws:
        self.aws.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.aws.stop()

    @property
    def lock(self) -> threading.Lock:
        """The embedded server's request lock (held around every request)."""
        return self.aws.app.lock  # type: ignore[union-attr]

    def client(self, **kwargs: Any) -> Any:
        return self.aws.client(**kwargs)

    def create_tables(self, spec: TableSpec) -> TableSpec:
        return self.aws.create_tables(spec)

    @property
    def backend(self) -> Any:
        from moto.dynamodb.models import dynamodb_backends

        return dynamodb_backends[ACCOUNT][LOCAL_REGION]

    def populate(self, table_name: str, items: list[dict[str, Any]]) -> None:
        """Insert wire-format items straight into moto's backend (setup only; see module doc)."""
        from moto.dynamodb.models import dynamo_type

        table = self.backend.get_table(table_name)
        original = dynamo_type.LimitedSizeDict.__setitem__
        with self.lock:
            # moto re-sums the whole item on every attribute it sets (quadratic); these items are
            # a few hundred bytes, far from the 400 KB limit that check enforces.
            dynamo_type.LimitedSizeDict.__setitem__ = dict.__setitem__  # type: ignore[method-assign]
            try:
                for item in items:
                    table.put_item(item, overwrite=True)
            finally:
                dynamo_type.LimitedSizeDict.__setitem__ = original  # type: ignore[method-assign]
                _forget(table)  # written behind the accelerator's back: rebuild on next query


class ServerProcess:
    """The embedded endpoint in a child process (``python -m leasefence_tools.bench.server``).

    Stopped by closing its standard input (or, failing that, by its own pid)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self._lock = threading.Lock()

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "leasefence_tools.bench.server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._read()
        self.endpoint = f"http://127.0.0.1:{ready['port']}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def _read(self) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the embedded endpoint process exited")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"embedded endpoint: {answer['error']}")
        return answer

    def command(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            assert self.proc is not None and self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return self._read()

    def client(self) -> Any:
        import boto3

        use_local_credentials()
        return boto3.client(
            "dynamodb",
            endpoint_url=self.endpoint,
            region_name=LOCAL_REGION,
            config=Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64),
        )

    def create_tables(self, spec: TableSpec) -> TableSpec:
        from leasefence.schema import create_table

        create_table(self.client(), spec)
        return spec

    def populate(
        self,
        spec: TableSpec,
        tenant: str,
        count: int,
        now_ms: int,
        kind: str = "queued",
        prefix: str = "op",
        lease_expires_at: int | None = None,
    ) -> float:
        """Fill ``spec``'s table with ``count`` engine-built items (see module doc); returns seconds."""
        answer = self.command(
            cmd="populate",
            table=spec.table_name,
            due_shards=spec.due_shards,
            sweep_shards=spec.sweep_shards,
            tenant=tenant,
            count=count,
            now_ms=now_ms,
            kind=kind,
            prefix=prefix,
            lease_expires_at=lease_expires_at,
        )
        return float(answer["seconds"])

    @contextlib.contextmanager
    def accelerated(self) -> Iterator[None]:
        self.command(cmd="accelerate", on=True)
        try:
            yield
        finally:
            self.command(cmd="accelerate", on=False)

    def self_check(self, per_tenant: int = 60) -> int:
        return int(self.command(cmd="self_check", per_tenant=per_tenant)["compared"])

    def verify(
        self,
        table: str,
        index: str,
        partitions: list[str],
        nows: list[int],
        limits: tuple[int, ...] = (16,),
    ) -> int:
        """Compare accelerated and stock answers on a table as it is now (accelerator on)."""
        return int(
            self.command(
                cmd="verify",
                table=table,
                index=index,
                partitions=partitions,
                nows=nows,
                limits=list(limits),
                max_pages=2,
            )["compared"]
        )


# ---------------------------------------------------------------------- query accelerator

_RANGE_OPS = {
    "=": lambda v, a: v == a[0],
    "<=": lambda v, a: v <= a[0],
    "<": lambda v, a: v < a[0],
    ">=": lambda v, a: v >= a[0],
    ">": lambda v, a: v > a[0],
    "BETWEEN": lambda v, a: a[0] <= v <= a[1],
}


def _plain(value: Any) -> Any:
    """A moto DynamoType as a cheaply comparable Python value (numbers as Decimal)."""
    if value is None:
        return None
    if value.type == "N":
        return Decimal(value.value)
    return value.value


def _plain_wire(value: dict[str, Any]) -> Any:
    ((kind, inner),) = value.items()
    return Decimal(inner) if kind == "N" else inner


def _first(entry: tuple) -> Any:
    return entry[0]


class _IndexCache:
    """For one moto table: each (index, partition value) as a list sorted in moto's order
    (index range key, table hash key, table range key), kept current from the keys the backend
    wrote since the last query."""

    def __init__(self, table: Any) -> None:
        self.indexes = []
        for index in table.global_indexes or []:
            hashes = [k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH"]
            ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
            if len(hashes) == 1 and len(ranges) == 1:
                self.indexes.append((index.name, hashes[0], ranges[0]))
        self.parts: dict[tuple[str, Any], list[tuple]] = {}
        self.where: dict[tuple, list[tuple[str, Any, tuple]]] = {}
        self.dirty: set[tuple] = set()
        self.built = False

    def _place(self, table: Any, key: tuple) -> None:
        for name, part, sort_key in self.where.pop(key, []):
            entries = self.parts[(name, part)]
            at = bisect.bisect_left(entries, sort_key, key=_first)
            if at < len(entries) and entries[at][0] == sort_key:
                del entries[at]
        group = table.items.get(key[0])
        item = None
        if group is not None:
            item = group.get(key[1]) if table.range_key_attr else group
        if item is None:
            return
        placed = []
        for name, hk, rk in self.indexes:
            hv, rv = item.attrs.get(hk), item.attrs.get(rk)
            if hv is None or rv is None:
                continue
            sort_key = (_plain(rv), _plain(item.hash_key), _plain(item.range_key))
            part = (hv.type, hv.value)
            bisect.insort(self.parts.setdefault((name, part), []), (sort_key, key), key=_first)
            placed.append((name, part, sort_key))
        if placed:
            self.where[key] = placed

    def refresh(self, table: Any) -> None:
        if not self.built:
            self.parts.clear()
            self.where.clear()
            self.dirty.clear()
            for hash_value, group in table.items.items():
                if table.range_key_attr:
                    for range_value in group:
                        self._place(table, (hash_value, range_value))
                else:
                    self._place(table, (hash_value, None))
            self.built = True
            return
        dirty, self.dirty = self.dirty, set()
        for key in dirty:
            self._place(table, key)


_CACHES: dict[int, tuple[Any, _IndexCache]] = {}


def _cached(table: Any) -> _IndexCache | None:
    found = _CACHES.get(id(table))
    return found[1] if found is not None and found[0] is table else None


def _cache_for(table: Any) -> _IndexCache:
    cache = _cached(table)
    if cache is not None:
        return cache
    cache = _IndexCache(table)
    _CACHES[id(table)] = (table, cache)
    return cache


def _forget(table: Any) -> None:
    _CACHES.pop(id(table), None)


def _fast_query_factory(original: Any) -> Any:
    def query(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: Any,
        limit: Any,
        exclusive_start_key: Any,
        scan_index_forward: Any,
        projection_expressions: Any,
        index_name: Any = None,
        consistent_read: bool = False,
        filter_expression: Any = None,
        hash_key_conditions: Any = None,
        range_key_conditions: Any = None,
        **filter_kwargs: Any,
    ) -> Any:
        args = (
            hash_key,
            range_comparison,
            range_objs,
            limit,
            exclusive_start_key,
            scan_index_forward,
            projection_expressions,
        )
        kwargs = dict(
            index_name=index_name,
            consistent_read=consistent_read,
            filter_expression=filter_expression,
            hash_key_conditions=hash_key_conditions,
            range_key_conditions=range_key_conditions,
            **filter_kwargs,
        )
        cache = _cache_for(self)
        known = {name: (hk, rk) for name, hk, rk in cache.indexes}
        simple = (
            index_name in known
            and not filter_kwargs
            and scan_index_forward
            and hash_key_conditions
            and len(hash_key_conditions) == 1
            and hash_key_conditions[0][0] == known[index_name][0]
            and (not range_key_conditions or len(range_key_conditions) == 1)
            and (range_comparison is None or range_comparison in _RANGE_OPS)
            and self.range_key_attr is not None
        )
        if not simple:
            return original(self, *args, **kwargs)
        cache.refresh(self)
        rk = known[index_name][1]
        want = hash_key_conditions[0][1]
        entries = cache.parts.get((index_name, (want.type, want.value)), [])
        bounds = [_plain(o) for o in (range_objs or [])]
        test = _RANGE_OPS.get(range_comparison) if range_comparison else None
        at = 0
        if exclusive_start_key:
            start = tuple(
                _plain_wire(exclusive_start_key[name])
                for name in (rk, self.hash_key_attr, self.range_key_attr)
            )
            at = bisect.bisect_right(entries, start, key=_first)
            exclusive_start_key = None
        # Exactly what moto's loop would look at: items up to the limit-th one that passes the
        # key condition, plus the next one (which decides the last key).
        found, passing = [], 0
        for sort_key, key in _islice_from(entries, at):
            found.append(self.items[key[0]][key[1]])
            if limit and passing == limit:
                break
            if test is None or test(sort_key[0], bounds):
                passing += 1
        # moto's own code does the rest (limit, last key, projection, filter) on the candidates.
        self.all_items = lambda: found
        try:
            return original(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                **kwargs,
            )
        finally:
            del self.all_items

    query._leasefence_accelerated = True  # type: ignore[attr-defined]
    query._leasefence_original = original  # type: ignore[attr-defined]
    return query


def _islice_from(entries: list, start: int) -> Iterator[tuple]:
    for index in range(start, len(entries)):
        yield entries[index]


def _tracking(original: Any, key_arg: str, position: int) -> Any:
    """Wrap a backend write so the accelerator learns which item it touched."""

    def write(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, table_name, *args, **kwargs)
        finally:
            table = self.tables.get(table_name)
            cache = _cached(table) if table is not None else None
            if cache is not None:
                key = kwargs[key_arg] if key_arg in kwargs else args[position]
                from moto.dynamodb.models.dynamo_type import DynamoType

                cache.dirty.add(
                    (
                        DynamoType(key[table.hash_key_attr]),
                        DynamoType(key[table.range_key_attr]) if table.range_key_attr else None,
                    )
                )

    return write


def _fast_project_factory(original: Any) -> Any:
    from moto.dynamodb.models.dynamo_type import Item

    def project(self: Any, item: Any) -> Any:
        projection = self.projection or {}
        kind = projection.get("ProjectionType")
        if kind not in ("KEYS_ONLY", "INCLUDE"):
            return original(self, item)
        allowed = set(self.table_key_attrs) | {k["AttributeName"] for k in self.schema}
        if kind == "INCLUDE":
            allowed |= set(projection.get("NonKeyAttributes", []))
        # Top-level attributes only (what INCLUDE names): copy them as they are.
        return Item(
            hash_key=item.hash_key,
            range_key=item.range_key,
            attrs={k: v.to_json() for k, v in item.attrs.items() if k in allowed},
        )

    return project


@contextlib.contextmanager
def accelerated_queries() -> Iterator[None]:
    """Install the index-query accelerator for the duration of the block (see module doc)."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import SecondaryIndex, Table

    originals = {
        (Table, "query"): Table.query,
        (SecondaryIndex, "project"): SecondaryIndex.project,
        (DynamoDBBackend, "put_item"): DynamoDBBackend.put_item,
        (DynamoDBBackend, "update_item"): DynamoDBBackend.update_item,
        (DynamoDBBackend, "delete_item"): DynamoDBBackend.delete_item,
    }
    if getattr(Table.query, "_leasefence_accelerated", False):
        yield
        return
    Table.query = _fast_query_factory(Table.query)  # type: ignore[method-assign]
    SecondaryIndex.project = _fast_project_factory(SecondaryIndex.project)  # type: ignore[method-assign]
    DynamoDBBackend.put_item = _tracking(DynamoDBBackend.put_item, "item_attrs", 0)  # type: ignore[method-assign]
    DynamoDBBackend.update_item = _tracking(DynamoDBBackend.update_item, "key", 0)  # type: ignore[method-assign]
    DynamoDBBackend.delete_item = _tracking(DynamoDBBackend.delete_item, "key", 0)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)
        _CACHES.clear()


def compare(
    client: Any,
    table: str,
    index: str,
    pk_name: str,
    sk_name: str,
    partitions: list[str],
    nows: list[int],
    limits: tuple[int, ...] = (1, 5, 16, 200),
    max_pages: int = 1000,
) -> int:
    """Page through the same index queries (at most ``max_pages`` pages each) with the
    accelerator on and off; AssertionError on any difference. Returns how many queries were
    compared. Call with the accelerator installed."""
    from moto.dynamodb.models.table import Table

    assert getattr(Table.query, "_leasefence_accelerated", False), "install the accelerator first"
    compared = 0
    for pk in partitions:
        for now in nows:
            for limit in limits:
                request = {
                    "TableName": table,
                    "IndexName": index,
                    "KeyConditionExpression": "#pk = :pk AND #at <= :now",
                    "ExpressionAttributeNames": {"#pk": pk_name, "#at": sk_name},
                    "ExpressionAttributeValues": {":pk": {"S": pk}, ":now": {"N": str(now)}},
                    "Limit": limit,
                }
                pages = {}
                for mode in ("fast", "stock"):
                    if mode == "stock":
                        fast = Table.query
                        Table.query = fast._leasefence_original  # type: ignore[attr-defined,method-assign]
                    try:
                        got, start = [], None
                        for _ in range(max_pages):
                            extra: dict[str, Any] = {"ExclusiveStartKey": start} if start else {}
                            page = client.query(**request, **extra)
                            got.append((page["Items"], page.get("LastEvaluatedKey")))
                            start = page.get("LastEvaluatedKey")
                            if not start:
                                break
                    finally:
                        if mode == "stock":
                            Table.query = fast  # type: ignore[method-assign]
                    pages[mode] = got
                assert pages["stock"] == pages["fast"], (
                    f"accelerated query differs: {table} {index} {pk} {now} {limit}"
                )
                compared += 1
    return compared


def self_check(bench: BenchAws, per_tenant: int = 60) -> int:
    """Compare accelerated and stock answers for claim- and sweep-shaped index queries on a sample
    table, paging through every result, then again after a round of writes (so the accelerator's
    tracking of changed items is checked too). Returns how many queries were compared."""
    import random

    clock = ManualClock()
    spec = TableSpec(table_name="bench-accel-check", due_shards=2, sweep_shards=2)
    bench.create_tables(spec)
    rng = random.Random(5)
    items = []
    for tenant in ("a", "b"):
        for item in engine_items(spec, tenant, per_tenant, clock, prefix=f"x{tenant}"):
            if DUE_PK in item:  # an operation (the other is the tenant's job-type directory)
                item[DUE_SK] = {"N": str(clock() + rng.choice([-5000, -10, 0, 0, 7, 900]))}
            items.append(item)
        items += final_claim_items(
            spec,
            tenant,
            per_tenant // 3,
            clock,
            clock() + rng.choice([-10, 0, 50]),
            prefix=f"f{tenant}",
        )
    bench.populate(spec.table_name, items)
    client = bench.client()
    nows = [clock(), clock() + 1000]
    compared = 0
    with accelerated_queries():
        for _round in range(2):
            compared += compare(
                client,
                spec.table_name,
                "due",
                DUE_PK,
                DUE_SK,
                [
                    keys.due_partition("a", 0, "refund"),
                    keys.due_partition("b", 1, "refund"),
                    keys.due_partition("zz", 0, "refund"),
                ],
                nows,
                limits=(7, 16, 200),
            )
            compared += compare(
                client,
                spec.table_name,
                "sweep",
                SWEEP_PK,
                SWEEP_SK,
                ["sweep#0", "sweep#1"],
                nows,
                limits=(7, 200),
            )
            # Claim some, finish some, re-file some: the accelerator must follow every change.
            engine = Engine(client=client, spec=spec, clock=clock, rng=random.Random(9))
            for tenant in ("a", "b"):
                for _ in range(15):
                    claim = engine.claim_next(tenant, "checker", lease_ms=1000)
                    if claim is not None and rng.random() < 0.5:
                        engine.complete(tenant, claim.operation_id, claim.fence, "ok")
            engine.enqueue("a", "late-one", "refund", HASH)
            engine.sweep(limit=10)
    client.delete_table(TableName=spec.table_name)
    return compared
