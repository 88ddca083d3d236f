"""The operator console's routes (docs/api-contract-extensions.md, section 14).

Counts per state and the target classes' advice (data routes, like the others), and the console's
own files (open static files, :mod:`leasefence.console`; with the console turned off they answer
404 like an unknown route). :mod:`leasefence.api.routes` registers them on its resolver
(:func:`register_routes`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from leasefence import listing
from leasefence.api import errors, models
from leasefence.api._shared import (
    AfterQuery,
    BeforeQuery,
    ClassQuery,
    JobTypeQuery,
    TextQuery,
    answer,
    filters_of,
)
from leasefence.api.security import Caller
from leasefence.settings import runtime


def _console(name: str) -> Response:
    from leasefence import console

    served = console.answer(name) if console.enabled() else None
    if served is None:
        return errors.to_response(errors.RouteNotFound("no such route"))
    content_type, body = served
    return Response(
        status_code=200,
        content_type=content_type,
        body=body.decode("utf-8"),
        headers=console.security_headers(),
    )


def register_routes(register: Callable[[str], Any], caller_of: Callable[[str], Caller]) -> None:
    """Register the console's routes with ``register`` (the resolver's, as
    :func:`leasefence.api._shared.register_on`); ``caller_of``: the caller of a route."""

    @register("countOperations")
    def count_operations(
        job_type: JobTypeQuery = None,
        target_class: ClassQuery = None,
        updated_after: AfterQuery = None,
        updated_before: BeforeQuery = None,
        q: TextQuery = None,
        limit: Annotated[
            int,
            Query(ge=1, le=listing.MAX_COUNT_ITEMS, description="Operations read at most (1-5000)"),
        ] = listing.DEFAULT_COUNT_ITEMS,
    ):
        tenant = caller_of("countOperations").tenant_id
        filters = filters_of(None, job_type, target_class, updated_after, updated_before, q)
        counts = runtime().engine_for(tenant).state_counts(tenant, filters, limit=limit)
        return answer(200, counts.to_public())

    @register("listTargetClasses")
    def list_target_classes():
        from leasefence.advice import target_classes

        return answer(200, {"target_classes": target_classes()})

    @register("consoleRedirect")
    def console_redirect():
        from leasefence import console

        if not console.enabled():
            return errors.to_response(errors.RouteNotFound("no such route"))
        return Response(
            status_code=302,
            content_type=None,
            body="",
            headers={"Location": console.PATH, "Cache-Control": "no-cache"},
        )

    @register("consolePage")
    def console_page():
        return _console("index.html")

    @register("consoleAsset")
    def console_asset(
        asset: Annotated[
            str,
            Path(
                description="index.html, console.css, config.json or one of the console's modules (*.js)",
                json_schema_extra={"minLength": 1, "maxLength": 64, "pattern": models.NO_CONTROL},
            ),
        ],
    ):
        return _console(asset)
