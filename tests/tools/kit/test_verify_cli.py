"""The ``leasefence verify`` command: the lines it prints, the report it writes, its exit codes."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from leasefence_tools.cli import app
from leasefence_tools.kit.report import VerifyReport

runner = CliRunner()
FIXTURE = "leasefence_tools.kit.example_fixture"  # the default function: build


def test_a_no_go_names_the_check_says_why_and_exits_1(tmp_path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(app, [
        "verify", "leasefence_tools.kit.examples_broken:NO_FENCE", "--job-type", "ledger-post",
        "--target-class", "B", "--fixture", FIXTURE, "--check", "stale-write", "--report", str(out),
    ])
    assert result.exit_code == 1, result.output
    assert "NO-GO  stale-write" in result.output
    assert "no fence condition" in result.output
    assert "verdict: NO-GO (1 of 1 checks: stale-write)" in result.output
    report = VerifyReport.model_validate_json(out.read_text())
    check = report.check("stale-write")
    assert report.verdict == check.verdict == "no-go"
    assert any(a.fence == 1 and a.kind == "write" and a.outcome == "landed" and a.fenced is False
               for a in check.actions)


def test_a_go_exits_0_with_the_evidence(tmp_path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(app, [
        "verify", "leasefence_tools.kit.examples:HANDLERS", "--job-type", "sms", "--target-class", "d",
        "--fixture", FIXTURE, "--check", "crash-after-effect", "--report", str(out),
    ])
    assert result.exit_code == 0, result.output
    assert "GO     crash-after-effect" in result.output
    assert "intent record (refused" not in result.output  # the requeued claim parked, no call
    assert json.loads(out.read_text())["verdict"] == "go"


def test_what_cannot_be_loaded_exits_2_with_one_sentence() -> None:
    result = runner.invoke(app, [
        "verify", "leasefence_tools.kit.examples:HANDLERS", "--job-type", "refunds", "--target-class",
        "A", "--fixture", FIXTURE, "--report", "-",
    ])
    assert result.exit_code == 2
    assert "no job type 'refunds'" in result.output
