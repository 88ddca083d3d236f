"""Every error the local stack answers itself (its stand-in for the JWT authorizer, http.server's
own refusals, a function that failed) has the contract's shape and the handler's bytes:
``{"error":{"code":"...","message":"..."}}``, compact, as the API function writes it."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from leasefence.api import errors
from leasefence_tools.local.server import LocalApi


def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is; the answer's status, headers and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def _http(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, dict(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers.items()), error.read()


def _contract(body: bytes, code: str) -> str:
    """The error's message, after checking the body is exactly the contract's, in the handler's
    bytes (what :func:`errors.encoded` writes)."""
    parsed = json.loads(body)
    assert set(parsed) == {"error"} and set(parsed["error"]) == {"code", "message"}, body
    assert parsed["error"]["code"] == code, body
    assert body == errors.encoded(code, parsed["error"]["message"]), body
    return parsed["error"]["message"]


@pytest.mark.parametrize(
    "authorization", [None, "Basic abc", "Bearer not-a-jwt"], ids=["none", "not-bearer", "malformed"]
)
def test_the_stand_in_authorizers_401_reads_like_the_handlers_errors(stack, authorization):
    request = urllib.request.Request(f"{stack.base_url}/v1/operations/op-1")
    if authorization:
        request.add_header("Authorization", authorization)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    with refused.value as answer:
        assert answer.code == 401 and answer.headers["Content-Type"] == "application/json"
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="leasefence"'
        _contract(answer.read(), "unauthorized")
    # ... byte for byte as the handler writes its own errors (the same serializer).
    status, _, body = _http(f"{stack.base_url}/v1/no-such-route")
    assert status == 404 and _contract(body, "not_found") == "no such route"


def test_http_servers_own_refusals_are_json_in_the_contracts_shape(stack):
    port = urlsplit(stack.base_url).port
    status, headers, body = _raw(port, b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n")
    assert status == 414 and headers["Content-Type"] == "application/json"
    assert _contract(body, "invalid_request") == "Request-URI Too Long"
    status, _, body = _raw(port, b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
    assert status == 431 and _contract(body, "invalid_request") == "Line too long"
    # A request line it cannot parse is answered HTTP/0.9-style (a body, no status line): JSON too.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b'GET / HTTP/"x\r\n\r\n')
        body = b"".join(iter(lambda: sock.recv(65536), b""))
    assert "Bad request version" in _contract(body, "invalid_request")
    status, _, body = _raw(port, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\nConnection: close\r\n\r\n")
    assert status == 400 and _contract(body, "invalid_request") == "bad Content-Length"


def test_a_function_that_fails_is_a_500_in_the_contracts_shape():
    class Failing:
        def invoke(self, name, event):
            raise RuntimeError("the function crashed")

    api = LocalApi("s" * 32, invoker=Failing()).start()
    try:
        status, headers, body = _http(f"{api.base_url}/v1/health")
    finally:
        api.stop()
    assert status == 500 and headers["Content-Type"] == "application/json"
    assert _contract(body, "internal_error") == "internal error"


def test_an_unknown_console_asset_is_the_handlers_404(stack):
    status, headers, body = _http(f"{stack.base_url}/console/nothing.js")
    assert status == 404 and headers["Content-Type"] == "application/json"
    assert _contract(body, "not_found") == "no such route"
    status, headers, _ = _http(f"{stack.base_url}/console/console.js")
    assert status == 200 and "javascript" in headers["Content-Type"]
