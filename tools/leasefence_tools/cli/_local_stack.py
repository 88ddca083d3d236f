"""The local stack's own commands: ``leasefence local`` (the whole service on this machine, in
a state folder of its own) and ``leasefence events tail`` (its outcome events, as a consumer
subscribes to them)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from leasefence_tools.local import API_ENVIRONMENTS

from ._app import app, events_app
from ._client import DEV_TENANT, default_scopes, found_stack
from ._options import STATE_DIR

#: Who the console link of ``leasefence local`` signs in as by default (not the dev token's
#: ``dev:dev``, so it may approve what the dev token enqueued).
CONSOLE_SUB = "dev:console"


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


@app.command()
def local(
    host: str = typer.Option("127.0.0.1", help="Address for the HTTP API."),
    port: int = typer.Option(8765, help="Port for the HTTP API."),
    dynamodb_port: int = typer.Option(
        8766, "--dynamodb-port", help="Port for the embedded DynamoDB (and S3) endpoint."
    ),
    sweep_interval: float = typer.Option(
        60.0, "--sweep-interval", help="Seconds between sweeper runs (0: never)."
    ),
    verbose: bool = typer.Option(
        False, "--verbose", help="Print a line per HTTP request (method and status)."
    ),
    logs: bool = typer.Option(
        False,
        "--logs",
        help="Show the Lambda functions' logs (JSON log lines, EMF metrics) here too; they "
        "always go to lambda.log in the state folder.",
    ),
    streams: bool = typer.Option(
        True,
        "--streams/--no-streams",
        help="Read the table's stream: stream worker, history and outcome events.",
    ),
    worker_handlers: str = typer.Option(
        None,
        "--worker-handlers",
        help="The stream worker's handlers (module:NAME; default: the demo handlers).",
    ),
    worker_tenant: list[str] | None = typer.Option(
        None,
        "--worker-tenant",
        help=f"A tenant the stream worker serves (repeat; default {DEV_TENANT}).",
    ),
    console_sub: str = typer.Option(
        CONSOLE_SUB,
        "--console-sub",
        help="Who the printed console link signs in as (its dev token's sub).",
    ),
    console_scope: list[str] | None = typer.Option(
        None,
        "--console-scope",
        help="A scope of the console link's token (repeat; operate or leasefence/operate; "
        "default all four).",
    ),
    samples: bool = typer.Option(
        False,
        "--samples",
        help=f"Make sample operations in tenant {DEV_TENANT} (leasefence_tools.local.samples) to look at.",
    ),
    state_dir: str | None = typer.Option(
        None,
        "--state-dir",
        help="Where this stack keeps its state for the other commands (default: "
        "LEASEFENCE_STATE_DIR, else ./.leasefence). One stack per state folder.",
    ),
    dynamodb_endpoint: str | None = typer.Option(
        None,
        "--dynamodb-endpoint",
        metavar="URL",
        help="Keep the table on this DynamoDB-compatible endpoint instead of the embedded one "
        "(S3, EventBridge and SQS stay embedded). Probed at start: refused when it lacks "
        "TransactWriteItems or ReturnValuesOnConditionCheckFailure; without streams the stream "
        "worker and publisher are off.",
    ),
    api_environments: int = typer.Option(
        API_ENVIRONMENTS,
        "--api-environments",
        min=0,
        help="Execution environments of the API function: processes started as concurrent "
        "requests need them, as Lambda does (0: one, in this process).",
    ),
    table_prefix: str | None = typer.Option(
        None,
        "--table-prefix",
        help="Name this stack's tables <prefix>-operations (default with --dynamodb-endpoint: "
        "leasefence-<hash of the state folder>, so stacks sharing an endpoint never share a "
        "table).",
    ),
) -> None:
    """Run the whole service on this machine until SIGINT/SIGTERM.

    It writes where it listens, its JWT secret and its dev token to a state folder
    (./.leasefence by default), where the other commands (token, ops, job-types, controls,
    events tail, invoke) find it from that folder or any folder below it. It holds the folder
    while it runs: a second stack on the same folder refuses to start; run it from another
    folder or with --state-dir (and its commands with the same --state-dir)."""
    from leasefence.schema import TableNotReady
    from leasefence_tools.local import lambda_log
    from leasefence_tools.local.capabilities import UnsuitableEndpoint
    from leasefence_tools.local.server import DEMO_HANDLERS, LocalStack, PortUnavailable
    from leasefence_tools.local.state import StateFolder, StateFolderInUse, own_folder
    from leasefence_tools.local.state import table_prefix as own_prefix

    folder = StateFolder(own_folder(state_dir))
    try:
        folder.acquire()  # before any port is taken: a second stack here stops right away
    except (StateFolderInUse, OSError) as error:
        typer.echo(f"cannot start: {error}", err=True)
        raise typer.Exit(1) from None
    handlers = worker_handlers or DEMO_HANDLERS
    tenants = worker_tenant or [DEV_TENANT]
    stack = LocalStack(
        host=host,
        port=port,
        dynamodb_port=dynamodb_port,
        sweep_interval=sweep_interval or None,
        quiet=not verbose,
        streams=streams,
        worker_handlers=handlers,
        worker_tenants=tenants,
        dynamodb_endpoint=dynamodb_endpoint,
        table_prefix=table_prefix or (own_prefix(folder.folder) if dynamodb_endpoint else None),
        api_environments=api_environments,
    )
    log = lambda_log.LambdaLog(folder.folder / lambda_log.FILE, echo=logs).open()
    try:
        stack.start()
    except (OSError, UnsuitableEndpoint, TableNotReady) as error:
        log.close()
        folder.release()
        how = ""
        if isinstance(error, PortUnavailable):
            option = "--" + error.setting.replace("_", "-")
            how = f": choose another with {option} PORT (0: any free port)"
        typer.echo(f"cannot start: {error}{how}", err=True)
        raise typer.Exit(1) from None
    token = stack.token(DEV_TENANT)
    if samples:
        from leasefence_tools.local.samples import seed

        seed(
            stack.base_url,
            lambda sub, scopes: stack.token(DEV_TENANT, scopes.split(), subject=sub),
        )
    console_scopes = [s if "/" in s else f"leasefence/{s}" for s in console_scope or []] or list(
        default_scopes(DEV_TENANT)
    )
    console_link = (
        f"{stack.base_url}/console#token="
        f"{stack.token(DEV_TENANT, console_scopes, subject=console_sub)}"
    )
    lines = [
        f"API base URL:       {stack.base_url}",
        *_store_lines(stack),
        f"Console:            {stack.base_url}/console  (signed in as {console_sub}, tenant "
        f"'{DEV_TENANT}', {' '.join(s.split('/')[-1] for s in console_scopes)}: open the link below)",
        f"Docs (Swagger UI):  {stack.docs_url}   OpenAPI: {stack.base_url}/openapi.json",
        f"State folder:       {folder.folder}  ({_finds_it(folder.folder)}; one stack per "
        "folder: a second stack needs another, --state-dir DIR)",
        f"Sweeper:            every {sweep_interval:g} s"
        if sweep_interval
        else "Sweeper:            off",
        f"Lambda logs:        {log.path}  (JSON log lines and EMF metrics; rotated, at most "
        f"{log.bound_bytes // 2**20} MiB; "
        + ("shown here too)" if logs else "--logs shows them here too)"),
    ]
    if stack.streams_off_reason:
        lines.append(
            f"Stream worker:      off, and so are history and outcome events: "
            f"{stack.streams_off_reason}"
        )
    if stack.streams:
        lines += [
            f"Stream worker:      {handlers} for tenant(s) {', '.join(tenants)}: runs a job right "
            "after its enqueue",
            f"History and events: from the table's stream; events on bus {stack.event_bus} "
            "(watch them: leasefence events tail)",
        ]
    if stack.generated_secret:
        lines.append(
            f"JWT secret:         {stack.secret}  (generated; export LEASEFENCE_LOCAL_JWT_SECRET to keep one)"
        )
    lines += [
        f"Dev token (tenant '{DEV_TENANT}', all scopes, 12 h):",
        f"  {token}",
        "",
        f"  curl -H 'Authorization: Bearer <token>' {stack.base_url}/v1/operations",
        "Console link (the token stays in the page, never in a request URL):",
        f"  {console_link}",
        "Press Ctrl-C to stop.",
    ]
    folder.write(
        {
            "pid": os.getpid(),
            "base_url": stack.base_url,
            "dynamodb_endpoint": stack.dynamodb_endpoint,
            "aws_endpoint": stack.aws_endpoint,
            "token": token,
            "secret": stack.secret,
            "table": stack.table_name,
            "bucket": stack.bucket,
            "event_bus": stack.event_bus,
            "publisher_failures_bucket": stack.failure_buckets.get("publisher"),
        }
    )
    # Ready once the commands can find it: the banner ("Press Ctrl-C to stop.") after the state.
    typer.echo("\n".join(lines))
    sys.stdout.flush()
    try:
        _wait_for_signal()
    finally:
        folder.release()  # the commands stop finding it before it stops answering
        stack.stop()
        log.close()
    typer.echo("stopped")


def _store_lines(stack: Any) -> list[str]:
    """Where the table and the payloads are kept (the embedded endpoint, or an external one)."""
    if not stack.external_dynamodb:
        return [
            f"DynamoDB endpoint:  {stack.dynamodb_endpoint}  (table {stack.table_name}; S3 on the "
            f"same endpoint, bucket {stack.bucket}; linearizable: one request at a time)"
        ]
    from leasefence_tools.local.capabilities import TTL

    lacks = stack.capabilities.describe()
    lines = [
        f"DynamoDB endpoint:  {stack.dynamodb_endpoint}  (external; table {stack.table_name}, "
        "this stack's own: kept when it stops; "
        + (f"it lacks {lacks})" if lacks else "it has everything the stack uses)"),
        f"S3, EventBridge:    {stack.aws_endpoint}  (embedded, in memory; bucket {stack.bucket}: "
        "payloads a payload item cannot keep in 1 KiB, packed or not, go there, gone when the "
        "stack stops while the table keeps referring to them)",
    ]
    if not stack.capabilities.supports(TTL):
        lines.append(
            "TTL:                none on that endpoint: ended operations are never deleted"
        )
    return lines


def _finds_it(folder: Path) -> str:
    """How the other commands find a stack that uses this state folder."""
    from leasefence_tools.local.state import FOLDER

    if folder.name == FOLDER:
        return f"the CLI finds this stack from {folder.parent} and the folders below it"
    return f"the CLI finds this stack with --state-dir {folder} or LEASEFENCE_STATE_DIR"


@events_app.command("tail")
def events_tail(
    tenant: str | None = typer.Option(
        None, "--tenant", help="Only this tenant's events (default: every tenant)."
    ),
    detail_type: list[str] | None = typer.Option(
        None, "--detail-type", help="Only this detail-type, e.g. 'Operation Succeeded' (repeat)."
    ),
    endpoint: str | None = typer.Option(
        None, "--endpoint", help="The embedded endpoint (default: the running local stack's)."
    ),
    bus: str | None = typer.Option(
        None, "--bus", help="The event bus (default: the local stack's)."
    ),
    count: int = typer.Option(
        0, "--count", min=0, help="Stop after this many events (0: run until Ctrl-C)."
    ),
    timeout: float = typer.Option(
        0, "--timeout", min=0, help="Stop after this many seconds (0: never)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print each event as one JSON line."),
    state_dir: str | None = STATE_DIR,
) -> None:
    """Print outcome events as the local stack publishes them.

    Subscribes the way a consumer does on AWS: a rule on the bus with a pattern (source
    leasefence; --tenant and --detail-type narrow it) and an SQS queue as its target, both
    removed again when this stops."""
    import time

    from leasefence.streams.events import subscription_pattern
    from leasefence_tools.local.embedded import use_local_credentials
    from leasefence_tools.local.events import LOCAL_BUS, Subscription

    state = found_stack(state_dir)
    target = endpoint or state.get("aws_endpoint") or state.get("dynamodb_endpoint")
    if not target:
        typer.echo(state.advice("--endpoint"), err=True)
        raise typer.Exit(1)
    use_local_credentials()

    def clients(service: str) -> Any:
        import boto3

        return boto3.client(service, endpoint_url=target, region_name="us-east-1")

    try:
        pattern = subscription_pattern(tenant, detail_type)
        subscription = Subscription(
            clients, pattern, bus=bus or state.get("event_bus") or LOCAL_BUS
        )
    except ValueError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    except Exception as error:  # noqa: BLE001 - no stack there, or no bus: say so
        typer.echo(
            f"cannot subscribe at {target}: {type(error).__name__}: {error} (is `leasefence local` "
            "running?)",
            err=True,
        )
        raise typer.Exit(1) from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    deadline = time.monotonic() + timeout if timeout else None
    seen = 0
    typer.echo(f"watching {json.dumps(pattern)} (Ctrl-C stops)", err=True)
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            for event in subscription.receive(wait_s=0.5):
                seen += 1
                if as_json:
                    typer.echo(json.dumps(event, separators=(",", ":")))
                else:
                    d = event.get("detail", {})
                    why = d.get("outcome_code") or d.get("reason") or ""
                    who = f"{d.get('tenant_id')}/{d.get('operation_id')}"
                    typer.echo(
                        f"{d.get('time')}  {event.get('detail-type'):<24} {who}"
                        f"  {d.get('previous_state')} -> {d.get('state')}  fence {d.get('fence')}"
                        f"  by {d.get('actor')}  {why}".rstrip()
                    )
                sys.stdout.flush()
                if count and seen >= count:
                    return
    finally:
        subscription.close()
