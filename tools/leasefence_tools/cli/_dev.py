"""Developer commands: ``token`` (a dev JWT for the local stack), ``openapi`` (the OpenAPI
document from the code) and ``invoke`` (one function's handler, run once as Lambda would)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from ._app import app
from ._client import default_scopes, found_stack, jwt_secret
from ._options import STATE_DIR


@app.command()
def token(
    tenant: str = typer.Option(..., "--tenant", help="The tenant_id claim."),
    scope: list[str] | None = typer.Option(
        None,
        "--scope",
        help="A scope to grant (repeat). Default: all four; for a shadow tenant (shadow:...) "
        "produce, work, operate and leasefence/shadow.",
    ),
    ttl: int = typer.Option(12 * 3600, "--ttl", min=1, help="Lifetime in seconds."),
    sub: str | None = typer.Option(
        None,
        "--sub",
        help="The sub claim: who the caller is (default dev:<tenant>). An approver needs "
        "another sub than the producer that enqueued the operation.",
    ),
    state_dir: str | None = STATE_DIR,
) -> None:
    """Print a dev JWT for the local stack (HS256, secret from LEASEFENCE_LOCAL_JWT_SECRET, else
    the running local stack's)."""
    from leasefence_tools.local.tokens import mint

    found = found_stack(state_dir)
    secret = jwt_secret(found)
    if not secret:
        typer.echo(
            f"no secret: set LEASEFENCE_LOCAL_JWT_SECRET, or start `leasefence local` "
            f"({found.why_none()}).",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(
        mint(tenant, scope or default_scopes(tenant), ttl_seconds=ttl, secret=secret, subject=sub)
    )


@app.command()
def openapi(
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="Where to write it (default: openapi.json at the repository root in a checkout, "
        "else in the current folder).",
    ),
    check: bool = typer.Option(
        False, "--check", help="Only check that the file is up to date (exit 1 if not)."
    ),
) -> None:
    """Generate the OpenAPI document from the code."""
    from leasefence.api import openapi as spec

    path = output or spec.DEFAULT_PATH
    if check:
        if spec.drifted(path):
            typer.echo(f"{path} is out of date: run `leasefence openapi`", err=True)
            raise typer.Exit(1)
        typer.echo(f"{path} is up to date")
        return
    typer.echo(f"wrote {spec.write(path)}")


@app.command()
def invoke(
    function: str = typer.Argument(..., help="A directory of functions/: api, sweeper, ..."),
    event: Path = typer.Option(
        ..., "--event", "-e", exists=True, dir_okay=False, help="The event JSON file."
    ),
    endpoint: str = typer.Option(
        None,
        "--endpoint",
        help="DynamoDB/S3 endpoint (default: LEASEFENCE_DYNAMODB_ENDPOINT, else the running local "
        "stack's).",
    ),
    state_dir: str | None = STATE_DIR,
) -> None:
    """Invoke a function's handler once with an event, as Lambda would, and print its answer."""
    from leasefence_tools.local.embedded import use_local_credentials
    from leasefence_tools.local.server import Invoker, function_names

    if function not in function_names():
        typer.echo(
            f"unknown function {function!r}; choose from {', '.join(function_names())}", err=True
        )
        raise typer.Exit(2)
    try:
        payload = json.loads(event.read_text(encoding="utf-8"))
    except ValueError as error:
        typer.echo(f"{event} is not JSON: {error}", err=True)
        raise typer.Exit(2) from None
    state = found_stack(state_dir)
    target = (
        endpoint or os.environ.get("LEASEFENCE_DYNAMODB_ENDPOINT") or state.get("dynamodb_endpoint")
    )
    if not target:
        typer.echo(state.advice("--endpoint"), err=True)
        raise typer.Exit(1)
    os.environ["LEASEFENCE_DYNAMODB_ENDPOINT"] = target
    embedded = state.get("aws_endpoint") or target  # S3 and the bus (on an external table too)
    os.environ["LEASEFENCE_S3_ENDPOINT"] = (
        endpoint or os.environ.get("LEASEFENCE_S3_ENDPOINT") or embedded
    )
    os.environ["LEASEFENCE_EVENTS_ENDPOINT"] = (
        endpoint or os.environ.get("LEASEFENCE_EVENTS_ENDPOINT") or embedded
    )
    for key, value in (
        ("LEASEFENCE_TABLE", state.get("table")),
        ("LEASEFENCE_PAYLOAD_BUCKET", state.get("bucket")),
        ("LEASEFENCE_EVENT_BUS", state.get("event_bus")),
    ):
        if value:
            os.environ.setdefault(key, value)
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ.setdefault("AWS_REGION", "us-east-1")
    use_local_credentials()
    result = Invoker().invoke(function, payload)
    typer.echo(json.dumps(result, indent=2, default=str))
