"""The rollout kit's commands: ``verify`` (the fault tests against your own handler) and
``shadow report`` (what leasefence would have refused beside an existing consumer)."""

from __future__ import annotations

from pathlib import Path

import typer

from ._app import app, shadow
from ._client import DEV_TENANT, api_client
from ._errors import api_errors
from ._options import BASE_URL, STATE_DIR


@app.command()
def verify(
    handlers: str = typer.Argument(
        ..., help="Your handler mapping, as the worker function loads it: package.module:HANDLERS."
    ),
    job_type: str = typer.Option(..., "--job-type", help="The job type to verify."),
    target_class: str = typer.Option(..., "--target-class", help="Its target class: A, B, C or D."),
    fixture: str = typer.Option(
        ...,
        "--fixture",
        help="package.module[:function] (default function: build) that builds your target on "
        "the embedded stack: build(env) -> Target.",
    ),
    report: str = typer.Option(
        "verify-report.json", "--report", help="Where to write the JSON report ('-': none)."
    ),
    check: list[str] | None = typer.Option(
        None, "--check", help="Run only this check (repeat). Default: all."
    ),
    lease_seconds: int = typer.Option(
        30, "--lease-seconds", min=1, max=900, help="Lease of every claim (engine time)."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="One line per check, without evidence."),
) -> None:
    """Run the fault tests and the zombie story against your own handler, on the embedded stack.

    Prints a go/no-go line per check with the evidence (what the target recorded), writes the
    JSON report, and exits 1 on any no-go (2 when something cannot be loaded)."""
    from leasefence_tools.kit.verify import main as run

    raise typer.Exit(
        run(
            handlers,
            job_type,
            target_class.upper(),
            fixture,
            None if report == "-" else report,
            checks=check or None,
            lease_ms=lease_seconds * 1000,
            quiet=quiet,
        )
    )


@shadow.command("report")
def shadow_report(
    tenant: str | None = typer.Option(
        None,
        "--tenant",
        help="The tenant whose shadow operations to report (default: dev): mints a local dev "
        "token for shadow:<tenant> (needs the JWT secret) unless a token is given.",
    ),
    examples: int = typer.Option(
        10, "--examples", min=0, help="Examples per kind of refusal (0: all)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    out: str | None = typer.Option(None, "--out", help="Also write the JSON report here."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = typer.Option(
        None, "--token", help="A bearer token for the shadow tenant (default: LEASEFENCE_TOKEN)."
    ),
) -> None:
    """Per job type: executions the existing path ran more than once, and those that ran after
    another execution had taken over: what leasefence would have refused, with examples."""
    from leasefence.shadow import shadow_tenant
    from leasefence.shadow_api import token_tenant
    from leasefence_tools.kit.shadow_report import build_report

    client = api_client(
        base_url, token_value, shadow_tenant(tenant or DEV_TENANT), state_dir=state_dir
    )
    name = token_tenant(client.token or "") or shadow_tenant(tenant or DEV_TENANT)
    with api_errors():
        report = build_report(name, client.iter_operations(), max_examples=examples or None)
    if out:
        Path(out).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    typer.echo(report.model_dump_json(indent=2) if as_json else report.text())
