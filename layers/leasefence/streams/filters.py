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

from leasefence import history, keys
from leasefence.model import State, Transition
from leasefence.schema import PURGE_SK

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
        # A tenant's items are in its bare partition and in its write shards (<tenant>\t<n>).
        pattern["dynamodb"]["Keys"] = {
            "tenant_id": {
                "S": [
                    *tenants,
                    *({"prefix": f"{t}{keys.SHARD_MARK}"} for t in tenants),
                ]
            }
        }
    return [pattern]


#: Transitions that publish an outcome event and leave the operation live (no write but the next
#: transition follows them, save rare index repairs, which the publisher skips by ``seq``).
EVENT_LIVE = (
    Transition.RETRY,
    Transition.RETRY_LATER,
    Transition.UNKNOWN,
    Transition.SWEEP,
    Transition.QUARANTINE,
    Transition.REQUEUE,
    Transition.APPROVE,
)
#: Transitions that publish an outcome event and end the operation (the payload's purge writes
#: the ended item later: it slims it, setting ``hx``, or removes the purge time these records
#: show, so it passes no filter; an ended item is slimmed only by the purge).
EVENT_FINAL = (
    Transition.COMPLETE,
    Transition.FAIL,
    Transition.RESOLVE,
    Transition.REJECT,
    Transition.APPROVAL_EXPIRE,
    Transition.CANCEL,
)
_IN_ITEM = {"N": [{"exists": True}]}
_BEFORE = {"N": [{"exists": False}]}


def publisher_filters(events: bool = True) -> list[dict[str, Any]]:
    """The publisher's filters: only the records it still needs (:mod:`leasefence.history`: each
    transition writes its own history entry into the operation's item). Of an operation whose
    history is in its item (``hv``): the records that publish an outcome event (which also let
    the publisher compact a history past its bound: every loop of an operation passes one), never
    an enqueue (unless it awaits approval), a fresh claim, an erasure, a heartbeat, a payload
    purge or the item's deletion. A heartbeat of a holder that took over a lapsed lease still
    passes (its image is the takeover's; the publisher skips it by ``seq``): takeovers are rare.
    Of an operation enqueued before (no ``hv``): as before, every write that records a transition
    and the item's deletion (its history item is written and deleted by the publisher).

    ``events`` False (a deployment without outcome events, the construct's default): only the
    records of operations enqueued before. Of the others the publisher would publish nothing and
    only compact a history that ran past :data:`~leasefence.history.COMPACT_AT` entries, which
    the writers' own bound (:func:`leasefence.history.make_room`, at
    :data:`~leasefence.limits.HISTORY_ROOM` entries or :data:`~leasefence.limits.HISTORY_ROOM_BYTES`)
    keeps bounded anyway: so no invocation for every operation's end."""
    mark = history.ITEM_HISTORY_MARK
    changed = ["INSERT", "MODIFY"]
    before = [
        {
            "eventName": changed,
            "dynamodb": {"NewImage": {mark: _BEFORE, "transition": {"S": [{"exists": True}]}}},
        },
        {
            "eventName": ["REMOVE"],
            "dynamodb": {"OldImage": {mark: _BEFORE, "transition": {"S": [{"exists": True}]}}},
        },
    ]
    if not events:
        return before
    return [
        {
            "eventName": changed,
            "dynamodb": {
                "NewImage": {mark: _IN_ITEM, "transition": {"S": [t.value for t in EVENT_LIVE]}}
            },
        },
        {
            "eventName": changed,
            "dynamodb": {
                "NewImage": {
                    mark: _IN_ITEM,
                    "transition": {"S": [t.value for t in EVENT_FINAL]},
                    PURGE_SK: {"N": [{"exists": True}]},
                    history.ITEM_HISTORY_EXPIRED: {"N": [{"exists": False}]},
                }
            },
        },
        {
            # A takeover (a claim from ``claimed``), or an enqueue that awaits approval.
            "eventName": changed,
            "dynamodb": {
                "NewImage": {
                    mark: _IN_ITEM,
                    "transition": {"S": [Transition.CLAIM.value, Transition.ENQUEUE.value]},
                    "state": {"S": [State.CLAIMED.value, State.AWAITING_APPROVAL.value]},
                    "claimed_from": {"S": [State.CLAIMED.value, {"exists": False}]},
                }
            },
        },
        *before,
    ]


def shared_filters(
    events: bool = True, tenants: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The filter of the one mapping that feeds both the worker's dispatch and the publisher
    (:func:`leasefence.streams.mappings.shared`): a superset of :func:`dispatch_filters` and
    :func:`publisher_filters` in five patterns (Lambda's default quota of filters per mapping).
    The publisher's first pattern (an outcome that leaves the operation live) and the worker's
    (work that became claimable now) become one: any write whose transition is one of those or an
    enqueue, whatever the state, tenant or history mark. What it passes beyond the two filters
    (enqueues of tenants the worker does not serve, enqueues of operations whose history is not in
    their item) the function drops by the exact filters (:mod:`leasefence.worker.stream_router`).

    ``events`` False (no outcome events): the worker's exact filter for ``tenants`` and the
    publisher's two patterns of operations enqueued before (:func:`publisher_filters`), three in
    all: an operation's end, and an enqueue of a tenant the worker does not serve (one of HTTP
    workers), invoke nothing."""
    if not events:
        return [*dispatch_filters(tenants), *publisher_filters(events=False)]
    live, *rest = publisher_filters()
    transitions = [t.value for t in EVENT_LIVE]
    transitions += [t.value for t in CLAIMABLE_NOW if t.value not in transitions]
    merged = {
        "eventName": live["eventName"],
        "dynamodb": {"NewImage": {"transition": {"S": transitions}}},
    }
    return [merged, *rest]


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
