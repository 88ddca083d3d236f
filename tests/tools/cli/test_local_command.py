"""`leasefence local` as a user runs it: a real process, a plain boto3 client, SIGTERM exits 0."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3

from leasefence.schema import DEFAULT_TABLE_NAME


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listening on {port}")


def test_local_serves_a_dynamodb_endpoint_and_stops_cleanly_on_sigterm(tmp_path):
    api_port, ddb_port = _free_port(), _free_port()
    leasefence = Path(sys.executable).with_name("leasefence")
    log = (tmp_path / "out.txt").open("w+")
    process = subprocess.Popen(
        [str(leasefence), "local", "--port", str(api_port), "--dynamodb-port", str(ddb_port), "--sweep-interval", "1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "LEASEFENCE_LOCAL_JWT_SECRET": "test-secret-for-the-local-command-test",
             "LEASEFENCE_STATE_DIR": str(tmp_path / "state")},  # its own: never a developer's
    )
    try:
        _wait_for(ddb_port)
        _wait_for(api_port)
        deadline = time.monotonic() + 60
        while f"http://127.0.0.1:{ddb_port}" not in (tmp_path / "out.txt").read_text():
            assert process.poll() is None and time.monotonic() < deadline, "never printed its endpoints"
            time.sleep(0.1)
        client = boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{ddb_port}",
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
        )
        deadline = time.monotonic() + 30
        while DEFAULT_TABLE_NAME not in client.list_tables()["TableNames"]:
            assert time.monotonic() < deadline, "the operations table was never created"
            time.sleep(0.1)
        client.put_item(TableName=DEFAULT_TABLE_NAME, Item={"tenant_id": {"S": "t"}, "operation_id": {"S": "o"}})
        assert client.get_item(TableName=DEFAULT_TABLE_NAME, Key={"tenant_id": {"S": "t"}, "operation_id": {"S": "o"}})["Item"]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    log.seek(0)
    output = log.read()
    assert code == 0, output
    assert f"http://127.0.0.1:{ddb_port}" in output
    assert f"State folder:       {tmp_path / 'state'}" in output
    assert not (tmp_path / "state" / "local.json").exists()
