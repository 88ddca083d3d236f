"""The catalogue's request body (``PUT /v1/job-types/{job_type}``), apart from
:mod:`leasefence.api.models` for its size."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field

from leasefence.api.models import (
    _CLASS_D_ONE_ATTEMPT,
    ApprovalSeconds,
    Attempts,
    LeaseSeconds,
    RequestToken,
    Strict,
    TargetClassName,
    Version,
)
from leasefence.catalogue import MAX_SUMMARY_FIELDS, RUNBOOK_URL_PATTERN
from leasefence.limits import MAX_TEXT_LENGTH as MAX_TEXT


class JobTypeRequest(Strict):
    """A job type's catalogue entry. Omitted fields take their defaults (not the old values):
    a PUT declares the whole entry.

    Two rules no JSON Schema can state are checked too (422 invalid_request): `lease_seconds`
    must not exceed `max_lease_seconds` (with their defaults when omitted), and `payload_schema`
    must be a JSON Schema leasefence can use (local `$ref`s only, patterns it can run)."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _CLASS_D_ONE_ATTEMPT,
                {
                    "if": {
                        "required": ["approval_required"],
                        "properties": {"approval_required": {"const": True}},
                    },
                    "else": {"properties": {"approval_valid_seconds": {"type": "null"}}},
                },
                {
                    # A summary names payload fields: it needs the gate and a schema to name.
                    "if": {
                        "required": ["approval_summary"],
                        "properties": {"approval_summary": {"type": "array"}},
                    },
                    "then": {
                        "required": ["approval_required", "payload_schema"],
                        "properties": {
                            "approval_required": {"const": True},
                            "payload_schema": {"type": "object"},
                        },
                    },
                },
            ]
        }
    )

    target_class: TargetClassName = Field(description="What the job type's target can enforce")
    max_attempts: Attempts | None = Field(
        default=None, description="The attempt budget (default 5; class D: 1)"
    )
    lease_seconds: LeaseSeconds = Field(
        default=60, description="The lease of a claim that names none"
    )
    max_lease_seconds: LeaseSeconds = Field(
        default=900, description="Longer leases asked for by a claim are cut to this"
    )
    owner: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    runbook_url: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT,
        pattern=RUNBOOK_URL_PATTERN,
        description="An http(s) URL",
    )
    approval_required: bool = False
    approval_valid_seconds: ApprovalSeconds | None = Field(
        default=None,
        description="With approval_required: how long an approval may take (default 86400)",
    )
    payload_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Schema that inline payloads must match (local $refs only; at most "
        "16 KiB). A job type with one refuses payloads by reference",
    )
    approval_summary: list[Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SUMMARY_FIELDS,
        description="With approval_required and payload_schema: the payload fields that the "
        "approvers' inbox shows for each operation (GET /v1/approvals); each must be a property "
        "payload_schema declares (a rule between two fields: 422 invalid_request otherwise)",
    )
    expected_version: Version | None = Field(
        default=None,
        description="Write only if the entry is at this version (0: only if it does not exist); "
        "else 409 version_conflict",
    )
    request_token: RequestToken | None = None
