"""The table the model check drives: moto in this process (no HTTP), one fresh engine per step.

A state of the protocol is what the table holds (every item, canonically) plus what the actors
remember. :meth:`World.capture` names each item by the digest of its canonical JSON and keeps
that JSON once, compressed, in a pool, so a snapshot is a tuple of digests and going back to it
(:meth:`World.restore`) builds a few moto items, not a request. The engine reaches moto through
:class:`~leasefence_tools.modelcheck.memo.MemoClient` (moto's handler called in process, its
answers remembered). Every step builds a new :class:`~leasefence.engine.Engine` (an engine keeps
nothing between calls that the protocol relies on: its caches of held claims and catalogue
entries only save requests) with a seeded ``rng`` and a :class:`~leasefence.clock.ManualClock` at
the state's time, so the same state and the same step always give the same successor: what a
visited set needs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import uuid
import zlib
from collections import defaultdict
from typing import Any, cast

import boto3
from moto.core import DEFAULT_ACCOUNT_ID

from leasefence import Engine, schema
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec
from leasefence_tools.local.embedded import (
    LOCAL_REGION,
    install_fast_json_responses,
    install_fast_update_expressions,
    use_local_credentials,
)
from leasefence_tools.modelcheck.direct_client import DirectClient
from leasefence_tools.modelcheck.memo import MemoClient

#: The table's name starts so; each world adds a suffix of its own (worlds one after another in
#: one process never meet each other's items).
TABLE = "modelcheck"


def start_moto() -> Any:
    """moto's in-process mock, started WITHOUT resetting moto's backends (and stopped by
    :func:`stop_moto` without removing their data): an embedded endpoint that serves other tests
    from this same process (thread mode) shares those backends and keeps its tables."""
    from moto import mock_aws

    mock = mock_aws()
    mock.start(reset=False)
    return mock


def stop_moto(mock: Any) -> None:
    mock.stop(remove_data=False)


def _forget_items() -> None:
    """Let go of every moto item no table holds. moto keeps each model instance it ever made in
    its class's ``instances_tracked`` (for its server's dashboard, which nothing here reads):
    every item built by a restore and every copy moto makes per update, several per explored
    transition, never freed (about 60 KB per explored state: 8 GB at 112,000 states)."""
    from moto.dynamodb.models.dynamo_type import Item

    tracked: list[Any] = Item.instances_tracked  # type: ignore[attr-defined]
    tracked.clear()


#: A table's items, each named by the digest of its canonical JSON, in key order.
Snapshot = tuple[bytes, ...]
START_MS = 1_800_000_000_000


def canonical(attributes: dict[str, Any]) -> bytes:
    """An item's DynamoDB JSON as canonical bytes (a binary value, as moto holds it, in base64)."""
    return json.dumps(attributes, sort_keys=True, separators=(",", ":"), default=_binary).encode()


def _binary(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} in an item")


def _binary_back(value: dict[str, Any]) -> dict[str, Any]:
    """An attribute from :func:`canonical`'s JSON as moto holds it (a binary value as bytes)."""
    if "B" in value:
        return {"B": base64.b64decode(value["B"])}
    if "BS" in value:
        return {"BS": [base64.b64decode(v) for v in value["BS"]]}
    if "M" in value:
        return {"M": {k: _binary_back(v) for k, v in value["M"].items()}}
    if "L" in value:
        return {"L": [_binary_back(v) for v in value["L"]]}
    return value


class World:
    """One operations table on an in-process moto backend (``mock_aws``), started on entry."""

    def __init__(self, memo: bool = True, memo_limit: int = 200_000) -> None:
        use_local_credentials()
        install_fast_json_responses()
        install_fast_update_expressions()
        self._mock = start_moto()
        from moto.dynamodb.models import dynamodb_backends

        boto_client = boto3.client("dynamodb", region_name=LOCAL_REGION)
        self.client: DirectClient
        if memo:
            self.client = MemoClient(
                boto_client, DEFAULT_ACCOUNT_ID, LOCAL_REGION, table=self, limit=memo_limit
            )
        else:
            self.client = DirectClient(boto_client, DEFAULT_ACCOUNT_ID, LOCAL_REGION)
        self.spec = TableSpec(
            table_name=f"{TABLE}-{uuid.uuid4().hex[:12]}",
            due_shards=1,
            sweep_shards=1,
            # One write shard, set: the protocol's states, without the tenant's layout record.
            operation_shards=(1,),
        )
        schema.create_table(self.client, self.spec)

        self._table = dynamodb_backends[DEFAULT_ACCOUNT_ID][LOCAL_REGION].tables[
            self.spec.table_name
        ]
        self._pool: dict[bytes, bytes] = {}
        #: Per pooled item: its key (as :meth:`_key` gives it) and its place in key order.
        self._keys: dict[bytes, tuple[str, str]] = {}
        self._order: dict[bytes, tuple[str, str]] = {}
        self._current: Snapshot | None = None
        #: The canonical JSON of each item at the last :meth:`capture`, in key order.
        self.texts: list[bytes] = []

    def close(self) -> None:
        from moto.dynamodb.models import dynamodb_backends

        dynamodb_backends[DEFAULT_ACCOUNT_ID][LOCAL_REGION].tables.pop(self.spec.table_name, None)
        stop_moto(self._mock)

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def engine(self, now_ms: int, client: Any = None) -> Engine:
        """A fresh engine at this time (nothing carried over from an earlier step), on the
        world's client or ``client``."""
        return Engine(
            client=client or self.client,
            spec=self.spec,
            clock=ManualClock(now_ms),
            rng=random.Random(0),
        )

    def capture(self) -> tuple[Snapshot, list[dict[str, Any]]]:
        """The table as it is: a snapshot to come back to, and every item as DynamoDB JSON in
        key order. A snapshot names each item by the digest of its canonical JSON; the pool keeps
        that JSON once per item, compressed (states share most of their items)."""
        items, names, texts = [], [], []
        for item in self._sorted():
            attributes = item.to_json()["Attributes"]
            text = canonical(attributes)
            name = hashlib.blake2b(text, digest_size=16).digest()
            if name not in self._pool:
                self._pool[name] = zlib.compress(text, 1)
                self._keys[name] = self._key(attributes)
                self._order[name] = (str(item.hash_key), str(item.range_key))
            items.append(attributes)
            names.append(name)
            texts.append(text)
        self._current = tuple(names)
        self.texts = texts
        return self._current, items

    def current(self, changed: bool = False) -> Snapshot:
        """The snapshot of the table as it is (``changed``: a write may have changed it)."""
        if changed or self._current is None:
            self.capture()
        assert self._current is not None
        return self._current

    def restore(self, saved: Snapshot | None) -> None:
        """Back to a snapshot (None: the empty table, and a new pool). Nothing to do when the
        table is that snapshot already (every write is followed by a :meth:`capture` or a
        :meth:`current` before the next restore)."""
        if saved is not None and saved == self._current:
            return
        _forget_items()
        table: defaultdict[Any, dict[Any, Any]] = defaultdict(dict)
        if saved is None:
            self._pool.clear()
            self._keys.clear()
            self._order.clear()
            if isinstance(self.client, MemoClient):
                self.client.forget()
        else:
            for name in saved:
                item = self._item(json.loads(zlib.decompress(self._pool[name])))
                table[item.hash_key][item.range_key] = item
        self._table.items = table
        self._current = () if saved is None else saved

    def pool(self) -> tuple[dict[bytes, bytes], dict[bytes, Any], dict[bytes, Any]]:
        """The item pool (with each item's key and place in key order), to save a search."""
        return self._pool, self._keys, self._order

    def add_pool(self, pool: tuple[dict[bytes, bytes], dict[bytes, Any], dict[bytes, Any]]) -> None:
        """Items of a saved search's pool (:meth:`pool`) added to this one."""
        items, keys, order = pool
        self._pool.update(items)
        self._keys.update(keys)
        self._order.update(order)

    def _key(self, attributes: dict[str, Any]) -> tuple[str, str]:
        """An item's key attributes (DynamoDB JSON) as text, from its attributes or a request's
        ``Key``."""
        range_attr = self._table.range_key_attr
        return (
            json.dumps(attributes[self._table.hash_key_attr], sort_keys=True),
            json.dumps(attributes[range_attr], sort_keys=True) if range_attr else "",
        )

    def named(self, request: dict[str, Any], saved: Snapshot) -> bytes | None:
        """The item of ``saved`` under the key a one-item request names (its ``Key``, or its
        ``Item``'s key for a put), None when there is none."""
        key = self._key(request["Key"] if "Key" in request else request["Item"])
        return next((name for name in saved if self._keys[name] == key), None)

    def replaced(self, saved: Snapshot, old: bytes | None, new: bytes | None) -> Snapshot:
        """``saved`` with the item ``old`` (None: none) replaced by ``new`` (None: removed), in
        key order (the order :meth:`capture` gives)."""
        names = [name for name in saved if name != old]
        if new is not None:
            names.append(new)
        return tuple(sorted(names, key=self._order.__getitem__))

    def _item(self, attributes: dict[str, Any]) -> Any:
        """A moto item from its JSON, as moto builds one from a request (the attributes set
        without re-checking the size each time: the item passed the check when it was written)."""
        from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

        item = cast(Item, Item.__new__(Item))  # moto types __new__ as -> BaseModel
        item.hash_key = DynamoType(attributes[self._table.hash_key_attr])
        range_attr = self._table.range_key_attr
        item.range_key = DynamoType(attributes[range_attr]) if range_attr else None
        attrs = LimitedSizeDict.__new__(LimitedSizeDict)
        dict.__init__(attrs)
        for key, value in attributes.items():
            dict.__setitem__(attrs, key, DynamoType(_binary_back(value)))
        item.attrs = attrs
        return item

    def _sorted(self) -> list[Any]:
        return [
            self._table.items[hash_key][range_key]
            for hash_key in sorted(self._table.items, key=str)
            for range_key in sorted(self._table.items[hash_key], key=str)
        ]

    def item_size(self, key: dict[str, Any]) -> int:
        """The size moto gives the item under ``key`` (DynamoDB JSON), 0 when there is none."""
        from moto.dynamodb.models.dynamo_type import DynamoType

        range_attr = self._table.range_key_attr
        by_range = self._table.items.get(DynamoType(key[self._table.hash_key_attr]), {})
        item = by_range.get(DynamoType(key[range_attr]) if range_attr else None)
        return 0 if item is None else int(item.size())

    def items(self) -> list[dict[str, Any]]:
        """Every item, as DynamoDB JSON, in key order."""
        return [item.to_json()["Attributes"] for item in self._sorted()]
