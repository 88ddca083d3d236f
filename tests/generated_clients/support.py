"""Where the generated-client tests find their tools (``make generated-clients`` installs them;
``make test`` runs it), and how they run them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE / "node_modules"
#: openapi-python-client's own virtualenv (it needs typer<0.28; the project locks a newer one).
GENERATOR_VENV = ROOT / ".venv" / "openapi-python-client"
DOCUMENT = ROOT / "openapi.json"


def tool(name: str) -> Path:
    """An npm tool of this folder, or the generator venv's ``openapi-python-client``."""
    path = (
        GENERATOR_VENV / "bin" / name
        if name == "openapi-python-client"
        else NODE_MODULES / ".bin" / name
    )
    if not path.exists():
        pytest.fail(f"{name} is not installed: run `make generated-clients` (make test does)")
    return path


def run(*args: Any, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command; its output, or a failure that shows it."""
    done = subprocess.run(
        [str(a) for a in args],
        check=False,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        f"{args[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout


def last_json(output: str) -> dict[str, Any]:
    return json.loads(output.strip().splitlines()[-1])
