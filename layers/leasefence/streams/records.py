"""One DynamoDB stream record of the operations table, parsed (as Lambda delivers it)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leasefence import keys
from leasefence.errors import InvalidInput
from leasefence.model import State, Transition
from leasefence.store import from_item
from leasefence.validation import validate_id

#: What a transition's image must hold (everything the engine writes on every operation).
_REQUIRED = (
    "job_type",
    "state",
    "fence",
    "attempts",
    "max_attempts",
    "created_at",
    "updated_at",
    "transition",
    "seq",
)


class MalformedRecord(Exception):
    """The record cannot be read as a change of the operations table: it goes to the failure
    path (partial batch response, then the event source mapping's on-failure destination)."""


@dataclass(frozen=True)
class Change:
    """A stream record: the item before and after one write (plain values)."""

    event_name: str  # INSERT | MODIFY | REMOVE
    sequence_number: str
    #: The tenant (its write shard taken off the item's partition key: :attr:`partition`).
    tenant_id: str
    operation_id: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    #: The stream's ARN (Lambda adds it to each record), or None.
    source_arn: str | None = None
    #: The item's partition key as stored (the tenant's write shard); the tenant id when None.
    partition: str | None = None

    @property
    def key(self) -> dict[str, str]:
        """The item's key, where it lives."""
        return {"tenant_id": self.partition or self.tenant_id, "operation_id": self.operation_id}

    @property
    def is_operation(self) -> bool:
        """An operation item (not a tenant's job-type directory, an operation's history or its
        payload item)."""
        return not self.operation_id.startswith(
            (keys.DIRECTORY_ID[0], keys.HISTORY_PREFIX, keys.PAYLOAD_PREFIX)
        )

    @property
    def transition(self) -> Transition | None:
        """The transition this write made; None for writes that are none (a heartbeat, an index
        repair, a payload purge, a deletion) and for items other than operations."""
        if self.new is None or not self.is_operation or "transition" not in self.new:
            return None
        if self.old is not None and self.old.get("seq") == self.new.get("seq"):
            return None
        return Transition(self.new["transition"])


def parse(record: Mapping[str, Any]) -> Change:
    """A record as the event source mapping delivers it; :class:`MalformedRecord` if it is not
    one of the operations table's (keys, images and the transition's attributes checked)."""
    try:
        body = record["dynamodb"]
        event_name = record["eventName"]
        if event_name not in ("INSERT", "MODIFY", "REMOVE"):
            raise ValueError(f"unknown eventName {event_name!r}")
        key = from_item(body["Keys"]) or {}
        partition, operation_id = key["tenant_id"], key["operation_id"]
        if (
            not isinstance(partition, str)
            or not isinstance(operation_id, str)
            or not partition
            or not operation_id
        ):
            raise ValueError("keys are not two strings")
        tenant_id = keys.tenant_of(partition)
        old = from_item(_binary_decoded(body.get("OldImage")))
        new = from_item(_binary_decoded(body.get("NewImage")))
        if (event_name == "REMOVE") != (new is None) or (event_name == "INSERT") != (old is None):
            raise ValueError(f"{event_name} record with the wrong images")
        change = Change(
            event_name,
            str(body["SequenceNumber"]),
            tenant_id,
            operation_id,
            old,
            new,
            record.get("eventSourceARN"),
            partition,
        )
        if change.is_operation:
            validate_id("tenant_id", tenant_id)
            validate_id("operation_id", operation_id)
            for image in (old, new):
                if image is not None and (image.get("tenant_id"), image.get("operation_id")) != (
                    partition,
                    operation_id,
                ):
                    raise ValueError("an image does not match the record's keys")
        if change.transition is not None:
            _check_transition_image(change.new)  # type: ignore[arg-type]
        return change
    except MalformedRecord:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, InvalidInput) as error:
        raise MalformedRecord(
            f"not a record of the operations table: {type(error).__name__}: {error}"
        ) from None


def _binary_decoded(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An image with its binary values as bytes: a stream record's JSON carries them base64
    encoded, boto3's deserializer takes bytes. The table's binary attributes are a packed
    payload item's ``payload_z`` and an operation's ``payload_hash`` in its digest form
    (:mod:`leasefence.hash_form`), both at the top of their items."""
    if image is None:
        return None
    return {
        name: {"B": base64.b64decode(value["B"], validate=True)}
        if isinstance(value, Mapping) and isinstance(value.get("B"), str)
        else value
        for name, value in image.items()
    }


def _check_transition_image(image: dict[str, Any]) -> None:
    missing = [name for name in _REQUIRED if name not in image]
    if missing:
        raise ValueError(f"the image lacks {', '.join(missing)}")
    State(image["state"])
    Transition(image["transition"])
    for name in ("fence", "attempts", "max_attempts", "created_at", "updated_at", "seq"):
        if isinstance(image[name], bool) or not isinstance(image[name], int):
            raise ValueError(f"{name} is not an integer")
