"""The error answers' models: the contract's error body (``{"error": {"code", "message"}}``),
its codes as an open enum, and API Gateway's own body. Documentation only: the answers are
written by :mod:`leasefence.api.errors`."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field


class FieldProblem(BaseModel):
    field: str
    type: str
    message: str


#: The codes ``error.code`` takes today, in the contract's order (docs/contract.md, "Error codes").
ERROR_CODES = (
    "invalid_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "payload_conflict",
    "stale_fence",
    "invalid_transition",
    "payload_too_large",
    "payload_missing",
    "payload_mismatch",
    "unknown_job_type",
    "version_conflict",
    "already_attempted",
    "tenant_erasing",
    "too_many_job_types",
    "inline_payload_required",
    "method_not_allowed",
    "unavailable",
    "internal_error",
)
#: The rule for adding a code, stated in the document and in docs/contract.md.
NEW_CODES_RULE = (
    "Codes are added in any release, never renamed or removed, and a new code comes with a status "
    "that already has a meaning: a client must accept a code it does not know and handle it by "
    "its HTTP status"
)


ErrorCode = Enum(  # type: ignore[misc]  # the functional API: one member per code
    "ErrorCode", {code: code for code in ERROR_CODES}, type=str, module=__name__
)
ErrorCode.__doc__ = f"The error codes known when this document was generated. {NEW_CODES_RULE}."


class ErrorDetail(BaseModel):
    code: ErrorCode | str = Field(
        description="One of ErrorCode's values, or another string: the list is open. "
        f"{NEW_CODES_RULE}."
    )
    message: str
    details: list[FieldProblem] | None = Field(
        default=None, description="Per-field problems (422 only)"
    )


class ErrorOut(BaseModel):
    error: ErrorDetail


class GatewayErrorOut(BaseModel):
    """An answer API Gateway writes itself on AWS, before or instead of leasefence (its JWT
    authorizer's 401, a missing scope's 403, its throttling's 429, a failed or timed-out
    invocation's 500, 503 or 504): no `error` object, only a `message` such as `Unauthorized`,
    `Forbidden`, `Too Many Requests`, `Internal Server Error`, `Service Unavailable` or `Endpoint
    request timed out`. Tell it by its status; the Python SDK raises the same errors for both."""

    message: str
