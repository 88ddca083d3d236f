"""The API's entry: :func:`handle` checks the route's scope and the body's size and encoding, then
hands the request to the validated resolver (:mod:`leasefence.api.routes`).

The resolver is imported by :func:`resolver` on the first request that reaches it, not when this
module is imported: pydantic, the models and the Powertools resolver cost about as much as
``import boto3`` itself, and a request refused before validation (no token or the wrong scope, a
body too large or not UTF-8) never needs them. With SnapStart the before-snapshot hook imports it,
so restored instances have it (:mod:`leasefence.snapstart`).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from leasefence import snapstart
from leasefence.api import errors
from leasefence.api.errors import MalformedRequest, MethodNotAllowed, Unauthorized
from leasefence.api.security import (
    CONSOLE_ROUTES,
    allowed_methods,
    caller_from_event,
    iam_caller,
    iam_request,
    match_route,
)
from leasefence.errors import PayloadTooLarge
from leasefence.observability import logger, tag
from leasefence.settings import runtime

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

JSON = "application/json"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate object key")
    return result


def strict_json_loads(text: str) -> Any:
    """JSON as RFC 8259 / I-JSON has it: no NaN or Infinity, no duplicate keys. Every failure
    (including absurd nesting) is a :class:`json.JSONDecodeError`, which the resolver reports
    as a malformed body (400), never as a 500."""
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(
            "nested too deeply", text if isinstance(text, str) else "", 0
        ) from None
    except (ValueError, TypeError) as error:
        reason = str(error)[:120] or type(error).__name__
        raise json.JSONDecodeError(reason, text if isinstance(text, str) else "", 0) from None


def resolver() -> APIGatewayHttpResolver:
    """The validated resolver with every route (:mod:`leasefence.api.routes`), imported once."""
    from leasefence.api.routes import app

    return app


# With SnapStart the resolver is imported before the snapshot: restored instances have it.
snapstart.before_snapshot(resolver)


# ---------------------------------------------------------------------------------- entry


def _normalized(event: Mapping[str, Any]) -> dict[str, Any]:
    """The event as the resolver should see it: a UTF-8 text body, labelled as JSON.

    Every route speaks JSON only, so a body sent as ``text/plain`` or form-encoded (what
    ``curl -d`` and urllib send by default) is read as JSON rather than refused for its label.
    """
    event = dict(event)
    body = event.get("body")
    if body is None:
        return event
    limit = runtime().settings.max_body_bytes
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedRequest("request body is not valid base64") from None
        if len(raw) > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedRequest("request body is not UTF-8 JSON") from None
        event["body"], event["isBase64Encoded"] = body, False
    elif len(body) > limit:
        raise PayloadTooLarge(f"request body is larger than {limit} bytes")
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    headers["content-type"] = JSON
    event["headers"] = headers
    return event


def _refuse_method(method: str, path: str) -> None:
    """405 (:class:`MethodNotAllowed`) for a known path asked with a method it does not declare,
    before any token is read; nothing for a path no route has (the resolver's 404)."""
    allow = allowed_methods(path)
    if allow:
        from leasefence import console

        if not console.enabled():  # a console turned off has no routes: 404, as in AWS
            allow = allowed_methods(path, CONSOLE_ROUTES)
    if allow:
        raise MethodNotAllowed(method.upper(), allow)


def _cache_control(operation_id: str, result: dict[str, Any]) -> None:
    """``Cache-Control: no-store`` on every answer of a route whose answers carry customer data
    (:func:`leasefence.api._docs.no_store`, read from the response models: the routes are
    imported by now)."""
    from leasefence.api._docs import NO_STORE, no_store

    if no_store(operation_id):
        result.setdefault("headers", {})["Cache-Control"] = NO_STORE


def handle(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The API's Lambda entry (the function module adds the Powertools decorators)."""
    started = time.perf_counter()
    request_context = event.get("requestContext") or {}
    http = request_context.get("http") or {}
    path = str(event.get("rawPath", ""))
    stage = request_context.get("stage")
    if stage and stage != "$default" and path.startswith(f"/{stage}/"):
        path = path[len(stage) + 1 :]  # a named stage prefixes the path (Powertools strips it too)
    # Through the IAM API: the path's prefix names the scope (security.iam_request).
    iam_scope: str | None = None
    iam_refused: Unauthorized | None = None
    try:
        found = iam_request(event, path)
    except Unauthorized as refused:
        found, iam_refused = None, refused
    if found is not None:
        iam_scope, path = found
    method = str(http.get("method", ""))
    matched = match_route(method, path)
    spec = matched[0] if matched else None
    app = None
    try:
        if iam_refused is not None:
            raise iam_refused
        if spec is None:
            _refuse_method(method, path)
        prepared = _normalized(event)
        if iam_scope is not None:
            prepared["rawPath"] = path  # the resolver routes the path without its prefix
        caller = None
        if spec is not None and spec.scope is not None:
            # The scope gate runs before body validation (as the authorizer would in AWS).
            found_caller = (
                iam_caller(prepared, iam_scope)
                if iam_scope is not None
                else caller_from_event(prepared)
            )
            caller = found_caller.require(spec.scope, spec.also)
            logger.append_keys(tenant=tag(caller.tenant_id))
        app = resolver()
        app.clear_context()
        if caller is not None:
            app.append_context(caller=caller)
        result = app.resolve(prepared, context)
    except Exception as exc:  # noqa: BLE001 - failures before the resolver, mapped like the rest
        if app is not None:
            app.clear_context()
        result = errors.to_proxy_result(exc)
    if spec is not None and app is not None:
        _cache_control(spec.operation_id, result)
    logger.info(
        "request",
        extra={
            "route": spec.key if spec else "unmatched",
            "status": result.get("statusCode"),
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
        },
    )
    return result
