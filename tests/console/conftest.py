"""The console tests' local stack: the session's embedded AWS endpoint (tests/conftest.py), a
table and a bucket of their own, the HTTP API on a free port served in-process by the real
handlers; and the browser tests' own: a real ``leasefence local --samples`` and Debian's Chromium
(one of each per test session, shared by the browser test files), and a page that fails its test
when it raised or asked anything of another origin."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from leasefence_tools.local.tokens import ALL_SCOPES
from leasefence.client import LeaseFenceClient
from leasefence_tools.local.server import LocalStack

SECRET = "console-tests-secret-0123456789abcdef"


@pytest.fixture(scope="session")
def console_stack(aws):
    with LocalStack(
        host="127.0.0.1",
        port=0,
        aws=aws,
        table_name="console-operations",
        bucket="console-payloads",
        sweep_interval=None,
        secret=SECRET,
    ) as running:
        yield running


class Http:
    """Raw HTTP against the stack (status, headers, body), one token."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.base_url, self.token = base_url, token

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], str]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, dict(response.headers.items()), response.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers.items()), error.read().decode()

    def json(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, _, text = self.call(method, path, body)
        return status, json.loads(text) if text else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@pytest.fixture
def tenant() -> str:
    return f"console-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def http(console_stack):
    def make(tenant: str | None, scopes: Iterable[str] = ALL_SCOPES, sub: str | None = None) -> Http:
        token = None if tenant is None else console_stack.token(tenant, list(scopes), subject=sub)
        return Http(console_stack.base_url, token)

    return make


@pytest.fixture
def sdk(console_stack):
    def make(tenant: str, scopes: Iterable[str] = ALL_SCOPES, sub: str | None = None) -> LeaseFenceClient:
        token = console_stack.token(tenant, list(scopes), subject=sub)
        return LeaseFenceClient(console_stack.base_url, token, retries=2, backoff=0.01)

    return make


@pytest.fixture(scope="session")
def local(tmp_path_factory):
    from tests.support.browser import local_stack

    with local_stack(tmp_path_factory.mktemp("console-local")) as running:
        yield running


@pytest.fixture(scope="session")
def chromium():
    from tests.support.browser import browser

    with browser() as launched:
        yield launched


@pytest.fixture
def page(chromium, local):
    from tests.support.browser import WAIT_MS

    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    # Offline: every request the page (or Swagger UI) makes goes to the service itself.
    elsewhere: list[str] = []
    opened.on(
        "request",
        lambda request: None
        if request.url.startswith((local.base_url + "/", "data:", "about:"))
        else elsewhere.append(request.url),
    )
    yield opened
    context.close()
    assert errors == [], f"the page raised: {errors}"
    assert elsewhere == [], f"the page asked elsewhere: {elsewhere}"
