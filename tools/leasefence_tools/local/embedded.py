"""An embedded, linearizable DynamoDB (and S3) endpoint on moto's server.

moto's backends hold no lock, so concurrent conditional writes to one item can both win (see the
design notes). :class:`SerializedApp` holds one lock around each whole request, response body
included, which makes every request atomic with respect to every other: the property DynamoDB
gives per item, and the one every concurrency test here relies on.

moto is also kinder than DynamoDB. With a :class:`Fidelity` (``EmbeddedAws(fidelity=...)`` or the
``LEASEFENCE_FIDELITY*`` environment variables) the endpoint is not: it deletes expired TTL items
after a lag, answers index queries from a lagging view of the table, and can throttle
transactions. See :class:`Fidelity` and :class:`FidelityState`.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import json
import logging
import os
import random
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, cast

import boto3

from leasefence import schema
from leasefence_tools.local import LISTEN_BACKLOG
from leasefence_tools.local.partitions import PartitionMeter, install_partition_hooks
from leasefence_tools.local.timings import TIMINGS_PATH, Timings
from leasefence_tools.local.timings import answer as timings_answer

LOCAL_REGION = "us-east-1"


def use_local_credentials() -> None:
    """moto accepts any credentials; make sure boto3 finds some without touching real ones."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", LOCAL_REGION)


#: Item-level operations whose moto results are already DynamoDB wire JSON.
_FAST_JSON_ACTIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "TransactWriteItems",
        "BatchWriteItem",
    }
)


def _has_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_none(v) for v in value)
    return False


def _wire_json(value: Any) -> Any:
    """What moto's JSON serializer writes for the two non-JSON types its results hold: a
    ``datetime`` as epoch seconds (milliseconds kept), ``bytes`` (a binary value) as base64."""
    import base64
    import calendar
    from datetime import datetime

    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if not isinstance(value, datetime):
        raise TypeError(f"not JSON: {type(value).__name__}")
    seconds = calendar.timegm(value.timetuple())
    return seconds + (value.microsecond // 1000) / 1000.0 if value.microsecond else seconds


def _serve_as_json(handler_class: Any, actions: frozenset[str], content_type: str) -> None:
    """Answer ``actions`` of ``handler_class`` with ``json.dumps`` of moto's result (already
    wire JSON for them); anything unusual (errors, None values, types JSON has no form for but
    a timestamp) goes through moto's own serializer."""
    original = handler_class.serialized

    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if isinstance(result, dict) and self._get_action() in actions and not _has_none(result):
            try:
                body = json.dumps(result, allow_nan=False, default=_wire_json)
            except (TypeError, ValueError):
                return original(self, action_result)
            headers = {"Content-Type": content_type}
            headers.update(self.response_headers)
            return 200, headers, body
        return original(self, action_result)

    handler_class.serialized = serialized


def install_fast_json_responses() -> None:
    """Serve moto's item-level DynamoDB results, and the stream's ``GetRecords``, with
    ``json.dumps``.

    moto 5.2 runs every result through a generic, model-driven serializer that costs about 5 ms
    per item returned, half of an UpdateItem's time. For the item operations the result is
    already AttributeValue JSON, so it is written as is. ``GetRecords`` is the same JSON (records
    of AttributeValue images) plus one timestamp per record: through moto's serializer it took
    40% of the local stack's CPU under 16 HTTP workers (two mappings poll the stream, each
    record a few KB of images). Anything unusual (errors, None values, non-JSON types, other
    operations) still goes through moto's own serializer.
    """
    from moto.dynamodb.responses import DynamoHandler
    from moto.dynamodbstreams.responses import DynamoDBStreamsHandler

    if getattr(DynamoHandler, "_leasefence_fast_json", False):
        return
    _serve_as_json(DynamoHandler, _FAST_JSON_ACTIONS, "application/x-amz-json-1.0")
    _serve_as_json(DynamoDBStreamsHandler, frozenset({"GetRecords"}), "application/x-amz-json-1.0")
    DynamoHandler._leasefence_fast_json = True  # type: ignore[attr-defined]


def _partial_copy(item: Any, names: frozenset[str] | set[str]) -> Any:
    """A copy of ``item`` with only its attributes ``names`` (those it has, in its order),
    sharing nothing mutable with it; scalars are immutable, so a new wrapper around the same
    value suffices."""
    import copy

    from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict

    result = cast(Item, Item.__new__(Item))  # moto types __new__ as -> BaseModel
    result.hash_key, result.range_key = item.hash_key, item.range_key
    attrs = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.__init__(attrs)
    for name, value in item.attrs.items():
        if name not in names:
            continue
        if value.type in _SCALAR_TYPES:
            copied = DynamoType.__new__(DynamoType)
            copied.type, copied.value = value.type, value.value
        else:
            copied = copy.deepcopy(value)
        dict.__setitem__(attrs, name, copied)
    result.attrs = attrs
    return result


def install_fast_index_sort() -> None:
    """Make moto's index queries sort with precomputed keys.

    moto sorts a Query's candidates with ``DynamoType`` comparisons that rebuild a ``Decimal``
    for every comparison (32,000 per query at 2,000 items: 170 ms). Sorting by keys computed
    once per item gives the same order (numbers by value, strings and binary by content).
    Equality of two strings, the hot path of its key matching, is likewise compared directly,
    and a string is hashed directly (to the same hash moto computes).
    """
    from decimal import Decimal

    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_leasefence_fast_sort", False):
        return

    def scalar(value: DynamoType) -> Any:
        return Decimal(value.value) if value.type == "N" else value.cast_value

    def sorted_items(
        self: Any, hash_key_attrs: list[str], range_key_attrs: list[str | None], items: list[Any]
    ) -> list[Any]:
        attrs = self._generate_attr_to_sort_by(hash_key_attrs, range_key_attrs)
        items.sort(key=lambda item: tuple(scalar(item.attrs[a]) for a in attrs))
        return items

    def number(text: str) -> Any:
        digits = text[1:] if text[:1] == "-" else text
        return int(text) if digits.isdigit() else Decimal(text)

    def fast(op: Any, original: Any) -> Any:
        """Compare two scalars of the same type directly; anything else as moto does."""

        def compare(self: DynamoType, other: DynamoType) -> bool:
            if self.type == other.type:
                if self.type == "S":
                    return op(self.value, other.value)
                if self.type == "N":
                    return op(number(self.value), number(other.value))
            return original(self, other)

        return compare

    import operator

    for name, op in (
        ("__lt__", operator.lt),
        ("__le__", operator.le),
        ("__gt__", operator.gt),
        ("__ge__", operator.ge),
    ):
        setattr(DynamoType, name, fast(op, getattr(DynamoType, name)))
    original_eq, original_ne = DynamoType.__eq__, DynamoType.__ne__

    def eq(self: DynamoType, other: DynamoType) -> bool:
        if self.type == "S" and other.type == "S":
            return self.value == other.value
        return original_eq(self, other)

    def ne(self: DynamoType, other: DynamoType) -> bool:
        if self.type == "S" and other.type == "S":
            return self.value != other.value
        return original_ne(self, other)

    from moto.dynamodb.models.dynamo_type import Item

    original_project = Item.project

    def project(self: Any, projection_expressions: list[list[str]]) -> Any:
        """Top-level attribute names only (what index projections ask for): a copy of those
        attributes. moto otherwise converts the whole item to plain JSON once per name, and
        back, checking the item's size again at every attribute."""
        if all(len(path) == 1 for path in projection_expressions):
            return _partial_copy(self, {path[0] for path in projection_expressions})
        return original_project(self, projection_expressions)

    Item.project = project  # type: ignore[method-assign]
    original_hash = DynamoType.__hash__

    def hash_(self: DynamoType) -> int:
        """moto hashes ``(type, cast_value)``; for a string that is ``(type, value)``: the same
        number, without the property's type dispatch (every table-key lookup hashes twice)."""
        if self.type == "S":
            return hash(("S", self.value))
        return original_hash(self)

    Table.sorted_items = sorted_items  # type: ignore[method-assign]
    DynamoType.__eq__, DynamoType.__ne__ = eq, ne  # type: ignore[method-assign]
    DynamoType.__hash__ = hash_  # type: ignore[method-assign]  # hashable again after __eq__
    Table._leasefence_fast_sort = True  # type: ignore[attr-defined]


def install_fast_update_expressions() -> None:
    """Take the repeated work out of moto's UpdateItem (about 3.7 ms each, the endpoint's
    largest cost), keeping every check it makes:

    * an update expression is parsed once per distinct text (moto parses it twice per request;
      the tree is only read, and its validator works on its own deep copy);
    * the tree walkers look up which processor a node's class gets once per class, not at
      every node (each lookup was a walk of ``isinstance`` checks through ABCMeta);
    * the SET/REMOVE/ADD "one clause each" check runs once, at the top of the tree, instead
      of at every nested node (quadratic in the number of actions). The top counts every
      clause, so any expression the nested checks refuse, it refuses;
    * the validator's own copy of the tree is made by a pickle round trip, not ``deepcopy``:
      the same copy (both go through the nodes' ``__reduce_ex__``; no node type defines a copy
      of its own), each tree pickled once: a sixth of the time (a claim's tree: 1.8 -> 0.3 ms).
    """
    import copy
    import pickle

    from moto.dynamodb import comparisons
    from moto.dynamodb.parsing import expressions, validators

    # moto marks ast_nodes and expressions '# type: ignore' whole: mypy sees no names in them.
    from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
        DepthFirstTraverser,
        Node,
        UpdateExpression,
    )

    if getattr(DepthFirstTraverser, "_leasefence_fast", False):
        return
    parser = expressions.UpdateExpressionParser  # type: ignore[attr-defined]
    parser.make = staticmethod(functools.lru_cache(maxsize=512)(parser.make))

    def processing(self: Any) -> tuple[tuple[type, Any], ...]:
        table = self.__dict__.get("_leasefence_map")
        if table is None:
            table = self._leasefence_map = tuple(self._processing_map().items())
            self._leasefence_types = tuple(node_type for node_type, _ in table)
        return table

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        processing(self)
        return self._leasefence_types

    #: Per (walker class, node class): the position of the node's processor in the walker's
    #: map (-1: none). Each walker class's map has the same node classes in the same order
    #: (only its bound methods differ per walker), and the walkers are made anew per request.
    positions: dict[tuple[type, type], int] = {}
    #: Per class: whether its instances are tree nodes (``Node``'s metaclass is ABCMeta, whose
    #: ``isinstance`` is slow).
    node_classes: dict[type, bool] = {}

    def processor_for(self: Any, kind: type) -> Any:
        table = processing(self)
        key = (type(self), kind)
        at = positions.get(key)
        if at is None:
            at = positions[key] = next(
                (i for i, (node_type, _) in enumerate(table) if issubclass(kind, node_type)), -1
            )
        return None if at < 0 else table[at][1]

    def process(self: Any, node: Any) -> Any:
        found = processor_for(self, type(node))
        return None if found is None else found(node)

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        kind = type(node)
        is_node = node_classes.get(kind)
        if is_node is None:
            is_node = node_classes[kind] = issubclass(kind, Node)
        if is_node:
            parent_node = node.parent
            if node.children is not None:
                for i, child_node in enumerate(node.children):
                    self.pre_processing_of_child(node, i)
                    self.traverse_node_recursively(child_node, i)
            processor = processor_for(self, kind)
            if processor is not None:
                node = processor(node)
                node.parent = parent_node
                if parent_node:
                    parent_node.children[child_id] = node
        return node

    DepthFirstTraverser.nodes_to_be_processed = nodes_to_be_processed
    DepthFirstTraverser.process = process
    DepthFirstTraverser.traverse_node_recursively = traverse_node_recursively

    count_actions = validators.ActionCountValidator.verify_action_counts

    def verify_action_counts(self: Any, node: Any) -> Any:
        if isinstance(node.parent, UpdateExpression):
            return node  # an inner part: the top of the tree counts its clauses too
        return count_actions(self, node)

    validators.ActionCountValidator.verify_action_counts = verify_action_counts  # type: ignore[method-assign]

    #: The pickled form of each tree the validator copied, by the tree's id (with the tree, so
    #: that the id cannot be reused): the trees are the parser's cached ones, never changed.
    pickled: dict[int, tuple[Any, bytes]] = {}

    def tree_copy(value: Any, memo: Any = None) -> Any:
        if not isinstance(value, Node):  # anything else it copies (a list value of an item)
            return copy.deepcopy(value, memo)
        known = pickled.get(id(value))  # the validator's copy of the expression's tree
        if known is None or known[0] is not value:
            if len(pickled) >= 1024:
                pickled.clear()
            known = pickled[id(value)] = (value, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
        return pickle.loads(known[1])  # our own bytes

    validators.deepcopy = tree_copy  # type: ignore[assignment]

    # Condition expressions: the tokens of one text, once (immutable named tuples, their
    # children lists empty and never filled: later steps build new nodes); a text that does not
    # lex raises every time, as before (an exception is not cached).
    lexer = comparisons.ConditionExpressionParser
    lex = lexer._lex_condition_expression

    @functools.lru_cache(maxsize=512)
    def tokens(text: str) -> tuple[Any, ...]:
        bare = lexer.__new__(lexer)  # the lexer reads only the text and class constants
        bare.condition_expression = text
        return tuple(lex(bare))

    def lex_condition_expression(self: Any) -> deque[Any]:
        return deque(tokens(self.condition_expression))

    lexer._lex_condition_expression = lex_condition_expression  # type: ignore[method-assign]
    DepthFirstTraverser._leasefence_fast = True


def install_unsorted_query_candidates() -> None:
    """Let moto's Query collect its candidates without sorting the whole table first.

    ``Table.all_items`` sorts every item of the table by primary key; Query calls it and then
    sorts the few matching candidates again by the index's (or the table's) full key, a total
    order, so the first sort never shows in a result. At 10,000 items it made an empty index
    Query cost 68 ms. Scans keep moto's sorted order (their pages depend on it).

    moto then deep-copies every result, whole, before an index projects it; for an index that
    projects (KEYS_ONLY, INCLUDE: every index of the leasefence table) the projection is a new
    item already, so that copy (a quarter of a claim's Query) is left out.
    """
    import copy as copy_module

    from moto.dynamodb.models import table as table_module
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_leasefence_unsorted_query", False):
        return
    original_query = Table.query

    def unsorted_items(self: Any) -> list[Any]:
        if self.range_key_attr:
            return [item for items in self.items.values() for item in items.values()]
        return list(self.items.values())

    # Inside moto's table module, the deep copy of a Query's results is skipped while
    # `_lean.results` is set; any other deep copy there is the real one.
    shim = types.SimpleNamespace(**{name: getattr(copy_module, name) for name in ("copy", "Error")})
    shim.deepcopy = lambda value, memo=None: (
        value
        if getattr(_lean, "results", False) and isinstance(value, list)
        else copy_module.deepcopy(value, memo)
    )
    table_module.copy = shim  # type: ignore[assignment]

    def projects(self: Any, index_name: Any) -> bool:
        """Whether an index's query results are copies already (KEYS_ONLY or INCLUDE: each
        result is projected, a new item); ALL hands out the stored items themselves."""
        if not index_name:
            return False
        for index in self.all_indexes():
            if index.name == index_name:
                kind = (index.projection or {}).get("ProjectionType", "ALL")
                return kind in ("KEYS_ONLY", "INCLUDE")
        return False

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        _lean.results = projects(self, _arg(args, kwargs, 7, "index_name"))
        try:
            if "all_items" in self.__dict__:  # someone already chose this call's candidates
                return original_query(self, *args, **kwargs)
            self.all_items = types.MethodType(
                unsorted_items, self
            )  # this call only (requests are serialized)
            try:
                return original_query(self, *args, **kwargs)
            finally:
                del self.all_items
        finally:
            _lean.results = False

    Table.query = query  # type: ignore[method-assign]
    Table._leasefence_unsorted_query = True  # type: ignore[attr-defined]


#: Set while a Query whose results are copied by their projection runs (this thread).
_lean = threading.local()


def install_fast_item_copies() -> None:
    """Copy and convert moto's attribute values in one pass each.

    moto deep-copies the whole item at every UpdateItem (the stream record's old image) and
    every item a Scan or a table Query returns; its ``DynamoType.__deepcopy__`` goes back
    through ``copy.deepcopy`` (its dispatch and memo) for every nested value. The values are
    trees (DynamoDB data has no cycles), so each node is copied once, without a memo. Its
    ``to_regular_json`` (the stream record's images, ``ALL_NEW``/``ALL_OLD`` answers) deep-copied
    each nested value again at every level: a third of an UpdateItem's time on an item with a
    history of 20 entries. The copies and the JSON are the same (a test compares every answer,
    stream records included, with plain moto's).
    """
    import base64
    import copy as copy_module

    from moto.dynamodb.models.dynamo_type import DynamoType

    if getattr(DynamoType, "_leasefence_fast_copy", False):
        return

    def copied(value: Any) -> Any:
        result = DynamoType.__new__(value.__class__)
        kind = result.type = value.type
        if kind == "L":
            result.value = [copied(v) for v in value.value]
        elif kind == "M":
            result.value = {k: copied(v) for k, v in value.value.items()}
        elif kind in ("SS", "NS", "BS"):
            result.value = list(value.value)
        else:
            result.value = value.value
        return result

    def to_regular_json(self: Any) -> dict[str, Any]:
        """moto's plain-JSON form of a value, built in one pass (moto deep-copies the value at
        every level and then converts the copy again: quadratic in the nesting depth; the
        stream record's two images and the answer each convert the whole item)."""
        value = self.value
        if isinstance(value, dict):
            value = {
                k: v.to_regular_json() if isinstance(v, DynamoType) else copy_module.deepcopy(v)
                for k, v in value.items()
            }
        elif isinstance(value, list):
            value = [
                v.to_regular_json() if isinstance(v, DynamoType) else copy_module.deepcopy(v)
                for v in value
            ]
        else:
            value = copy_module.deepcopy(value)
        if self.is_binary() and isinstance(value, str):
            value = base64.b64decode(value)
        return {self.type: value}

    def deepcopy(self: Any, _memo: Any = None) -> Any:
        return copied(self)

    DynamoType.__deepcopy__ = deepcopy  # type: ignore[method-assign,assignment]
    DynamoType.to_regular_json = to_regular_json  # type: ignore[method-assign]
    DynamoType._leasefence_fast_copy = True  # type: ignore[attr-defined]


def install_item_level_transaction_rollback() -> None:
    """Make moto's TransactWriteItems back up the items it touches, not whole tables.

    moto deep-copies every table a transaction names before applying it, so that it can put the
    copies back if any part fails: O(table size) per transaction (a quarter of the endpoint's CPU
    in a torture run at a few thousand items). Here the tables are not copied; the items the
    transaction names are (at most 100), and on failure exactly those are put back as they were.
    The outcome is the same: all of the transaction or none of it, in the table's stream too: the
    records moto appended for the actions it applied before one failed are taken back (DynamoDB
    streams only what a transaction committed).
    """
    import copy as copy_module

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType

    backend_class = models.DynamoDBBackend
    if getattr(backend_class, "_leasefence_item_rollback", False):
        return
    original = backend_class.transact_write_items

    # Inside moto's dynamodb models module, `copy.deepcopy(table)` (the whole-table backup)
    # becomes a no-op; any other deep copy is the real one.
    shim = types.SimpleNamespace(**{name: getattr(copy_module, name) for name in ("copy", "Error")})
    shim.deepcopy = lambda value, memo=None: (
        value if isinstance(value, models.Table) else copy_module.deepcopy(value, memo)
    )
    models.copy = shim  # type: ignore[assignment]

    def touched_items(
        self: Any, transact_items: list[dict[str, Any]]
    ) -> list[tuple[Any, Any, Any, Any]]:
        saved = []
        for entry in transact_items:
            op_type, op = next(iter(entry.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue
            key = op.get("Item", {}) if op_type == "Put" else op.get("Key", {})
            hash_attr, range_attr = table.hash_key_attr, table.range_key_attr
            if hash_attr not in key or (range_attr is not None and range_attr not in key):
                continue  # moto rejects it before writing anything
            hash_value = DynamoType(key[hash_attr])
            range_value = DynamoType(key[range_attr]) if range_attr is not None else None
            current = table.get_item(hash_value, range_value)
            saved.append((table, hash_value, range_value, copy_module.deepcopy(current)))
        return saved

    def restore(saved: list[tuple[Any, Any, Any, Any]]) -> None:
        for table, hash_value, range_value, item in reversed(saved):
            if range_value is None:
                if item is None:
                    table.items.pop(hash_value, None)
                else:
                    table.items[hash_value] = item
            elif item is None:
                table.items.get(hash_value, {}).pop(range_value, None)
                if hash_value in table.items and not table.items[hash_value]:
                    del table.items[hash_value]
            else:
                table.items[hash_value][range_value] = item

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = touched_items(self, transact_items)
        streams = {
            id(t): (t.stream_shard, len(t.stream_shard.items))
            for t, *_ in saved
            if t.stream_shard is not None
        }
        try:
            original(self, transact_items)
        except BaseException:
            restore(saved)
            for shard, length in streams.values():
                del shard.items[length:]
            raise

    backend_class.transact_write_items = transact_write_items  # type: ignore[method-assign]
    backend_class._leasefence_item_rollback = True  # type: ignore[attr-defined]


def install_stream_iterator_pruning() -> None:
    """Forget a DynamoDB Streams shard iterator once ``GetRecords`` used it.

    moto keeps every iterator it ever handed out (each ``GetRecords`` answer makes a new one), so
    a poller reading the stream a few times a second grew the endpoint by about 100 MB an hour.
    DynamoDB lets an iterator be used for 15 minutes; every reader here (the local event source
    mappings) uses each one once, as Lambda does.
    """
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    if getattr(DynamoDBStreamsBackend, "_leasefence_pruned", False):
        return
    original = DynamoDBStreamsBackend.get_records

    def get_records(self: Any, iterator_arn: str, limit: int) -> Any:
        try:
            return original(self, iterator_arn, limit)
        finally:
            self.shard_iterators.pop(iterator_arn, None)

    DynamoDBStreamsBackend.get_records = get_records
    DynamoDBStreamsBackend._leasefence_pruned = True


def install_event_account_field() -> None:
    """Deliver EventBridge events to targets with their ``account`` field, as EventBridge does
    (moto's default target input leaves it out)."""
    from moto.events.utils import EventTemplateParser

    EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = (
        '{"version": "0", "id": "<id>", "detail-type": "<detail-type>", "source": "<source>", '
        '"account": "<account>", "time": <time>, "region": "<region>", "resources": <resources>, '
        '"detail": <detail>}'
    )


def install_fast_dispatch() -> None:
    """moto's server lists its own package directory on disk to route every request, and lists
    the methods of the service's response class (``inspect.getmembers``) to find the action's;
    neither changes while it runs, so each is read once (the methods once per class)."""
    from moto import backends
    from moto.core import responses

    if getattr(backends, "_leasefence_cached_modules", None) is not None:
        return
    modules = tuple(backends.list_of_moto_modules())
    backends._leasefence_cached_modules = modules
    backends.list_of_moto_modules = lambda: modules
    responses.method_names_from_class = functools.cache(responses.method_names_from_class)


class _Untracked(list):
    """A list that forgets what is appended to it."""

    def append(self, item: Any) -> None:
        pass


def stop_item_tracking() -> None:
    """Stop moto from keeping every DynamoDB and S3 model object it ever made.

    moto's ``BaseModel`` appends each new instance to a class-level list (for its model-instances
    API). Every update deep-copies the item twice and every transaction deep-copies the tables,
    so a long-running endpoint grew by kilobytes per request and megabytes per transaction (6 GB
    in a 5,000-operation torture run). The embedded endpoint never uses those lists.
    """
    import moto.dynamodb.models  # registers the model classes
    import moto.s3.models  # noqa: F401
    from moto.core.model_instances import model_data

    for service in ("dynamodb", "s3"):
        classes: dict[str, Any] = model_data[service]  # moto types the classes as object
        for model in classes.values():
            if not isinstance(model.instances_tracked, _Untracked):
                model.instances_tracked = _Untracked()


def _operation(environ: dict[str, Any]) -> str:
    """What a request asks the endpoint: the action of its ``X-Amz-Target`` (``UpdateItem``,
    ``GetRecords``, ...), else the service its signature names and the HTTP method (``s3 PUT``)."""
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:
        return target.rpartition(".")[2]
    # AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, ...
    scope = environ.get("HTTP_AUTHORIZATION", "").partition("Credential=")[2].split("/")
    service = scope[3] if len(scope) > 4 else "unsigned"
    return f"{service} {environ.get('REQUEST_METHOD', '')}"


class SerializedApp:
    """WSGI middleware: one request at a time, start to last byte.

    It times each request by operation: how long it waited for its turn (``waited``) and how
    long it held the endpoint (``held``), read at ``GET /__leasefence/timings``
    (:mod:`leasefence_tools.local.timings`; ``POST /__leasefence/timings/reset``)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.timings = {"held": Timings(), "waited": Timings()}

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.startswith(TIMINGS_PATH):
            found = timings_answer(environ.get("REQUEST_METHOD", "GET"), path, self.timings)
            if found is not None:
                status, body = found
                start_response(
                    f"{status} {'OK' if status == 200 else 'Method Not Allowed'}",
                    [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
                )
                return [body]
        operation = _operation(environ)
        arrived = time.perf_counter()
        with self.lock:
            started = time.perf_counter()
            try:
                return self._serve(environ, start_response)
            finally:
                ended = time.perf_counter()
                self.timings["waited"].add(operation, started - arrived)
                self.timings["held"].add(operation, ended - started)

    def _serve(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        """One request, under the lock: the whole answer."""
        body = self.app(environ, start_response)
        try:
            return [b"".join(body)]
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()


# ---------------------------------------------------------------------------------------- fidelity

_DAY_MS = 86_400_000
_SCALAR_TYPES = frozenset({"S", "N", "B", "BOOL", "NULL"})
_FIVE_YEARS_MS = 5 * 365 * _DAY_MS
ADMIN_PREFIX = "/__leasefence/"


def _env_flag(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Fidelity:
    """Where the embedded endpoint is as unkind as real DynamoDB (all off without one).

    * **TTL deletion** (``ttl_deletion``): an item whose TTL attribute (the table's
      ``UpdateTimeToLive`` setting; epoch *seconds*, a Number) is past is deleted, with its index
      entries, once the endpoint clock reaches ``ttl + lag``. The lag is per item, a seeded
      fraction between ``ttl_lag_min_ms`` and ``ttl_lag_ms`` (DynamoDB: typically within two
      days, never at an exact moment). Until then the item is readable. As in DynamoDB, a TTL more
      than five years in the past, or not a Number, is ignored. The endpoint clock is the wall
      clock unless a test sets it (:meth:`EmbeddedAws.set_time`).
    * **Lagging global secondary indexes** (``index_lag_ms``): an index Query (``IndexName`` of a
      GSI) sees each item as it was ``lag`` ago, wall-clock time: a write within the lag is not
      seen yet (the old version shows, or nothing if the item is new), a delete within the lag
      still shows. The lag is per item, a seeded fraction between ``index_lag_min_ms`` and
      ``index_lag_ms``. Table reads, table queries and conditions always see the latest item.
    * **Throttled transactions** (``txn_throttle_rate``): that fraction of ``TransactWriteItems``
      (seeded) is refused with ``TransactionCanceledException`` and ``ThrottlingError`` reasons
      (``ProvisionedThroughputExceeded`` on a provisioned table), nothing applied.
    * **Partition limits** (``partition_limits``, off by default): 1,000 write and 3,000 read
      units per second per partition key value, for the table and each index, past which a
      request is throttled (``ThrottlingException``, reason ``...KeyRangeThroughputExceeded``);
      ``partition_time_scale`` divides the limits. See
      :mod:`leasefence_tools.local.partitions`.
    """

    ttl_deletion: bool = True
    ttl_lag_ms: int = 2 * _DAY_MS
    ttl_lag_min_ms: int = 0
    index_lag_ms: int = 250
    index_lag_min_ms: int = 0
    txn_throttle_rate: float = 0.0
    seed: int = 0
    #: How often (wall seconds) an idle endpoint looks for TTL deletions that are due. Requests
    #: look too, before they run, so a request never sees an item that is due for deletion.
    reap_interval_s: float = 0.5
    partition_limits: bool = False
    partition_time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.ttl_lag_min_ms <= self.ttl_lag_ms:
            raise ValueError("need 0 <= ttl_lag_min_ms <= ttl_lag_ms")
        if not 0 <= self.index_lag_min_ms <= self.index_lag_ms:
            raise ValueError("need 0 <= index_lag_min_ms <= index_lag_ms")
        if not 0.0 <= self.txn_throttle_rate <= 1.0:
            raise ValueError("txn_throttle_rate is a fraction between 0 and 1")
        if self.reap_interval_s <= 0:
            raise ValueError("reap_interval_s must be positive")
        if self.partition_time_scale <= 0:
            raise ValueError("partition_time_scale must be positive")

    #: Environment variable per field (``LEASEFENCE_FIDELITY=1`` switches the whole thing on).
    ENV: ClassVar[dict[str, str]] = {
        "ttl_deletion": "LEASEFENCE_FIDELITY_TTL_DELETION",
        "ttl_lag_ms": "LEASEFENCE_FIDELITY_TTL_LAG_MS",
        "ttl_lag_min_ms": "LEASEFENCE_FIDELITY_TTL_LAG_MIN_MS",
        "index_lag_ms": "LEASEFENCE_FIDELITY_INDEX_LAG_MS",
        "index_lag_min_ms": "LEASEFENCE_FIDELITY_INDEX_LAG_MIN_MS",
        "txn_throttle_rate": "LEASEFENCE_FIDELITY_TXN_THROTTLE_RATE",
        "seed": "LEASEFENCE_FIDELITY_SEED",
        "reap_interval_s": "LEASEFENCE_FIDELITY_REAP_INTERVAL_S",
        "partition_limits": "LEASEFENCE_FIDELITY_PARTITION_LIMITS",
        "partition_time_scale": "LEASEFENCE_FIDELITY_PARTITION_TIME_SCALE",
    }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Fidelity | None:
        """``None`` unless ``LEASEFENCE_FIDELITY`` is set and true; then the defaults, each
        overridden by its ``LEASEFENCE_FIDELITY_*`` variable where set."""
        env = os.environ if env is None else env
        if not _env_flag(env.get("LEASEFENCE_FIDELITY", "")):
            return None
        values: dict[str, Any] = {}
        types_ = {f.name: f.type for f in fields(cls)}
        for name, var in cls.ENV.items():
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            kind = types_[name]
            if kind in ("bool", bool):
                values[name] = _env_flag(raw)
            elif kind in ("float", float):
                values[name] = float(raw)
            else:
                values[name] = int(raw)
        return cls(**values)


class EndpointClock:
    """The endpoint's notion of now (epoch ms): the wall clock, shifted or frozen by tests."""

    def __init__(self) -> None:
        self.frozen_ms: int | None = None
        self.offset_ms = 0

    def now_ms(self) -> int:
        if self.frozen_ms is not None:
            return self.frozen_ms
        return time.time_ns() // 1_000_000 + self.offset_ms

    def set(self, now_ms: int | None) -> None:
        """Freeze at ``now_ms``; ``None`` returns to the (unshifted) wall clock."""
        self.frozen_ms = None if now_ms is None else int(now_ms)
        self.offset_ms = 0

    def advance(self, ms: int) -> None:
        if self.frozen_ms is not None:
            self.frozen_ms += int(ms)
        else:
            self.offset_ms += int(ms)


def _fraction(seed: int, kind: str, table: str, key: tuple[Any, Any]) -> float:
    """A deterministic number in [0, 1) per (seed, purpose, table, item key)."""
    hash_key, range_key = key
    text = f"{seed}\0{kind}\0{table}\0{hash_key.type}:{hash_key.value}\0"
    if range_key is not None:
        text += f"{range_key.type}:{range_key.value}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return a.type == b.type and a.value == b.value


class _IndexShape:
    """What a table's global secondary indexes read of an item."""

    __slots__ = ("memberships", "relevant")

    def __init__(self, table: Any) -> None:
        relevant: set[str] | None = {table.hash_key_attr} | (
            {table.range_key_attr} if table.range_key_attr else set()
        )
        memberships = []
        for index in table.global_indexes or []:
            keys = tuple(index.schema_key_attrs)
            memberships.append(keys)
            projection = (index.projection or {}).get("ProjectionType", "ALL")
            if relevant is not None:
                relevant.update(keys)
                if projection == "INCLUDE":
                    relevant.update(index.projection.get("NonKeyAttributes", []))
                elif projection != "KEYS_ONLY":
                    relevant = None  # ALL: every attribute shows
        self.relevant: frozenset[str] | None = None if relevant is None else frozenset(relevant)
        self.memberships: tuple[tuple[str, ...], ...] = tuple(memberships)

    def indexed(self, item: Any) -> bool:
        attrs = item.attrs
        return any(all(name in attrs for name in keys) for keys in self.memberships)

    def same(self, old: Any, new: Any) -> bool:
        """Whether an index would show ``old`` and ``new`` alike (``None``: no item)."""
        if old is None or new is None:
            other = new if old is None else old
            return other is None or not self.indexed(other)
        if self.relevant is None:
            return old.attrs.keys() == new.attrs.keys() and all(
                _same_value(value, new.attrs[name]) for name, value in old.attrs.items()
            )
        old_attrs, new_attrs = old.attrs, new.attrs
        return all(_same_value(old_attrs.get(name), new_attrs.get(name)) for name in self.relevant)

    def snapshot(self, item: Any) -> Any:
        """A copy of what the indexes read of ``item`` (keys and projected attributes), immune to
        the in-place changes an UpdateItem makes to the original."""
        import copy

        if self.relevant is None:
            return copy.deepcopy(item)
        return _partial_copy(item, self.relevant)


def _shape_of(table: Any) -> _IndexShape:
    """The table's :class:`_IndexShape`, cached on it until its indexes change."""
    signature = tuple(map(id, table.global_indexes or ()))
    cached = table.__dict__.get("_leasefence_shape")
    if cached is None or cached[0] != signature:
        cached = table._leasefence_shape = (signature, _IndexShape(table))
    return cached[1]


def _all_items_unsorted(table: Any) -> list[Any]:
    if table.range_key_attr:
        return [item for items in table.items.values() for item in items.values()]
    return list(table.items.values())


class FidelityState:
    """Per endpoint: its clock, the tables it created, the index lag's pending versions and the
    TTL deletion schedule. Every method runs under the endpoint's request lock.

    Index lag: per (table, key), a list of ``(visible_at, version_before)`` for the changes an
    index does not show yet (wall-clock monotonic seconds); an index query shows the version
    before the first change not yet visible. Entries are dropped once visible, so memory is
    bounded by the writes of the last ``index_lag_ms``.

    TTL: a heap of ``(due_ms, table, key)``, pushed by every write that leaves a TTL on an item;
    an entry is re-checked against the item when it comes due (the item may have changed since).
    A full scan (:meth:`reap` with ``full=True``) rebuilds it.
    """

    def __init__(self, config: Fidelity) -> None:
        self.config = config
        self.clock = EndpointClock()
        self.owned: dict[str, Any] = {}  # table name -> its moto backend
        self.pending: dict[str, dict[tuple[Any, Any], list[tuple[float, Any]]]] = {}
        self._expiry: deque[tuple[float, str, tuple[Any, Any]]] = deque()
        self.staging: list[tuple[str, tuple[Any, Any], float, float, Any]] | None = None
        self._ttl_heap: list[tuple[int, int, str, tuple[Any, Any]]] = []
        self._seq = itertools.count()
        self.scan_needed = False
        self.rng = random.Random(config.seed)
        self.stats = {
            "ttl_deleted": 0,
            "ttl_passes": 0,
            "index_versions_recorded": 0,
            "index_queries_lagged": 0,
            "index_stale_items_served": 0,
            "txn_throttled": 0,
        }
        #: Per-partition throughput (``partition_limits``), on the endpoint clock.
        self.partitions = (
            PartitionMeter(config.partition_time_scale, clock=lambda: self.clock.now_ms() / 1000)
            if config.partition_limits
            else None
        )

    # ---------------------------------------------------------------- writes

    def record(self, table: Any, key: tuple[Any, Any], old: Any, new: Any) -> None:
        """A write changed ``key`` of ``table`` from ``old`` to ``new`` (``None``: no item)."""
        config = self.config
        if config.index_lag_ms > 0 and table.global_indexes and not _shape_of(table).same(old, new):
            lag_ms: float = config.index_lag_min_ms
            if config.index_lag_ms > lag_ms:
                lag_ms += _fraction(config.seed, "index", table.name, key) * (
                    config.index_lag_ms - lag_ms
                )
            if lag_ms > 0:
                now = time.monotonic()
                entry = (
                    table.name,
                    key,
                    now + lag_ms / 1000,
                    now + config.index_lag_ms / 1000,
                    old,
                )
                if self.staging is not None:
                    self.staging.append(entry)
                else:
                    self._add_pending(*entry)
        if config.ttl_deletion and new is not None:
            ttl = table.ttl
            if ttl.get("TimeToLiveStatus") == "ENABLED":
                due = self.ttl_due_ms(table, new, ttl.get("AttributeName"))
                if due is not None:
                    heapq.heappush(self._ttl_heap, (due, next(self._seq), table.name, key))

    def _add_pending(
        self, name: str, key: tuple[Any, Any], visible_at: float, forget_at: float, old: Any
    ) -> None:
        self.pending.setdefault(name, {}).setdefault(key, []).append((visible_at, old))
        self._expiry.append((forget_at, name, key))
        self.stats["index_versions_recorded"] += 1
        self.prune(time.monotonic())

    def commit_staged(self) -> None:
        staged, self.staging = self.staging, None
        for entry in staged or ():
            self._add_pending(*entry)

    def prune(self, now: float) -> None:
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, name, key = expiry.popleft()
            table = self.pending.get(name)
            entries = table.get(key) if table is not None else None
            if table is None or entries is None:
                continue
            while entries and entries[0][0] <= now:
                del entries[0]
            if not entries:
                del table[key]
                if not table:
                    del self.pending[name]

    def forget_table(self, name: str) -> None:
        self.owned.pop(name, None)
        self.pending.pop(name, None)

    # ---------------------------------------------------------------- index queries

    def index_candidates(self, table: Any) -> list[Any] | None:
        """The items an index query of ``table`` sees now, or ``None``: the table as it is."""
        pending = self.pending.get(table.name)
        if not pending:
            return None
        now = time.monotonic()
        self.prune(now)
        stored = table.items
        ranged = table.range_key_attr is not None
        replace: dict[int, Any] = {}
        gone = []
        for (hash_key, range_key), entries in pending.items():
            for visible_at, old in entries:  # noqa: B007 - the break keeps old for below
                if visible_at > now:
                    break
            else:
                continue  # every change of this item is visible already
            current = stored.get(hash_key)
            if ranged and current is not None:
                current = current.get(range_key)
            if current is None:
                if old is not None:
                    gone.append(old)
            else:
                replace[id(current)] = old
        if not replace and not gone:
            return None
        items = _all_items_unsorted(table)
        if replace:
            items = [replace.get(id(item), item) for item in items]
            items = [item for item in items if item is not None]
        items.extend(gone)
        self.stats["index_queries_lagged"] += 1
        self.stats["index_stale_items_served"] += len(replace) + len(gone)
        return items

    # ---------------------------------------------------------------- TTL

    def ttl_due_ms(self, table: Any, item: Any, attribute: str | None) -> int | None:
        """When the endpoint deletes ``item`` (epoch ms), or ``None``: never (no usable TTL)."""
        value = item.attrs.get(attribute) if attribute else None
        if value is None or value.type != "N":
            return None
        try:
            expires_ms = int(Decimal(value.value) * 1000)
        except (InvalidOperation, ValueError, OverflowError):
            return None
        config = self.config
        lag_ms = config.ttl_lag_min_ms
        if config.ttl_lag_ms > lag_ms:
            key = (item.hash_key, item.range_key)
            lag_ms += int(
                _fraction(config.seed, "ttl", table.name, key) * (config.ttl_lag_ms - lag_ms)
            )
        return expires_ms + lag_ms

    def ttl_due(self, now_ms: int | None = None) -> bool:
        if not self.config.ttl_deletion:
            return False
        if self.scan_needed:
            return True
        heap = self._ttl_heap
        return bool(heap) and heap[0][0] <= (self.clock.now_ms() if now_ms is None else now_ms)

    def _ttl_table(self, name: str) -> tuple[Any, str] | None:
        backend = self.owned.get(name)
        table = backend.tables.get(name) if backend is not None else None
        if table is None or table.ttl.get("TimeToLiveStatus") != "ENABLED":
            return None
        return table, table.ttl.get("AttributeName")

    def reap(self, full: bool = False) -> int:
        """Delete the items whose TTL deletion is due; ``full`` rescans every owned table."""
        if not self.config.ttl_deletion:
            return 0
        now_ms = self.clock.now_ms()
        self.stats["ttl_passes"] += 1
        deleted = 0
        if full or self.scan_needed:
            self.scan_needed = False
            heap: list[tuple[int, int, str, tuple[Any, Any]]] = []
            for name in list(self.owned):
                found = self._ttl_table(name)
                if found is None:
                    continue
                table, attribute = found
                for item in _all_items_unsorted(table):
                    due = self.ttl_due_ms(table, item, attribute)
                    if due is None:
                        continue
                    key = (item.hash_key, item.range_key)
                    if due <= now_ms:
                        deleted += self._expire(table, item, key, now_ms)
                    else:
                        heap.append((due, next(self._seq), name, key))
            heapq.heapify(heap)
            self._ttl_heap = heap
        heap = self._ttl_heap
        while heap and heap[0][0] <= now_ms:
            _, _, name, key = heapq.heappop(heap)
            found = self._ttl_table(name)
            if found is None:
                continue
            table, attribute = found
            try:
                item = table.get_item(*key)
            except Exception:  # noqa: BLE001
                item = None
            if item is None:
                continue
            due = self.ttl_due_ms(table, item, attribute)
            if (
                due is not None and due <= now_ms
            ):  # else: changed since; its write pushed its own entry
                deleted += self._expire(table, item, key, now_ms)
        self.stats["ttl_deleted"] += deleted
        return deleted

    def _expire(self, table: Any, item: Any, key: tuple[Any, Any], now_ms: int) -> int:
        if (
            int(Decimal(item.attrs[table.ttl["AttributeName"]].value) * 1000)
            < now_ms - _FIVE_YEARS_MS
        ):
            return 0  # DynamoDB ignores TTLs more than five years in the past
        stream = table.stream_shard
        before = len(stream.items) if stream is not None else 0
        table.delete_item(item.hash_key, item.range_key)  # moto adds the REMOVE stream record
        if stream is not None and len(stream.items) > before:
            # As DynamoDB marks deletions by TTL in a stream (GetRecords' member names).
            stream.items[-1].record["userIdentity"] = {
                "Type": "Service",
                "PrincipalId": "dynamodb.amazonaws.com",
            }
        self.record(table, key, item, None)
        return 1

    # ---------------------------------------------------------------- throttled transactions

    def throttle_transaction(self, environ: dict[str, Any]) -> bytes | None:
        """The error body of a TransactWriteItems refused as throttled, or ``None``: let it run."""
        if not self.config.txn_throttle_rate or self.rng.random() >= self.config.txn_throttle_rate:
            return None
        from leasefence_tools.testing.faults import (
            cancellation_message,
            cancellation_reasons,
            pick_throttled,
        )

        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            actions = json.loads(body or b"{}").get("TransactItems") or []
        except ValueError:
            return None  # let moto answer what it cannot parse either (the body is gone: it will refuse)
        if not isinstance(actions, list) or not actions:
            return None
        provisioned = False
        for action in actions:
            op: Any = next(iter(action.values()), {}) if isinstance(action, dict) and action else {}
            backend = self.owned.get(op.get("TableName", "")) if isinstance(op, dict) else None
            table = backend.tables.get(op["TableName"]) if backend is not None else None
            if table is not None and getattr(table, "billing_mode", "") == "PROVISIONED":
                provisioned = True
        code = "ProvisionedThroughputExceeded" if provisioned else "ThrottlingError"
        reasons = cancellation_reasons(len(actions), pick_throttled(len(actions), self.rng), code)
        self.stats["txn_throttled"] += 1
        return json.dumps(
            {
                "__type": "com.amazonaws.dynamodb.v20120810#TransactionCanceledException",
                "Message": cancellation_message(reasons),
                "CancellationReasons": reasons,
            }
        ).encode()


#: The fidelity state of the endpoint whose request this thread is serving (if it has one).
_active = threading.local()


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def install_fidelity_hooks() -> None:
    """Record every item write (and answer index queries from the lagging view) for requests
    served by an endpoint with a :class:`Fidelity`. For any other request, and for every
    endpoint without one, the hooks call moto's own code unchanged."""

    from moto.dynamodb import models
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    backend_class = models.DynamoDBBackend
    if getattr(backend_class, "_leasefence_fidelity", False):
        return
    original_put, original_delete = backend_class.put_item, backend_class.delete_item
    original_update, original_transact = (
        backend_class.update_item,
        backend_class.transact_write_items,
    )
    original_create, original_delete_table = backend_class.create_table, backend_class.delete_table
    original_ttl, original_query = backend_class.update_time_to_live, Table.query

    def owned_table(state: FidelityState, backend: Any, name: Any) -> Any:
        table = backend.tables.get(name) if isinstance(name, str) else None
        return table if table is not None and state.owned.get(table.name) is backend else None

    def key_of(table: Any, values: dict[str, Any]) -> tuple[Any, Any] | None:
        try:
            hash_key = DynamoType(values[table.hash_key_attr])
            range_key = DynamoType(values[table.range_key_attr]) if table.range_key_attr else None
        except (KeyError, TypeError, IndexError, AttributeError):
            return None
        return hash_key, range_key

    def put_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = getattr(_active, "state", None)
        table = (
            owned_table(state, self, _arg(args, kwargs, 0, "table_name"))
            if state is not None
            else None
        )
        key = (
            key_of(table, _arg(args, kwargs, 1, "item_attrs") or {}) if table is not None else None
        )
        if state is None or table is None or key is None:
            return original_put(self, *args, **kwargs)
        old = table.get_item(*key)  # replaced, never changed in place: no copy needed
        new = original_put(self, *args, **kwargs)
        state.record(table, key, old, new)
        return new

    def delete_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = getattr(_active, "state", None)
        table = (
            owned_table(state, self, _arg(args, kwargs, 0, "table_name"))
            if state is not None
            else None
        )
        old = original_delete(self, *args, **kwargs)
        if state is not None and table is not None and old is not None:
            state.record(table, (old.hash_key, old.range_key), old, None)
        return old

    def update_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = getattr(_active, "state", None)
        table = (
            owned_table(state, self, _arg(args, kwargs, 0, "table_name"))
            if state is not None
            else None
        )
        key = key_of(table, _arg(args, kwargs, 1, "key") or {}) if table is not None else None
        if state is None or table is None or key is None:
            return original_update(self, *args, **kwargs)
        current = table.get_item(*key)
        old = None
        if current is not None:
            # UpdateItem changes the stored item in place: keep what an index would read of it.
            old = (
                _shape_of(table).snapshot(current)
                if state.config.index_lag_ms and table.global_indexes
                else current
            )
        new = original_update(self, *args, **kwargs)
        state.record(table, key, old, new)
        return new

    def transact_write_items(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = getattr(_active, "state", None)
        if state is None:
            return original_transact(self, *args, **kwargs)
        state.staging = []  # index versions count only if the whole transaction commits
        try:
            result = original_transact(self, *args, **kwargs)
        except BaseException:
            state.staging = None
            raise
        state.commit_staged()
        return result

    def create_table(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        table = original_create(self, name, *args, **kwargs)
        state = getattr(_active, "state", None)
        if state is not None:
            state.owned[table.name] = self
        return table

    def delete_table(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        table = original_delete_table(self, name, *args, **kwargs)
        state = getattr(_active, "state", None)
        if state is not None and state.owned.get(table.name) is self:
            state.forget_table(table.name)
        return table

    def update_time_to_live(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_ttl(self, *args, **kwargs)
        state = getattr(_active, "state", None)
        if state is not None:
            state.scan_needed = True  # items already in the table may now be due
        return result

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        state = getattr(_active, "state", None)
        if state is None or not state.pending or "all_items" in self.__dict__:
            return original_query(self, *args, **kwargs)
        index_name = _arg(args, kwargs, 7, "index_name")
        if not index_name or state.owned.get(self.name) is None:
            return original_query(self, *args, **kwargs)
        if not any(index.name == index_name for index in self.global_indexes or []):
            return original_query(self, *args, **kwargs)  # LSIs and unknown names: as moto does
        candidates = state.index_candidates(self)
        if candidates is None:
            return original_query(self, *args, **kwargs)
        self.all_items = lambda: candidates  # this call only (requests are serialized)
        try:
            return original_query(self, *args, **kwargs)
        finally:
            del self.all_items

    backend_class.put_item = put_item  # type: ignore[method-assign]
    backend_class.delete_item = delete_item  # type: ignore[method-assign]
    backend_class.update_item = update_item  # type: ignore[method-assign]
    backend_class.transact_write_items = transact_write_items  # type: ignore[method-assign]
    backend_class.create_table = create_table  # type: ignore[method-assign]
    backend_class.delete_table = delete_table  # type: ignore[method-assign]
    backend_class.update_time_to_live = update_time_to_live  # type: ignore[method-assign]
    Table.query = query  # type: ignore[method-assign]
    backend_class._leasefence_fidelity = True  # type: ignore[attr-defined]


class FidelityApp(SerializedApp):
    """:class:`SerializedApp` plus the :class:`Fidelity` behaviours and the admin paths under
    ``/__leasefence/`` (handled here, never by moto):

    * ``GET /__leasefence/time``: ``{"now_ms": ..., "frozen": ...}`` (the endpoint clock);
    * ``POST /__leasefence/time`` with ``{"now_ms": N}`` (freeze at N), ``{"advance_ms": N}`` or
      ``{"wall": true}`` (back to the wall clock); answers as GET;
    * ``POST /__leasefence/ttl/reap``: a full TTL deletion pass now, ``{"deleted": n, "now_ms": ...}``;
    * ``GET /__leasefence/fidelity``: the configuration and counters.
    """

    def __init__(self, app: Any, fidelity: Fidelity) -> None:
        super().__init__(app)
        self.state = FidelityState(fidelity)

    def _serve(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        state = self.state
        if environ.get("PATH_INFO", "").startswith(ADMIN_PREFIX):
            return self._admin(environ, start_response)
        if state.ttl_due():
            state.reap()
        if state.config.txn_throttle_rate and environ.get("HTTP_X_AMZ_TARGET", "").endswith(
            ".TransactWriteItems"
        ):
            refused = state.throttle_transaction(environ)
            if refused is not None:
                start_response(
                    "400 Bad Request",
                    [
                        ("Content-Type", "application/x-amz-json-1.0"),
                        ("x-amzn-RequestId", f"throttled-{state.stats['txn_throttled']}"),
                        ("Content-Length", str(len(refused))),
                    ],
                )
                return [refused]
        _active.state = state
        try:
            return super()._serve(environ, start_response)
        finally:
            _active.state = None

    def reap_if_due(self) -> None:
        with self.lock:
            if self.state.ttl_due():
                self.state.reap()

    def _admin(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        state, path, method = (
            self.state,
            environ.get("PATH_INFO", ""),
            environ.get("REQUEST_METHOD", "GET"),
        )
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            request = json.loads(environ["wsgi.input"].read(length) or b"{}") if length else {}
            if path == ADMIN_PREFIX + "time":
                if method == "POST":
                    if request.get("wall"):
                        state.clock.set(None)
                    elif "now_ms" in request:
                        state.clock.set(int(request["now_ms"]))
                    elif "advance_ms" in request:
                        state.clock.advance(int(request["advance_ms"]))
                    else:
                        raise ValueError("expected now_ms, advance_ms or wall")
                answer: dict[str, Any] = {
                    "now_ms": state.clock.now_ms(),
                    "frozen": state.clock.frozen_ms is not None,
                }
            elif path == ADMIN_PREFIX + "ttl/reap" and method == "POST":
                answer = {"deleted": state.reap(full=True), "now_ms": state.clock.now_ms()}
            elif path == ADMIN_PREFIX + "fidelity":
                pending = sum(
                    len(entries) for table in state.pending.values() for entries in table.values()
                )
                answer = {
                    "config": asdict(state.config),
                    "stats": {
                        **state.stats,
                        "index_versions_pending": pending,
                        "ttl_scheduled": len(state._ttl_heap),
                        **(state.partitions.stats if state.partitions is not None else {}),
                    },
                }
            else:
                status, answer = "404 Not Found", {"error": f"no admin path {method} {path}"}
                return self._json(start_response, status, answer)
        except (ValueError, TypeError) as error:
            return self._json(start_response, "400 Bad Request", {"error": str(error)})
        return self._json(start_response, "200 OK", answer)

    @staticmethod
    def _json(start_response: Any, status: str, answer: dict[str, Any]) -> list[bytes]:
        body = json.dumps(answer).encode()
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]


def _serve_in_child(host: str, port: int, ready: Any, fidelity: Fidelity | bool = False) -> None:
    server = EmbeddedAws(host, port, fidelity=fidelity).start()
    ready.put(server.port)
    threading.Event().wait()  # until the parent terminates this process


#: One event per in-process stream reader, set whenever a stream record is written here.
_STREAM_LISTENERS: weakref.WeakSet[threading.Event] = weakref.WeakSet()


def install_stream_notifications() -> None:
    """Tell the in-process stream readers (:meth:`RecordsReader.written`) when a record is added
    to a table's stream, so that they read when there is something to read instead of polling
    an idle stream 20 times a second."""
    from moto.dynamodb.models.table import StreamShard

    if getattr(StreamShard, "_leasefence_notifies", False):
        return
    original = StreamShard.add

    def add(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            for event in list(_STREAM_LISTENERS):
                event.set()

    StreamShard.add = add  # type: ignore[method-assign]
    StreamShard._leasefence_notifies = True  # type: ignore[attr-defined]


class RecordsReader:
    """``GetRecords`` of an endpoint running in this process, for the local event source
    mappings: :meth:`read` answers the wire JSON, through the same serialized application as an
    attached client's calls (lock, fidelity, timings) but without botocore's request building
    and its model-driven parsing of every record
    (:func:`~leasefence_tools.local.in_process.call_json`); :meth:`written` says when there is
    something new to read. Once the endpoint stopped, :meth:`read` raises, as a client of a
    stopped endpoint does."""

    def __init__(self, aws: EmbeddedAws) -> None:
        install_stream_notifications()
        self.aws = aws

    def read(self, iterator: str, limit: int) -> dict[str, Any]:
        from leasefence_tools.local.in_process import call_json

        if self.aws.app is None or self.aws._server is None:
            raise ConnectionError(f"the endpoint {self.aws.endpoint} stopped")
        return call_json(
            self.aws.app,
            self.aws.endpoint,
            "DynamoDBStreams_20120810.GetRecords",
            {"ShardIterator": iterator, "Limit": limit},
            "dynamodb",
        )

    def written(self) -> threading.Event:
        """A new event of the reader's own, set whenever a stream record is added in this
        process (moto's backends are the process's: any table; a spurious wake-up costs one
        empty read)."""
        event = threading.Event()
        _STREAM_LISTENERS.add(event)
        return event


class EmbeddedAws:
    """moto's server, serialized, in a background thread (or, with ``process=True``, in a child
    process, so the endpoint and its callers do not share one interpreter lock).

    ``fidelity``: a :class:`Fidelity` (``True``: the defaults) makes it as unkind as DynamoDB (TTL
    deletion, lagging indexes, throttled transactions); ``False`` keeps plain moto; ``None`` (the default) reads
    :meth:`Fidelity.from_env`, which is off unless ``LEASEFENCE_FIDELITY`` is set.

    In thread mode every endpoint of a process shares moto's one backend; an endpoint's
    fidelity applies to the tables created through it and to the requests it serves.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        process: bool = False,
        fidelity: Fidelity | bool | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.process = process
        if fidelity is None:
            fidelity = Fidelity.from_env()
        elif fidelity is True:
            fidelity = Fidelity()
        self.fidelity: Fidelity | None = fidelity if isinstance(fidelity, Fidelity) else None
        self._server: Any = None
        self.app: SerializedApp | None = None
        self._thread: threading.Thread | None = None
        self._reaper: threading.Thread | None = None
        self._stopping = threading.Event()
        self._child: Any = None

    def start(self) -> EmbeddedAws:
        if self.process:
            import multiprocessing

            use_local_credentials()
            context = multiprocessing.get_context("spawn")
            ready = context.Queue()
            self._child = context.Process(
                target=_serve_in_child,
                args=(self.host, self.port, ready, self.fidelity or False),
                daemon=True,
            )
            self._child.start()
            self.port = ready.get(timeout=120)
            return self
        return self._start_in_thread()

    def _start_in_thread(self) -> EmbeddedAws:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from waitress.server import create_server

        use_local_credentials()
        stop_item_tracking()
        if not os.environ.get("LEASEFENCE_MOTO_AS_IS"):
            install_fast_json_responses()
            install_fast_index_sort()
            install_unsorted_query_candidates()
            install_fast_update_expressions()
            install_fast_item_copies()
            install_item_level_transaction_rollback()
            install_fast_dispatch()
        install_stream_iterator_pruning()
        install_event_account_field()
        logging.getLogger("waitress.queue").setLevel(
            logging.ERROR
        )  # callers queue on the lock by design

        moto_app = DomainDispatcherApplication(create_backend_app)
        if self.fidelity is not None:
            install_fidelity_hooks()
            install_partition_hooks(_active)
            self.app = FidelityApp(moto_app, self.fidelity)
        else:
            self.app = SerializedApp(moto_app)
        # waitress keeps HTTP/1.1 connections open (werkzeug's development server closes each
        # one after a single request: a new TCP connection and thread per request).
        self._server = create_server(
            self.app,
            host=self.host,
            port=self.port,
            threads=8,
            connection_limit=2000,
            backlog=LISTEN_BACKLOG,  # waitress's default too: stated, so it cannot drift
            channel_timeout=600,
            # Whole seconds: waitress reads this as an int (0.2 became 0, a select that never
            # waited: the loop thread spun, a fifth of a core while idle, and took the interpreter
            # lock from the requests). New work and stop() wake the loop through its trigger.
            asyncore_loop_timeout=1,
            ident="embedded-aws",
        )
        self.port = self._server.effective_port
        self._thread = threading.Thread(target=self._server.run, name="embedded-aws", daemon=True)
        self._thread.start()
        if isinstance(self.app, FidelityApp) and self.app.state.config.ttl_deletion:
            self._stopping.clear()
            self._reaper = threading.Thread(
                target=self._reap_forever, name="embedded-aws-ttl", daemon=True
            )
            self._reaper.start()
        return self

    def _reap_forever(self) -> None:
        """Deletes what TTL makes due while no request comes (a request looks for itself)."""
        app = self.app
        assert isinstance(app, FidelityApp)
        while not self._stopping.wait(app.state.config.reap_interval_s):
            app.reap_if_due()

    # ------------------------------------------------------------------ fidelity controls

    def _admin(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call an admin path of this endpoint (in either mode: the same HTTP path)."""
        import urllib.error
        import urllib.request

        if self.fidelity is None:
            raise RuntimeError(
                "this endpoint runs without fidelity (EmbeddedAws(fidelity=Fidelity(...)))"
            )
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - this endpoint's own http:// URL
            self.endpoint + ADMIN_PREFIX + path,
            data=data,
            method="GET" if data is None else "POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - as above
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{path}: {error.read().decode(errors='replace')}") from error

    def now_ms(self) -> int:
        """The endpoint clock (epoch ms): what TTL deletion compares against."""
        return int(self._admin("time")["now_ms"])

    def set_time(self, now_ms: int | None) -> int:
        """Freeze the endpoint clock at ``now_ms`` (``None``: back to the wall clock)."""
        return int(
            self._admin("time", {"wall": True} if now_ms is None else {"now_ms": int(now_ms)})[
                "now_ms"
            ]
        )

    def advance_time(self, ms: int) -> int:
        """Move the endpoint clock ``ms`` forward (frozen or not); returns the new now."""
        return int(self._admin("time", {"advance_ms": int(ms)})["now_ms"])

    def reap_ttl(self) -> int:
        """Run a full TTL deletion pass now; returns how many items it deleted."""
        return int(self._admin("ttl/reap", {})["deleted"])

    def fidelity_stats(self) -> dict[str, Any]:
        """The fidelity configuration and counters (TTL deletions, lagged index queries, ...)."""
        return self._admin("fidelity")

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str = "dynamodb", **kwargs: Any) -> Any:
        from botocore.config import Config

        config = kwargs.pop("config", None) or Config(
            retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64
        )
        return boto3.client(
            service, endpoint_url=self.endpoint, region_name=LOCAL_REGION, config=config, **kwargs
        )

    def attach(self, client: Any) -> Any:
        """Serve ``client`` (one of this endpoint's) without the network while this endpoint
        runs in this process (thread mode): through the same serialized application, so with
        the same lock, fidelity and timings (:mod:`leasefence_tools.local.in_process`). In
        process mode, or once stopped, it goes over HTTP. Returns ``client``."""
        if self.process or self.app is None:
            return client
        from leasefence_tools.local.in_process import serve_in_process

        return serve_in_process(client, self.app, lambda: self._server is not None)

    def records_reader(self) -> RecordsReader | None:
        """This endpoint's streams for a reader in this process (thread mode), or None (process
        mode): see :class:`RecordsReader`."""
        if self.process or self.app is None:
            return None
        return RecordsReader(self)

    def create_tables(self, spec: schema.TableSpec | None = None) -> schema.TableSpec:
        spec = spec or schema.TableSpec()
        schema.create_table(self.client(), spec)
        return spec

    def stop(self) -> None:
        self._stopping.set()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
            self._reaper = None
        if self._child is not None:
            self._child.terminate()
            self._child.join(timeout=10)
            self._child = None
        if self._server is not None:
            from waitress import wasyncore

            server = self._server
            server.task_dispatcher.shutdown()  # requests in progress finish first
            # Close every connection from the server's own loop thread (closing them from here
            # would pull sockets from under its select); the loop ends once none is left.
            server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> EmbeddedAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
