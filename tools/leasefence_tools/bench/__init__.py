"""leasefence's performance benchmarks: cost per job, throughput, contention, depth, fairness,
cold start and scale (issue 7).

``python -m leasefence_tools.bench [--quick] [--json] [--out FILE]`` runs them all against the embedded
endpoint, writes the JSON report to ``FILE`` (default ``bench-report.json``) and prints the cost
table (dollars per million lifecycles, issue 16) and a short table of the targets; with ``--json``
the report itself goes to stdout as one JSON object; ``--render FILE`` prints the tables of a
report already written (what the README's performance section pastes), ``--readme-table FILE``
the README's comparison with the alternatives (:mod:`~leasefence_tools.bench.comparison_table`).
``--quick`` runs every
benchmark at a small scale (under a minute; what the test suite checks).

Modules: :mod:`~leasefence_tools.bench.units` (request-unit arithmetic), :mod:`~leasefence_tools.bench.meter`
(the metering client), :mod:`~leasefence_tools.bench.harness` (the endpoint process and its setup
shortcuts), one module per benchmark, :mod:`~leasefence_tools.bench.report` (targets and the table),
:mod:`~leasefence_tools.bench.scale_sim` (the shard simulation; also runnable on its own),
:mod:`~leasefence_tools.bench.prices` (the one price table: each price with its page and date),
:mod:`~leasefence_tools.bench.profiles` (what a lifecycle uses, all in, on the local stack) and
:mod:`~leasefence_tools.bench.cost_per_million` (that at list prices, next to the alternatives),
:mod:`~leasefence_tools.bench.local_stack` (HTTP workers against ``leasefence local --samples``;
``--only local-stack`` runs it alone), :mod:`~leasefence_tools.bench.batched_http` (HTTP requests
per lifecycle of a busy fleet, one request per call and batched: issue 33).

Importing this package starts nothing; the benchmarks import moto only when they run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_OUT = "bench-report.json"
#: Sections that run on their own (``--only``).
ONLY = ("local-stack",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="leasefence bench",
        description="Cost per job and per million jobs, throughput, contention, depth, fairness, "
        "cold start and scale, measured on the embedded endpoint.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="every benchmark at a small scale (under a minute)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as one JSON object on stdout"
    )
    parser.add_argument(
        "--out",
        default=None,
        help=f"write the JSON report here (default {DEFAULT_OUT}, none with --only; '-' for none)",
    )
    parser.add_argument(
        "--only",
        choices=ONLY,
        help="run one section on its own and print it: local-stack (16 HTTP workers against "
        "`leasefence local --samples`: lifecycles/s, time per route in the handler and per "
        "operation in the embedded endpoint)",
    )
    parser.add_argument(
        "--render",
        metavar="REPORT",
        help="print the tables of a report already written (e.g. bench-report.json) and exit",
    )
    parser.add_argument(
        "--readme-table",
        metavar="REPORT",
        help="print the README's table 'Compared with the alternatives' from a report already "
        "written (e.g. bench-report.json) and exit",
    )
    args = parser.parse_args(argv)

    if args.only == "local-stack":
        from leasefence_tools.bench import local_stack

        section = local_stack.measure()
        if args.out and args.out != "-":
            Path(args.out).write_text(json.dumps({"local_stack": section}, indent=2) + "\n")
        if args.json:
            sys.stdout.write(json.dumps({"local_stack": section}) + "\n")
        else:
            print(local_stack.render(section))
        return 1 if section["errors"] else 0

    from leasefence_tools.bench.report import render_table, run

    if args.out is None:
        args.out = DEFAULT_OUT
    if args.render:
        print(render_table(json.loads(Path(args.render).read_text())))
        return 0
    if args.readme_table:
        from leasefence_tools.bench import comparison_table

        written = json.loads(Path(args.readme_table).read_text())
        print(comparison_table.render(written["cost_per_million_all_in"]["comparison"]))
        return 0

    report = run(quick=args.quick)
    text = json.dumps(report, indent=2, sort_keys=False, default=str)
    if args.out and args.out != "-":
        Path(args.out).write_text(text + "\n")
        print(f"[bench] report written to {args.out}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(report, default=str) + "\n")
    else:
        print(render_table(report))
    return 0
