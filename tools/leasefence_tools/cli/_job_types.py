"""``leasefence job-types`` (the tenant's job-type catalogue through the HTTP API: list, show,
put, delete, apply a file) and ``leasefence controls`` (go/no-go per job type)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from ._app import app, job_types_app
from ._client import api_client
from ._errors import api_errors
from ._options import BASE_URL, STATE_DIR, TENANT, TOKEN


def _print_entry(entry: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_row("job_type", entry.job_type)
    table.add_row("version", str(entry.version))
    for name, value in entry.spec.items():
        shown = json.dumps(value) if isinstance(value, (dict, list)) else value
        table.add_row(name, "-" if value is None else str(shown))
    table.add_row("updated_at", entry.updated_at.isoformat())
    table.add_row("updated_by", entry.updated_by or "-")
    Console().print(table)


def _read_document(path: Path) -> Any:
    """A YAML or JSON file (JSON is YAML too, but its errors read better from the JSON parser)."""
    import yaml

    from leasefence.errors import InvalidInput

    text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise InvalidInput(
            f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}"
        ) from None


@job_types_app.command("list")
def job_types_list(
    as_json: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """List the catalogue's entries."""
    from rich.console import Console
    from rich.table import Table

    with api_errors():
        entries = api_client(base_url, token_value, tenant, state_dir=state_dir).list_job_types()
    if as_json:
        typer.echo(
            json.dumps({e.job_type: {"version": e.version, **e.spec} for e in entries}, indent=2)
        )
        return
    table = Table(title="job types")
    for column in ("job_type", "version", "class", "attempts", "lease", "owner", "approval"):
        table.add_column(column)
    for e in entries:
        s = e.spec
        table.add_row(
            e.job_type,
            str(e.version),
            s["target_class"],
            str(s["max_attempts"]),
            f"{s['lease_seconds']}s (max {s['max_lease_seconds']}s)",
            s.get("owner") or "-",
            f"{s['approval_valid_seconds']}s" if s.get("approval_required") else "-",
        )
    Console().print(table)


@job_types_app.command("show")
def job_types_show(
    job_type: str = typer.Argument(..., help="The job type."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Show one entry."""
    with api_errors():
        _print_entry(
            api_client(base_url, token_value, tenant, state_dir=state_dir).get_job_type(job_type)
        )


@job_types_app.command("put")
def job_types_put(
    job_type: str = typer.Argument(..., help="The job type."),
    target_class: str = typer.Option(..., "--class", help="Target class: A, B, C or D."),
    max_attempts: int | None = typer.Option(None, "--max-attempts", help="Attempt budget."),
    lease_seconds: int | None = typer.Option(None, "--lease-seconds", help="Default lease."),
    max_lease_seconds: int | None = typer.Option(
        None, "--max-lease-seconds", help="Maximum lease."
    ),
    owner: str | None = typer.Option(None, "--owner", help="Owning team or contact."),
    runbook_url: str | None = typer.Option(None, "--runbook-url", help="The runbook."),
    approval_required: bool = typer.Option(False, "--approval-required", help="Require approval."),
    approval_valid_seconds: int | None = typer.Option(
        None, "--approval-valid-seconds", help="How long an approval may take."
    ),
    schema: Path | None = typer.Option(
        None, "--schema", help="A JSON Schema file (YAML or JSON) for inline payloads."
    ),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="Write only if the entry is at this version (0: new)."
    ),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Declare a job type (the whole entry: omitted options take their defaults)."""
    with api_errors():  # an unreadable --schema file is refused like the API's 400, no traceback
        spec: dict[str, Any] = {
            "target_class": target_class,
            "max_attempts": max_attempts,
            "lease_seconds": lease_seconds,
            "max_lease_seconds": max_lease_seconds,
            "owner": owner,
            "runbook_url": runbook_url,
            "approval_required": approval_required,
            "approval_valid_seconds": approval_valid_seconds,
            "payload_schema": None if schema is None else _read_document(schema),
        }
        spec = {k: v for k, v in spec.items() if v is not None}
        entry, changed = api_client(
            base_url, token_value, tenant, state_dir=state_dir
        ).put_job_type(job_type, spec, expected_version=expected_version)
    typer.echo(f"{job_type}: version {entry.version} ({'changed' if changed else 'unchanged'})")


@job_types_app.command("delete")
def job_types_delete(
    job_type: str = typer.Argument(..., help="The job type."),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="Remove only if the entry is at this version."
    ),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Remove a job type from the catalogue (operations already enqueued keep their terms)."""
    with api_errors():
        entry = api_client(base_url, token_value, tenant, state_dir=state_dir).delete_job_type(
            job_type, expected_version=expected_version
        )
    typer.echo(f"{job_type}: removed (version {entry.version})")


@job_types_app.command("apply")
def job_types_apply(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="A YAML or JSON catalogue."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Show what would change; change nothing."
    ),
    keep: bool = typer.Option(
        False, "--keep", help="Keep entries that the file does not list (default: remove them)."
    ),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Make the catalogue what FILE declares, and print each change (+ added, ~ changed with
    its fields, - removed). Idempotent: a second run finds nothing to change.

    FILE: ``{"strict_job_types": bool (optional), "job_types": {name: entry, ...}}``."""
    from leasefence.catalogue import JobTypeSpec, parse_document, plan

    with api_errors():
        desired, strict = parse_document(_read_document(file))
        client = api_client(base_url, token_value, tenant, state_dir=state_dir)
        current = {e.job_type: JobTypeSpec.parse(e.spec) for e in client.list_job_types()}
        changes = plan(current, desired, prune=not keep)
        if strict is not None and strict == client.settings()["strict_job_types"]:
            strict = None
        for change in changes:
            for line in change.describe():
                typer.echo(line)
        if strict is not None:
            typer.echo(f"~ strict_job_types: {json.dumps(not strict)} -> {json.dumps(strict)}")
        if not changes and strict is None:
            typer.echo("no changes")
            return
        if dry_run:
            typer.echo("dry run: nothing changed")
            return
        for change in changes:
            if change.kind == "removed":
                client.delete_job_type(change.job_type)
            else:
                assert change.spec is not None
                spec = {k: v for k, v in change.spec.to_public().items() if v is not None}
                client.put_job_type(change.job_type, spec)
        if strict is not None:
            client.set_strict_job_types(strict)
    typer.echo(f"applied {len(changes) + (strict is not None)} change(s)")


@app.command("controls")
def controls(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Go/no-go per job type: the nine controls of the Lease-Plus-Fence design with the evidence
    leasefence holds. Exits 1 when any job type is no-go (or on an error)."""
    with api_errors():
        report = api_client(base_url, token_value, tenant, state_dir=state_dir).controls()
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        if not report["job_types"]:
            typer.echo("no job types (none catalogued, none enqueued)")
        for job in report["job_types"]:
            version = f"catalogue v{job['version']}" if job["catalogued"] else "not catalogued"
            typer.echo(f"{job['job_type']}: {'GO' if job['go'] else 'NO-GO'} ({version})")
            for c in job["controls"]:
                mark = "ok  " if c["go"] else "FAIL"
                typer.echo(f"  {mark} {c['control']}. {c['name']}")
                typer.echo(f"         {c['evidence']}")
    if not report["go"]:
        raise typer.Exit(1)
