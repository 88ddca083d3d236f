"""The batch routes' bodies and answers (``POST /v1/batch/...``): each item is the body of its
one-at-a-time route (:mod:`leasefence.api.models`), with the operation's id where the route
takes it from its path; each answer is one result per item, in the items' order."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from leasefence.api.models import (
    ClaimEnvelope,
    ClaimRequest,
    CompleteRequest,
    EnqueueOut,
    EnqueueRequest,
    ErrorOut,
    FailRequest,
    HeartbeatRequest,
    Id,
    LeaseOut,
    OperationEnvelope,
    ParkRequest,
    Strict,
)
from leasefence.limits import MAX_BATCH_ITEMS


def _batch_of(item: Any, what: str) -> Any:
    return Annotated[
        list[item],
        Field(
            min_length=1,
            max_length=MAX_BATCH_ITEMS,
            description=f"1-{MAX_BATCH_ITEMS} {what}, made in order: each is its own "
            "conditional write (an id named twice: the second sees the first's write), answered "
            "in the same place of `results`",
        ),
    ]


class ClaimBatchRequest(Strict):
    """Up to 25 claims, each as `POST /v1/claims` takes it (its own `worker_id`, `claim_token`,
    lease and job types): each is one claim with its own token, so a resend after a lost answer
    answers each claim that was made again. The claims are made in order; those not begun within
    5 seconds of the request are answered 503 `unavailable` without being made (send them
    again)."""

    items: _batch_of(ClaimRequest, "claims")  # type: ignore[valid-type]


class EnqueueBatchRequest(Strict):
    """Up to 25 enqueues, each as `POST /v1/operations` takes it."""

    items: _batch_of(EnqueueRequest, "enqueues")  # type: ignore[valid-type]


class HeartbeatItem(HeartbeatRequest):
    operation_id: Id


class HeartbeatBatchRequest(Strict):
    """Up to 25 lease renewals, each as `POST /v1/operations/{id}/heartbeat` takes it, with the
    operation's id."""

    items: _batch_of(HeartbeatItem, "renewals")  # type: ignore[valid-type]


class CompleteItem(CompleteRequest):
    action: Literal["complete"]
    operation_id: Id


class FailItem(FailRequest):
    action: Literal["fail"]
    operation_id: Id


class UnknownItem(ParkRequest):
    action: Literal["unknown"]
    operation_id: Id


class QuarantineItem(ParkRequest):
    action: Literal["quarantine"]
    operation_id: Id


FinishItem = Annotated[
    CompleteItem | FailItem | UnknownItem | QuarantineItem, Field(discriminator="action")
]


class FinishBatchRequest(Strict):
    """Up to 25 fenced finishes, each as its route takes it (`action`: `complete`, `fail`,
    `unknown` or `quarantine`), with the operation's id."""

    items: _batch_of(FinishItem, "finishes")  # type: ignore[valid-type]


def batch_out(name: str, answer: Any, unnamed: bool = False) -> type[BaseModel]:
    """The answer of a batch route: one result per item, in the items' order, each carrying
    the status and body that item's one-at-a-time route would have answered (``answer``), or
    its error (the contract's error body)."""
    item = create_model(
        f"{name}Result",
        __doc__="One item's answer: what its one-at-a-time route would have answered",
        operation_id=(
            str | None if unnamed else str,
            Field(
                description="The item's operation (a claim: the one claimed or named; null: none)"
            ),
        ),
        status=(int, Field(description="The HTTP status the item would have had alone")),
        body=(
            answer | ErrorOut | None if unnamed else answer | ErrorOut,
            Field(description="That answer's body, or its error (null: a 204, no body)"),
        ),
    )
    return create_model(
        name,
        __doc__="Answered 200 once every item was processed, whatever each item's own status",
        results=(list[item], Field(description="One per item, in the items' order")),  # type: ignore[valid-type]
    )


EnqueueBatchOut = batch_out("EnqueueBatchOut", EnqueueOut)
HeartbeatBatchOut = batch_out("HeartbeatBatchOut", LeaseOut)
FinishBatchOut = batch_out("FinishBatchOut", OperationEnvelope)
ClaimBatchOut = batch_out("ClaimBatchOut", ClaimEnvelope, unnamed=True)
