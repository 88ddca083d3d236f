"""The command line: ``leasefence local`` as a real process, ``token`` and ``invoke``."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import jwt
import pytest
from typer.testing import CliRunner

from leasefence_tools.cli import app as cli
from leasefence_tools.local.tokens import ALL_SCOPES
from tests.support import ROOT


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reader(stream, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line)
    lines.put(None)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_local_serves_the_whole_stack_and_exits_0_on_a_signal(tmp_path, stop_signal):
    port, ddb_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEFENCE_", "PYTEST"))}
    env.update(LEASEFENCE_STATE_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [sys.executable, "-c", "from leasefence_tools.cli import main; main()", "local", "--port", str(port),
         "--dynamodb-port", str(ddb_port), "--sweep-interval", "0.5"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True).start()
    output = ""
    try:
        deadline = time.time() + 60
        while "Press Ctrl-C" not in output:
            line = lines.get(timeout=max(0.1, deadline - time.time()))
            assert line is not None, output
            output += line
        assert f"http://127.0.0.1:{port}" in output
        assert f"http://127.0.0.1:{ddb_port}" in output
        assert f"http://127.0.0.1:{port}/docs" in output
        token = re.search(r"^\s+(eyJ[\w-]+\.[\w-]+\.[\w-]+)\s*$", output, re.M).group(1)
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/v1/health", timeout=10) as reply:
            assert json.loads(reply.read()) == {"status": "ok"}
        request = urllib.request.Request(
            f"{base}/v1/operations",
            data=json.dumps({"operation_id": "cli-1", "job_type": "job", "payload": {"x": 1}}).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 201
        with urllib.request.urlopen(f"{base}/docs", timeout=10) as reply:
            assert reply.status == 200 and b"swagger" in reply.read().lower()
        # The operator commands find the running stack without any option.
        state = json.loads((tmp_path / "local.json").read_text())
        assert state["base_url"] == base
        shown = subprocess.run(
            [sys.executable, "-c", "from leasefence_tools.cli import main; main()", "ops", "show", "cli-1"],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "queued" in shown.stdout
        if stop_signal == signal.SIGTERM:
            _stream_walkthrough(base, token, env)
        # The sweeper timer runs: its function's log lines are in the Lambda log, not the terminal.
        deadline = time.time() + 10
        while '"sweep finished"' not in (tmp_path / "lambda.log").read_text():
            assert time.time() < deadline, output
            time.sleep(0.1)
        while not lines.empty():
            output += lines.get() or ""
        assert '"sweep finished"' not in output and '"level":' not in output, output
    finally:
        process.send_signal(stop_signal)
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, output
    assert not (tmp_path / "local.json").exists()


def _stream_walkthrough(base: str, token: str, env: dict[str, str]) -> None:
    """`make run`'s stream worker: a demo job runs right after its enqueue (no schedule), `events
    tail` prints its outcome event, `ops history` lists what happened."""
    command = [sys.executable, "-c", "from leasefence_tools.cli import main; main()"]
    tail = subprocess.Popen(
        [
            *command,
            "events",
            "tail",
            "--json",
            "--count",
            "1",
            "--timeout",
            "30",
            "--detail-type",
            "Operation Succeeded",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while "watching" not in tail.stderr.readline():  # subscribed: the rule and its queue exist
        assert tail.poll() is None, tail.stderr.read()
    request = urllib.request.Request(
        f"{base}/v1/operations",
        data=json.dumps(
            {"operation_id": "receipt-1", "job_type": "demo-receipt", "payload": {"to": "a@b"}}
        ).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 201
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    event = json.loads(out)
    assert (event["detail-type"], event["detail"]["operation_id"], event["detail"]["fence"]) == (
        "Operation Succeeded",
        "receipt-1",
        1,
    )
    history = subprocess.run(
        [*command, "ops", "history", "receipt-1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert history.returncode == 0, history.stderr
    entries = [json.loads(line) for line in history.stdout.splitlines()]
    assert [e["transition"] for e in entries][:3] == ["enqueue", "claim", "complete"]


def test_token_command(monkeypatch, tmp_path):
    monkeypatch.setenv("LEASEFENCE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LEASEFENCE_LOCAL_JWT_SECRET", "token-command-secret-0123456789abcdef")
    runner = CliRunner()
    result = runner.invoke(cli, ["token", "--tenant", "acme"])
    assert result.exit_code == 0, result.output
    claims = jwt.decode(result.output.strip(), "token-command-secret-0123456789abcdef", algorithms=["HS256"],
                        options={"verify_aud": False})
    assert claims["tenant_id"] == "acme" and claims["scope"].split() == list(ALL_SCOPES)
    result = runner.invoke(cli, ["token", "--tenant", "acme", "--scope", "leasefence/work", "--ttl", "60"])
    claims = jwt.decode(result.output.strip(), options={"verify_signature": False})
    assert claims["scope"] == "leasefence/work" and claims["exp"] - claims["iat"] == 60
    assert claims["sub"] == "dev:acme"
    result = runner.invoke(cli, ["token", "--tenant", "acme", "--sub", "approver-1"])
    assert jwt.decode(result.output.strip(), options={"verify_signature": False})["sub"] == "approver-1"
    monkeypatch.delenv("LEASEFENCE_LOCAL_JWT_SECRET")
    result = runner.invoke(cli, ["token", "--tenant", "acme"])
    assert result.exit_code == 1


def test_invoke_command_runs_the_handlers(stack, monkeypatch, tmp_path):
    monkeypatch.setenv("LEASEFENCE_STATE_DIR", str(tmp_path))
    # `invoke` configures its process through the environment: undo that afterwards.
    for key in (
        "LEASEFENCE_DYNAMODB_ENDPOINT",
        "LEASEFENCE_S3_ENDPOINT",
        "LEASEFENCE_EVENTS_ENDPOINT",
        "LEASEFENCE_EVENT_BUS",
        "POWERTOOLS_TRACE_DISABLED",
        "AWS_REGION",
    ):
        monkeypatch.setenv(key, "placeholder")
        monkeypatch.delenv(key)
    # The functions find their table through the environment, as in Lambda: name this stack's
    # (unset, they would use the default name, which this session's endpoint may not hold).
    monkeypatch.setenv("LEASEFENCE_TABLE", stack.table_name)
    runner = CliRunner()
    # No stack runs in that state folder and no endpoint is named: it says so, guessing no port.
    result = runner.invoke(cli, ["invoke", "api", "--event", str(ROOT / "events" / "api-health.json")])
    assert result.exit_code == 1 and f"no running local stack in the state folder {tmp_path}" in result.output
    result = runner.invoke(cli, ["invoke", "api", "--event", str(ROOT / "events" / "api-health.json"),
                                 "--endpoint", stack.dynamodb_endpoint])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output[result.output.index("{\n"):])
    assert answer["statusCode"] == 200 and json.loads(answer["body"]) == {"status": "ok"}
    result = runner.invoke(cli, ["invoke", "sweeper", "--event", str(ROOT / "events" / "sweeper-scheduled.json"),
                                 "--endpoint", stack.dynamodb_endpoint])
    assert result.exit_code == 0, result.output
    assert '"stopped": "drained"' in result.output
    assert runner.invoke(cli, ["invoke", "nope", "--event", str(ROOT / "events" / "api-health.json")]).exit_code == 2
