"""The ``leasefence`` command line."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="leasefence: leases for liveness, fences for safety.",
)
ops = typer.Typer(
    no_args_is_help=True, help="Operator commands against a running API (default: the local stack)."
)
app.add_typer(ops, name="ops")
events_app = typer.Typer(no_args_is_help=True, help="Outcome events of the local stack.")
app.add_typer(events_app, name="events")
shadow = typer.Typer(
    no_args_is_help=True,
    help="Shadow mode: what leasefence would have refused beside an existing consumer.",
)
app.add_typer(shadow, name="shadow")
job_types_app = typer.Typer(
    no_args_is_help=True,
    help="The tenant's job-type catalogue (operate scope; default: the local stack).",
)
app.add_typer(job_types_app, name="job-types")
publisher_app = typer.Typer(
    no_args_is_help=True,
    help="The publisher (history and outcome events from the table's stream).",
)
app.add_typer(publisher_app, name="publisher")

DEV_TENANT = "dev"
#: Who the console link of ``leasefence local`` signs in as by default (not the dev token's
#: ``dev:dev``, so it may approve what the dev token enqueued).
CONSOLE_SUB = "dev:console"


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


# ---------------------------------------------------------------------------------- local state

_STATE_DIR = typer.Option(
    None,
    "--state-dir",
    help="The local stack's state folder (default: LEASEFENCE_STATE_DIR, else the nearest "
    ".leasefence/ from the current folder up).",
)


def _found(state_dir: str | None) -> Any:
    """What the commands know of the running local stack (leasefence_tools.local.state)."""
    from leasefence_tools.local import state

    return state.find(state_dir)


# ---------------------------------------------------------------------------------- local


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
) -> None:
    """Run the whole service on this machine until SIGINT/SIGTERM.

    It writes where it listens, its JWT secret and its dev token to a state folder
    (./.leasefence by default), where the other commands (token, ops, job-types, controls,
    events tail, invoke) find it from that folder or any folder below it. It holds the folder
    while it runs: a second stack on the same folder refuses to start; run it from another
    folder or with --state-dir (and its commands with the same --state-dir)."""
    from leasefence_tools.local.server import DEMO_HANDLERS, LocalStack
    from leasefence_tools.local.state import StateFolder, StateFolderInUse, own_folder

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
    )
    try:
        stack.start()
    except OSError as error:
        folder.release()
        typer.echo(f"cannot start: {error}", err=True)
        raise typer.Exit(1) from None
    token = stack.token(DEV_TENANT)
    if samples:
        from leasefence_tools.local.samples import seed

        seed(
            stack.base_url,
            lambda sub, scopes: stack.token(DEV_TENANT, scopes.split(), subject=sub),
        )
    console_scopes = [s if "/" in s else f"leasefence/{s}" for s in console_scope or []] or list(
        _default_scopes(DEV_TENANT)
    )
    console_link = (
        f"{stack.base_url}/console#token="
        f"{stack.token(DEV_TENANT, console_scopes, subject=console_sub)}"
    )
    lines = [
        f"API base URL:       {stack.base_url}",
        f"DynamoDB endpoint:  {stack.dynamodb_endpoint}  (table {stack.table_name}; S3 on the same "
        f"endpoint, bucket {stack.bucket}; linearizable: one request at a time)",
        f"Console:            {stack.base_url}/console  (signed in as {console_sub}, tenant "
        f"'{DEV_TENANT}', {' '.join(s.split('/')[-1] for s in console_scopes)}: open the link below)",
        f"Docs (Swagger UI):  {stack.docs_url}   OpenAPI: {stack.base_url}/openapi.json",
        f"State folder:       {folder.folder}  ({_finds_it(folder.folder)}; one stack per "
        "folder: a second stack needs another, --state-dir DIR)",
        f"Sweeper:            every {sweep_interval:g} s"
        if sweep_interval
        else "Sweeper:            off",
    ]
    if streams:
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
    typer.echo("\n".join(lines))
    sys.stdout.flush()
    folder.write(
        {
            "pid": os.getpid(),
            "base_url": stack.base_url,
            "dynamodb_endpoint": stack.dynamodb_endpoint,
            "token": token,
            "secret": stack.secret,
            "table": stack.table_name,
            "bucket": stack.bucket,
            "event_bus": stack.event_bus,
            "publisher_failures_bucket": stack.failure_buckets.get("publisher"),
        }
    )
    try:
        _wait_for_signal()
    finally:
        folder.release()  # the commands stop finding it before it stops answering
        stack.stop()
    typer.echo("stopped")


def _finds_it(folder: Path) -> str:
    """How the other commands find a stack that uses this state folder."""
    from leasefence_tools.local.state import FOLDER

    if folder.name == FOLDER:
        return f"the CLI finds this stack from {folder.parent} and the folders below it"
    return f"the CLI finds this stack with --state-dir {folder} or LEASEFENCE_STATE_DIR"


# ---------------------------------------------------------------------------------- token


def _secret(found: Any) -> str | None:
    from leasefence_tools.local.tokens import secret_from_env

    return secret_from_env() or found.get("secret")


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
    state_dir: str | None = _STATE_DIR,
) -> None:
    """Print a dev JWT for the local stack (HS256, secret from LEASEFENCE_LOCAL_JWT_SECRET, else
    the running local stack's)."""
    from leasefence_tools.local.tokens import mint

    found = _found(state_dir)
    secret = _secret(found)
    if not secret:
        typer.echo(
            f"no secret: set LEASEFENCE_LOCAL_JWT_SECRET, or start `leasefence local` "
            f"({found.why_none()}).",
            err=True,
        )
        raise typer.Exit(1)
    typer.echo(
        mint(tenant, scope or _default_scopes(tenant), ttl_seconds=ttl, secret=secret, subject=sub)
    )


# ---------------------------------------------------------------------------------- openapi


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


# ---------------------------------------------------------------------------------- invoke


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
    state_dir: str | None = _STATE_DIR,
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
    state = _found(state_dir)
    target = (
        endpoint or os.environ.get("LEASEFENCE_DYNAMODB_ENDPOINT") or state.get("dynamodb_endpoint")
    )
    if not target:
        typer.echo(state.advice("--endpoint"), err=True)
        raise typer.Exit(1)
    os.environ["LEASEFENCE_DYNAMODB_ENDPOINT"] = target
    os.environ["LEASEFENCE_S3_ENDPOINT"] = (
        endpoint or os.environ.get("LEASEFENCE_S3_ENDPOINT") or target
    )
    os.environ["LEASEFENCE_EVENTS_ENDPOINT"] = (
        endpoint or os.environ.get("LEASEFENCE_EVENTS_ENDPOINT") or target
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


# ---------------------------------------------------------------------------------- ops


def _client(
    base_url: str | None,
    token_value: str | None,
    tenant: str | None,
    sub: str | None = None,
    state_dir: str | None = None,
) -> Any:
    """A client of the API named by --base-url or LEASEFENCE_BASE_URL, else of the running local
    stack (found in its state folder; none there: say so, never guess a port)."""
    from leasefence.client import LeaseFenceClient

    url = base_url or os.environ.get("LEASEFENCE_BASE_URL")
    bearer = token_value or os.environ.get("LEASEFENCE_TOKEN")
    state = _found(state_dir) if not (url and bearer) else None
    if not url:
        assert state is not None
        url = state.get("base_url")
        if not url:
            typer.echo(state.advice("--base-url (or LEASEFENCE_BASE_URL)"), err=True)
            raise typer.Exit(1)
    if (
        not bearer
        and state is not None
        and tenant is None
        and sub is None
        and state.get("token")
        and state.get("base_url") == url
    ):
        bearer = state.get("token")
    if not bearer:
        assert state is not None
        secret = _secret(state)
        if not secret:
            typer.echo(
                "no token: pass --token, set LEASEFENCE_TOKEN or LEASEFENCE_LOCAL_JWT_SECRET "
                f"({state.why_none()}).",
                err=True,
            )
            raise typer.Exit(2)
        from leasefence_tools.local.tokens import mint

        bearer = mint(
            tenant or DEV_TENANT,
            _default_scopes(tenant or DEV_TENANT),
            ttl_seconds=600,
            secret=secret,
            subject=sub,
        )
    return LeaseFenceClient(url, bearer, retries=2)


def _default_scopes(tenant: str) -> tuple[str, ...]:
    """A minted dev token's scopes: all four; for a shadow tenant (``shadow:``, a reserved
    namespace) a shadow token's, the only token the API accepts for one."""
    from leasefence.api.security import ALL_SCOPES, SHADOW_MODE_SCOPES
    from leasefence.keys import is_shadow_tenant

    return SHADOW_MODE_SCOPES if is_shadow_tenant(tenant) else ALL_SCOPES


def _fail(error: Exception) -> NoReturn:
    code = getattr(error, "code", type(error).__name__)
    status = getattr(error, "status", "")
    typer.echo(f"error {status} {code}: {getattr(error, 'message', error)}", err=True)
    raise typer.Exit(1)


def _show(operation: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for name, value in vars(operation).items():
        table.add_row(name, "-" if value is None else str(value))
    Console().print(table)


_BASE_URL = typer.Option(None, "--base-url", help="API base URL (default: the local stack).")
_TOKEN = typer.Option(
    None, "--token", help="Bearer token (default: LEASEFENCE_TOKEN or a local dev token)."
)
_TENANT = typer.Option(
    None, "--tenant", help="Mint a local dev token for this tenant (needs the JWT secret)."
)


@ops.command("list")
def ops_list(
    state: str | None = typer.Option(
        None, "--state", help="Only operations in this state (e.g. unknown)."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="Page size."),
    all_pages: bool = typer.Option(False, "--all", help="Follow next_cursor through every page."),
    cursor: str | None = typer.Option(None, "--cursor", help="Start from this cursor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """List the tenant's operations."""
    from rich.console import Console
    from rich.table import Table

    from leasefence.errors import LeaseFenceError

    client = _client(base_url, token_value, tenant, state_dir=state_dir)
    rows, next_cursor = [], cursor
    try:
        while True:
            page = client.list(state=state, limit=limit, cursor=next_cursor)
            rows.extend(page.operations)
            next_cursor = page.next_cursor
            if not all_pages or not next_cursor:
                break
    except LeaseFenceError as error:
        _fail(error)
    if as_json:
        for op in rows:
            typer.echo(
                json.dumps(
                    {
                        k: (str(v) if v is not None and not isinstance(v, (int, str, bool)) else v)
                        for k, v in vars(op).items()
                    }
                )
            )
        return
    table = Table(title=f"operations{f' ({state})' if state else ''}")
    for column in (
        "operation_id",
        "job_type",
        "state",
        "fence",
        "attempts",
        "class",
        "outcome",
        "updated_at",
    ):
        table.add_column(column)
    for op in rows:
        table.add_row(
            op.operation_id,
            op.job_type,
            op.state,
            str(op.fence),
            f"{op.attempts}/{op.max_attempts}",
            op.target_class,
            op.outcome_code or "-",
            op.updated_at.isoformat(),
        )
    console = Console()
    console.print(table)
    if next_cursor and not all_pages:
        console.print(f"next cursor: {next_cursor}")


@ops.command("show")
def ops_show(
    operation_id: str = typer.Argument(..., help="The operation id."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Show one operation."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(_client(base_url, token_value, tenant, state_dir=state_dir).get(operation_id))
    except LeaseFenceError as error:
        _fail(error)


@ops.command("history")
def ops_history(
    operation_id: str = typer.Argument(..., help="The operation id."),
    limit: int = typer.Option(50, "--limit", min=1, max=50, help="Page size."),
    all_pages: bool = typer.Option(False, "--all", help="Follow next_cursor through every page."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """What happened to an operation: each transition, who made it and why (oldest first)."""
    from rich.console import Console
    from rich.table import Table

    from leasefence.errors import LeaseFenceError

    client = _client(base_url, token_value, tenant, state_dir=state_dir)
    entries, cursor, dropped = [], None, 0
    try:
        while True:
            page = client.history(operation_id, limit=limit, cursor=cursor)
            entries.extend(page.entries)
            cursor, dropped = page.next_cursor, page.dropped
            if not all_pages or not cursor:
                break
    except LeaseFenceError as error:
        _fail(error)
    if as_json:
        for entry in entries:
            typer.echo(
                json.dumps(
                    {
                        k: (v.isoformat() if hasattr(v, "isoformat") else v)
                        for k, v in vars(entry).items()
                    }
                )
            )
        return
    table = Table(title=f"history of {operation_id}")
    for column in (
        "#",
        "time",
        "transition",
        "from",
        "to",
        "fence",
        "attempt",
        "actor",
        "outcome / reason",
    ):
        table.add_column(column)
    for e in entries:
        actor = e.actor or "-"
        if e.previous_actor:
            actor += f" (took over from {e.previous_actor})"
        table.add_row(
            str(e.sequence),
            e.time.isoformat(),
            e.transition,
            e.previous_state or "-",
            e.state,
            str(e.fence),
            str(e.attempt),
            actor,
            e.outcome_code or e.reason or "-",
        )
    console = Console()
    console.print(table)
    if dropped:
        console.print(f"{dropped} older entries were dropped to keep the history bounded")
    if cursor and not all_pages:
        console.print(f"more: --all (next cursor {cursor})")


@ops.command("resolve")
def ops_resolve(
    operation_id: str = typer.Argument(..., help="The operation id."),
    resolution: str = typer.Option(
        ..., "--resolution", help="succeeded, failed_terminal or requeue."
    ),
    note: str = typer.Option("", "--note", help="Why (kept with the operation)."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Resolve an unknown or quarantined operation."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(
            _client(base_url, token_value, tenant, state_dir=state_dir).resolve(
                operation_id, resolution, note
            )
        )
    except LeaseFenceError as error:
        _fail(error)


@ops.command("erase")
def ops_erase(
    operation_id: str = typer.Argument(..., help="The operation id."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Erase one operation's payload and free text; its identity (id, hash, fences, state) stays.

    Refused (409 invalid_transition) while the operation is claimed. Erasing again is harmless."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(_client(base_url, token_value, tenant, state_dir=state_dir).erase(operation_id))
    except LeaseFenceError as error:
        _fail(error)


_SUB = typer.Option(
    None,
    "--sub",
    help="With a minted local dev token: its sub (who you are; default dev:<tenant>).",
)


@ops.command("approve")
def ops_approve(
    operation_id: str = typer.Argument(..., help="The operation id."),
    payload_hash: str = typer.Option(
        ..., "--payload-hash", help="The hash of the payload you approve (sha256:<64 hex>)."
    ),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
    sub: str | None = _SUB,
) -> None:
    """Approve an operation awaiting approval: it becomes queued, claimable at once.

    Refused when the hash is not the operation's (409 payload_mismatch), when your identity
    enqueued it (403 forbidden) and after a reject, an expiry or a cancel (409
    invalid_transition). Approving again is harmless."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(
            _client(base_url, token_value, tenant, sub, state_dir=state_dir).approve(
                operation_id, payload_hash
            )
        )
    except LeaseFenceError as error:
        _fail(error)


@ops.command("reject")
def ops_reject(
    operation_id: str = typer.Argument(..., help="The operation id."),
    note: str = typer.Option("", "--note", help="Why (kept as the operation's reason)."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
    sub: str | None = _SUB,
) -> None:
    """Reject an operation awaiting approval: it ends failed_terminal, outcome rejected."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(
            _client(base_url, token_value, tenant, sub, state_dir=state_dir).reject(
                operation_id, note
            )
        )
    except LeaseFenceError as error:
        _fail(error)


@ops.command("cancel")
def ops_cancel(
    operation_id: str = typer.Argument(..., help="The operation id."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
    sub: str | None = _SUB,
) -> None:
    """Withdraw a queued operation no worker ever claimed, or one awaiting approval: it ends
    cancelled.

    Refused once a worker claimed it: 409 already_attempted when it is queued again after an
    attempt (its next claim reconciles it), 409 invalid_transition while claimed or once ended.
    Cancelling again is harmless."""
    from leasefence.errors import LeaseFenceError

    try:
        _show(_client(base_url, token_value, tenant, sub, state_dir=state_dir).cancel(operation_id))
    except LeaseFenceError as error:
        _fail(error)


# ---------------------------------------------------------------------------------- job types


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
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """List the catalogue's entries."""
    from rich.console import Console
    from rich.table import Table

    from leasefence.errors import LeaseFenceError

    try:
        entries = _client(base_url, token_value, tenant, state_dir=state_dir).list_job_types()
    except LeaseFenceError as error:
        _fail(error)
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
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Show one entry."""
    from leasefence.errors import LeaseFenceError

    try:
        _print_entry(
            _client(base_url, token_value, tenant, state_dir=state_dir).get_job_type(job_type)
        )
    except LeaseFenceError as error:
        _fail(error)


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
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Declare a job type (the whole entry: omitted options take their defaults)."""
    from leasefence.errors import LeaseFenceError

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
    try:
        entry, changed = _client(base_url, token_value, tenant, state_dir=state_dir).put_job_type(
            job_type, spec, expected_version=expected_version
        )
    except LeaseFenceError as error:
        _fail(error)
    typer.echo(f"{job_type}: version {entry.version} ({'changed' if changed else 'unchanged'})")


@job_types_app.command("delete")
def job_types_delete(
    job_type: str = typer.Argument(..., help="The job type."),
    expected_version: int | None = typer.Option(
        None, "--expected-version", help="Remove only if the entry is at this version."
    ),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Remove a job type from the catalogue (operations already enqueued keep their terms)."""
    from leasefence.errors import LeaseFenceError

    try:
        entry = _client(base_url, token_value, tenant, state_dir=state_dir).delete_job_type(
            job_type, expected_version=expected_version
        )
    except LeaseFenceError as error:
        _fail(error)
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
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Make the catalogue what FILE declares, and print each change (+ added, ~ changed with
    its fields, - removed). Idempotent: a second run finds nothing to change.

    FILE: ``{"strict_job_types": bool (optional), "job_types": {name: entry, ...}}``."""
    from leasefence.catalogue import JobTypeSpec, parse_document, plan
    from leasefence.errors import LeaseFenceError

    try:
        desired, strict = parse_document(_read_document(file))
        client = _client(base_url, token_value, tenant, state_dir=state_dir)
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
    except LeaseFenceError as error:
        _fail(error)
    typer.echo(f"applied {len(changes) + (strict is not None)} change(s)")


@app.command("controls")
def controls(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = _TOKEN,
    tenant: str | None = _TENANT,
) -> None:
    """Go/no-go per job type: the nine controls of the Lease-Plus-Fence design with the evidence
    leasefence holds. Exits 1 when any job type is no-go (or on an error)."""
    from leasefence.errors import LeaseFenceError

    try:
        report = _client(base_url, token_value, tenant, state_dir=state_dir).controls()
    except LeaseFenceError as error:
        _fail(error)
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


# ---------------------------------------------------------------------------------- events


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
    state_dir: str | None = _STATE_DIR,
) -> None:
    """Print outcome events as the local stack publishes them.

    Subscribes the way a consumer does on AWS: a rule on the bus with a pattern (source
    leasefence; --tenant and --detail-type narrow it) and an SQS queue as its target, both
    removed again when this stops."""
    import time

    from leasefence.streams.events import subscription_pattern
    from leasefence_tools.local.embedded import use_local_credentials
    from leasefence_tools.local.events import LOCAL_BUS, Subscription

    state = _found(state_dir)
    target = endpoint or state.get("dynamodb_endpoint")
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


# ---------------------------------------------------------------------------------- erase-tenant


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
    from leasefence.errors import LeaseFenceError
    from leasefence.settings import runtime

    rt = runtime()
    if rt.settings.dynamodb_endpoint or rt.settings.s3_endpoint:
        from leasefence_tools.local.embedded import use_local_credentials

        use_local_credentials()  # a local endpoint takes any credentials
    engine = rt.engine
    counts = {"steps": 0, "rows_deleted": 0, "payloads_deleted": 0, "held": 0}
    next_cursor = cursor
    finished = False
    try:
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
    except LeaseFenceError as error:
        if counts["steps"]:
            progress = json.dumps({**counts, "next_cursor": next_cursor})
            typer.echo(f"stopped after {counts['steps']} step(s): {progress}", err=True)
        _fail(error)
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


# ---------------------------------------------------------------------------------- publisher


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


# ---------------------------------------------------------------------------------- the kit


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
    base_url: str | None = _BASE_URL,
    state_dir: str | None = _STATE_DIR,
    token_value: str | None = typer.Option(
        None, "--token", help="A bearer token for the shadow tenant (default: LEASEFENCE_TOKEN)."
    ),
) -> None:
    """Per job type: executions the existing path ran more than once, and those that ran after
    another execution had taken over: what leasefence would have refused, with examples."""
    from leasefence.errors import LeaseFenceError
    from leasefence.shadow import shadow_tenant, token_tenant
    from leasefence_tools.kit.shadow_report import build_report

    client = _client(
        base_url, token_value, shadow_tenant(tenant or DEV_TENANT), state_dir=state_dir
    )
    name = token_tenant(client.token or "") or shadow_tenant(tenant or DEV_TENANT)
    try:
        report = build_report(name, client.iter_operations(), max_examples=examples or None)
    except LeaseFenceError as error:
        _fail(error)
    if out:
        Path(out).write_text(report.model_dump_json(indent=2), encoding="utf-8")
    typer.echo(report.model_dump_json(indent=2) if as_json else report.text())


@app.command()
def demo(
    per_class: int = typer.Option(
        3, "--per-class", min=1, max=20, help="Zombie operations per target class."
    ),
    lease_seconds: int = typer.Option(
        1, "--lease-seconds", min=1, max=10, help="Lease of every claim."
    ),
) -> None:
    """The zombie-worker story for each target class, on the embedded stack, with real threads."""
    from leasefence_tools.demo.zombie import main as run

    raise typer.Exit(run(per_class=per_class, lease_ms=lease_seconds * 1000))


@app.command()
def torture(
    operations: int = typer.Option(2_000, "--operations", min=1, help="Operations to run."),
    seed: int = typer.Option(1, "--seed", help="Fixes the workload and every fault decision."),
    workers: int = typer.Option(6, "--workers", min=1, max=64, help="Worker threads."),
) -> None:
    """Randomized fault injection over all four target classes; exits non-zero on any violation."""
    from leasefence_tools.torture import main as run

    raise typer.Exit(run(operations=operations, seed=seed, workers=workers))


@app.command()
def bench(
    quick: bool = typer.Option(
        False, "--quick", help="Every benchmark at a small scale (under a minute)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the report as one JSON object on stdout."
    ),
    out: str = typer.Option(
        "bench-report.json", "--out", help="Write the JSON report here ('-' for none)."
    ),
) -> None:
    """Cost per job in request units, throughput, contention, depth, fairness, cold start, scale."""
    from leasefence_tools.bench import main as run

    raise typer.Exit(
        run([*(["--quick"] if quick else []), *(["--json"] if json_out else []), "--out", out])
    )


def main() -> None:
    app()
