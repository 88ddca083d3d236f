"""``leasefence ops``: an operator's commands on the tenant's operations through the HTTP API
(list, show, history, resolve, erase) and the approval gate's (approve, reject, cancel)."""

from __future__ import annotations

import json
from typing import Any

import typer

from ._app import ops
from ._client import api_client
from ._errors import api_errors
from ._options import BASE_URL, STATE_DIR, SUB, TENANT, TOKEN


def _show(operation: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for name, value in vars(operation).items():
        table.add_row(name, "-" if value is None else str(value))
    Console().print(table)


@ops.command("list")
def ops_list(
    state: str | None = typer.Option(
        None, "--state", help="Only operations in this state (e.g. unknown)."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="Page size."),
    all_pages: bool = typer.Option(False, "--all", help="Follow next_cursor through every page."),
    cursor: str | None = typer.Option(None, "--cursor", help="Start from this cursor."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """List the tenant's operations."""
    from rich.console import Console
    from rich.table import Table

    client = api_client(base_url, token_value, tenant, state_dir=state_dir)
    rows, next_cursor = [], cursor
    with api_errors():
        while True:
            page = client.list(state=state, limit=limit, cursor=next_cursor)
            rows.extend(page.operations)
            next_cursor = page.next_cursor
            if not all_pages or not next_cursor:
                break
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
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Show one operation."""
    with api_errors():
        _show(api_client(base_url, token_value, tenant, state_dir=state_dir).get(operation_id))


@ops.command("history")
def ops_history(
    operation_id: str = typer.Argument(..., help="The operation id."),
    limit: int = typer.Option(50, "--limit", min=1, max=50, help="Page size."),
    all_pages: bool = typer.Option(False, "--all", help="Follow next_cursor through every page."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines instead of a table."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """What happened to an operation: each transition, who made it and why (oldest first)."""
    from rich.console import Console
    from rich.table import Table

    client = api_client(base_url, token_value, tenant, state_dir=state_dir)
    entries, cursor, dropped, expired = [], None, 0, None
    with api_errors():
        while True:
            page = client.history(operation_id, limit=limit, cursor=cursor)
            entries.extend(page.entries)
            cursor, dropped, expired = page.next_cursor, page.dropped, page.history_expired_at
            if not all_pages or not cursor:
                break
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
    if expired is not None:
        console.print(
            f"history expired {expired.isoformat()} (kept for the payload retention after the "
            "operation ended; its identity stays)"
        )
    if cursor and not all_pages:
        console.print(f"more: --all (next cursor {cursor})")


@ops.command("resolve")
def ops_resolve(
    operation_id: str = typer.Argument(..., help="The operation id."),
    resolution: str = typer.Option(
        ..., "--resolution", help="succeeded, failed_terminal or requeue."
    ),
    note: str = typer.Option("", "--note", help="Why (kept with the operation)."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Resolve an unknown or quarantined operation."""
    with api_errors():
        _show(
            api_client(base_url, token_value, tenant, state_dir=state_dir).resolve(
                operation_id, resolution, note
            )
        )


@ops.command("erase")
def ops_erase(
    operation_id: str = typer.Argument(..., help="The operation id."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """Erase one operation's payload and free text; its identity (id, hash, fences, state) stays.

    Refused (409 invalid_transition) while the operation is claimed. Erasing again is harmless."""
    with api_errors():
        _show(api_client(base_url, token_value, tenant, state_dir=state_dir).erase(operation_id))


@ops.command("approve")
def ops_approve(
    operation_id: str = typer.Argument(..., help="The operation id."),
    payload_hash: str = typer.Option(
        ..., "--payload-hash", help="The hash of the payload you approve (sha256:<64 hex>)."
    ),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
    sub: str | None = SUB,
) -> None:
    """Approve an operation awaiting approval: it becomes queued, claimable at once.

    Refused when the hash is not the operation's (409 payload_mismatch), when your identity
    enqueued it (403 forbidden) and after a reject, an expiry or a cancel (409
    invalid_transition). Approving again is harmless."""
    with api_errors():
        _show(
            api_client(base_url, token_value, tenant, sub, state_dir=state_dir).approve(
                operation_id, payload_hash
            )
        )


@ops.command("reject")
def ops_reject(
    operation_id: str = typer.Argument(..., help="The operation id."),
    note: str = typer.Option("", "--note", help="Why (kept as the operation's reason)."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
    sub: str | None = SUB,
) -> None:
    """Reject an operation awaiting approval: it ends failed_terminal, outcome rejected."""
    with api_errors():
        _show(
            api_client(base_url, token_value, tenant, sub, state_dir=state_dir).reject(
                operation_id, note
            )
        )


@ops.command("cancel")
def ops_cancel(
    operation_id: str = typer.Argument(..., help="The operation id."),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
    sub: str | None = SUB,
) -> None:
    """Withdraw a queued operation no worker ever claimed, or one awaiting approval: it ends
    cancelled.

    Refused once a worker claimed it: 409 already_attempted when it is queued again after an
    attempt (its next claim reconciles it), 409 invalid_transition while claimed or once ended.
    Cancelling again is harmless."""
    with api_errors():
        _show(
            api_client(base_url, token_value, tenant, sub, state_dir=state_dir).cancel(operation_id)
        )


@ops.command("triage")
def ops_triage(
    action: str = typer.Argument(..., help="resolve, requeue or cancel."),
    operation_ids: list[str] = typer.Argument(
        None, help="The operations (none: every one the filters below match, resolved first)."
    ),
    resolution: str | None = typer.Option(
        None, "--resolution", help="With resolve: succeeded or failed_terminal."
    ),
    note: str = typer.Option("", "--note", help="Why (one note, kept with each operation)."),
    state: str = typer.Option(
        "unknown", "--state", help="With no ids: the state to select (cancel: queued)."
    ),
    job_type: str | None = typer.Option(None, "--job-type", help="With no ids: only this type."),
    target_class: str | None = typer.Option(None, "--class", help="With no ids: only this class."),
    accept_risk: list[str] = typer.Option(
        [], "--accept-risk", help="Requeue this id despite its class's risk (repeat)."
    ),
    base_url: str | None = BASE_URL,
    state_dir: str | None = STATE_DIR,
    token_value: str | None = TOKEN,
    tenant: str | None = TENANT,
) -> None:
    """One decision for many operations (POST /v1/batch/triage), each pinned to the state and
    fence read here: one that moved on since is refused in its row (stale_fence), the others
    are done. A requeue of a class-D operation with an intent on record is refused unless named
    with --accept-risk. Sent again after a lost answer, each row done is a replay."""
    from rich.console import Console
    from rich.table import Table

    client = api_client(base_url, token_value, tenant, state_dir=state_dir)
    with api_errors():
        if operation_ids:
            seen = [client.get(op_id) for op_id in operation_ids]
        else:
            filters = {
                k: v for k, v in (("job_type", job_type), ("target_class", target_class)) if v
            }
            seen, cursor = [], None
            while True:
                page = client.list(state=state, limit=500, cursor=cursor, **filters)
                seen.extend(page.operations)
                cursor = page.next_cursor
                if not cursor:
                    break
        items = [
            {
                "operation_id": op.operation_id,
                "expected_state": op.state,
                "expected_fence": op.fence,
            }
            for op in seen
        ]
        if not items:
            typer.echo("nothing matched: nothing sent")
            return
        results = client.triage(
            action, items, note, resolution=resolution, accept_risks=accept_risk
        )
    table = Table("operation", "status", "now / why")
    for result in results:
        why = (
            result.value.state
            if result.value is not None
            else f"{result.error.code}: {result.error}"
        )
        table.add_row(str(result.operation_id), str(result.status), str(why))
    Console().print(table)
    done = sum(r.ok for r in results)
    typer.echo(f"{done} of {len(results)} done")
    if done < len(results):
        raise typer.Exit(1)
