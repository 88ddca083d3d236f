"""Operator commands that run against the table (and bucket, and bus) of the environment, as the
functions do, not through the HTTP API: ``erase-tenant`` and ``publisher redrive``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import typer

from ._app import app, publisher_app
from ._errors import api_errors


@app.command("erase-tenant")
def erase_tenant(
    tenant: str = typer.Option(
        ..., "--tenant", help="The tenant whose operations and payloads are deleted."
    ),
    limit: int = typer.Option(
        100, "--limit", min=1, max=1000, help="Rows (then payload objects) per step."
    ),
    cursor: str | None = typer.Option(
        None, "--cursor", help="Continue from the next_cursor of an earlier step."
    ),
    all_steps: bool = typer.Option(
        False, "--all", help="Repeat until nothing is left; print the totals."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Erase everything of one tenant: it is held first (its enqueues answer 409 tenant_erasing
    until the erasure finished), then its operations (rows and stored payloads) go, then any
    payload object left under its prefix, and last (a minute after the hold) its job-type
    directory, catalogue and settings. Irreversible.

    Runs against the table and bucket of the environment, as the functions do (LEASEFENCE_TABLE,
    LEASEFENCE_PAYLOAD_BUCKET, LEASEFENCE_DYNAMODB_ENDPOINT, LEASEFENCE_S3_ENDPOINT, AWS
    credentials with access to both): an operator's command, not an API route. One bounded step
    by default (continue with --cursor; --all waits out the settle minute); claimed operations
    are left alone and counted as held: the tenant stays held, run it again once they ended."""
    from leasefence.settings import runtime

    rt = runtime()
    if rt.settings.dynamodb_endpoint or rt.settings.s3_endpoint:
        from leasefence_tools.local.embedded import use_local_credentials

        use_local_credentials()  # a local endpoint takes any credentials
    engine = rt.engine
    counts = {"steps": 0, "rows_deleted": 0, "payloads_deleted": 0, "held": 0}
    next_cursor = cursor
    finished = False

    def how_far() -> None:
        if counts["steps"]:
            progress = json.dumps({**counts, "next_cursor": next_cursor})
            typer.echo(f"stopped after {counts['steps']} step(s): {progress}", err=True)

    with api_errors(before=how_far):
        while True:
            step = engine.erase_tenant(tenant, limit=limit, cursor=next_cursor)
            counts["steps"] += 1
            for name in ("rows_deleted", "payloads_deleted", "held"):
                counts[name] += getattr(step, name)
            next_cursor, finished = step.next_cursor, step.finished
            if not all_steps or next_cursor is None:
                break
            if step.wait_ms:
                time.sleep(step.wait_ms / 1000)  # the settle time after the hold
    totals = {**counts, "next_cursor": next_cursor, "finished": finished}
    if as_json:
        typer.echo(json.dumps(totals))
        return
    lines = [
        f"steps:            {totals['steps']}",
        f"rows deleted:     {totals['rows_deleted']}",
        f"payloads deleted: {totals['payloads_deleted']}",
        f"held (claimed):   {totals['held']}",
        f"next cursor:      {totals['next_cursor'] or '-'}",
        f"finished:         {'yes' if finished else 'no (the tenant stays held)'}",
    ]
    if totals["held"]:
        lines.append(
            "Some operations were claimed and left alone: run erase-tenant again once they ended."
        )
    typer.echo("\n".join(lines))


@publisher_app.command("redrive")
def publisher_redrive(
    bucket: str | None = typer.Option(
        None,
        "--bucket",
        help="The publisher's on-failure bucket (the stack's PublisherFailuresBucketName output; "
        "default: LEASEFENCE_PUBLISHER_FAILURES_BUCKET).",
    ),
    bus: str | None = typer.Option(
        None,
        "--bus",
        help="The bus of the outcome events (the stack's EventBusName output; default: "
        "LEASEFENCE_EVENT_BUS).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Only count the kept batches and records; change nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Replay the stream records the publisher gave up on after its retries.

    Its event source mapping keeps each such batch whole in an S3 bucket (its on-failure
    destination). This replays every record there, each operation's in sequence order, through
    the publisher's own code (history entries placed by sequence, events published again) and
    deletes each object once all its records went through; what fails again stays, and is listed.
    A record whose operation was deleted, replaced or erased since is left out. Safe to run again
    at any time. Runs against the table of the environment, as the functions
    do (LEASEFENCE_TABLE, LEASEFENCE_DYNAMODB_ENDPOINT, LEASEFENCE_S3_ENDPOINT,
    LEASEFENCE_EVENTS_ENDPOINT, AWS credentials): an operator's command. Exits 1 when anything
    is left."""
    import dataclasses

    import boto3

    from leasefence import settings as settings_module
    from leasefence.settings import runtime
    from leasefence.streams.publisher import Publisher
    from leasefence.streams.redrive import redrive

    target = bucket or os.environ.get("LEASEFENCE_PUBLISHER_FAILURES_BUCKET")
    if not target:
        typer.echo(
            "error: name the bucket: --bucket or LEASEFENCE_PUBLISHER_FAILURES_BUCKET", err=True
        )
        raise typer.Exit(2)
    rt = runtime()
    if bus:
        rt = settings_module.install(dataclasses.replace(rt.settings, event_bus=bus))
    if not rt.settings.event_bus and not dry_run:
        typer.echo("error: name the event bus: --bus or LEASEFENCE_EVENT_BUS", err=True)
        raise typer.Exit(2)
    if rt.settings.dynamodb_endpoint or rt.settings.s3_endpoint:
        from leasefence_tools.local.embedded import use_local_credentials

        use_local_credentials()  # a local endpoint takes any credentials
    streams = boto3.client(
        "dynamodbstreams",
        endpoint_url=rt.settings.dynamodb_endpoint,
        region_name=rt.settings.region,
    )
    store = rt.engine.store
    publisher = Publisher(store, lambda: rt.client("events"), rt.settings.event_bus)

    def current(tenant_id: str, operation_id: str) -> Any:
        return store.get({"tenant_id": tenant_id, "operation_id": operation_id})

    try:
        report = redrive(
            rt.client("s3"), target, publisher.handle, streams, dry_run=dry_run, current=current
        )
    except Exception as error:  # noqa: BLE001 - no bucket, no access: say so
        typer.echo(f"cannot redrive from {target}: {type(error).__name__}: {error}", err=True)
        raise typer.Exit(1) from None
    summary = report.as_dict()
    if as_json:
        typer.echo(json.dumps(summary))
    else:
        outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()) or "-"
        lines = [
            f"batches kept:     {summary['objects']}" + ("  (dry run)" if dry_run else ""),
            f"records in them:  {summary['records']}",
            f"replayed:         {summary['replayed']}  ({outcomes})",
            f"failed again:     {len(summary['failed'])}",
            f"waiting behind:   {summary['waiting']}",
            f"superseded:       {summary['superseded']}  (operation gone, replaced or erased)",
            f"batches deleted:  {summary['deleted']}",
            f"batches left:     {len(summary['kept'])}",
        ]
        for failure in summary["failed"]:
            lines.append(
                f"  failed: {failure['object']} #{failure['sequence_number']}: {failure['error']}"
            )
        for item in summary["unreadable"]:
            lines.append(f"  unreadable: {item['object']}: {item['why']}")
        typer.echo("\n".join(lines))
    if not dry_run and summary["kept"]:
        raise typer.Exit(1)
