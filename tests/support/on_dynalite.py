"""Run a command with ``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` naming a fresh dynalite (stopped
after it): ``python -m tests.support.on_dynalite python -m pytest tests/engine`` (``make
test-dynalite``). Its exit status is the command's."""

from __future__ import annotations

import os
import subprocess
import sys

from leasefence_tools.local.external import ENDPOINT_ENV
from tests.support import endpoints


def run(command: list[str], create_ms: int = 0, **kwargs) -> subprocess.CompletedProcess:
    with endpoints.dynalite(create_ms=create_ms) as endpoint:
        env = {**os.environ, ENDPOINT_ENV: endpoint, **kwargs.pop("env", {})}
        return subprocess.run(command, env=env, check=False, **kwargs)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:] or [sys.executable, "-m", "pytest", "tests/engine"]).returncode)
