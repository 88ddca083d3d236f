"""Answers API Gateway writes itself, not leasefence: the SDK and the HTTP worker backend turn them
into the same typed errors as the service's own bodies, and say which one answered.

On AWS the HTTP API's JWT authorizer answers 401 ``{"message":"Unauthorized"}`` (its reason in
``WWW-Authenticate``), a route's scope it does not find 403 ``{"message":"Forbidden"}``, its
throttling 429 ``{"message":"Too Many Requests"}``, and a failed or slow integration 500
``{"message":"Internal Server Error"}``, 503 ``{"message":"Service Unavailable"}`` or 504
``{"message":"Endpoint request timed out"}``; a proxy on the way may answer with a page that is
not JSON at all. Each is played here by a proxy that answers exactly those bytes.
"""

from __future__ import annotations

import json
import time

import pytest

from leasefence.client import LeaseFenceClient
from leasefence.errors import (
    Forbidden,
    LeaseFenceError,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
)
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.http_backend import HttpBackend
from tests.support.proxy import FaultyProxy

JSON = {"Content-Type": "application/json"}
CHALLENGE = {
    **JSON,
    "www-authenticate": 'Bearer scope="" error="invalid_token" '
    'error_description="the token does not have a valid audience"',
}

#: (status, body, headers) as API Gateway (or a proxy) writes them -> the class and code expected.
GATEWAY_ANSWERS = {
    "jwt-authorizer-401": ((401, b'{"message":"Unauthorized"}', CHALLENGE), Unauthorized, "unauthorized"),
    "scope-403": ((403, b'{"message":"Forbidden"}', JSON), Forbidden, "forbidden"),
    "no-route-404": ((404, b'{"message":"Not Found"}', JSON), NotFound, "not_found"),
    "too-large-413": ((413, b'{"message":"Request Entity Too Large"}', JSON), PayloadTooLarge, "payload_too_large"),
    "throttled-429": ((429, b'{"message":"Too Many Requests"}', JSON), Unavailable, "unavailable"),
    "integration-500": ((500, b'{"message":"Internal Server Error"}', JSON), Unavailable, "unavailable"),
    "unavailable-503": ((503, b'{"message":"Service Unavailable"}', JSON), Unavailable, "unavailable"),
    "timed-out-504": ((504, b'{"message":"Endpoint request timed out"}', JSON), Unavailable, "unavailable"),
    "html-502": ((502, b"<html><body>502 Bad Gateway</body></html>", {"Content-Type": "text/html"}), Unavailable, "unavailable"),
    "empty-503": ((503, b"", {}), Unavailable, "unavailable"),
}


@pytest.fixture
def canned():
    """A proxy that answers every request with the given ``(status, body, headers)``."""
    proxies: list[FaultyProxy] = []

    def make(answer) -> FaultyProxy:
        proxy = FaultyProxy("http://127.0.0.1:9", lambda method, path, n: answer)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def _client(url: str, retries: int = 0) -> LeaseFenceClient:
    return LeaseFenceClient(url, "t", retries=retries, backoff=0.001, timeout=10)


@pytest.mark.parametrize("name", GATEWAY_ANSWERS)
def test_a_gateway_body_is_the_typed_error_of_its_status(canned, name):
    answer, cls, code = GATEWAY_ANSWERS[name]
    proxy = canned(answer)
    with pytest.raises(cls) as raised:
        _client(proxy.url).get("op-1")
    error = raised.value
    assert type(error) is cls
    assert (error.status, error.code) == (answer[0], code)
    assert error.details == {"answered_by": "gateway"}
    assert error.message.startswith(f"HTTP {answer[0]} from the gateway: ")
    said = json.loads(answer[1])["message"] if answer[1].startswith(b"{") else None
    if said:
        assert said in error.message
    assert error.retryable is (cls is Unavailable)


def test_the_jwt_authorizers_reason_is_taken_from_its_challenge(canned):
    proxy = canned(GATEWAY_ANSWERS["jwt-authorizer-401"][0])
    with pytest.raises(Unauthorized, match="the token does not have a valid audience"):
        _client(proxy.url).claim("w-1")


@pytest.mark.parametrize(
    ("answer", "cls", "code"),
    [
        ((401, b'{"error":{"code":"unauthorized","message":"token expired"}}', JSON), Unauthorized, "unauthorized"),
        ((503, b'{"error":{"code":"unavailable","message":"busy"}}', JSON), Unavailable, "unavailable"),
        ((500, b'{"error":{"code":"internal_error","message":"internal error"}}', JSON), LeaseFenceError, "internal_error"),
    ],
    ids=["401", "503", "500"],
)
def test_the_services_own_bodies_are_told_apart_by_their_error_object(canned, answer, cls, code):
    proxy = canned(answer)
    with pytest.raises(cls) as raised:
        _client(proxy.url).get("op-1")
    error = raised.value
    assert type(error) is cls and (error.status, error.code) == (answer[0], code)
    assert error.message == json.loads(answer[1])["error"]["message"]
    assert "answered_by" not in error.details
    # The service's own 500 is a bug, not a busy moment: not retryable; API Gateway's 500 (a
    # failed invocation) is Unavailable, retried for the calls that are safe to repeat.
    assert error.retryable is (code == "unavailable")


@pytest.mark.parametrize("name", ["throttled-429", "integration-500", "timed-out-504", "html-502"])
def test_a_gateway_429_or_5xx_is_retried_like_the_services_503(stack, token, sdk, name):
    sdk.enqueue("gw-retry", "job", payload=1)
    answer = GATEWAY_ANSWERS[name][0]
    proxy = FaultyProxy(stack.base_url, lambda method, path, n: answer if n < 2 else None)
    try:
        assert LeaseFenceClient(proxy.url, token, retries=3, backoff=0.001).get("gw-retry").operation_id == "gw-retry"
        assert proxy.count("GET", "/v1/operations/gw-retry") == 3
    finally:
        proxy.close()


def test_the_http_worker_keeps_its_claim_through_gateway_throttling_and_timeouts(stack, token, sdk, tenant):
    """A worker over HTTP: its claim, heartbeats and completion are first answered by API Gateway
    (a 504 on the claim, 429 and 503 on heartbeats, a 504 on the completion). None of it is taken
    for lost ownership: the worker finishes the job, once."""
    sdk.enqueue("gw-job", "gw", {"n": 1})
    plan = {
        ("POST", "/v1/claims"): [GATEWAY_ANSWERS["timed-out-504"][0]],
        ("POST", "/v1/operations/gw-job/heartbeat"): [
            GATEWAY_ANSWERS["throttled-429"][0],
            GATEWAY_ANSWERS["unavailable-503"][0],
        ],
        ("POST", "/v1/operations/gw-job/complete"): [GATEWAY_ANSWERS["timed-out-504"][0]],
    }

    def answer(method, path, n):
        planned = plan.get((method, path), [])
        return planned[n] if n < len(planned) else None

    proxy = FaultyProxy(stack.base_url, answer)
    runs = []

    def handler(job):
        runs.append(job.fence)
        for _ in range(4):
            job.progress()
            time.sleep(0.06)
        return "done"

    try:
        client = LeaseFenceClient(proxy.url, token, retries=3, backoff=0.001)
        worker = Worker(HttpBackend(client, tenant), {"gw": FunctionHandler(handler)}, worker_id="w1",
                        lease_ms=30_000, heartbeat_interval_ms=50, idle_sleep_ms=20)
        job = worker.process(worker.backend.claim_next("w1", 30_000, ["gw"]))
        assert not job.cancelled.is_set(), job.lost_reason
    finally:
        proxy.close()
    assert runs == [1]
    assert proxy.count("POST", "/v1/claims") == 2
    assert proxy.count("POST", "/v1/operations/gw-job/heartbeat") >= 3
    op = sdk.get("gw-job")
    assert (op.state, op.fence, op.attempts, op.outcome_code) == ("succeeded", 1, 1, "done")
