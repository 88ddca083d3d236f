"""DynamoDB-compatible endpoints other than the session's embedded one, for the tests of
``leasefence local --dynamodb-endpoint``, the capability probe and ``schema.create_table``.

dynalite (npm, in memory) runs from tests/support/dynalite, installed from its lockfile by
``make dynalite`` (``make test`` runs it first). It keeps a new table ``CREATING`` for
``create_ms`` (as DynamoDB does for a while) and lacks TransactWriteItems, TTL, streams and
``ReturnValuesOnConditionCheckFailure``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest

DYNALITE_DIR = Path(__file__).resolve().parent / "dynalite"


@contextmanager
def dynalite(create_ms: int = 500, delete_ms: int = 0) -> Iterator[str]:
    """A dynalite server on a free port of 127.0.0.1 for the block; its endpoint URL."""
    if not (DYNALITE_DIR / "node_modules" / "dynalite").is_dir():
        pytest.fail("dynalite is not installed: run `make dynalite` (make test does)")
    process = subprocess.Popen(
        [
            "node",
            str(DYNALITE_DIR / "serve.js"),
            "--createTableMs",
            str(create_ms),
            "--deleteTableMs",
            str(delete_ms),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "listening <port>", or why it did not start
        assert line.startswith("listening "), f"dynalite did not start: {line}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def client(endpoint: str, service: str = "dynamodb") -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
