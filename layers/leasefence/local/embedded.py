"""An embedded, linearizable DynamoDB (and S3) endpoint on moto's server.

moto's backends hold no lock, so concurrent conditional writes to one item can both win (see the
design notes). :class:`SerializedApp` holds one lock around each whole request, response body
included, which makes every request atomic with respect to every other: the property DynamoDB
gives per item, and the one every concurrency test here relies on.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import types
from typing import Any, Iterable

import boto3

from leasefence import schema

LOCAL_REGION = "us-east-1"


def use_local_credentials() -> None:
    """moto accepts any credentials; make sure boto3 finds some without touching real ones."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", LOCAL_REGION)


#: Item-level operations whose moto results are already DynamoDB wire JSON.
_FAST_JSON_ACTIONS = frozenset(
    {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "TransactWriteItems", "BatchWriteItem"}
)


def _has_none(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_none(v) for v in value)
    return False


def install_fast_json_responses() -> None:
    """Serve moto's item-level DynamoDB results with ``json.dumps``.

    moto 5.2 runs every result through a generic, model-driven serializer that costs about 5 ms
    per item returned, half of an UpdateItem's time. For the item operations the result is
    already AttributeValue JSON, so it is written as is. Anything unusual (errors, None values,
    non-JSON types, other operations) still goes through moto's own serializer.
    """
    from moto.dynamodb.responses import DynamoHandler

    if getattr(DynamoHandler, "_leasefence_fast_json", False):
        return
    original = DynamoHandler.serialized

    def serialized(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if isinstance(result, dict) and self._get_action() in _FAST_JSON_ACTIONS and not _has_none(result):
            try:
                body = json.dumps(result, allow_nan=False)
            except (TypeError, ValueError):
                return original(self, action_result)
            headers = {"Content-Type": "application/x-amz-json-1.0"}
            headers.update(self.response_headers)
            return 200, headers, body
        return original(self, action_result)

    DynamoHandler.serialized = serialized
    DynamoHandler._leasefence_fast_json = True


def install_fast_index_sort() -> None:
    """Make moto's index queries sort with precomputed keys.

    moto sorts a Query's candidates with ``DynamoType`` comparisons that rebuild a ``Decimal``
    for every comparison (32,000 per query at 2,000 items: 170 ms). Sorting by keys computed
    once per item gives the same order (numbers by value, strings and binary by content).
    Equality of two strings, the hot path of its key matching, is likewise compared directly.
    """
    from decimal import Decimal

    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_leasefence_fast_sort", False):
        return

    def scalar(value: DynamoType) -> Any:
        return Decimal(value.value) if value.type == "N" else value.cast_value

    def sorted_items(self: Any, hash_key_attrs: list[str], range_key_attrs: list[str | None], items: list[Any]) -> list[Any]:
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

    for name, op in (("__lt__", operator.lt), ("__le__", operator.le), ("__gt__", operator.gt), ("__ge__", operator.ge)):
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
        """Top-level attribute names only (what index projections ask for): copy those
        attributes. moto otherwise converts the whole item to plain JSON once per name."""
        if all(len(path) == 1 for path in projection_expressions):
            names = {path[0] for path in projection_expressions}
            attrs = {name: value.to_json() for name, value in self.attrs.items() if name in names}
            return Item(hash_key=self.hash_key, range_key=self.range_key, attrs=attrs)
        return original_project(self, projection_expressions)

    Item.project = project
    hash_ = DynamoType.__hash__
    Table.sorted_items = sorted_items
    DynamoType.__eq__, DynamoType.__ne__ = eq, ne
    DynamoType.__hash__ = hash_  # keep hashability after redefining __eq__
    Table._leasefence_fast_sort = True


def install_fast_update_expressions() -> None:
    """Take the repeated work out of moto's UpdateItem (about 3.7 ms each, the endpoint's
    largest cost), keeping every check it makes:

    * an update expression is parsed once per distinct text (moto parses it twice per request;
      the tree is only read, and its validator works on its own deep copy);
    * the tree walkers look up which node types they process once, not at every node;
    * the SET/REMOVE/ADD "one clause each" check runs once, at the top of the tree, instead
      of at every nested node (quadratic in the number of actions). The top counts every
      clause, so any expression the nested checks refuse, it refuses.
    """
    import functools

    from moto.dynamodb.parsing import expressions, validators
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node, UpdateExpression

    if getattr(DepthFirstTraverser, "_leasefence_fast", False):
        return
    parser = expressions.UpdateExpressionParser
    parser.make = staticmethod(functools.lru_cache(maxsize=512)(parser.make))  # type: ignore[assignment]

    def processing(self: Any) -> tuple[tuple[type, Any], ...]:
        table = self.__dict__.get("_leasefence_map")
        if table is None:
            table = self._leasefence_map = tuple(self._processing_map().items())
            self._leasefence_types = tuple(node_type for node_type, _ in table)
        return table

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        processing(self)
        return self._leasefence_types

    def process(self: Any, node: Any) -> Any:
        for node_type, processor in processing(self):
            if isinstance(node, node_type):
                return processor(node)
        return None

    def traverse_node_recursively(self: Any, node: Any, child_id: int = -1) -> Any:
        if isinstance(node, Node):
            parent_node = node.parent
            if node.children is not None:
                for i, child_node in enumerate(node.children):
                    self.pre_processing_of_child(node, i)
                    self.traverse_node_recursively(child_node, i)
            if isinstance(node, nodes_to_be_processed(self)):
                node = self.process(node)
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

    validators.ActionCountValidator.verify_action_counts = verify_action_counts
    DepthFirstTraverser._leasefence_fast = True


def install_unsorted_query_candidates() -> None:
    """Let moto's Query collect its candidates without sorting the whole table first.

    ``Table.all_items`` sorts every item of the table by primary key; Query calls it and then
    sorts the few matching candidates again by the index's (or the table's) full key, a total
    order, so the first sort never shows in a result. At 10,000 items it made an empty index
    Query cost 68 ms. Scans keep moto's sorted order (their pages depend on it).
    """
    from moto.dynamodb.models.table import Table

    if getattr(Table, "_leasefence_unsorted_query", False):
        return
    original_query = Table.query

    def unsorted_items(self: Any) -> list[Any]:
        if self.range_key_attr:
            return [item for items in self.items.values() for item in items.values()]
        return list(self.items.values())

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        if "all_items" in self.__dict__:  # someone already chose the candidates for this call
            return original_query(self, *args, **kwargs)
        self.all_items = types.MethodType(unsorted_items, self)  # this call only (requests are serialized)
        try:
            return original_query(self, *args, **kwargs)
        finally:
            del self.all_items

    Table.query = query
    Table._leasefence_unsorted_query = True


def install_item_level_transaction_rollback() -> None:
    """Make moto's TransactWriteItems back up the items it touches, not whole tables.

    moto deep-copies every table a transaction names before applying it, so that it can put the
    copies back if any part fails: O(table size) per transaction (a quarter of the endpoint's CPU
    in a torture run at a few thousand items). Here the tables are not copied; the items the
    transaction names are (at most 100), and on failure exactly those are put back as they were.
    The outcome is the same: all of the transaction or none of it.
    """
    import copy as copy_module

    import moto.dynamodb.models as models
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
    models.copy = shim

    def touched_items(self: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any, Any, Any]]:
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
        try:
            original(self, transact_items)
        except BaseException:
            restore(saved)
            raise

    backend_class.transact_write_items = transact_write_items
    backend_class._leasefence_item_rollback = True


def install_fast_dispatch() -> None:
    """moto's server lists its own package directory on disk to route every request; the list
    does not change while it runs, so it is read once."""
    from moto import backends

    if getattr(backends, "_leasefence_cached_modules", None) is not None:
        return
    modules = tuple(backends.list_of_moto_modules())
    backends._leasefence_cached_modules = modules
    backends.list_of_moto_modules = lambda: modules


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
    import moto.dynamodb.models  # noqa: F401 - registers the model classes
    import moto.s3.models  # noqa: F401
    from moto.core.model_instances import model_data

    for service in ("dynamodb", "s3"):
        for model in model_data[service].values():
            if not isinstance(model.instances_tracked, _Untracked):
                model.instances_tracked = _Untracked()


class SerializedApp:
    """WSGI middleware: one request at a time, start to last byte."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def _serve_in_child(host: str, port: int, ready: Any) -> None:
    server = EmbeddedAws(host, port).start()
    ready.put(server.port)
    threading.Event().wait()  # until the parent terminates this process


class EmbeddedAws:
    """moto's server, serialized, in a background thread (or, with ``process=True``, in a child
    process, so the endpoint and its callers do not share one interpreter lock)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, process: bool = False) -> None:
        self.host = host
        self.port = port
        self.process = process
        self._server: Any = None
        self.app: SerializedApp | None = None
        self._thread: threading.Thread | None = None
        self._child: Any = None

    def start(self) -> EmbeddedAws:
        if self.process:
            import multiprocessing

            use_local_credentials()
            context = multiprocessing.get_context("spawn")
            ready = context.Queue()
            self._child = context.Process(target=_serve_in_child, args=(self.host, self.port, ready), daemon=True)
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
            install_item_level_transaction_rollback()
            install_fast_dispatch()
        logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # callers queue on the lock by design

        self.app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        # waitress keeps HTTP/1.1 connections open (werkzeug's development server closes each
        # one after a single request: a new TCP connection and thread per request).
        self._server = create_server(
            self.app, host=self.host, port=self.port, threads=8, connection_limit=2000,
            channel_timeout=600, asyncore_loop_timeout=0.2, ident="embedded-aws",
        )
        self.port = self._server.effective_port
        self._thread = threading.Thread(target=self._server.run, name="embedded-aws", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str = "dynamodb", **kwargs: Any) -> Any:
        from botocore.config import Config

        config = kwargs.pop("config", None) or Config(
            retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64
        )
        return boto3.client(service, endpoint_url=self.endpoint, region_name=LOCAL_REGION, config=config, **kwargs)

    def create_tables(self, spec: schema.TableSpec | None = None) -> schema.TableSpec:
        spec = spec or schema.TableSpec()
        schema.create_table(self.client(), spec)
        return spec

    def stop(self) -> None:
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
