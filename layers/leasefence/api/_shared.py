"""What every route handler shares: the body's parser, the route's registration, who may read
an operation, path ids, the answers' shapes (:mod:`leasefence.resources`) and the listing filters'
query parameters.

Nothing here holds a resolver: :mod:`leasefence.api.routes` makes its own (a module the torture
run loads once per environment, each with its own resolver and context) and registers on it the
handlers of :mod:`leasefence.api.routes` (operations, job types, settings) and of
:mod:`leasefence.api._console` (the operator console's routes).
"""

from __future__ import annotations

import calendar
import json
import re
from typing import Annotated, Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query

from leasefence import listing, resources
from leasefence.api import models
from leasefence.api._docs import NO_STORE_HEADER, ROUTE_DOCS, no_store
from leasefence.api.app import JSON, strict_json_loads
from leasefence.api.errors import Forbidden
from leasefence.api.security import APPROVE, Caller, route
from leasefence.errors import InvalidInput, LeaseFenceError
from leasefence.tracecontext import MAX_TRACESTATE_BYTES
from leasefence.validation import validate_id


def json_body(text: str) -> Any:
    """The request body (:func:`strict_json_loads`), refused here when it is an array: every body
    is an object (or, where a route takes none, null), and the resolver would otherwise validate
    an array's first item in place of the body."""
    body = strict_json_loads(text)
    if isinstance(body, list):
        raise RequestValidationError(
            [
                {
                    "type": "model_type",
                    "loc": ("body",),
                    "msg": "the request body must be a JSON object, not an array",
                    "input": None,
                }
            ]
        )
    return body


def register_on(app: APIGatewayHttpResolver, operation_id: str) -> Any:
    """Register the route ``operation_id`` (:data:`~leasefence.api.security.ROUTES`) on ``app``
    with what the document says of it (:data:`~leasefence.api._docs.ROUTE_DOCS`)."""
    doc = ROUTE_DOCS[operation_id]
    spec = route(operation_id)
    responses = doc.responses
    if no_store(operation_id):  # the document states the header on the successful answers
        responses = {
            status: {**answer, "headers": NO_STORE_HEADER} if 200 <= status < 300 else answer
            for status, answer in responses.items()
        }
    # One alternative per scope that opens the route (OpenAPI: any one of them suffices).
    security = [{"bearerAuth": [scope]} for scope in spec.scopes] or None
    return app.route(
        spec.rule,
        spec.method,
        summary=doc.summary,
        description=doc.description,
        operation_id=operation_id,
        responses=responses,
        security=security,
        tags=[
            doc.tag
            if doc.tag is not None
            else "operator"
            if spec.scope == "leasefence/operate"
            else "approvals"
            if spec.scope == "leasefence/approve"
            else "health"
            if spec.scope is None
            else "operations"
        ],
    )


def readable(caller: Caller, operation_id: str, operation: Any) -> Any:
    """``operation``, if the caller may read it through this route: any of its tenant's with the
    route's own scope or another the route admits but ``leasefence/approve`` (an operator reads
    any one operation, as it lists them all); with only ``leasefence/approve``, one that went
    through the approval gate: an approver reads what it approves (the operation, its payload,
    its history) and nothing else, and claims nothing (that takes ``leasefence/work``)."""
    spec = route(operation_id)
    reads_all = [scope for scope in (spec.scope, *spec.also) if scope != APPROVE]
    if not caller.scopes.isdisjoint(reads_all) or operation.approval_gated:
        return operation
    raise Forbidden(
        f"without the scope {' or '.join(str(s) for s in reads_all)}, a token reads only "
        "operations that went through the approval gate"
    )


def path_id(raw: str, name: str = "operation_id") -> str:
    """A path id arrives percent-encoded (UTF-8); decode it exactly once."""
    try:
        value = unquote(raw, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} in the path is not valid percent-encoded UTF-8") from None
    return validate_id(name, value)


def answer(status: int, body: Any) -> Response:
    return Response(status_code=status, content_type=JSON, body=body)


def public(operation: Any) -> dict[str, Any]:
    """The Operation resource (:class:`leasefence.resources.Operation`) of an engine record."""
    return resources.dump(resources.Operation, operation)


def public_claim(grant: Any, payload: Any = None) -> dict[str, Any]:
    """The Claim resource (:class:`leasefence.resources.Claim`) of the engine's grant, carrying
    ``payload`` (the stored payload's JSON value; None: not carried)."""
    return resources.dump(
        resources.Claim, grant, lease_seconds=grant.lease_ms // 1000, payload=payload
    )


def claim_payload(engine: Any, grant: Any) -> Any:
    """The payload a claim answer carries: the one leasefence stores for the operation, read as
    ``GET .../payload`` reads it (checked against its hash), so the worker needs no request of its
    own. None (the field is null) when there is none (by reference) or it cannot be read now
    (purged, erased, its store refusing or unreachable): the claim is granted either way, and the
    worker's ``GET .../payload`` answers why (410, 503). The payload is never logged."""
    try:
        return json.loads(engine.payload(grant))
    except LeaseFenceError:
        return None


def operation_answer(operation: Any) -> Response:
    return answer(200, {"operation": public(operation)})


OperationPath = Annotated[
    str,
    Path(
        description="The operation id, percent-encoded (1-256 characters once decoded, no control characters)",
        json_schema_extra={"minLength": 1, "maxLength": 256, "pattern": models.NO_CONTROL},
    ),
]

# ---------------------------------------------------------------------------------- trace context

Traceparent = Annotated[
    str | None,
    Header(
        description=(
            "The producer's W3C trace context (OpenTelemetry's traceparent), kept with the "
            "operation and handed to every claim (the claim's traceparent). A malformed one is "
            "ignored, as W3C Trace Context asks of a receiver: the operation is enqueued "
            "without it. A replay keeps the first enqueue's"
        ),
    ),
]
Tracestate = Annotated[
    str | None,
    Header(
        description=(
            f"The W3C tracestate that goes with traceparent: kept when it is at most "
            f"{MAX_TRACESTATE_BYTES} printable ASCII characters, dropped otherwise"
        ),
    ),
]

# ---------------------------------------------------------------------------------- list filters

JobTypeQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=256,
        pattern=models.NO_CONTROL,
        description="Only operations of this job type",
    ),
]
ClassQuery = Annotated[
    models.TargetClassName | None, Query(description="Only operations of this target class")
]
AfterQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only operations updated at or after this time (RFC 3339 with a time zone)",
        json_schema_extra={"format": "date-time"},
    ),
]
BeforeQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="Only operations updated before this time (RFC 3339 with a time zone)",
        json_schema_extra={"format": "date-time"},
    ),
]
TextQuery = Annotated[
    str | None,
    Query(
        max_length=listing.MAX_TEXT_QUERY,
        pattern=models.NO_CONTROL,
        description="Only operations whose id, job type or reason contains this text "
        "(case-sensitive)",
    ),
]


#: An RFC 3339 ``date-time`` (what the document's ``format: date-time`` admits, and nothing else).
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)


def _days(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a date of the proleptic Gregorian calendar (year 0 too)."""
    year -= month <= 2
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    of_era_days = of_era * 365 + of_era // 4 - of_era // 100 + of_year
    return era * 146_097 + of_era_days - 719_468


def time_ms(value: str | None, name: str) -> int | None:
    """An RFC 3339 date-time (with its zone) as ms since the epoch; None for none. Exactly the
    strings ``format: date-time`` admits: a leap second (23:59:60 UTC) reads as the next second;
    an empty string, a date alone or a time without its zone is :class:`InvalidInput`."""
    if value is None:
        return None
    found = _DATE_TIME.fullmatch(value)
    refused = InvalidInput(
        f"{name} must be an RFC 3339 time with a zone, e.g. 2026-12-01T10:00:00Z"
    )
    if found is None:
        raise refused
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    sign, zone_hours, zone_minutes = found.group(8), found.group(9), found.group(10)
    offset = (
        0
        if sign is None
        else (1 if sign == "+" else -1) * (int(zone_hours) * 60 + int(zone_minutes))
    )
    in_range = (
        1 <= month <= 12
        and 1 <= day <= (29 if month == 2 and calendar.isleap(year) else _MONTH_DAYS[month - 1])
        and hour <= 23
        and minute <= 59
        and (second <= 59 or (second == 60 and (hour * 60 + minute - offset) % 1440 == 1439))
        and (sign is None or (int(zone_hours) <= 23 and int(zone_minutes) <= 59))
    )
    if not in_range:
        raise refused
    seconds = _days(year, month, day) * 86_400 + hour * 3600 + (minute - offset) * 60 + second
    return seconds * 1000 + int((found.group(7) or "0")[:3].ljust(3, "0"))


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def filters_of(
    state: str | None,
    job_type: str | None,
    target_class: str | None,
    updated_after: str | None,
    updated_before: str | None,
    q: str | None,
) -> listing.Filters:
    """The listing filters of a request's query parameters."""
    return listing.Filters.of(
        state=state,
        job_type=job_type,
        target_class=target_class,
        updated_after=time_ms(updated_after, "updated_after"),
        updated_before=time_ms(updated_before, "updated_before"),
        text=q or None,
    )
