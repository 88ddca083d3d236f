"""The typed error of a non-2xx HTTP answer, whoever wrote it: the service (its ``error`` object,
by ``error.code``) or API Gateway itself (``{"message": "..."}`` from its JWT authorizer, its
throttling or a failed integration; or a body that is not JSON), by its status. The SDK
(:mod:`leasefence.client`) and the worker's HTTP backend raise what this returns."""

from __future__ import annotations

import json
import re

from leasefence.api.errors import Forbidden, Unauthorized
from leasefence.errors import (
    AlreadyAttempted,
    InlinePayloadRequired,
    InvalidInput,
    InvalidTransition,
    LeaseFenceError,
    NotFound,
    PayloadConflict,
    PayloadMismatch,
    PayloadMissing,
    PayloadTooLarge,
    StaleFence,
    TenantErasing,
    TooManyJobTypes,
    Unavailable,
    UnknownJobType,
    VersionConflict,
)

#: Error code -> class. Unknown codes become a plain LeaseFenceError with that code.
ERRORS: dict[str, type[LeaseFenceError]] = {
    "invalid_request": InvalidInput,
    "inline_payload_required": InlinePayloadRequired,
    "payload_too_large": PayloadTooLarge,
    "not_found": NotFound,
    "payload_missing": PayloadMissing,
    "payload_conflict": PayloadConflict,
    "payload_mismatch": PayloadMismatch,
    "stale_fence": StaleFence,
    "invalid_transition": InvalidTransition,
    "unknown_job_type": UnknownJobType,
    "already_attempted": AlreadyAttempted,
    "tenant_erasing": TenantErasing,
    "too_many_job_types": TooManyJobTypes,
    "version_conflict": VersionConflict,
    "unavailable": Unavailable,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
}

#: An answer that is not the service's own (no ``error`` object: API Gateway's ``{"message":
#: "..."}`` from its JWT authorizer, throttling or a failed integration, or a body that is not
#: JSON at all) -> the code of the service's answer that means the same to a caller. Any other
#: 5xx is ``unavailable``, any other 4xx ``invalid_request``.
GATEWAY_CODES: dict[int, str] = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    413: "payload_too_large",
    429: "unavailable",
}


def _challenge_description(challenge: str | None) -> str | None:
    """The ``error_description`` of a ``WWW-Authenticate: Bearer ...`` challenge (RFC 6750)."""
    if not challenge:
        return None
    found = re.search(r'error_description="([^"]*)"', challenge)
    return found.group(1) if found else None


def answer_error(status: int, raw: bytes, headers: dict[str, str] | None = None) -> LeaseFenceError:
    """The typed error of a non-2xx answer: by its ``error.code`` when the service wrote it,
    else by its status (:data:`GATEWAY_CODES`), with ``details["answered_by"]`` set to
    ``"gateway"`` (the service's own errors carry no such detail)."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code, message = error["code"], str(error.get("message") or error["code"])
        gateway = False
    else:
        gateway = True
        code = GATEWAY_CODES.get(status, "unavailable" if status >= 500 else "invalid_request")
        said = body.get("message") if isinstance(body, dict) else None
        text = str(said) if said else raw.decode("utf-8", "replace").strip()[:200]
        # The JWT authorizer says why in its WWW-Authenticate header, not in the body.
        challenge = {k.lower(): v for k, v in (headers or {}).items()}.get("www-authenticate")
        why = _challenge_description(challenge)
        message = f"HTTP {status} from the gateway: {text or 'no body'}" + (
            f" ({why})" if why else ""
        )
    cls = ERRORS.get(code, LeaseFenceError)
    exc = cls(message)
    exc.code = code
    exc.status = status
    if gateway:
        exc.details["answered_by"] = "gateway"
    return exc
