"""The ``leasefence`` Typer app and its command groups (``ops``, ``events``, ``shadow``,
``job-types``, ``publisher``).

The command modules register on these. The order of registration is the order ``--help`` lists
them in: the groups are added here, in this order; the commands in the order ``__init__`` imports
their modules.
"""

from __future__ import annotations

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
