"""``leasefence local --dynamodb-endpoint`` as a user runs it (a real process): refused by name
on dynalite, which lacks what the engine needs; on a second embedded endpoint a lifecycle served,
history from that endpoint's stream, the table the stack's own (and kept), nobody else's table
touched, its existing table completed (stream, TTL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from leasefence.schema import TTL_ATTRIBUTE, TableSpec, create_table_request
from leasefence_tools.local.embedded import EmbeddedAws
from leasefence_tools.local.state import table_prefix
from leasefence_tools.local.tokens import ALL_SCOPES, mint
from tests.support import ROOT, endpoints
from tests.support.api import Api, claimed, enqueue, op_path

LEASEFENCE = Path(sys.executable).with_name("leasefence")
SECRET = "external-dynamodb-test-secret-0123456789"


def _local(state: Path, endpoint: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(LEASEFENCE), "local", "--port", "0", "--dynamodb-port", "0"]
        + ["--sweep-interval", "0", "--dynamodb-endpoint", endpoint],
        stdout=out.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "LEASEFENCE_LOCAL_JWT_SECRET": SECRET, "LEASEFENCE_STATE_DIR": str(state)},
    )


def test_on_dynalite_it_refuses_to_start_naming_what_the_endpoint_lacks(tmp_path):
    with endpoints.dynalite() as endpoint:
        out = tmp_path / "out.txt"
        process = _local(tmp_path / "state", endpoint, out)
        assert process.wait(timeout=60) == 1, out.read_text()
        assert endpoints.client(endpoint).list_tables()["TableNames"] == []  # its probe cleaned up
    said = out.read_text()
    assert said.startswith(f"cannot start: the DynamoDB endpoint {endpoint} lacks TransactWriteItems")
    for lacking in ("TransactWriteItems (", "ReturnValuesOnConditionCheckFailure (", "TTL (", "Streams ("):
        assert lacking in said
    assert "Traceback" not in said
    assert not (tmp_path / "state" / "local.json").exists()


@pytest.fixture(scope="module")
def second_endpoint():
    """A second embedded endpoint (moto, serialized) on a free port, apart from the stack's own."""
    with EmbeddedAws() as aws:
        yield aws


def test_on_a_second_embedded_endpoint_it_serves_a_lifecycle_in_a_table_of_its_own(
    tmp_path, second_endpoint
):
    ddb = second_endpoint.client()
    foreign = f"not-leasefence-{tmp_path.name[-20:]}"
    ddb.create_table(
        TableName=foreign,
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    state, out = tmp_path / "state", tmp_path / "out.txt"
    table = f"{table_prefix(state)}-operations"
    # Its table, left by an earlier run or made by hand without stream and TTL: completed.
    ddb.create_table(**create_table_request(TableSpec(table_name=table)))
    process = _local(state, second_endpoint.endpoint, out)
    try:
        deadline = time.monotonic() + 90
        while "Press Ctrl-C to stop." not in out.read_text():
            assert process.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "never printed its banner"
            time.sleep(0.1)
        banner = out.read_text()
        found = json.loads((state / "local.json").read_text())
        assert found["dynamodb_endpoint"] == second_endpoint.endpoint != found["aws_endpoint"]
        assert found["table"] == table
        assert (
            f"DynamoDB endpoint:  {second_endpoint.endpoint}  (external; table {table}, this "
            "stack's own: kept when it stops; it has everything the stack uses)"
        ) in banner
        assert f"S3, EventBridge:    {found['aws_endpoint']}  (embedded, in memory;" in banner
        assert "History and events: from the table's stream" in banner
        ttl = ddb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)

        tail = subprocess.Popen(  # the bus is on the embedded endpoint: events tail finds it
            [str(LEASEFENCE), "events", "tail", "--tenant", "acme", "--count", "1"]
            + ["--timeout", "60", "--json", "--state-dir", str(state)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60  # subscribed once it says what it watches
        while not tail.stderr.readline().startswith("watching "):
            assert tail.poll() is None and time.monotonic() < deadline, tail.stderr.read()

        api = Api(found["base_url"], mint("acme", ALL_SCOPES, secret=SECRET))
        big = {"text": "x" * 2000}  # over the inline limit: its object is on the embedded S3
        enqueue(api, "ext-1", payload=big, job_type="report")
        grant = claimed(api, "ext-1")
        assert grant["payload"] == big
        done = api.post(op_path("ext-1", "complete"), {"fence": grant["fence"], "outcome_code": "ok"})
        assert done.status == 200, done.text
        # In whichever write shard the stack's layout put it (a small table of its own).
        item = next(
            i for i in ddb.scan(TableName=table)["Items"] if i["operation_id"]["S"] == "ext-1"
        )
        assert (item["state"], item["fence"]) == ({"S": "succeeded"}, {"N": str(grant["fence"])})
        deadline = time.monotonic() + 30
        while len(api.get(op_path("ext-1", "history")).json["entries"]) < 3:
            assert time.monotonic() < deadline, "the publisher never wrote the history"
            time.sleep(0.1)
        (event,) = [json.loads(line) for line in tail.communicate(timeout=60)[0].splitlines()]
        assert event["detail"]["operation_id"] == "ext-1"
        # invoke, too, runs against the table on the external endpoint
        invoked = subprocess.run(
            [str(LEASEFENCE), "invoke", "sweeper", "--event", str(ROOT / "events" / "sweeper-scheduled.json")]
            + ["--state-dir", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert invoked.returncode == 0, invoked.stderr
        result = json.loads(invoked.stdout[invoked.stdout.index("{\n") :])  # after its log lines
        assert result["ttl_state"] == "window"  # a sweep of the table there (none: an error)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0, out.read_text()
    tables = [t for page in ddb.get_paginator("list_tables").paginate() for t in page["TableNames"]]
    assert table in tables and foreign in tables  # kept; nobody else's touched
    assert [t for t in tables if "-probe-" in t] == []
