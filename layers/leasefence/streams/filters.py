"""The event source mappings' filter criteria, defined once (the CDK app and the local stack both
read them here), and a small evaluator for the part of the filter syntax they use.

A Lambda event source mapping on a DynamoDB stream matches each record (as JSON: ``eventName``,
``dynamodb.Keys``, ``dynamodb.NewImage`` and ``OldImage`` in attribute-value form) against up to
five patterns and invokes the function only with records that match one of them; the others are
dropped without an invocation. The patterns use EventBridge pattern syntax. Only records where
work became claimable *now* reach the worker: an enqueue, an immediate retry, an operator's
requeue, an approval. Delayed retries and expired leases are the scheduled drain's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from leasefence.model import State, Transition

#: Transitions after which the operation is queued and claimable at once.
CLAIMABLE_NOW = (Transition.ENQUEUE, Transition.RETRY, Transition.REQUEUE, Transition.APPROVE)


def dispatch_filters(tenants: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The worker's filter: new or changed operation items that are ``queued`` by a transition in
    :data:`CLAIMABLE_NOW` (``tenants``: only those tenants' records, as the worker serves them)."""
    pattern: dict[str, Any] = {
        "eventName": ["INSERT", "MODIFY"],
        "dynamodb": {
            "NewImage": {
                "state": {"S": [State.QUEUED.value]},
                "transition": {"S": [t.value for t in CLAIMABLE_NOW]},
            }
        },
    }
    if tenants is not None:
        if not tenants:
            raise ValueError("a dispatch filter needs at least one tenant (or None: every tenant)")
        pattern["dynamodb"]["Keys"] = {"tenant_id": {"S": list(tenants)}}
    return [pattern]


def publisher_filters() -> list[dict[str, Any]]:
    """The publisher's filters: every write that records a transition (heartbeats and index
    repairs of a claimed item pass too: they keep ``transition``; the publisher skips them by
    ``seq``), and the deletion of an operation item (TTL, tenant erasure: its history goes)."""
    return [
        {
            "eventName": ["INSERT", "MODIFY"],
            "dynamodb": {"NewImage": {"transition": {"S": [{"exists": True}]}}},
        },
        {
            "eventName": ["REMOVE"],
            "dynamodb": {"OldImage": {"transition": {"S": [{"exists": True}]}}},
        },
    ]


def filter_criteria(filters: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``FilterCriteria`` of an event source mapping (CloudFormation and the Lambda API)."""
    return {
        "Filters": [{"Pattern": json.dumps(pattern, separators=(",", ":"))} for pattern in filters]
    }


# ---------------------------------------------------------------------------------- evaluator

_ABSENT = object()


def passes(filters: Iterable[Mapping[str, Any]], record: Mapping[str, Any]) -> bool:
    """Whether an event source mapping with these filters hands ``record`` to its function (a
    record passes when any one pattern matches)."""
    return any(matches(pattern, record) for pattern in filters)


def matches(pattern: Mapping[str, Any], event: Any) -> bool:
    """EventBridge pattern matching, for what the patterns here use: nested objects; at a leaf a
    list of alternatives, each an exact string, number, boolean or null, or ``{"exists": bool}``,
    ``{"prefix": str}``, ``{"anything-but": [...]}``. Every field of the pattern must match."""
    for name, wanted in pattern.items():
        value = event.get(name, _ABSENT) if isinstance(event, Mapping) else _ABSENT
        if isinstance(wanted, Mapping):
            if not matches(wanted, value if value is not _ABSENT else {}):
                return False
        elif isinstance(wanted, list):
            if not any(_leaf(alternative, value) for alternative in wanted):
                return False
        else:
            raise ValueError(f"pattern field {name!r} must be an object or a list of alternatives")
    return True


def _leaf(alternative: Any, value: Any) -> bool:
    if isinstance(alternative, Mapping):
        ((kind, operand),) = alternative.items()
        if kind == "exists":
            return (value is not _ABSENT and not isinstance(value, Mapping)) is bool(operand)
        if value is _ABSENT or isinstance(value, (Mapping, list)):
            return False
        if kind == "prefix":
            return isinstance(value, str) and value.startswith(operand)
        if kind == "anything-but":
            return value not in (operand if isinstance(operand, list) else [operand])
        raise ValueError(f"filter operator {kind!r} is not supported here")
    if value is _ABSENT or isinstance(value, Mapping):
        return False
    if isinstance(value, list):
        return alternative in value
    return type(alternative) is type(value) and alternative == value
