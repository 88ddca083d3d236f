"""docs/contract.md, the public contract, says what ``openapi.json`` says (itself generated from the
routes and checked by ``leasefence openapi --check``): the same routes, each with the same scopes
and the same statuses, and the same error codes.

The routes table lists each route's own answers; the answers every route shares are one sentence
above it, and :func:`shared_statuses` is that sentence: 401, 403, 422, 429 and 503 for a route with a
scope, and 400 and 413 for one that takes a body (a row may name one of those too, for a reason
of its own). A status is written in bold (``**409**``), so that
other numbers in a row (``256 KiB``) are not read as statuses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import leasefence.api.errors  # noqa: F401  (its error classes join the domain's)
from leasefence.errors import LeaseFenceError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "contract.md"
METHODS = {"get", "put", "post", "delete", "patch"}
ROUTE_ROW = re.compile(
    r"^\| `(?P<method>[A-Z]+) (?P<path>/\S*)` \| (?P<scopes>[^|]+) \| (?P<answers>.+) \|$"
)
CODE_ROW = re.compile(r"^\| `(?P<code>[a-z_]+)` \| (?P<statuses>[^|]+) \| (?P<when>.+) \|$")
STATUS = re.compile(r"\*\*(\d{3})\*\*")

Route = tuple[str, str]


def shared_statuses(scoped: bool, has_body: bool) -> set[str]:
    """What the sentence above the routes table says every such route may also answer."""
    return ({"401", "403", "422", "429", "503"} if scoped else set()) | (
        {"400", "413"} if has_body else set()
    )


def spec() -> dict[str, Any]:
    return json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))


def page_routes(text: str) -> dict[Route, tuple[set[str], set[str]]]:
    """Each route of the page's table: (its scopes, the statuses its row names)."""
    found: dict[Route, tuple[set[str], set[str]]] = {}
    for line in text.splitlines():
        row = ROUTE_ROW.match(line)
        if row:
            route = (row["method"], row["path"])
            assert route not in found, f"{route} twice in the table"
            scopes = {s.strip() for s in row["scopes"].split(",")} - {"none"}
            found[route] = (scopes, set(STATUS.findall(row["answers"])))
    return found


def openapi_routes(document: dict[str, Any]) -> dict[Route, tuple[set[str], set[str], set[str]]]:
    """Each route of openapi.json: (its scopes, short names; its statuses less the shared ones;
    the shared ones)."""
    found: dict[Route, tuple[set[str], set[str], set[str]]] = {}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if method not in METHODS:
                continue
            scopes = {
                scope.removeprefix("leasefence/")
                for requirement in operation.get("security") or []
                for scope in requirement.get("bearerAuth", [])
            }
            shared = shared_statuses(bool(scopes), "requestBody" in operation)
            statuses = set(operation["responses"])
            missing = shared - statuses
            assert not missing, f"{method.upper()} {path} lacks the shared answers {missing}"
            found[(method.upper(), path)] = (scopes, statuses - shared, shared)
    return found


def documented_codes(document: dict[str, Any]) -> set[str]:
    """The error codes openapi.json lists (the ErrorCode enum ErrorDetail.code refers to)."""
    code = document["components"]["schemas"]["ErrorDetail"]["properties"]["code"]
    assert code["anyOf"] == [{"$ref": "#/components/schemas/ErrorCode"}, {"type": "string"}]
    return set(document["components"]["schemas"]["ErrorCode"]["enum"])


def statuses_of_codes() -> dict[str, set[str]]:
    """The status each error code is answered with, from the error classes of the code."""
    found: dict[str, set[str]] = {LeaseFenceError.code: {str(LeaseFenceError.status)}}
    todo = [LeaseFenceError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.setdefault(sub.code, set()).add(str(sub.status))
            todo.append(sub)
    return found


def page_codes(text: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        row = CODE_ROW.match(line)
        if row and STATUS.search(row["statuses"]):
            found[row["code"]] = set(STATUS.findall(row["statuses"]))
    return found


def route_problems(page: str, document: dict[str, Any]) -> list[str]:
    documented, served = page_routes(page), openapi_routes(document)
    problems = [f"{m} {p}: in the page, not in openapi.json" for m, p in documented.keys() - served]
    problems += [
        f"{m} {p}: in openapi.json, not in the page" for m, p in served.keys() - documented
    ]
    for route in sorted(documented.keys() & served.keys()):
        page_scopes, page_statuses = documented[route]
        api_scopes, api_statuses, shared = served[route]
        page_statuses -= shared  # a row may name a shared answer for a reason of its own
        name = " ".join(route)
        if page_scopes != api_scopes:
            problems.append(
                f"{name}: scopes {sorted(page_scopes)} in the page, {sorted(api_scopes)}"
            )
        if page_statuses != api_statuses:
            problems.append(
                f"{name}: statuses {sorted(page_statuses)} in the page (besides the shared ones), "
                f"{sorted(api_statuses)} in openapi.json"
            )
    return problems


def test_the_routes_table_is_openapis() -> None:
    assert route_problems(PAGE.read_text(encoding="utf-8"), spec()) == []


def test_the_error_codes_are_openapis_with_their_statuses() -> None:
    codes = page_codes(PAGE.read_text(encoding="utf-8"))
    assert set(codes) == documented_codes(spec())
    answered = statuses_of_codes()
    wrong = {code: s for code, s in codes.items() if not s <= answered.get(code, set())}
    assert not wrong, f"statuses the code never answers with: {wrong} (it does: {answered})"


@pytest.mark.parametrize(
    ("edit", "complaint"),
    [
        (
            lambda t: t.replace(
                "| `GET /v1/settings` | operate |", "| `GET /v1/setting` | operate |"
            ),
            "GET /v1/settings: in openapi.json, not in the page",
        ),
        (
            lambda t: t.replace(
                "**413** `payload_too_large`.", "**413** `payload_too_large`; **418**."
            ),
            "POST /v1/operations: statuses",
        ),
        (
            lambda t: t.replace(
                "| `GET /v1/controls` | operate |", "| `GET /v1/controls` | work |"
            ),
            "GET /v1/controls: scopes ['work']",
        ),
    ],
)
def test_a_page_that_drifted_fails(edit: Any, complaint: str) -> None:
    """The check itself: a route renamed, a status added or a scope changed on the page is named."""
    text = PAGE.read_text(encoding="utf-8")
    changed = edit(text)
    assert changed != text
    assert any(complaint in problem for problem in route_problems(changed, spec()))


def test_openapi_gaining_a_status_fails() -> None:
    document = spec()
    document["paths"]["/v1/claims"]["post"]["responses"]["410"] = {"description": "Gone"}
    assert route_problems(PAGE.read_text(encoding="utf-8"), document) == [
        "POST /v1/claims: statuses ['200', '204', '404'] in the page (besides the shared ones), "
        "['200', '204', '404', '410'] in openapi.json"
    ]


def test_nothing_points_outside_the_repository() -> None:
    """A clone holds no ../shared folder: no page, nor the README, may send a reader there."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pointing = [
        str(p.relative_to(ROOT)) for p in pages if "../shared" in p.read_text(encoding="utf-8")
    ]
    assert pointing == []
