"""The dev loop as a new user meets it: ``make run`` with no Node.js on the PATH, the first
start's numbered steps with pip's output in a log, a quiet terminal (the Lambda functions' logs
in a bounded file, ``--logs`` to watch them), and a port in use named with its option."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from leasefence_tools.local.lambda_log import BOUND_BYTES, FILE
from tests.support import ROOT
from tests.support.local_process import LEASEFENCE, READY, Stack, clean_env

NODE = ("node", "npm", "npx", "corepack")
FREE_PORTS = ("--port", "0", "--dynamodb-port", "0", "--sweep-interval", "0")


@pytest.fixture(scope="module")
def path_without_node(tmp_path_factory) -> str:
    """A PATH with every command of this one but Node.js's (links in one folder)."""
    folder = tmp_path_factory.mktemp("path-without-node")
    for entry in os.environ["PATH"].split(os.pathsep):
        if not Path(entry).is_dir():
            continue
        for command in Path(entry).iterdir():
            if command.name not in NODE and not (folder / command.name).exists():
                (folder / command.name).symlink_to(command)
    assert shutil.which("node", path=str(folder)) is None and shutil.which("make", path=str(folder))
    return str(folder)


def _start(argv: list[str], tmp_path: Path, state: Path, **env: str) -> Stack:
    log = tmp_path / "terminal.txt"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=clean_env(**env),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make run: the signal reaches make and the stack it started
        )
    return Stack(process, log, state)


def _traffic(stack: Stack) -> None:
    for _ in range(3):
        request = urllib.request.Request(
            f"{stack.state['base_url']}/v1/operations",
            headers={"Authorization": f"Bearer {stack.state['token']}"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - http://127.0.0.1
            assert reply.status == 200


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]


def test_make_run_starts_without_node_and_keeps_the_lambda_logs_out_of_the_terminal(
    tmp_path, path_without_node
):
    state = tmp_path / "state"
    args = " ".join([*FREE_PORTS, "--state-dir", str(state)])
    stack = _start(
        ["make", "--no-print-directory", "run", f"ARGS={args}"],
        tmp_path,
        state,
        PATH=path_without_node,
    )
    try:
        assert READY in stack.wait_ready().output, stack.output
        _traffic(stack)
    finally:
        code = stack.stop()
    terminal = stack.output
    # make dies of the signal (or exits 2) once the stack it ran stopped cleanly.
    assert code in (0, 2, -signal.SIGTERM) and terminal.endswith("stopped\n"), terminal
    assert f"Lambda logs:        {state / FILE}  (JSON log lines and EMF metrics" in terminal
    assert _json_lines(terminal) == [], terminal
    logged = (state / FILE).read_text()
    records = [json.loads(line) for line in _json_lines(logged)]
    assert any(r.get("service") == "leasefence" and r.get("message") == "request" for r in records)
    assert any("_aws" in r for r in records)  # EMF metric lines
    # The stream's one reader (the worker function publishes too: docs/constructs.md).
    assert {r.get("function_name") for r in records} >= {"leasefence-api", "leasefence-worker"}
    assert (state / FILE).stat().st_size <= BOUND_BYTES


def test_logs_shows_the_lambda_logs_in_the_terminal_too(tmp_path):
    state = tmp_path / "state"
    stack = _start(
        [str(LEASEFENCE), "local", *FREE_PORTS, "--state-dir", str(state), "--logs"],
        tmp_path,
        state,
    )
    try:
        assert READY in stack.wait_ready().output, stack.output
        _traffic(stack)
    finally:
        assert stack.stop() == 0, stack.output
    shown = _json_lines(stack.output)
    assert any('"message":"request"' in line for line in shown), stack.output
    assert set(shown) <= set((state / FILE).read_text().splitlines())  # the same lines, kept


@pytest.mark.parametrize(
    ("taken", "service", "option"),
    [
        ("--port", "HTTP API", "--port"),
        ("--dynamodb-port", "embedded DynamoDB endpoint", "--dynamodb-port"),
    ],
)
def test_a_port_in_use_is_named_with_its_service_and_option(tmp_path, taken, service, option):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ports = {"--port": "0", "--dynamodb-port": "0", taken: str(port)}
        result = subprocess.run(
            [
                str(LEASEFENCE),
                "local",
                *(x for kv in ports.items() for x in kv),
                "--state-dir",
                str(tmp_path / "state"),
            ],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result
    assert result.stderr.strip() == (
        f"cannot start: port {port} of the {service} is already in use on 127.0.0.1: choose "
        f"another with {option} PORT (0: any free port)"
    )
    assert READY not in result.stdout


@pytest.mark.parametrize("node", [None, "18.20.0"], ids=["no-node", "node-18"])
def test_synth_without_a_node_it_can_use_says_what_it_needs(tmp_path, path_without_node, node):
    path = path_without_node
    if node:  # a node (and npm) too old, first on the PATH
        (tmp_path / "node").write_text(f"#!/bin/sh\necho {node.split('.')[0]}\n")
        (tmp_path / "npm").write_text("#!/bin/sh\n")
        for command in ("node", "npm"):
            (tmp_path / command).chmod(0o755)
        path = f"{tmp_path}{os.pathsep}{path}"
    result = subprocess.run(
        ["make", "--no-print-directory", "synth"],
        cwd=ROOT,
        env=clean_env(PATH=path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "make synth needs Node.js 22 or 24 (20 works too) with npm on the PATH" in result.stderr
    assert "npx" not in result.stdout  # stopped before the CDK CLI


# ------------------------------------------------------------------ the Python bootstrap's steps

FAKE_PYTHON = """#!/bin/bash
# A stand-in for python3: --version, and -m venv DIR with a pip that writes a lot.
if [ "$1" = --version ]; then echo "Python 3.11.99"; exit 0; fi
mkdir -p "$3/bin"
ln -s {python} "$3/bin/python"
cat > "$3/bin/pip" <<'PIP'
#!/bin/bash
for n in $(seq 1 200); do echo "pip noise $n ($*)"; done
[[ "$*" == *"-e .[dev]"* ]] && exit ${{FAKE_PIP_EXIT:-0}}
exit 0
PIP
chmod +x "$3/bin/pip"
"""


def _bootstrap(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``make install-python`` with this repository's Makefile, in a folder with a project and a
    lock of its own, and a stand-in for python3 (nothing is installed)."""
    lock = tmp_path / "infra/leasefence_infra/requirements.lock"
    for made in (tmp_path / "pyproject.toml", lock):
        if not made.exists():  # made once: a later touch would be a change to install again
            made.parent.mkdir(parents=True, exist_ok=True)
            made.touch()
    python = tmp_path / "fake-python"
    python.write_text(FAKE_PYTHON.format(python=shutil.which("python3")))
    python.chmod(0o755)
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-f",
            str(ROOT / "Makefile"),
            "install-python",
            f"PY={python}",
        ],
        cwd=tmp_path,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_first_start_numbers_its_steps_and_keeps_pips_output_in_a_log(tmp_path):
    result = _bootstrap(tmp_path)
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == [
        "[1/2] creating .venv with Python 3.11.99",
        "[2/2] installing the locked Python packages (log: .venv/install.log; minutes the "
        "first time)",
    ]
    assert result.stderr == ""
    log = (tmp_path / ".venv/install.log").read_text().splitlines()
    assert len(log) == 400 and log[-1].startswith("pip noise 200 (install -c ")
    assert (tmp_path / ".venv/.installed").exists()
    again = _bootstrap(tmp_path)  # nothing changed: nothing to do
    assert again.returncode == 0 and "[2/2]" not in again.stdout, again


def test_a_failed_install_shows_the_logs_tail_and_its_path(tmp_path):
    result = _bootstrap(tmp_path, FAKE_PIP_EXIT="1")
    assert result.returncode != 0
    assert "pip noise 200 (install -c" in result.stderr
    assert "pip noise 150 (install -c" not in result.stderr  # the tail, not the whole
    assert "(the whole log: .venv/install.log)" in result.stderr
    assert "pip noise" not in result.stdout
    assert not (tmp_path / ".venv/.installed").exists()
