"""The OpenAPI document: generated from the code, committed, never drifting, and true.

``openapi.json`` must equal what the routes and models generate (regenerate with
``leasefence openapi``). Schemathesis (pinned in the dev extra) then generates requests from that
document, valid and invalid ones, and sends them to the running local stack: no answer may be a
5xx, and every answer must be documented (status code, content type, body schema).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from leasefence.api import openapi
from leasefence.api.security import ROUTES

ROOT = Path(__file__).resolve().parents[2]
SPEC = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
TENANT = f"fuzz-{uuid.uuid4().hex[:8]}"


def test_committed_openapi_matches_the_code():
    assert not openapi.drifted(ROOT / "openapi.json"), "openapi.json is stale: run `leasefence openapi`"


def test_openapi_describes_every_route_with_its_scope():
    assert SPEC["openapi"].startswith("3.1")
    documented = {
        (method.upper(), path): op for path, methods in SPEC["paths"].items() for method, op in methods.items()
    }
    assert set(documented) == {(r.method, r.template) for r in ROUTES}
    for route in ROUTES:
        op = documented[(route.method, route.template)]
        assert op["operationId"] == route.operation_id
        if route.scope is None:
            assert op["security"] == []  # public, explicitly (not the document's default)
        else:
            assert op["security"] == [{"bearerAuth": [scope]} for scope in route.scopes]
            assert {"401", "403"} <= set(op["responses"])
    schemas = SPEC["components"]["schemas"]
    # The enqueue body: a oneOf of named, complete alternatives and nothing beside it.
    assert schemas["EnqueueRequest"] == {
        "oneOf": [
            {"$ref": "#/components/schemas/EnqueueInline"},
            {"$ref": "#/components/schemas/EnqueueByReference"},
        ]
    }
    assert schemas["EnqueueInline"]["additionalProperties"] is False
    assert schemas["EnqueueByReference"]["additionalProperties"] is False
    assert "HTTPValidationError" not in schemas


def test_openapi_command_writes_and_checks(tmp_path):
    from typer.testing import CliRunner

    from leasefence_tools.cli import app

    target = tmp_path / "openapi.json"
    runner = CliRunner()
    assert runner.invoke(app, ["openapi", "--check", "-o", str(target)]).exit_code == 1
    assert runner.invoke(app, ["openapi", "-o", str(target)]).exit_code == 0
    assert json.loads(target.read_text()) == SPEC
    assert runner.invoke(app, ["openapi", "--check", "-o", str(target)]).exit_code == 0


def test_openapi_is_served_with_swagger_ui(stack):
    served = requests.get(f"{stack.base_url}/openapi.json", timeout=10)
    assert served.status_code == 200
    body = served.json()
    assert body["paths"] == SPEC["paths"] and body["servers"][0]["url"] == stack.base_url
    page = requests.get(stack.docs_url, timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert "swagger" in page.text.lower() and "/v1/claims" in page.text
    assert "https://" not in page.text.split("<script>")[0]  # self-contained: no external assets


# ---------------------------------------------------------------------------------- fuzzing

schema = schemathesis.openapi.from_dict(SPEC)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def fuzz_session(stack):
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {stack.token(TENANT)}"
    # Some ids for the generated requests to find (and so get past 404 now and then).
    for operation_id in ("a", "0", "fuzz"):
        session.post(
            f"{stack.base_url}/v1/operations",
            json={"operation_id": operation_id, "job_type": "fuzz", "payload": {"id": operation_id}},
            timeout=10,
        )
    yield session
    session.close()


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_no_generated_request_gets_a_5xx_or_an_undocumented_answer(case, stack, fuzz_session):
    response = case.call(base_url=stack.base_url, session=fuzz_session, timeout=10)
    case.validate_response(response, checks=CHECKS)
