"""The operator's bulk routes (issue 37): the approvers' inbox (``GET /v1/approvals``) and bulk
triage (``POST /v1/batch/triage``), whose answer has the batch routes' per-item result shape
(:func:`leasefence.api.models_batch.batch_out`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from leasefence.api.models import (
    MAX_TEXT,
    Id,
    OperationEnvelope,
    OperationOut,
    RequestToken,
    Strict,
    Version,
)
from leasefence.api.models_batch import batch_out, result_of
from leasefence.limits import MAX_TRIAGE_ITEMS
from leasefence.resources import StateName

SummaryState = Literal[
    "shown", "not_declared", "needs_scope", "erased", "purged", "external", "missing"
]


class ApprovalRow(BaseModel):
    operation: OperationOut  # type: ignore[valid-type]
    summary: dict[str, Any] | None = Field(
        description="The payload fields the job type's catalogue entry names in approval_summary "
        "(a field the payload lacks is left out); null unless summary_state is shown"
    )
    summary_state: SummaryState = Field(
        description="shown; not_declared (the entry names no summary, or the job type is not "
        "catalogued); needs_scope (the token may not read payloads: leasefence/approve or "
        "leasefence/work); erased, purged, external (a payload by reference) or missing"
    )


class ApprovalsPage(BaseModel):
    approvals: list[ApprovalRow] = Field(description="Soonest deadline first within the page")
    next_cursor: str | None


class TriageItem(Strict):
    operation_id: Id
    expected_state: StateName = Field(
        description="The state the operator saw: the item's write is conditional on it"
    )
    expected_fence: Version = Field(
        description="The fence the operator saw: the write is conditional on it"
    )


class TriageBatchRequest(Strict):
    """One operator decision for up to 100 operations named by id (a filter is resolved to ids
    before anything is sent). Each item is its own conditional write, pinned to the state and
    fence the operator saw, with its own answer; a resend with the same `request_token` after a
    lost answer answers each item done as a replay. The items are written in order: an id named
    twice is the same decision twice (the second a replay of the first)."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"action": {"const": "resolve"}}},
            "then": {"required": ["resolution"], "properties": {"resolution": {"type": "string"}}},
            "else": {"properties": {"resolution": {"type": "null"}}},
        }
    )

    action: Literal["resolve", "requeue", "cancel"] = Field(
        description="resolve (with resolution), requeue (a resolve with resolution requeue), or "
        "cancel (needs leasefence/produce too)"
    )
    resolution: Literal["succeeded", "failed_terminal"] | None = Field(
        default=None, description="With action resolve: what the operator found"
    )
    note: str = Field(default="", max_length=MAX_TEXT, description="One note for every item")
    request_token: RequestToken
    accept_risks: list[Id] = Field(
        default_factory=list,
        max_length=MAX_TRIAGE_ITEMS,
        description="Operations the operator requeues despite the class's risk (class D with an "
        "intent on record): a requeue of such an operation not named here is refused (422)",
    )
    items: list[TriageItem] = Field(min_length=1, max_length=MAX_TRIAGE_ITEMS)


TriageBatchOut = batch_out("TriageBatchOut", result_of("TriageBatchOut", OperationEnvelope))
