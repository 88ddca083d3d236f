"""openapi.json passes the OpenAPI specification's validator and a linter (redocly, recommended
rules less the two its redocly.yaml names, with why)."""

from __future__ import annotations

import json

from openapi_spec_validator import validate

from tests.generated_clients.support import DOCUMENT, HERE, run, tool


def test_the_document_is_valid_openapi() -> None:
    validate(json.loads(DOCUMENT.read_text(encoding="utf-8")))  # raises on any violation


def test_the_document_passes_the_linter() -> None:
    output = run(
        tool("redocly"),
        "lint",
        DOCUMENT,
        "--config",
        HERE / "redocly.yaml",
        "--format",
        "json",
        env={"REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"},
    )
    report = json.loads(output[output.index("{") :])
    assert report["totals"] == {"errors": 0, "warnings": 0, "ignored": 0}, report["problems"]
