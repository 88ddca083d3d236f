"""Outcome events: what an upstream service hears on EventBridge, built from a stream record.

One event per transition an upstream service cares about (:data:`DETAIL_TYPES`), with
``source`` :data:`SOURCE`, the operation's identity and outcome in ``detail`` and never its
payload (nor its reference or hash). The schema is ``docs/events/operation-event.v1.schema.json``
(:data:`SCHEMA_VERSION`; ``detail.version`` carries it). ``detail.sequence`` is the transition's
``seq``. Delivery is at least once: a record delivered again (retried, redriven, replayed by a
mapping created again) publishes its event again, so consumers dedupe on ``(detail.tenant_id,
detail.operation_id, detail.sequence)``; and they order one operation's events by
``detail.sequence``, not by arrival: the publisher never lets a record overtake a failed one in
its batch, but a record given up after its retries and redriven later arrives after the ones
behind it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from leasefence.clock import to_rfc3339
from leasefence.history import MAX_REASON, OUTCOME_TRANSITIONS, transition_of
from leasefence.model import State, Transition
from leasefence.streams.records import Change

SOURCE = "leasefence"
SCHEMA_VERSION = "1"

#: detail-type per transition; the transitions not listed publish nothing (an enqueue, a fresh
#: claim, an erasure: what the API's own answers already tell the caller), except an enqueue that
#: awaits approval (:data:`AWAITING_APPROVAL`: its approvers are not the caller).
DETAIL_TYPES: dict[Transition, str] = {
    Transition.COMPLETE: "Operation Succeeded",
    Transition.FAIL: "Operation Failed",
    Transition.UNKNOWN: "Operation Unknown",
    Transition.SWEEP: "Operation Unknown",
    Transition.QUARANTINE: "Operation Quarantined",
    Transition.RETRY: "Operation Retrying",
    Transition.RETRY_LATER: "Operation Retrying",
    Transition.REQUEUE: "Operation Requeued",
    Transition.RESOLVE: "Operation Resolved",
    Transition.TAKEOVER: "Operation Taken Over",
    Transition.APPROVE: "Operation Approved",
    Transition.REJECT: "Operation Rejected",
    Transition.APPROVAL_EXPIRE: "Operation Approval Expired",
    Transition.CANCEL: "Operation Cancelled",
}

#: The detail-type of an enqueue into ``awaiting_approval``: what an approval service subscribes to.
AWAITING_APPROVAL = "Operation Awaiting Approval"
#: Every detail-type published.
ALL_DETAIL_TYPES = frozenset({*DETAIL_TYPES.values(), AWAITING_APPROVAL})


def _reason(change: Change, transition: Transition) -> str | None:
    new = change.new or {}
    text = (
        new.get("resolution_note")
        if transition in (Transition.RESOLVE, Transition.REQUEUE)
        else new.get("reason")
    )
    if transition in (
        Transition.COMPLETE,
        Transition.TAKEOVER,
        Transition.APPROVE,
        Transition.CANCEL,
    ):
        return None
    return text[:MAX_REASON] if isinstance(text, str) and text else None


def detail_type(transition: Transition, new: dict[str, Any]) -> str | None:
    """The detail-type of a transition (its image after the write), or None: it publishes nothing."""
    if transition is Transition.ENQUEUE:
        return AWAITING_APPROVAL if new.get("state") == State.AWAITING_APPROVAL else None
    return DETAIL_TYPES.get(transition)


def detail(change: Change) -> dict[str, Any]:
    """The event's ``detail`` for a transition record (see the schema for each field)."""
    new, old = change.new or {}, change.old
    transition = transition_of(new)
    return {
        "version": SCHEMA_VERSION,
        "tenant_id": change.tenant_id,
        "operation_id": change.operation_id,
        "job_type": new["job_type"],
        "transition": transition.value,
        "state": new["state"],
        "previous_state": old.get("state") if old is not None else None,
        "fence": int(new["fence"]),
        "attempt": int(new["attempts"]),
        "max_attempts": int(new["max_attempts"]),
        "actor": new.get("actor"),
        "previous_actor": old.get("lease_owner")
        if transition is Transition.TAKEOVER and old is not None
        else None,
        "outcome_code": new.get("outcome_code") if transition in OUTCOME_TRANSITIONS else None,
        "reason": _reason(change, transition),
        "sequence": int(new["seq"]),
        "time": to_rfc3339(int(new["updated_at"])),
    }


def entry(change: Change, bus: str) -> dict[str, Any] | None:
    """The ``PutEvents`` entry for a transition record, or None when it publishes nothing."""
    if change.transition is None or change.new is None:
        return None
    kind = detail_type(transition_of(change.new), change.new)
    if kind is None:
        return None
    body = detail(change)
    return {
        "Source": SOURCE,
        "DetailType": kind,
        "Detail": json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        "EventBusName": bus,
        "Time": datetime.fromtimestamp(int(change.new["updated_at"]) / 1000, tz=UTC),
        # The table's stream: tells deployments sharing one bus apart.
        "Resources": [change.source_arn] if change.source_arn else [],
    }


def subscription_pattern(
    tenant_id: str | None = None, detail_types: list[str] | None = None
) -> dict[str, Any]:
    """An EventBridge rule pattern for leasefence's outcome events: one tenant's (``tenant_id``),
    only some kinds (``detail_types``), or all of them."""
    pattern: dict[str, Any] = {"source": [SOURCE]}
    if detail_types:
        unknown = set(detail_types) - ALL_DETAIL_TYPES
        if unknown:
            raise ValueError(f"no such detail-type: {', '.join(sorted(unknown))}")
        pattern["detail-type"] = list(detail_types)
    if tenant_id is not None:
        pattern["detail"] = {"tenant_id": [tenant_id]}
    return pattern


class NotPublished(Exception):
    """EventBridge refused an entry (throttled, failing): the record is retried."""


def publish(client: Any, entries: list[dict[str, Any]]) -> None:
    """``PutEvents`` (at most 10 entries); :class:`NotPublished` if any entry failed."""
    if not entries:
        return
    answer = client.put_events(Entries=entries)
    if answer.get("FailedEntryCount"):
        codes = sorted(
            {e.get("ErrorCode", "?") for e in answer.get("Entries", []) if e.get("ErrorCode")}
        )
        raise NotPublished(
            f"EventBridge refused {answer['FailedEntryCount']} event(s): {', '.join(codes)}"
        )
