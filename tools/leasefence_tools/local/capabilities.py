"""What a DynamoDB-compatible endpoint supports of what leasefence uses, found by trying it.

:func:`probe` creates a scratch table (named with the caller's prefix and a random suffix, so two
stacks on one endpoint never share one), tries each capability on it, and deletes it again (only
it: a table the probe did not create is never touched). ``leasefence local --dynamodb-endpoint``
runs it at start; a test suite that runs the engine against another endpoint can run it to know
what to expect there.

The capabilities, by the names the messages use:

* ``TransactWriteItems``: a transaction commits all its actions, and a refused one is cancelled
  with per-action ``CancellationReasons`` that carry the item (``ALL_OLD``). Class-A completions
  commit in one; required.
* ``ReturnValuesOnConditionCheckFailure``: a refused conditional write returns the item as it is.
  Every refusal (replay, conflict, lost ownership) is decided from that item. Without it the store
  reads the refused item back once, consistently (:mod:`leasefence.store`: one more read per
  refusal, the engine's answers unchanged, as ``make test-dynalite`` shows); a local stack still
  requires it.
* ``TTL`` (``UpdateTimeToLive``/``DescribeTimeToLive``): ended operations are deleted after
  their identity retention. Without it they stay; the service is otherwise unchanged.
* ``Streams`` (a table's stream and the DynamoDB Streams API): what the stream worker and the
  publisher (history, outcome events) read. Without it those are off.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

TRANSACTIONS: Final = "TransactWriteItems"
RETURNED_ITEM: Final = "ReturnValuesOnConditionCheckFailure"
TTL: Final = "TTL"
STREAMS: Final = "Streams"

#: Every capability, in the order the messages list them.
ALL: Final = (TRANSACTIONS, RETURNED_ITEM, TTL, STREAMS)
#: Without these the engine cannot give its answers: a stack refuses such an endpoint.
REQUIRED: Final = (TRANSACTIONS, RETURNED_ITEM)

#: What each capability is for (for the messages).
CONSEQUENCE: Final = {
    TRANSACTIONS: "a class-A completion and its business writes commit in one transaction, and "
    "a resent claim-next proves its token's claim spent before it claims another",
    RETURNED_ITEM: "every refusal (replay, conflict, lost ownership) is decided from the item the "
    "refused write returns",
    TTL: "ended operations are never deleted",
    STREAMS: "the stream worker and the publisher (history, outcome events) are off",
}

#: How long the probe waits for its scratch table to be ACTIVE, and for its stream's records.
TABLE_TIMEOUT_S: Final = 120.0
STREAM_TIMEOUT_S: Final = 5.0

_KEY = "pk"


class UnsuitableEndpoint(Exception):
    """The endpoint did not answer, could not create a table, or lacks a capability of
    :data:`REQUIRED` (the message names each)."""


@dataclass(frozen=True)
class Capabilities:
    """What :func:`probe` found at ``endpoint``: ``lacking`` maps each capability it lacks to
    what the probe saw."""

    endpoint: str
    lacking: Mapping[str, str] = field(default_factory=dict)
    #: The scratch table, when deleting it failed (else None): delete it by hand.
    left_behind: str | None = None

    def supports(self, capability: str) -> bool:
        return capability not in self.lacking

    @property
    def missing_required(self) -> tuple[str, ...]:
        return tuple(c for c in REQUIRED if c in self.lacking)

    @property
    def missing_optional(self) -> tuple[str, ...]:
        return tuple(c for c in ALL if c in self.lacking and c not in REQUIRED)

    def require(self) -> Capabilities:
        """Itself, or :class:`UnsuitableEndpoint` with :meth:`refusal` when a required
        capability is lacking."""
        refusal = self.refusal()
        if refusal:
            raise UnsuitableEndpoint(refusal)
        return self

    def describe(self, capabilities: tuple[str, ...] | None = None) -> str:
        """The lacking ``capabilities`` (default: all lacking), each with what the probe saw:
        ``TransactWriteItems (UnknownOperationException), TTL (...)``."""
        names = capabilities if capabilities is not None else tuple(self.lacking)
        return ", ".join(f"{c} ({self.lacking[c]})" for c in names)

    def refusal(self) -> str | None:
        """Why a stack cannot run on this endpoint (None: it can), naming everything it lacks."""
        required = self.missing_required
        if not required:
            return None
        lines = [
            f"the DynamoDB endpoint {self.endpoint} lacks {self.describe(required)}.",
            *(f"  {c} is required: {CONSEQUENCE[c]}." for c in required),
        ]
        optional = self.missing_optional
        if optional:
            lines.append(f"It also lacks {self.describe(optional)}:")
            lines += [f"  without {c}: {CONSEQUENCE[c]}." for c in optional]
        return "\n".join(lines)


def client_config() -> Config:
    """A short-tempered client configuration: an endpoint that does not answer is said so in
    seconds, not after botocore's minutes of retries."""
    return Config(
        connect_timeout=5, read_timeout=30, retries={"mode": "standard", "max_attempts": 2}
    )


def scratch_table_name(prefix: str) -> str:
    return f"{prefix}-probe-{secrets.token_hex(4)}"


def probe(
    dynamodb: Any,
    streams: Any = None,
    prefix: str = "leasefence",
    table_timeout_s: float = TABLE_TIMEOUT_S,
) -> Capabilities:
    """Try every capability of :data:`ALL` at ``dynamodb``'s endpoint on a scratch table of its
    own (``<prefix>-probe-<random>``), deleted again before this returns. ``streams``: a
    ``dynamodbstreams`` client of the same endpoint (default: one made like ``dynamodb``).
    :class:`UnsuitableEndpoint` when the endpoint does not answer or cannot create a table."""
    from leasefence.schema import STREAM_SPECIFICATION, TableNotReady, wait_until_active

    endpoint = dynamodb.meta.endpoint_url
    if streams is None:
        import boto3

        streams = boto3.client(
            "dynamodbstreams",
            endpoint_url=endpoint,
            region_name=dynamodb.meta.region_name,
            config=client_config(),
        )
    table = scratch_table_name(prefix)
    request = {
        "TableName": table,
        "AttributeDefinitions": [{"AttributeName": _KEY, "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": _KEY, "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
        "StreamSpecification": dict(STREAM_SPECIFICATION),
    }
    try:
        try:
            dynamodb.create_table(**request)
        except ClientError as error:
            if _code(error) != "ValidationException":
                raise
            # An endpoint that refuses the stream specification: probe the rest without one.
            del request["StreamSpecification"]
            dynamodb.create_table(**request)
    except (BotoCoreError, ClientError) as error:
        raise UnsuitableEndpoint(
            f"the DynamoDB endpoint {endpoint} could not create a table: {_why(error)}"
        ) from error
    lacking: dict[str, str] = {}
    left_behind: str | None = None
    try:
        try:
            description = wait_until_active(dynamodb, table, table_timeout_s)
            _put(dynamodb, table, "a", 1)
        except (TableNotReady, BotoCoreError, ClientError) as error:
            raise UnsuitableEndpoint(f"the DynamoDB endpoint {endpoint}: {_why(error)}") from error
        for name, check in (
            (RETURNED_ITEM, lambda: _returned_item(dynamodb, table)),
            (TRANSACTIONS, lambda: _transactions(dynamodb, table)),
            (TTL, lambda: _ttl(dynamodb, table)),
            (STREAMS, lambda: _streams(streams, description)),
        ):
            try:
                why = check()
            except (BotoCoreError, ClientError) as error:
                why = _why(error)
            if why:
                lacking[name] = why
    finally:
        try:
            dynamodb.delete_table(TableName=table)
        except (BotoCoreError, ClientError):
            left_behind = table
        else:  # gone before this returns, where the endpoint is quick about it
            with contextlib.suppress(BotoCoreError, ClientError):  # a WaiterError too
                dynamodb.get_waiter("table_not_exists").wait(
                    TableName=table, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100}
                )
    return Capabilities(endpoint, lacking, left_behind)


# ------------------------------------------------------------------------------- the checks
# Each returns None when the capability works, else what it saw instead.


def _put(dynamodb: Any, table: str, key: str, value: int) -> None:
    dynamodb.put_item(TableName=table, Item={_KEY: {"S": key}, "v": {"N": str(value)}})


def _returned_item(dynamodb: Any, table: str) -> str | None:
    try:
        dynamodb.put_item(
            TableName=table,
            Item={_KEY: {"S": "a"}, "v": {"N": "2"}},
            ConditionExpression="attribute_not_exists(#k)",
            ExpressionAttributeNames={"#k": _KEY},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as error:
        if _code(error) != "ConditionalCheckFailedException":
            raise
        item = error.response.get("Item")
        if item == {_KEY: {"S": "a"}, "v": {"N": "1"}}:
            return None
        if not item:
            return "a refused conditional write came back without the item"
        return "a refused conditional write came back with another item"
    return "a conditional write that had to be refused succeeded"


def _transactions(dynamodb: Any, table: str) -> str | None:
    dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {_KEY: {"S": "t1"}}}},
            {
                "Update": {
                    "TableName": table,
                    "Key": {_KEY: {"S": "a"}},
                    "UpdateExpression": "SET v = :two",
                    "ExpressionAttributeValues": {":two": {"N": "2"}},
                }
            },
        ]
    )
    got = dynamodb.get_item(TableName=table, Key={_KEY: {"S": "t1"}}, ConsistentRead=True)
    if "Item" not in got:
        return "a committed transaction's Put is not there"
    try:
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {_KEY: {"S": "t2"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {_KEY: {"S": "a"}},
                        "ConditionExpression": "v = :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ]
        )
    except ClientError as error:
        if _code(error) != "TransactionCanceledException":
            raise
        reasons = error.response.get("CancellationReasons") or []
        if len(reasons) != 2 or reasons[1].get("Code") != "ConditionalCheckFailed":
            return "a cancelled transaction gave no per-action CancellationReasons"
        if (reasons[1].get("Item") or {}).get("v") != {"N": "2"}:
            return "a cancelled transaction's reason came back without the item"
        got = dynamodb.get_item(TableName=table, Key={_KEY: {"S": "t2"}}, ConsistentRead=True)
        return "a cancelled transaction's Put was written" if "Item" in got else None
    return "a transaction whose condition failed committed"


def _ttl(dynamodb: Any, table: str) -> str | None:
    dynamodb.update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "gone_at"}
    )
    described = dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    if described.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
        return None
    return f"TTL reads {described.get('TimeToLiveStatus')} after UpdateTimeToLive enabled it"


def _streams(streams: Any, description: Mapping[str, Any]) -> str | None:
    arn = description.get("LatestStreamArn")
    if not arn:
        return "a table created with a StreamSpecification has no stream"
    deadline = time.monotonic() + STREAM_TIMEOUT_S
    while True:
        shards = streams.describe_stream(StreamArn=arn)["StreamDescription"].get("Shards") or []
        for shard in shards:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            records = streams.get_records(ShardIterator=iterator).get("Records") or []
            if any(r.get("eventName") == "INSERT" for r in records):
                return None
        if time.monotonic() >= deadline:
            return f"no record of the table's writes on its stream within {STREAM_TIMEOUT_S:g} s"
        time.sleep(0.2)


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _why(error: Exception) -> str:
    if isinstance(error, ClientError):
        return _code(error) or type(error).__name__
    if isinstance(error, BotoCoreError):
        return f"{type(error).__name__}: {error}"
    return str(error)
