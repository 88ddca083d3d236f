"""Another DynamoDB as the tests' target (``leasefence_tools.local.external``, the ``aws`` fixture
and the ``needs`` mark of tests/support/target.py): a representative part of the engine's tests
run on dynalite (``make test-dynalite`` runs them all), what it lacks said at the start, the tests
that need it reported not applicable by name, and only the run's own tables touched."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from leasefence.schema import TableSpec
from leasefence_tools.local.external import ENDPOINT_ENV, PREFIX_ENV, ExternalDynamoDB, TableExists
from tests.support import ROOT, endpoints

#: Every transition and refusal, and create_table (whose TTL and
#: stream tests dynalite cannot serve).
SUBSET = [
    "tests/engine/test_transitions.py",
    "tests/engine/test_create_table.py",
]


def test_engine_tests_on_dynalite_name_what_it_lacks_and_leave_no_table():
    with endpoints.dynalite(create_ms=0) as endpoint:
        client = endpoints.client(endpoint)
        client.create_table(
            TableName="someone-elses",
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *SUBSET],
            cwd=ROOT,
            env={**_env(), ENDPOINT_ENV: endpoint, PREFIX_ENV: "subset"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        left = client.list_tables()["TableNames"]
    out = run.stdout
    assert run.returncode == 0, out[-3000:]
    assert f"leasefence DynamoDB target: {endpoint}, tables subset-*; lacks " in out
    assert "ReturnValuesOnConditionCheckFailure (a refused conditional write came back" in out
    summary = re.search(
        r"of the tests that use it (\d+) passed, (\d+) failed; (\d+) not applicable \(by the first capability lacking: (.*)\)",
        out,
    )
    assert summary is not None, out[-2000:]
    passed, failed, not_applicable, by = summary.groups()
    assert int(passed) >= 45 and int(failed) == 0
    assert (int(not_applicable), by) == (4, "Streams: 1, TTL: 3")
    assert "not applicable: " + endpoint + " lacks TTL (UnknownOperationException)" in out
    assert left == ["someone-elses"]  # the run's tables (and the probe's) are gone, no other


def test_a_table_already_there_is_never_used_and_stop_deletes_only_its_own():
    """Tables named as another run's (the four unexplained failures of an earlier dynalite run:
    a second run on the same endpoint found the first one's live claims in its due pages)."""
    with endpoints.dynalite(create_ms=0) as endpoint:
        first = ExternalDynamoDB(endpoint, prefix="same").start()
        spec = first.create_tables(TableSpec(table_name="ops-0"))
        assert spec.table_name == "same-ops-0"
        second = ExternalDynamoDB(endpoint, prefix="same").start()
        with pytest.raises(TableExists, match="same-ops-0 exists .* already"):
            second.create_tables(TableSpec(table_name="ops-0"))
        assert second.stop() == []
        assert endpoints.client(endpoint).list_tables()["TableNames"] == ["same-ops-0"]
        assert first.stop() == []
        assert endpoints.client(endpoint).list_tables()["TableNames"] == []


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
