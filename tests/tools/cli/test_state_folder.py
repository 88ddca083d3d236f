"""One local stack per state folder, as a user meets it: real ``leasefence local`` processes and
the commands run the way a person runs them (a process in some folder, no options).

Every stack here runs on free ports (``--port 0``) with a state folder under ``tmp_path``, and
without ``LEASEFENCE_LOCAL_JWT_SECRET``, so that each stack generates a secret of its own (a
token of one is refused by another, as on a machine with two stacks)."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from leasefence_tools.local.lambda_log import FILE as LAMBDA_LOG
from leasefence_tools.local.state import FOLDER, LOCK_FILE, STATE_FILE
from tests.support.local_process import LEASEFENCE, READY, Stack
from tests.support.local_process import clean_env as _env


@pytest.fixture
def start(tmp_path):
    """``start(cwd, *args, env=...)``: a ``leasefence local`` in ``cwd``, once it is ready (or
    has exited; ``wait=False``: at once); stopped at the end of the test."""
    started: list[Stack] = []

    def run(
        cwd: Path,
        *args: str,
        folder: Path | None = None,
        env: dict | None = None,
        wait: bool = True,
    ) -> Stack:
        cwd.mkdir(parents=True, exist_ok=True)
        log = tmp_path / f"stack-{len(started)}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    str(LEASEFENCE),
                    "local",
                    "--port",
                    "0",
                    "--dynamodb-port",
                    "0",
                    "--sweep-interval",
                    "0",
                    *args,
                ],
                cwd=cwd,
                env=env or _env(),
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        stack = Stack(process, log, folder or cwd / FOLDER)
        started.append(stack)
        return stack.wait_ready() if wait else stack

    yield run
    for stack in started:
        stack.stop()


def cli(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LEASEFENCE), *args],
        check=False,
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def enqueue(stack: Stack, operation_id: str) -> None:
    request = urllib.request.Request(
        f"{stack.state['base_url']}/v1/operations",
        data=json.dumps(
            {"operation_id": operation_id, "job_type": "refund", "payload": {}}
        ).encode(),
        headers={
            "Authorization": f"Bearer {stack.state['token']}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 201


def listed(cwd: Path, *args: str, env: dict | None = None) -> set[str]:
    result = cli(cwd, "ops", "list", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return {json.loads(line)["operation_id"] for line in result.stdout.splitlines()}


def status_with(base_url: str, token: str) -> int:
    request = urllib.request.Request(
        f"{base_url}/v1/operations", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def test_two_stacks_in_two_folders_each_keep_their_own_cli(start, tmp_path):
    """Stack a in its folder (./.leasefence), stack b with --state-dir, stack c with
    LEASEFENCE_STATE_DIR: each one's commands reach it, from its folder or a subfolder, and
    never another one; --state-dir beats the variable, --base-url beats both."""
    a = start(tmp_path / "a", wait=False)
    b_state = tmp_path / "b-state"
    b = start(tmp_path / "b", "--state-dir", str(b_state), folder=b_state, wait=False)
    c_state = tmp_path / "c-state"
    c = start(
        tmp_path / "c", env=_env(LEASEFENCE_STATE_DIR=str(c_state)), folder=c_state, wait=False
    )
    for stack in (a, b, c):
        assert READY in stack.wait_ready().output, stack.output
        assert f"State folder:       {stack.folder}" in stack.output
    assert len({a.state["base_url"], b.state["base_url"], c.state["base_url"]}) == 3
    enqueue(a, "in-a")
    enqueue(b, "in-b")
    enqueue(c, "in-c")

    deep = tmp_path / "a" / "src" / "deeper"
    deep.mkdir(parents=True)
    assert listed(tmp_path / "a") == {"in-a"}
    assert listed(deep) == {"in-a"}  # found from a subfolder, as git finds .git
    assert listed(tmp_path / "b", "--state-dir", str(b_state)) == {"in-b"}
    assert listed(deep, "--state-dir", str(b_state)) == {"in-b"}
    assert listed(deep, env=_env(LEASEFENCE_STATE_DIR=str(c_state))) == {"in-c"}
    assert listed(
        deep, "--state-dir", str(b_state), env=_env(LEASEFENCE_STATE_DIR=str(c_state))
    ) == {"in-b"}
    assert listed(deep, "--base-url", b.state["base_url"], "--token", b.state["token"]) == {"in-b"}
    assert listed(
        deep, env=_env(LEASEFENCE_BASE_URL=c.state["base_url"], LEASEFENCE_TOKEN=c.state["token"])
    ) == {"in-c"}

    # A token minted in a's folder is a's: its own stack takes it, the others refuse it.
    token_a = cli(deep, "token", "--tenant", "dev").stdout.strip()
    token_b = cli(deep, "token", "--tenant", "dev", "--state-dir", str(b_state)).stdout.strip()
    assert status_with(a.state["base_url"], token_a) == 200
    assert status_with(b.state["base_url"], token_a) == 401
    assert status_with(b.state["base_url"], token_b) == 200
    shown = cli(deep, "ops", "show", "in-b", "--state-dir", str(b_state))
    assert shown.returncode == 0 and "in-b" in shown.stdout, shown.stderr
    missing = cli(deep, "ops", "show", "in-b")
    assert missing.returncode == 1 and "404" in missing.stderr

    for stack in (a, b, c):
        assert stack.stop() == 0, stack.output
        assert not (stack.folder / STATE_FILE).exists()
        assert stack.folder.is_dir()  # the folder stays, its state goes


def test_a_second_stack_on_the_same_folder_refuses_and_the_first_keeps_working(start, tmp_path):
    first = start(tmp_path / "a")
    enqueue(first, "first-1")
    before = first.state
    second = start(tmp_path / "a" / "sub", "--state-dir", str(first.folder))
    same_cwd = start(tmp_path / "a")
    for refused in (second, same_cwd):
        assert refused.process.wait(timeout=30) == 1
        message = refused.output
        assert READY not in message and "API base URL" not in message  # no port taken, no token
        assert f"the state folder {first.folder} is in use" in message
        assert f"pid {first.process.pid}" in message and before["base_url"] in message
        assert "--state-dir" in message
    assert first.process.poll() is None
    assert first.state == before  # not taken over
    assert listed(tmp_path / "a") == {"first-1"}
    assert listed(tmp_path / "a" / "sub") == {"first-1"}
    assert first.stop() == 0, first.output


def test_a_stale_state_is_replaced_and_commands_say_no_stack_runs(start, tmp_path):
    dead = start(tmp_path / "a")
    left = dead.state
    assert dead.stop(signal.SIGKILL) == -signal.SIGKILL  # no chance to clean up
    assert json.loads((dead.folder / STATE_FILE).read_text()) == left

    stale = cli(tmp_path / "a", "ops", "list")
    assert stale.returncode == 1
    assert f"no running local stack in the state folder {dead.folder}" in stale.stderr
    assert f"pid {left['pid']}" in stale.stderr and "no longer running" in stale.stderr
    assert left["base_url"] not in stale.stdout

    again = start(tmp_path / "a")
    assert READY in again.output, again.output
    assert again.state["pid"] == again.process.pid != left["pid"]
    enqueue(again, "after-1")
    assert listed(tmp_path / "a") == {"after-1"}
    assert again.stop() == 0, again.output
    # Its state gone; the lock and the Lambda log (for a post-mortem) stay.
    assert sorted(p.name for p in again.folder.iterdir()) == [".gitignore", LAMBDA_LOG, LOCK_FILE]

    gone = cli(tmp_path / "a", "ops", "list", "--state-dir", str(again.folder))
    assert gone.returncode == 1
    assert f"no running local stack in the state folder {again.folder}" in gone.stderr
    assert "--base-url" in gone.stderr


def test_the_console_link_signs_in_as_the_chosen_subject_and_scopes(start, tmp_path):
    """``leasefence local`` prints a console link whose token (in the fragment) is for the
    subject and scopes asked for (issue 25); without them, dev:console with all four scopes."""
    import re

    import jwt

    def link_claims(stack: Stack) -> tuple[str, dict]:
        (link,) = re.findall(r"^\s+(http://\S+)/console#token=(\S+)\s*$", stack.output, re.MULTILINE)
        assert f"API base URL:       {link[0]}" in stack.output
        assert status_with(link[0], link[1]) == 200  # the stack takes it
        return link[0], jwt.decode(link[1], options={"verify_signature": False})

    chosen = start(
        tmp_path / "chosen", "--console-sub", "alice", "--console-scope", "operate",
        "--console-scope", "leasefence/approve",
    )
    _, claims = link_claims(chosen)
    assert (claims["sub"], claims["tenant_id"]) == ("alice", "dev")
    assert claims["scope"].split() == ["leasefence/operate", "leasefence/approve"]
    assert "signed in as alice, tenant 'dev', operate approve" in chosen.output
    _, default = link_claims(start(tmp_path / "default"))
    assert default["sub"] == "dev:console"
    assert set(default["scope"].split()) == {
        f"leasefence/{s}" for s in ("produce", "work", "operate", "approve")
    }
