"""``leasefence verify`` on the DynamoDB ``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names (here
dynalite): the checks run there, its operations table is deleted after, and a class its endpoint
cannot serve (class A without transactions) is a setup error naming what is lacking."""

from __future__ import annotations

import pytest

from leasefence_tools.kit.verify import SetupError, verify
from leasefence_tools.local.external import ENDPOINT_ENV
from tests.support import endpoints

EXAMPLES = "leasefence_tools.kit.examples:HANDLERS"
FIXTURE = "leasefence_tools.kit.example_fixture:build"


def test_verify_runs_on_the_named_endpoint_and_refuses_what_it_cannot_serve(monkeypatch):
    with endpoints.dynalite(create_ms=0) as endpoint:
        monkeypatch.setenv(ENDPOINT_ENV, endpoint)
        report = verify(EXAMPLES, "sms", "D", FIXTURE)
        assert report.go, report.text()
        # The example fixture's business tables are its own; the operations table is gone.
        assert endpoints.client(endpoint).list_tables()["TableNames"] == ["ledger", "orders"]
        with pytest.raises(
            SetupError, match=f"the DynamoDB endpoint {endpoint} lacks TransactWriteItems"
        ):
            verify(EXAMPLES, "refund", "A", FIXTURE)
