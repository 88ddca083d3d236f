"""Callers inside AWS, through the IAM-authorized HTTP API (the construct's ``iam_tenant``): the
path's prefix names the scope IAM granted, the tenant is the deployment's IAM tenant, the
identity is the signing principal. Anything else that looks like an IAM request is refused."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest
from tests.support.api import Api, enqueue, new_tenant

from leasefence.api.security import APPROVE, IAM_PREFIXES, ROUTES, iam_caller, iam_request
from leasefence_tools.local.tokens import ALL_SCOPES
from leasefence.client import LeaseFenceClient, sigv4_signer
from leasefence_tools.local.server import LambdaContext, http_api_event, load_function

IAM_API_ID = "iamapi0001"
PRINCIPAL = "arn:aws:sts::111122223333:assumed-role/acme-billing/i-0abc"


@pytest.fixture
def iam_tenant(stack, monkeypatch) -> str:
    """The deployment's IAM API and its tenant, as the construct sets them on the API function."""
    tenant = new_tenant()
    monkeypatch.setenv("LEASEFENCE_IAM_TENANT", tenant)
    monkeypatch.setenv("LEASEFENCE_IAM_API_ID", IAM_API_ID)
    return tenant


def _call(method: str, path: str, body: Any = None, *, api_id: str = IAM_API_ID,
          principal: str = PRINCIPAL) -> tuple[int, Any]:
    """One request as the IAM API hands it to the API function (payload v2, ``authorizer.iam``)."""
    data = json.dumps(body).encode() if body is not None else None
    event = http_api_event(method, path, [("content-type", "application/json")], data, claims=None)
    event["requestContext"]["apiId"] = api_id
    event["requestContext"]["authorizer"] = {"iam": {
        "accessKey": "ASIAEXAMPLE", "accountId": "111122223333", "callerId": "AROAEXAMPLE:i-0abc",
        "principalOrgId": None, "userArn": principal, "userId": "AROAEXAMPLE:i-0abc",
    }}
    result = load_function("api").lambda_handler(event, LambdaContext("leasefence-api", 29_000))
    return result["statusCode"], json.loads(result["body"]) if result.get("body") else None


def test_each_scope_has_its_prefix() -> None:
    assert IAM_PREFIXES == {s.split("/")[1]: s for s in ALL_SCOPES}
    assert set(IAM_PREFIXES) == {"produce", "work", "operate", "approve"}
    assert {r.scope for r in ROUTES if r.scope} == set(IAM_PREFIXES.values())


def test_an_iam_caller_enqueues_and_works_for_the_iam_tenant(stack, iam_tenant) -> None:
    status, body = _call("POST", "/produce/v1/operations",
                         {"operation_id": "iam-1", "job_type": "job", "payload": {"n": 1}})
    assert status == 201, body
    status, body = _call("GET", "/produce/v1/operations/iam-1")
    assert status == 200 and body["operation_id"] == "iam-1"
    # The operation is the IAM tenant's (a JWT caller of that tenant sees it, another does not).
    assert Api(stack.base_url, stack.token(iam_tenant, ALL_SCOPES)).get("/v1/operations/iam-1").status == 200
    assert Api(stack.base_url, stack.token(new_tenant(), ALL_SCOPES)).get("/v1/operations/iam-1").status == 404
    status, body = _call("POST", "/work/v1/claims", {"worker_id": "w-iam", "job_types": ["job"],
                                                   "operation_id": "iam-1"})
    assert status == 200, body
    fence = body["claim"]["fence"]
    status, body = _call("POST", "/work/v1/operations/iam-1/complete", {"fence": fence, "outcome_code": "ok"})
    assert status == 200 and body["operation"]["state"] == "succeeded", body


def test_the_caller_is_the_iam_tenant_with_one_scope_as_the_signing_principal(iam_tenant) -> None:
    event = {"requestContext": {"apiId": IAM_API_ID, "authorizer": {"iam": {"userArn": PRINCIPAL}}}}
    assert iam_request(event, "/approve/v1/operations/x/approve") == (APPROVE, "/v1/operations/x/approve")
    caller = iam_caller(event, APPROVE)
    # The principal is the identity: an operation it enqueued cannot be approved by it.
    assert (caller.tenant_id, caller.scopes, caller.subject) == (iam_tenant, frozenset({APPROVE}), PRINCIPAL)
    assert iam_request({"requestContext": {"authorizer": {"jwt": {"claims": {}}}}}, "/work/v1/claims") is None


def test_a_prefix_grants_only_its_own_scope(stack, iam_tenant) -> None:
    """IAM granted the principal /produce/*: it cannot claim by calling the claims route under
    that prefix (403), nor list operations (operate)."""
    assert _call("POST", "/produce/v1/claims", {"worker_id": "w"})[0] == 403
    assert _call("GET", "/produce/v1/operations")[0] == 403
    assert _call("POST", "/work/v1/operations", {"operation_id": "x", "job_type": "j", "payload": 1})[0] == 403
    assert _call("GET", "/operate/v1/operations")[0] == 200
    # A route another scope opens too: an approver passes the scope gate under /approve (then the
    # route lets it read gated operations only: this one was not gated).
    assert _call("POST", "/produce/v1/operations", {"operation_id": "p-1", "job_type": "j", "payload": 1})[0] == 201
    status, body = _call("GET", "/approve/v1/operations/p-1")
    assert status == 403 and "approval gate" in body["error"]["message"], body
    status, body = _call("GET", "/work/v1/operations/p-1")
    assert status == 403 and "lacks the scope" in body["error"]["message"], body


def test_a_shadow_tenant_is_never_the_iam_tenant(stack, iam_tenant, monkeypatch) -> None:
    monkeypatch.setenv("LEASEFENCE_IAM_TENANT", "shadow:" + iam_tenant)
    status, body = _call("GET", "/produce/v1/operations/x")
    assert status == 403 and body["error"]["code"] == "forbidden"


@pytest.mark.parametrize("path", ["/v1/operations/x", "/admin/v1/operations/x", "/produce", "/produce/"])
def test_a_path_without_a_scope_prefix_is_refused(stack, iam_tenant, path) -> None:
    status, body = _call("GET", path)
    assert status == 401 and body["error"]["code"] == "unauthorized"


def test_iam_requests_from_another_api_or_without_the_option_are_refused(stack, iam_tenant, monkeypatch, api) -> None:
    enqueue(api, "jwt-1")
    assert _call("GET", "/produce/v1/operations/jwt-1", api_id="someone-elses-api")[0] == 401
    monkeypatch.delenv("LEASEFENCE_IAM_TENANT")
    assert _call("GET", "/produce/v1/operations/jwt-1")[0] == 401
    monkeypatch.delenv("LEASEFENCE_IAM_API_ID")
    assert _call("GET", "/produce/v1/operations/jwt-1")[0] == 401


def test_jwt_callers_are_unchanged_when_the_iam_api_exists(stack, iam_tenant, api) -> None:
    assert enqueue(api, "jwt-2").status == 201
    assert api.get("/v1/operations/jwt-2").status == 200
    assert api.get("/produce/v1/operations/jwt-2").status == 404  # no prefixes on the JWT API


# ----------------------------------------------------------------------------- the client, signed


class _Recorder(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received.append((self.command, self.path, dict(self.headers.items()), body))
        self.send_response(204)  # nothing claimable
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        return


def test_the_client_signs_requests_for_the_iam_api_with_sigv4() -> None:
    """A worker inside AWS: its client's base URL is the IAM API's /work prefix, each request is
    signed (service execute-api, the session token sent along), and the signature is the one
    SigV4 gives for exactly what arrived."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    received: list[Any] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Recorder,), {"received": received}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
    base = f"http://127.0.0.1:{server.server_address[1]}/work"
    try:
        client = LeaseFenceClient(base, signer=sigv4_signer("eu-west-1", credentials), retries=0)
        assert client.claim("worker-1", job_types=["job"]) is None
    finally:
        server.shutdown()
        server.server_close()
    ((method, path, headers, body),) = received
    assert (method, path) == ("POST", "/work/v1/claims")
    authorization = headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert headers["X-Amz-Security-Token"] == "session-token"
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert "host" in signed and "x-amz-date" in signed
    again = AWSRequest(method=method, url=f"http://{headers['Host']}{path}", data=body,
                       headers={k: v for k, v in headers.items() if k.lower() in signed})
    again.context["timestamp"] = headers["X-Amz-Date"]
    auth = SigV4Auth(credentials, "execute-api", "eu-west-1")
    signature = auth.signature(auth.string_to_sign(again, auth.canonical_request(again)), again)
    assert authorization.endswith(f"Signature={signature}")
