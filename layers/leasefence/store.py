"""The DynamoDB seam: typed items in, typed items out, domain errors only.

Every call the engine makes to DynamoDB goes through :class:`Store`, and every botocore error is
translated in one function, :func:`translate`. A failed condition becomes :class:`ConditionFailed`
carrying the item as it is now (``ReturnValuesOnConditionCheckFailure=ALL_OLD``), so the loser of
a race learns the current state without a second read.

A DynamoDB-compatible store that ignores ``ReturnValuesOnConditionCheckFailure`` (dynalite, some
proxies) refuses without the item, which on DynamoDB means "no such item". So a refusal that came
back without its item is completed by one consistent ``GetItem`` of the refused key
(:meth:`Store._read_back`): the engine then decides from the item as it is just after the
refusal, as it would from the ``ALL_OLD`` item (fences only rise and an ended operation stays
ended, so the later item proves what the refused one did), never answering 404 for an item the
refusal proved to exist. On DynamoDB it costs a read only when the item is really absent.

The boto3 client is injected, or created lazily on first use: importing this module connects to
nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)

from leasefence import hash_form
from leasefence.errors import (
    InvalidInput,
    ItemTooLarge,
    LeaseFenceError,
    StoreMisconfigured,
    Unavailable,
)
from leasefence.schema import PARTITION_KEY, SORT_KEY, OperationItem

#: An item as the store returns it: attribute name -> plain Python value (numbers as int/float).
Item = dict[str, Any]
#: A table key: ``tenant_id`` and ``operation_id``.
Key = Mapping[str, Any]

_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()

_TRANSIENT = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)
#: Per-action cancellation reasons of a ``TransactWriteItems`` that mean "busy, try again": the
#: codes DynamoDB reports inside ``TransactionCanceledException`` (botocore does not retry them).
_TRANSIENT_REASONS = frozenset(
    {
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "TransactionConflict",
        "RequestLimitExceeded",
    }
)


class ConditionFailed(Exception):
    """A conditional write was refused. ``item`` is the item as it is now (None: no such item)."""

    def __init__(self, item: Item | None, reasons: list[Item | None] | None = None) -> None:
        super().__init__("condition failed")
        self.item = item
        #: For a transaction: per action, None where its condition held, else the current item
        #: (``{}`` when there is none).
        self.reasons = reasons

    @property
    def operation(self) -> OperationItem | None:
        """:attr:`item`, when the refused write was on an operation item."""
        return cast("OperationItem | None", self.item)


def to_attr(value: Any) -> dict[str, Any]:
    attr: dict[str, Any] = _SERIALIZER.serialize(value)
    return attr


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, set)):
        return [_plain(v) for v in value]
    return value


def from_item(item: Mapping[str, Any] | None) -> Item | None:
    """An item as the table answers it, in plain Python values (numbers as ``int`` where they
    are whole) and its payload hash in the text form, whichever form it is stored in
    (:mod:`leasefence.hash_form`)."""
    if item is None:
        return None
    plain = {k: _plain(_DESERIALIZER.deserialize(v)) for k, v in item.items()}
    hash_form.read(plain)
    return plain


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: to_attr(v) for k, v in values.items() if v is not None}


#: How DynamoDB (and moto) word the refusal of a write that would pass the item size limit.
_ITEM_TOO_LARGE = "item size"


def _cancelled(reasons: list[dict[str, Any]]) -> Exception:
    """A ``TransactionCanceledException``, by its actions' cancellation reasons."""
    if any(r.get("Code") == "ConditionalCheckFailed" for r in reasons):
        # Per action: None where its condition held, else the item as it is now ({} if absent).
        olds = [
            (from_item(r.get("Item")) or {}) if r.get("Code") == "ConditionalCheckFailed" else None
            for r in reasons
        ]
        first = next((o for o in olds if o is not None), None)
        return ConditionFailed(first or None, reasons=olds)
    if any(r.get("Code") in _TRANSIENT or r.get("Code") in _TRANSIENT_REASONS for r in reasons):
        return Unavailable("transaction throttled or in conflict, retry")
    if any(r.get("Code") == "ValidationError" for r in reasons):
        return InvalidInput("the store refused a write of the transaction as invalid")
    return LeaseFenceError(f"transaction cancelled: {[r.get('Code') for r in reasons]}")


def _malformed(error: ParamValidationError) -> InvalidInput:
    """The client refused the request before sending it (a business write of the wrong shape):
    permanent. Its report names the parameter; the value it quotes is left out."""
    report = str(error.kwargs.get("report", ""))
    problems = [line.split(", value:")[0] for line in report.splitlines() if line.strip()]
    return InvalidInput(f"a malformed request: {'; '.join(problems)[:300]}")


def translate(error: Exception) -> Exception:
    """The one place where botocore errors become domain errors."""
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", "")
        if code == "ConditionalCheckFailedException":
            return ConditionFailed(from_item(error.response.get("Item")))
        if code == "TransactionCanceledException":
            return _cancelled(error.response.get("CancellationReasons") or [])
        if code in _TRANSIENT:
            return Unavailable(f"store busy ({code}), retry")
        if code == "ResourceNotFoundException":
            return StoreMisconfigured("operations table not found")
        if code == "ValidationException" and _ITEM_TOO_LARGE in message.lower():
            # DynamoDB: "Item size has exceeded the maximum allowed size" (a put, or an update's
            # result) or "Item size to update has exceeded ..."; moto says the same.
            return ItemTooLarge("item too large for the store")
        if code == "ValidationException" and "size" in message.lower():
            return InvalidInput("a key too large for the store")
        if code == "ValidationException" and error.operation_name == "TransactWriteItems":
            # A transaction is a class-A completion with the caller's business writes: one the
            # store refuses as malformed is refused every time (a write on the operation's own
            # item too: "multiple operations on one item"). Permanent, never a retry.
            return InvalidInput(f"the store refused the transaction: {message[:300]}")
        return LeaseFenceError(f"store error {code}")
    if isinstance(error, ParamValidationError):
        return _malformed(error)
    if isinstance(error, (ConnectionError, ReadTimeoutError)):
        # Ambiguous: the write may have committed. Every engine write is fenced or replayable,
        # so the caller retries and the engine recognizes its own earlier write.
        return Unavailable("store unreachable or response lost, retry")
    if isinstance(error, BotoCoreError):
        return Unavailable(f"store client error: {type(error).__name__}")
    return error


def _refused_key(request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The key of a refused write (``Key``, or an operation table's key in a put's ``Item``)."""
    if "Key" in request:
        return dict(request["Key"])
    item = request.get("Item") or {}
    key = {name: item[name] for name in (PARTITION_KEY, SORT_KEY) if name in item}
    return key if len(key) == 2 else None


@dataclass
class QueryPage:
    items: list[Item]
    last_key: Item | None
    #: Items read before any filter (what ``Limit`` counts).
    scanned: int = 0

    @property
    def operations(self) -> list[OperationItem]:
        """:attr:`items`, when the page is of operation items (or index entries of them)."""
        return cast("list[OperationItem]", self.items)


class Store:
    """Thin, typed access to one DynamoDB table."""

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        client_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.table_name = table_name
        self._client = client
        self._client_factory = client_factory or default_client
        #: Called with an operation's key when an update of it was refused for the item's size
        #: (:class:`~leasefence.errors.ItemTooLarge`): makes room (the engine compacts the
        #: history, :func:`leasefence.history.make_room`) and returns whether it did, and then the
        #: update is sent once more. No refusal for size is a dead end.
        self.make_room: Callable[[Key], bool] | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._client_factory()
        return self._client

    def _call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self.client, method)(**kwargs)
            return response
        except Exception as error:  # translated, never swallowed
            translated = translate(error)
            if isinstance(translated, StoreMisconfigured):
                translated = self._missing_table(_business_tables(kwargs))
            if isinstance(translated, ConditionFailed):
                self._read_back(translated, kwargs)
            raise translated from error

    def _read_back(self, refused: ConditionFailed, request: Mapping[str, Any]) -> None:
        """Fill in what a refusal came back without (see the module's text): the refused item,
        and each refused action's item of a transaction, read once, consistently."""
        if refused.reasons is None:
            if refused.item is None:
                refused.item = self._current(self.table_name, _refused_key(request))
            return
        actions = request.get("TransactItems") or []
        for i, old in enumerate(refused.reasons):
            if old == {} and i < len(actions):
                action = next(iter(actions[i].values()))
                if "Key" in action or action["TableName"] == self.table_name:
                    key = _refused_key(action)
                    refused.reasons[i] = self._current(action["TableName"], key) or {}
        refused.item = next((o for o in refused.reasons if o is not None), None) or None

    def _current(self, table: str, key: dict[str, Any] | None) -> Item | None:
        if key is None:
            return None
        response = self._call("get_item", TableName=table, Key=key, ConsistentRead=True)
        return from_item(response.get("Item"))

    def _missing_table(self, business: list[str]) -> Exception:
        """What a ``ResourceNotFoundException`` means: DynamoDB answers it for a table that is
        still ``CREATING`` too, which is a wait, not a misconfiguration. ``business``: the other
        tables a class-A transaction names; the one missing is named (DynamoDB does not say)."""
        for name in dict.fromkeys((self.table_name, *business)):
            try:
                status = self.client.describe_table(TableName=name)["Table"]["TableStatus"]
            except Exception:  # noqa: BLE001 - not there (or not describable): as the write said
                status = None
            what = "the operations table" if name == self.table_name else f"business table {name}"
            if status == "CREATING":
                return Unavailable(f"{what} is still being created (CREATING), retry")
            if status is None:
                if name == self.table_name:
                    return StoreMisconfigured(f"operations table {name} not found")
                return StoreMisconfigured(f"{what} not found (named by a class-A business write)")
        return StoreMisconfigured(f"a table of the request was not found ({self.table_name}?)")

    def get(self, key: Key, consistent: bool = True) -> Item | None:
        response = self._call(
            "get_item", TableName=self.table_name, Key=to_item(key), ConsistentRead=consistent
        )
        return from_item(response.get("Item"))

    def get_operation(self, key: Key, consistent: bool = True) -> OperationItem | None:
        """:meth:`get` of an operation item."""
        return cast("OperationItem | None", self.get(key, consistent))

    def put_new(self, item: Mapping[str, Any], condition: str, names: dict[str, str]) -> None:
        self._call(
            "put_item",
            TableName=self.table_name,
            Item=to_item(item),
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def put_new_where_absent(
        self,
        item: Mapping[str, Any],
        condition: str,
        names: dict[str, str],
        absent: Sequence[Key],
    ) -> None:
        """:meth:`put_new`, and atomically with it no item at any key of ``absent`` (a
        ``TransactWriteItems`` of condition checks and the put; just the put when ``absent`` is
        empty). A refusal raises :class:`ConditionFailed` whose ``item`` is the item found."""
        if not absent:
            self.put_new(item, condition, names)
            return
        checks = [
            {
                "ConditionCheck": {
                    "TableName": self.table_name,
                    "Key": to_item(key),
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": names,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
            for key in absent
        ]
        put = {
            "Put": {
                "TableName": self.table_name,
                "Item": to_item(item),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        self.transact([*checks, put])

    def put_plain(self, item: Mapping[str, Any]) -> None:
        """An unconditional put (an item whose every write of one key writes the same bytes)."""
        self._call("put_item", TableName=self.table_name, Item=to_item(item))

    def delete_plain(self, key: Key) -> None:
        """An unconditional delete (harmless when the item is gone already)."""
        self._call("delete_item", TableName=self.table_name, Key=to_item(key))

    def put(
        self, item: Mapping[str, Any], condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> None:
        """A conditional put whose condition compares with values."""
        self._call(
            "put_item",
            TableName=self.table_name,
            Item=to_item(item),
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={k: to_attr(v) for k, v in values.items()},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    def update(
        self,
        key: Key,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        returns: str = "ALL_NEW",
    ) -> Item | None:
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": to_item(key),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ReturnValues": returns,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if names:  # DynamoDB refuses an empty map (moto accepts it)
            kwargs["ExpressionAttributeNames"] = names
        if values:
            kwargs["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
        response = self._call("update_item", **kwargs)
        return from_item(response.get("Attributes"))

    def update_operation(
        self,
        key: Key,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        returns: str = "ALL_NEW",
    ) -> OperationItem | None:
        """:meth:`update` of an operation item (refusals: :attr:`ConditionFailed.operation`).
        Refused for the item's size, it is sent again once :attr:`make_room` made room."""
        try:
            item = self.update(key, update, condition, names, values, returns)
        except ItemTooLarge:
            if self.make_room is None or not self.make_room(key):
                raise
            item = self.update(key, update, condition, names, values, returns)
        return cast("OperationItem | None", item)

    def query(self, **kwargs: Any) -> QueryPage:
        values = kwargs.pop("values", None)
        if values:
            kwargs["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
        start = kwargs.pop("start", None)
        if start:
            kwargs["ExclusiveStartKey"] = to_item(start)
        response = self._call("query", TableName=self.table_name, **kwargs)
        return QueryPage(
            items=[from_item(i) or {} for i in response.get("Items", [])],
            last_key=from_item(response.get("LastEvaluatedKey")),
            scanned=int(response.get("ScannedCount", 0)),
        )

    def scan(self, **kwargs: Any) -> QueryPage:
        """One page of a ``Scan`` (``values`` and ``start`` as for :meth:`query`)."""
        values = kwargs.pop("values", None)
        if values:
            kwargs["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
        start = kwargs.pop("start", None)
        if start:
            kwargs["ExclusiveStartKey"] = to_item(start)
        response = self._call("scan", TableName=self.table_name, **kwargs)
        return QueryPage(
            items=[from_item(i) or {} for i in response.get("Items", [])],
            last_key=from_item(response.get("LastEvaluatedKey")),
            scanned=int(response.get("ScannedCount", 0)),
        )

    def update_action(
        self,
        key: Key,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> dict[str, Any]:
        """The same conditional update as :meth:`update`, as a ``TransactWriteItems`` action."""
        action: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": to_item(key),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            action["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
        return {"Update": action}

    def check_action(
        self, key: Key, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> dict[str, Any]:
        """A ``ConditionCheck`` of a ``TransactWriteItems``: the transaction commits only while
        ``condition`` holds on the item under ``key`` (which it does not change)."""
        action = self.update_action(key, "", condition, names, values)["Update"]
        del action["UpdateExpression"]
        return {"ConditionCheck": action}

    def delete(
        self, key: Key, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> None:
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": to_item(key),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if values:
            kwargs["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
        self._call("delete_item", **kwargs)

    def add_to_set(
        self,
        key: Key,
        attribute: str,
        members: list[str],
        extra: dict[str, Any],
        condition: str | None = None,
        condition_values: dict[str, Any] | None = None,
    ) -> set[str]:
        """``ADD attribute :members`` (a string set) and ``SET`` the ``extra`` attributes: an
        idempotent upsert, conditional when ``condition`` is given (``#set`` names the set;
        ``condition_values`` its placeholders): a refusal raises :class:`ConditionFailed` with
        the item as it is. Returns the set as it was before (empty: none)."""
        names = {"#set": attribute}
        values: dict[str, Any] = {":m": {"SS": list(members)}}
        sets = []
        for i, (name, value) in enumerate(extra.items()):
            names[f"#e{i}"] = name
            values[f":e{i}"] = to_attr(value)
            sets.append(f"#e{i} = :e{i}")
        kwargs: dict[str, Any] = {}
        if condition is not None:
            kwargs["ConditionExpression"] = condition
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            values.update({k: to_attr(v) for k, v in (condition_values or {}).items()})
        response = self._call(
            "update_item",
            TableName=self.table_name,
            Key=to_item(key),
            UpdateExpression="ADD #set :m" + (f" SET {', '.join(sets)}" if sets else ""),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_OLD",
            **kwargs,
        )
        before = from_item(response.get("Attributes")) or {}
        return set(before.get(attribute) or ())

    def transact(self, actions: list[dict[str, Any]]) -> None:
        """``TransactWriteItems``; a refused condition raises :class:`ConditionFailed` with reasons."""
        self._call("transact_write_items", TransactItems=actions)


def _business_tables(request: Mapping[str, Any]) -> list[str]:
    """The tables a ``TransactWriteItems`` request's actions name, in order, once each."""
    names = [
        body.get("TableName")
        for action in request.get("TransactItems", ())
        for body in action.values()
        if isinstance(body, Mapping)
    ]
    return list(dict.fromkeys(n for n in names if isinstance(n, str)))


def default_client() -> Any:
    """A DynamoDB client from the environment (``LEASEFENCE_DYNAMODB_ENDPOINT`` for local stacks)."""
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get("LEASEFENCE_DYNAMODB_ENDPOINT") or None
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        config=Config(
            retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5
        ),
    )
