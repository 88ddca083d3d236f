"""An embedded, linearizable DynamoDB (and S3) endpoint on moto's server.

moto's backends hold no lock, so concurrent conditional writes to one item can both win (see the
design notes). :class:`SerializedApp` holds one lock around each whole request, response body
included, which makes every request atomic with respect to every other: the property DynamoDB
gives per item, and the one every concurrency test here relies on.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Iterable

import boto3
from werkzeug.serving import BaseWSGIServer, make_server

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
        self._server: BaseWSGIServer | None = None
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
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        use_local_credentials()
        stop_item_tracking()
        if not os.environ.get("LEASEFENCE_MOTO_AS_IS"):
            install_fast_json_responses()
            install_fast_index_sort()

        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self.host, self.port, app, threaded=True, request_handler=QuietHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-aws", daemon=True)
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
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> EmbeddedAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
