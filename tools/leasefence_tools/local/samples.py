"""Sample operations for the local stack (``leasefence local --samples``): a tenant with something
in every corner of the operator console, made through the HTTP API as producers, workers,
approvers and operators would (nothing is written behind the API's back).

What :func:`seed` leaves in the tenant (ids are stable, so a second run is a replay):

* ``refund`` (class C, approval required) in the catalogue; ``refund-1001`` and ``refund-1002``
  awaiting approval, requested by ``agent-7``;
* ``receipt-5001`` to ``-5003`` (``demo-receipt``): run by the stream worker's demo handlers when
  the stack reads its stream, else queued;
* ``email-2001`` (class D) ``unknown`` after its worker recorded an intent and lost the answer;
* ``import-3001`` (class B) ``quarantined``: its payload could not be read;
* ``sync-4001`` (class B) taken over from a stalled worker, then completed (a takeover in its
  history);
* ``charge-6001`` (class C) ``failed_terminal``; ``charge-6002`` retrying after a backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from leasefence.client import LeaseFenceClient
from leasefence.errors import LeaseFenceError

#: Who the sample producer and workers are.
AGENT = "agent-7"
REFUND_SCHEMA = {
    "type": "object",
    "required": ["order", "amount", "currency"],
    "properties": {
        "order": {"type": "string"},
        "amount": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "reason": {"type": "string"},
    },
}


def _quietly(call: Callable[[], Any]) -> Any:
    """A step of the story that may have been done by an earlier run (a replay, a refusal of a
    second transition): its refusal is expected and ignored."""
    try:
        return call()
    except LeaseFenceError:
        return None


def seed(
    base_url: str,
    token: Callable[[str, str], str],
    takeover: bool = True,
) -> list[str]:
    """Make the sample operations through the API at ``base_url``; ``token(subject, scopes)``
    mints a token of the tenant to fill for that identity (space-separated scopes). Returns
    their ids."""
    everything = "leasefence/produce leasefence/work leasefence/operate"
    operator = LeaseFenceClient(base_url, token("operator:sam", everything))
    agent = LeaseFenceClient(base_url, token(AGENT, "leasefence/produce leasefence/work"))
    made: list[str] = []

    def enqueue(
        client: LeaseFenceClient, op_id: str, job_type: str, payload: Any, **kw: Any
    ) -> None:
        _quietly(lambda: client.enqueue(op_id, job_type, payload, **kw))
        made.append(op_id)

    _quietly(
        lambda: operator.put_job_type(
            "refund",
            {
                "target_class": "C",
                "max_attempts": 3,
                "owner": "payments-oncall",
                "runbook_url": "https://runbooks.example.com/refunds",
                "approval_required": True,
                "approval_valid_seconds": 86_400,
                "payload_schema": REFUND_SCHEMA,
                "approval_summary": ["amount", "currency", "reason"],
            },
        )
    )
    enqueue(
        agent,
        "refund-1001",
        "refund",
        {"order": "A-1001", "amount": 1250, "currency": "EUR", "reason": "parcel arrived damaged"},
    )
    enqueue(
        agent,
        "refund-1002",
        "refund",
        {"order": "A-1002", "amount": 89900, "currency": "EUR", "reason": "duplicate charge"},
    )
    for n in (5001, 5002, 5003):
        enqueue(
            agent, f"receipt-{n}", "demo-receipt", {"order": f"A-{n}", "to": "buyer@example.com"}
        )

    def worked(
        op_id: str,
        job_type: str,
        target_class: str,
        payload: Any,
        finish: Callable[[Any], Any],
        lease_seconds: int = 30,
    ) -> None:
        enqueue(agent, op_id, job_type, payload, target_class=target_class)
        claim = _quietly(
            lambda: agent.claim("worker-a", lease_seconds=lease_seconds, operation_id=op_id)
        )
        if claim is not None:
            _quietly(lambda: finish(claim))

    worked(
        "email-2001",
        "send-email",
        "D",
        {"template": "welcome", "to": "new-user@example.com"},
        lambda c: (
            agent.heartbeat(
                c.operation_id, c.fence, "worker-a", intent="send welcome email via SMTP relay"
            ),
            agent.unknown(
                c.operation_id, c.fence, "SMTP relay timed out after DATA: the mail may be sent"
            ),
        ),
    )
    worked(
        "import-3001",
        "import-ledger",
        "B",
        {"file": "ledger-2026-11.csv", "format": "v1"},
        lambda c: agent.quarantine(
            c.operation_id, c.fence, "row 17: amount 'twelve' is not a number (format v1)"
        ),
    )
    worked(
        "charge-6001",
        "charge-card",
        "C",
        {"order": "A-6001", "amount": 4200},
        lambda c: agent.fail(c.operation_id, c.fence, False, "card declined: insufficient funds"),
    )
    worked(
        "charge-6002",
        "charge-card",
        "C",
        {"order": "A-6002", "amount": 1800},
        lambda c: agent.fail(
            c.operation_id, c.fence, True, "provider answered 503", retry_after_seconds=3600
        ),
    )
    if takeover:
        # A worker that stalls past its lease, and one that takes over and finishes.
        worked(
            "sync-4001",
            "sync-inventory",
            "B",
            {"sku": "SKU-4001", "warehouse": "north"},
            lambda c: agent.heartbeat(c.operation_id, c.fence, "worker-a", checkpoint={"page": 3}),
            lease_seconds=1,
        )
        time.sleep(1.3)
        claim = _quietly(
            lambda: agent.claim("worker-b", lease_seconds=30, operation_id="sync-4001")
        )
        if claim is not None:
            _quietly(lambda: agent.complete("sync-4001", claim.fence, "synced"))
    return made
