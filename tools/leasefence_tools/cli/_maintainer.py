"""The maintainers' runs on the embedded stack: ``demo`` (the zombie-worker story), ``torture``
(randomized fault injection) and ``bench`` (cost, throughput, contention, ...)."""

from __future__ import annotations

import typer

from ._app import app


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
    timeout_s: float = typer.Option(
        0.0,
        "--timeout-s",
        min=0.0,
        help="Wall-clock budget in seconds (0: 300 plus 1.5 per operation).",
    ),
    operation_shards: int = typer.Option(
        0,
        "--operation-shards",
        min=0,
        help="Write shards of the table per tenant (1: the bare tenant id; 0: the default "
        "layout, each tenant's counts recorded at its first enqueue).",
    ),
) -> None:
    """Randomized fault injection over all four target classes; exits non-zero on any violation."""
    from leasefence_tools.torture import main as run

    raise typer.Exit(
        run(
            operations=operations,
            seed=seed,
            workers=workers,
            timeout_s=timeout_s,
            operation_shards=operation_shards,
        )
    )


@app.command()
def bench(
    quick: bool = typer.Option(
        False, "--quick", help="Every benchmark at a small scale (under a minute)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the report as one JSON object on stdout."
    ),
    out: str | None = typer.Option(
        None,
        "--out",
        help="Write the JSON report here (default bench-report.json, none with --only; '-' for none).",
    ),
    only: str | None = typer.Option(
        None,
        "--only",
        help="Run one section alone and print it: local-stack (16 HTTP workers against "
        "`leasefence local --samples`: lifecycles/s, time per route in the handler and per "
        "operation in the embedded endpoint).",
    ),
    render: str | None = typer.Option(
        None, "--render", help="Print the tables of a report already written, and exit."
    ),
    readme_table: str | None = typer.Option(
        None,
        "--readme-table",
        help="Print the README's table 'Compared with the alternatives' from a report already "
        "written, and exit.",
    ),
) -> None:
    """Cost per job in request units, throughput, contention, depth, fairness, cold start, scale."""
    from leasefence_tools.bench import main as run

    given = [
        *(["--quick"] if quick else []),
        *(["--json"] if json_out else []),
        *(["--out", out] if out else []),
        *(["--only", only] if only else []),
        *(["--render", render] if render else []),
        *(["--readme-table", readme_table] if readme_table else []),
    ]
    raise typer.Exit(run(given))
