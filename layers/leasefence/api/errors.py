"""The one place where an exception becomes the contract's error answer.

``{"error": {"code": "...", "message": "..."}}`` with the status the contract names. Domain errors
(:class:`leasefence.errors.LeaseFenceError`) carry their own code and status; Powertools' own
validation errors become ``invalid_request`` (400 for a body that is not JSON, else 422); anything
unexpected becomes a 500 ``internal_error`` whose message reveals nothing, and is logged without
its message (which could quote ids).

This module imports no Powertools code at import time, so the client SDK can share the error
classes below without loading the event handler.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

# Forbidden and Unauthorized are domain errors (leasefence.errors); the API and the SDK import
# them from here.
from leasefence.errors import (
    Forbidden,  # noqa: F401
    InvalidInput,
    LeaseFenceError,
    NotFound,
    Unauthorized,  # noqa: F401
)

log = logging.getLogger("leasefence.api")

JSON = "application/json"


class MalformedRequest(InvalidInput):
    """The request body is not JSON at all (or not UTF-8)."""

    status = 400


class UnsupportedMediaType(InvalidInput):
    status = 415


class RouteNotFound(NotFound):
    pass


class MethodNotAllowed(LeaseFenceError):
    """A known path asked with a method it does not declare: 405 with ``Allow`` (RFC 9110)."""

    code = "method_not_allowed"
    status = 405

    def __init__(self, method: str, allow: tuple[str, ...]) -> None:
        super().__init__(f"{method} is not allowed here; allowed: {', '.join(allow)}")
        self.allow = allow


def headers_of(exc: BaseException) -> dict[str, str]:
    """The headers an error answer carries beside its content type (``Allow`` for a 405)."""
    if isinstance(exc, MethodNotAllowed):
        return {"Allow": ", ".join(exc.allow)}
    return {}


def error_body(
    code: str, message: str, details: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if details:
        error["details"] = details
    return {"error": error}


def dumps(body: Any) -> str:
    """An answer's JSON as the resolver writes it (compact), so that every error body, whoever
    writes it (the resolver, the entry, the local stack's stand-in for API Gateway), reads the
    same."""
    import json

    return json.dumps(body, separators=(",", ":"))


def encoded(code: str, message: str) -> bytes:
    """The contract's error body for ``code`` and ``message``, as bytes on the wire."""
    return dumps(error_body(code, message)).encode()


def _where(loc: Any) -> str:
    parts = [str(p) for p in (loc or ())]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        source, rest = parts[0], parts[1:]
        return ".".join(rest) if rest else source
    return ".".join(parts) or "request"


def _validation_details(errors: Any) -> list[dict[str, Any]]:
    details = []
    for error in errors or ():
        kind = str(error.get("type", "invalid"))
        message = str(error.get("msg", "invalid value"))
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        if kind == "string_pattern_mismatch":
            message = "must not contain control characters"
        elif kind == "string_unicode":
            message = "must be valid Unicode text"
        details.append({"field": _where(error.get("loc")), "type": kind, "message": message})
    return details


def describe(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """``(status, body)`` for any exception: the mapping itself."""
    from aws_lambda_powertools.event_handler.exceptions import NotFoundError, ServiceError
    from aws_lambda_powertools.event_handler.openapi.exceptions import (
        RequestUnsupportedContentType,
        RequestValidationError,
    )

    if isinstance(exc, LeaseFenceError):
        if exc.status >= 500 and not exc.retryable:
            _log_unexpected(exc)
            return exc.status, error_body("internal_error", "internal error")
        return exc.status, error_body(exc.code, exc.message)
    if isinstance(exc, RequestValidationError):
        errors = list(exc.errors())
        broken = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if broken is not None:
            reason = str((broken.get("ctx") or {}).get("error") or "").strip()
            message = "request body is not valid JSON" + (f" ({reason})" if reason else "")
            return 400, error_body("invalid_request", message)
        details = _validation_details(errors)
        summary = (
            "; ".join(f"{d['field']}: {d['message']}" for d in details[:5]) or "invalid request"
        )
        return 422, error_body("invalid_request", summary, details)
    if isinstance(exc, RequestUnsupportedContentType):
        return 415, error_body("invalid_request", "request body must be JSON")
    if isinstance(exc, NotFoundError):
        return 404, error_body("not_found", "no such route")
    if isinstance(exc, ServiceError) and 400 <= exc.status_code < 500:
        return exc.status_code, error_body("invalid_request", str(exc.msg))
    _log_unexpected(exc)
    return 500, error_body("internal_error", "internal error")


def _log_unexpected(exc: BaseException) -> None:
    # The traceback's frames, not the exception's message: messages may quote ids or payloads.
    frames = traceback.format_tb(exc.__traceback__)[-8:]
    log.error("unhandled error", extra={"error_type": type(exc).__name__, "frames": frames})


def to_response(exc: BaseException) -> Any:
    """A Powertools :class:`Response` (for exception handlers inside the resolver)."""
    from aws_lambda_powertools.event_handler import Response

    status, body = describe(exc)
    return Response(status_code=status, content_type=JSON, body=body, headers=headers_of(exc))


def to_proxy_result(exc: BaseException, serializer: Any = None) -> dict[str, Any]:
    """An API Gateway payload-v2 result (for failures before the resolver runs)."""
    status, body = describe(exc)
    dump = serializer or dumps
    return {
        "statusCode": status,
        "headers": {"Content-Type": JSON, **headers_of(exc)},
        "body": dump(body),
        "isBase64Encoded": False,
        "cookies": [],
    }
