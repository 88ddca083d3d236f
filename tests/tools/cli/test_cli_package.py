"""The ``leasefence`` command as a package (``leasefence_tools.cli``): the commands in the order
``--help`` lists them, a start-up that loads none of what the commands run, and the one mapping of
an API or SDK error to a line on stderr and an exit code."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import typer
from typer.testing import CliRunner

from leasefence.errors import InvalidTransition, NotFound
from leasefence_tools.cli import app, main
from leasefence_tools.cli._errors import api_errors

#: What ``leasefence --help`` lists, in its order (the order the commands are registered in).
COMMANDS = [
    "local",
    "token",
    "openapi",
    "invoke",
    "controls",
    "erase-tenant",
    "verify",
    "demo",
    "torture",
    "bench",
    "ops",
    "events",
    "shadow",
    "job-types",
    "publisher",
]
GROUPS = {
    "ops": ["list", "show", "history", "resolve", "erase", "approve", "reject", "cancel", "triage"],
    "job-types": ["list", "show", "put", "delete", "apply"],
    "events": ["tail"],
    "shadow": ["report"],
    "publisher": ["redrive"],
}


def test_help_lists_every_command_in_its_order() -> None:
    root = typer.main.get_command(app)
    assert root.list_commands(None) == COMMANDS
    for group, commands in GROUPS.items():
        assert root.commands[group].list_commands(None) == commands, group
    shown = CliRunner().invoke(app, ["--help"], terminal_width=100).output
    assert [shown.index(f"│ {name} ") for name in COMMANDS] == sorted(
        shown.index(f"│ {name} ") for name in COMMANDS
    )


def test_main_is_the_console_script() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "leasefence"]
    assert script.value == "leasefence_tools.cli:main"
    assert script.load() is main


def test_starting_the_cli_loads_neither_the_runtime_nor_what_commands_run() -> None:
    """Every command imports what it runs inside its body: ``leasefence --help`` stays quick."""
    code = textwrap.dedent(
        """
        import sys
        import leasefence_tools.cli
        heavy = ("leasefence", "rich", "boto3", "botocore", "yaml", "jwt", "pydantic", "moto")
        print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_api_errors_prints_status_code_and_message_and_exits_1(capsys) -> None:
    with pytest.raises(typer.Exit) as stopped, api_errors():
        raise NotFound("no operation op-1")
    assert stopped.value.exit_code == 1
    assert capsys.readouterr().err == "error 404 not_found: no operation op-1\n"


def test_api_errors_says_how_far_it_got_before_the_error(capsys) -> None:
    with (
        pytest.raises(typer.Exit) as stopped,
        api_errors(before=lambda: typer.echo("2 steps", err=True)),
    ):
        raise InvalidTransition("claimed")
    assert stopped.value.exit_code == 1
    assert capsys.readouterr().err == "2 steps\nerror 409 invalid_transition: claimed\n"


def test_api_errors_lets_anything_else_through(capsys) -> None:
    ran = []
    with (
        pytest.raises(ValueError, match="not an API error"),
        api_errors(before=lambda: ran.append(1)),
    ):
        raise ValueError("not an API error")
    with pytest.raises(typer.Exit) as stopped, api_errors():
        raise typer.Exit(2)
    assert stopped.value.exit_code == 2
    with api_errors():
        pass
    assert ran == [] and capsys.readouterr().err == ""


def test_an_unreadable_schema_file_is_refused_in_one_line_before_any_request(tmp_path) -> None:
    bad = tmp_path / "schema.json"
    bad.write_text("{not json", encoding="utf-8")
    # No stack, no token: the file is refused before the command looks for either.
    result = CliRunner().invoke(app, ["job-types", "put", "refund", "--class", "C", "--schema", str(bad),
                                      "--base-url", "http://127.0.0.1:9", "--token", "t"])
    assert result.exit_code == 1
    assert result.output.startswith("error 422 invalid_request: ") and "is not valid JSON" in result.output
    assert "Traceback" not in result.output
