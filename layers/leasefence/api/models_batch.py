"""The batch routes' bodies and answers (``POST /v1/batch/...``): each item is the body of its
one-at-a-time route (:mod:`leasefence.api.models`), with the operation's id where the route
takes it from its path; each answer is one result per item, in the items' order."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

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


def _part_of_round(item: Any, what: str) -> Any:
    return Annotated[
        list[item],
        Field(
            default_factory=list,
            max_length=MAX_BATCH_ITEMS,
            description=f"0-{MAX_BATCH_ITEMS} {what}, answered in the same place of the answer's "
            "list of that name",
        ),
    ]


class WorkBatchRequest(Strict):
    """A worker fleet's round trip: closing writes, lease renewals and claims in one request, up
    to 25 of each and at least one item. The finishes are made first, then the renewals, then
    the claims, each list in order and each item as its batch route makes it (`POST
    /v1/batch/finish`, `/heartbeat`, `/claim`): so a worker closes its job and claims its next
    one in one request."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        # At least one item: one of the lists not empty (what the validator below refuses).
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"minItems": 1}}}
                for name in ("finish", "heartbeat", "claim")
            ]
        },
    )

    finish: _part_of_round(FinishItem, "finishes")  # type: ignore[valid-type]
    heartbeat: _part_of_round(HeartbeatItem, "renewals")  # type: ignore[valid-type]
    claim: _part_of_round(ClaimRequest, "claims")  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _not_empty(self) -> WorkBatchRequest:
        if not (self.finish or self.heartbeat or self.claim):
            raise ValueError("send at least one item (finish, heartbeat or claim)")
        return self


def result_of(name: str, answer: Any, unnamed: bool = False) -> type[BaseModel]:
    """One item's result in a batch answer: the status and body that item's one-at-a-time route
    would have answered (``answer``), or its error (the contract's error body)."""
    return create_model(
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


def batch_out(name: str, result: type[BaseModel]) -> type[BaseModel]:
    """The answer of a batch route: one ``result`` (:func:`result_of`) per item, in order."""
    return create_model(
        name,
        __doc__="Answered 200 once every item was processed, whatever each item's own status",
        results=(list[result], Field(description="One per item, in the items' order")),  # type: ignore[valid-type]
    )


EnqueueResult = result_of("EnqueueBatchOut", EnqueueOut)
HeartbeatResult = result_of("HeartbeatBatchOut", LeaseOut)
FinishResult = result_of("FinishBatchOut", OperationEnvelope)
ClaimResult = result_of("ClaimBatchOut", ClaimEnvelope, unnamed=True)
EnqueueBatchOut = batch_out("EnqueueBatchOut", EnqueueResult)
HeartbeatBatchOut = batch_out("HeartbeatBatchOut", HeartbeatResult)
FinishBatchOut = batch_out("FinishBatchOut", FinishResult)
ClaimBatchOut = batch_out("ClaimBatchOut", ClaimResult)
WorkBatchOut = create_model(
    "WorkBatchOut",
    __doc__="Answered 200 once every item was processed: each list one result per item of the "
    "request's list of that name, in its order (empty when none was sent)",
    finish=(
        list[FinishResult],  # type: ignore[valid-type]
        Field(description="As `POST /v1/batch/finish` answers its items"),
    ),
    heartbeat=(
        list[HeartbeatResult],  # type: ignore[valid-type]
        Field(description="As `POST /v1/batch/heartbeat` answers its items"),
    ),
    claim=(
        list[ClaimResult],  # type: ignore[valid-type]
        Field(description="As `POST /v1/batch/claim` answers its items"),
    ),
)
