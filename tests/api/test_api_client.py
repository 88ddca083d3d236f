"""The Python SDK: typed results and errors, and retries that stay safe when answers are lost."""

from __future__ import annotations

import pytest

from leasefence.api.errors import Forbidden, Unauthorized
from leasefence.client import Claim, LeaseFenceClient, Operation
from leasefence.errors import (
    InvalidInput,
    InvalidTransition,
    NotFound,
    PayloadConflict,
    PayloadTooLarge,
    StaleFence,
    Unavailable,
)
from tests.support.proxy import FaultyProxy


@pytest.fixture
def proxy_for(stack):
    proxies = []

    def make(plan) -> FaultyProxy:
        proxy = FaultyProxy(stack.base_url, plan)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


def _client(url: str, token: str, **kwargs) -> LeaseFenceClient:
    return LeaseFenceClient(url, token, retries=kwargs.pop("retries", 3), backoff=0.001, timeout=10, **kwargs)


# ---------------------------------------------------------------------------------- typed answers


def test_typed_results_for_the_whole_lifecycle(sdk):
    assert sdk.health() == {"status": "ok"}
    created = sdk.enqueue("sdk/1", "email", payload={"to": "a@example.com"}, max_attempts=2)
    assert created.created is True and isinstance(created.operation, Operation)
    assert created.operation.state == "queued" and created.operation.created_at.tzinfo is not None
    assert sdk.enqueue("sdk/1", "email", payload={"to": "a@example.com"}).created is False
    assert sdk.payload("sdk/1") == {"to": "a@example.com"}
    grant = sdk.claim("w-1", lease_seconds=30, job_types=["email"])
    assert isinstance(grant, Claim) and grant.operation_id == "sdk/1" and grant.fence == 1
    assert sdk.claim("w-1") is None
    expires = sdk.heartbeat("sdk/1", grant.fence, "w-1", lease_seconds=60, checkpoint={"sent": False})
    assert expires > grant.lease_expires_at
    done = sdk.complete("sdk/1", grant.fence, "sent")
    assert done.state == "succeeded" and done.outcome_code == "sent"
    assert sdk.get("sdk/1") == done
    page = sdk.list(state="succeeded", limit=10)
    assert [o.operation_id for o in page.operations] == ["sdk/1"] and page.next_cursor is None
    assert [o.operation_id for o in sdk.iter_operations(page_size=1)] == ["sdk/1"]


def test_park_fail_and_resolve(sdk):
    sdk.enqueue("sdk-p", "job", payload=[1])
    grant = sdk.claim("w", operation_id="sdk-p")
    assert sdk.quarantine("sdk-p", grant.fence, "bad input").state == "quarantined"
    assert sdk.resolve("sdk-p", "requeue", "fixed").state == "queued"
    grant = sdk.claim("w", operation_id="sdk-p")
    assert grant.fence == 2 and grant.reconcile_required
    assert sdk.fail("sdk-p", grant.fence, retryable=True, reason="busy", retry_after_seconds=60).state == "queued"
    sdk.enqueue("sdk-u", "job", payload=[2])
    grant = sdk.claim("w", operation_id="sdk-u")
    assert sdk.unknown("sdk-u", grant.fence, "timeout").state == "unknown"


def test_errors_are_the_domain_classes(stack, sdk, tenant):
    sdk.enqueue("sdk-e", "job", payload=1)
    with pytest.raises(PayloadConflict) as conflict:
        sdk.enqueue("sdk-e", "job", payload=2)
    assert conflict.value.status == 409 and conflict.value.code == "payload_conflict"
    with pytest.raises(NotFound):
        sdk.get("sdk-missing")
    with pytest.raises(InvalidInput) as invalid:
        sdk.enqueue("sdk-e2", "job", payload=1, max_attempts=0)
    assert invalid.value.status == 422
    with pytest.raises(PayloadTooLarge):
        sdk.enqueue("sdk-big", "job", payload="x" * (300 * 1024))
    with pytest.raises(StaleFence):
        sdk.complete("sdk-e", 3, "x")
    with pytest.raises(InvalidTransition):
        sdk.resolve("sdk-e", "succeeded")
    with pytest.raises(Unauthorized):
        LeaseFenceClient(stack.base_url, "bogus").get("sdk-e")
    with pytest.raises(Forbidden):
        LeaseFenceClient(stack.base_url, stack.token(tenant, ["leasefence/work"])).get("sdk-e")


# ---------------------------------------------------------------------------------- retries


def test_enqueue_retried_after_a_lost_answer_is_a_replay(proxy_for, token, sdk):
    proxy = proxy_for(lambda method, path, n: "drop" if method == "POST" and n == 0 else None)
    result = _client(proxy.url, token).enqueue("lost-1", "job", payload={"v": 1})
    assert result.created is False  # the first attempt created it; the retry was recognized
    assert proxy.count("POST", "/v1/operations") == 2
    assert sdk.get("lost-1").state == "queued"


def test_complete_retried_after_a_lost_answer_succeeds(proxy_for, token, sdk):
    sdk.enqueue("lost-2", "job", payload=1)
    grant = sdk.claim("w", operation_id="lost-2")
    proxy = proxy_for(lambda method, path, n: "drop" if path.endswith("/complete") and n == 0 else None)
    done = _client(proxy.url, token).complete("lost-2", grant.fence, "ok")
    assert done.state == "succeeded" and done.outcome_code == "ok"
    assert proxy.count("POST", "/v1/operations/lost-2/complete") == 2


def test_heartbeat_and_fail_are_retried_too(proxy_for, token, sdk):
    sdk.enqueue("lost-3", "job", payload=1)
    grant = sdk.claim("w", operation_id="lost-3")
    proxy = proxy_for(lambda method, path, n: "drop" if n == 0 and method == "POST" else None)
    client = _client(proxy.url, token)
    client.heartbeat("lost-3", grant.fence, "w")
    assert client.fail("lost-3", grant.fence, retryable=False, reason="no").state == "failed_terminal"


def test_resolve_retried_after_a_lost_answer_is_a_replay(proxy_for, token, sdk):
    """The resolve took effect, its answer was lost: the SDK sends it again (with the same
    request token) and gets the replay, not 409."""
    sdk.enqueue("lost-5", "job", payload=1)
    grant = sdk.claim("w", operation_id="lost-5")
    sdk.unknown("lost-5", grant.fence, "timeout")
    proxy = proxy_for(lambda method, path, n: "drop" if path.endswith("/resolve") and n == 0 else None)
    done = _client(proxy.url, token).resolve("lost-5", "requeue", "checked")
    assert done.state == "queued" and done.fence == 1
    assert proxy.count("POST", "/v1/operations/lost-5/resolve") == 2
    with pytest.raises(InvalidTransition):
        sdk.resolve("lost-5", "requeue", "checked")  # another call is another decision


def test_a_job_type_put_retried_after_a_lost_answer_says_it_changed(proxy_for, token, sdk):
    sdk.put_job_type("lost-type", {"target_class": "C", "max_attempts": 3})
    proxy = proxy_for(lambda method, path, n: "drop" if method == "PUT" and n == 0 else None)
    entry, changed = _client(proxy.url, token).put_job_type("lost-type", {"target_class": "C", "max_attempts": 4})
    assert (entry.version, entry.spec["max_attempts"], changed) == (2, 4, True)
    assert proxy.count("PUT", "/v1/job-types/lost-type") == 2
    assert sdk.put_job_type("lost-type", {"target_class": "C", "max_attempts": 4}) == (entry, False)


@pytest.mark.parametrize("named", [False, True], ids=["claim-next", "named"])
def test_a_claim_whose_answer_was_lost_is_resent_and_answered_with_the_same_claim(proxy_for, token, sdk, named):
    """The claim was made, its answer lost: the SDK resends the request with the same claim
    token and gets that claim (same fence, no attempt spent), on a final attempt too (without
    it, the claim would lapse and the operation end unknown)."""
    sdk.enqueue("lost-4", "job", payload=1, target_class="D")  # one attempt
    proxy = proxy_for(lambda method, path, n: "drop" if path == "/v1/claims" and n == 0 else None)
    client = _client(proxy.url, token)
    grant = client.claim("w", lease_seconds=30, operation_id="lost-4" if named else None)
    assert grant is not None and (grant.operation_id, grant.fence, grant.attempts) == ("lost-4", 1, 1)
    assert proxy.count("POST", "/v1/claims") == 2
    assert grant.claim_token and grant.lease_ms == 30_000 and grant.lease_seconds == 30
    op = sdk.get("lost-4")
    assert (op.state, op.fence, op.attempts, op.lease_owner) == ("claimed", 1, 1, "w")
    assert op.lease_expires_at == grant.lease_expires_at
    # When every resend is lost too, the caller resends with the claim's token itself.
    sdk.enqueue("lost-5", "job", payload=1, target_class="D")
    proxy = proxy_for(lambda method, path, n: "drop" if path == "/v1/claims" and n < 4 else None)
    client = _client(proxy.url, token)
    with pytest.raises(Unavailable):
        client.claim("w", claim_token="tok-5", operation_id="lost-5" if named else None)
    again = client.claim("w", claim_token="tok-5", operation_id="lost-5" if named else None)
    assert again is not None and (again.operation_id, again.fence, again.attempts) == ("lost-5", 1, 1)
    assert client.claim("w", claim_token="tok-5", operation_id="lost-5" if named else None) == again
    assert sdk.complete("lost-5", 1, "sent").state == "succeeded"
    assert client.claim("w", claim_token="tok-5", operation_id="lost-5" if named else None) is None


def test_5xx_and_429_are_retried_with_backoff(proxy_for, token, sdk):
    sdk.enqueue("busy-1", "job", payload=1)
    proxy = proxy_for(lambda method, path, n: 503 if n < 2 else None)
    assert _client(proxy.url, token).get("busy-1").operation_id == "busy-1"
    assert proxy.count("GET", "/v1/operations/busy-1") == 3
    # A claim is retried on 429 and on 503 too (it carries a claim token: a resend of a claim
    # that was made answers that claim).
    proxy = proxy_for(lambda method, path, n: 429 if n == 0 else None)
    assert _client(proxy.url, token).claim("w").operation_id == "busy-1"
    proxy = proxy_for(lambda method, path, n: 503)
    with pytest.raises(Unavailable) as error:
        _client(proxy.url, token).claim("w")
    assert error.value.status == 503 and proxy.count("POST", "/v1/claims") == 4
    # Retries end: the last answer is raised.
    proxy = proxy_for(lambda method, path, n: 503)
    with pytest.raises(Unavailable):
        _client(proxy.url, token, retries=2).get("busy-1")
    assert proxy.count("GET", "/v1/operations/busy-1") == 3


@pytest.mark.parametrize("base_url", ["file:///etc/passwd", "ftp://example.com", "localhost:8000"])
def test_only_http_base_urls_are_accepted(base_url):
    with pytest.raises(ValueError, match="http:// or https://"):
        LeaseFenceClient(base_url, "t")


def test_connection_refused_is_retried_then_unavailable():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(Unavailable):
        LeaseFenceClient(f"http://127.0.0.1:{port}", "t", retries=1, backoff=0.001).claim("w")
