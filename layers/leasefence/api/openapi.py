"""The OpenAPI 3.1 document, generated from the routes and models (never written by hand).

``openapi.json`` at the repository root is this document; ``leasefence openapi`` (or
``python -m leasefence.api.openapi``) rewrites it, ``--check`` fails when it drifted, and so does
a test. Outside a checkout (the installed wheel) the default file is ``openapi.json`` in the
current folder; the local stack serves the document generated from the routes, never a file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from leasefence.api.links import LINKS

#: The document's version. 1.1.0 describes the same requests and answers as 1.0.0 in shapes generators
#: type correctly (the enqueue body's two alternatives named, error codes an open enum): a client
#: generated from 1.0.0 keeps working.
API_VERSION = "1.1.0"
TITLE = "leasefence"
DESCRIPTION = (
    "Job claims with leases (liveness) and per-operation fencing tokens (safety).\n\n"
    "Every route except `GET /v1/health` needs `Authorization: Bearer <JWT>`; the tenant is the "
    "token's `tenant_id` claim, scopes are its space-separated `scope` claim. Errors are "
    '`{"error": {"code": "...", "message": "..."}}`. On AWS, API Gateway answers some 401, 403, '
    '429 and 5xx itself, as `{"message": "..."}` (GatewayErrorOut): a body without `error` is '
    "the gateway's, to be read by its status."
)
REPO_ROOT = Path(__file__).resolve().parents[3]
#: The repository's ``openapi.json`` in a checkout (``layers/leasefence`` under the root), else
#: ``openapi.json`` in the current folder (never beside an installed package).
DEFAULT_PATH = (
    REPO_ROOT / "openapi.json"
    if (REPO_ROOT / "layers" / "leasefence" / "api" / "openapi.py").is_file()
    else Path("openapi.json")
)


def _referenced(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            _referenced(value, found)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, found)


def _query_without_null(operation: dict[str, Any]) -> None:
    """An optional query parameter is absent or a value, never null: Powertools writes
    ``anyOf [X, null]`` for ``X | None``; the document says X."""
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        if parameter.get("in") != "query" or "anyOf" not in schema:
            continue
        kept = [s for s in schema["anyOf"] if s != {"type": "null"}]
        if len(kept) == 1:
            del schema["anyOf"]
            schema.update(kept[0])


#: Every route that takes a body answers 413 to one above the deployment's limit
#: (``LEASEFENCE_MAX_BODY_BYTES``), before it is parsed.
BODY_TOO_LARGE = {
    "description": "The request body is larger than the deployment's limit (payload_too_large)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
}


def _shape(operation: dict[str, Any]) -> None:
    """One route's entry as this API answers: its links, explicit ``security: []`` when public,
    no empty bodies, 413 where a body is taken, and its 422 as ``ErrorOut`` (Powertools documents
    its own 422 body on every route; a route without input has no 422 at all)."""
    _query_without_null(operation)
    # A public route says so (an operation without `security` inherits the document's).
    operation.setdefault("security", [])
    for status, links in LINKS.get(operation.get("operationId", ""), {}).items():
        operation["responses"][status]["links"] = links
    responses = operation.get("responses", {})
    default_422 = (
        responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
    )
    for response in responses.values():
        if response.get("content") == {}:
            del response["content"]  # no body (204)
        for content in response.get("content", {}).values():
            if "anyOf" in content.get("schema", {}):  # either error shape: no "Return"
                content["schema"].pop("title", None)
    if "requestBody" in operation:
        responses.setdefault("413", BODY_TOO_LARGE)
    if default_422.get("$ref") == "#/components/schemas/HTTPValidationError":
        if operation.get("parameters") or operation.get("requestBody"):
            default_422["$ref"] = "#/components/schemas/ErrorOut"
        else:
            del responses["422"]


def build_spec() -> dict[str, Any]:
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer, License
    from pydantic.json_schema import models_json_schema

    from leasefence.api.models import DOCUMENT_MODELS
    from leasefence.api.routes import app

    raw = app.get_openapi_json_schema(
        title=TITLE,
        version=API_VERSION,
        description=DESCRIPTION,
        license_info=License(name="Apache-2.0", identifier="Apache-2.0"),
        security_schemes={
            "bearerAuth": HTTPBearer(
                bearerFormat="JWT",
                description="A JWT with tenant_id and scope claims (locally: `leasefence token`)",
            )
        },
    )
    spec = json.loads(raw)
    for methods in spec.get("paths", {}).values():
        for operation in methods.values():
            _shape(operation)
    schemas = spec.get("components", {}).get("schemas", {})
    _, extra = models_json_schema(
        [(model, "validation") for model in DOCUMENT_MODELS],
        ref_template="#/components/schemas/{model}",
    )
    schemas.update(extra["$defs"])
    # Drop the schemas nothing refers to any more.
    used: set[str] = set()
    _referenced({k: v for k, v in spec.items() if k != "components"}, used)
    pending = list(used)
    while pending:
        found: set[str] = set()
        _referenced(schemas.get(pending.pop(), {}), found)
        pending.extend(found - used)
        used |= found
    for name in [name for name in schemas if name not in used]:
        del schemas[name]
    return spec


def render() -> str:
    return json.dumps(build_spec(), indent=2, ensure_ascii=False) + "\n"


def write(path: Path = DEFAULT_PATH) -> Path:
    path.write_text(render(), encoding="utf-8")
    return path


def drifted(path: Path = DEFAULT_PATH) -> bool:
    return not path.is_file() or path.read_text(encoding="utf-8") != render()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    paths = [a for a in args if not a.startswith("--")]
    path = Path(paths[0]) if paths else DEFAULT_PATH
    if check:
        if drifted(path):
            print(f"{path} is out of date: run `leasefence openapi`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    print(f"wrote {write(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
