"""Unit tests of the API layer's pieces: canonical payloads and their keys, the strict JSON reader,
the caller from the authorizer context, the error mapping, settings, the sweeper loop, the event
builder, and the cold-import promise (nothing heavy, nothing connecting)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from leasefence import privacy
from leasefence.api import errors
from leasefence.api.app import strict_json_loads
from leasefence.api.errors import Forbidden, Unauthorized
from leasefence.api.security import OPERATE, PRODUCE, WORK, caller_from_event, match_route
from leasefence.errors import (
    InvalidInput,
    LeaseFenceError,
    NotFound,
    PayloadMissing,
    PayloadTooLarge,
    StoreMisconfigured,
    Unavailable,
)
from leasefence_tools.local.server import http_api_event, load_function
from leasefence.payloads import MAX_PAYLOAD_BYTES, PayloadStore, canonicalize
from leasefence.settings import Runtime, Settings

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------- payloads


def test_canonical_hash_ignores_key_order_whitespace_and_number_spelling():
    a = canonicalize(json.loads('{"b": [1, 2.0, {"y": 1, "x": 2}], "a": "é"}'))
    b = canonicalize(json.loads('{"a":"\\u00e9","b":[1,2,{"x":2,"y":1}]}'))
    assert a == b
    assert a.body == '{"a":"é","b":[1,2,{"x":2,"y":1}]}'.encode()
    assert a.hash.startswith("sha256:") and len(a.hash) == 71
    assert canonicalize({"a": 1}).hash != canonicalize({"a": 2}).hash


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), 2**60, "\ud800", {1: 2}])
def test_values_without_a_canonical_form_are_invalid_input(value):
    with pytest.raises(InvalidInput) as raised:
        canonicalize(value)
    assert not isinstance(raised.value, PayloadTooLarge)


def test_the_size_limit_is_on_canonical_bytes():
    assert len(canonicalize("x" * (MAX_PAYLOAD_BYTES - 2)).body) == MAX_PAYLOAD_BYTES
    with pytest.raises(PayloadTooLarge):
        canonicalize("x" * (MAX_PAYLOAD_BYTES - 1))
    with pytest.raises(PayloadTooLarge):
        canonicalize("é" * (MAX_PAYLOAD_BYTES // 2))  # 2 bytes each in UTF-8


def test_payload_keys_are_deterministic_tenant_scoped_and_unguessable():
    store = PayloadStore("bucket", secret="s3cret")
    h = canonicalize({"a": 1}).hash
    key = store.key_for("tenant-a", "op-1", h)
    assert key == store.key_for("tenant-a", "op-1", h)  # a replay addresses the same object
    assert key.startswith("payloads/") and key.endswith(".json")
    assert "tenant-a" not in key and "op-1" not in key
    assert store.key_for("tenant-b", "op-1", h) != key
    assert store.key_for("tenant-a", "op-2", h) != key
    assert store.key_for("tenant-a", "op-1", canonicalize({"a": 2}).hash) != key
    assert key.split("/")[1] == store.key_for("tenant-a", "op-9", h).split("/")[1]  # one prefix per tenant
    assert key.split("/")[1] != store.key_for("tenant-b", "op-1", h).split("/")[1]
    assert PayloadStore("bucket", secret="other").key_for("tenant-a", "op-1", h) != key
    # Length-prefixed parts: moving characters between ids changes the key.
    assert store.key_for("ab", "c", h) != store.key_for("a", "bc", h)
    ref = store.ref_for(key)
    assert store.owns("tenant-a", "op-1", h, ref)
    assert not store.owns("tenant-b", "op-1", h, ref)
    assert not store.owns("tenant-a", "op-1", h, "s3://bucket/elsewhere")
    assert not store.owns("tenant-a", "op-1", h, None)


def test_payload_store_put_get_and_replay(aws):
    s3 = aws.client("s3")
    s3.create_bucket(Bucket="unit-payloads")
    store = PayloadStore("unit-payloads", secret="k", client=s3)
    payload = canonicalize({"z": 1, "a": [True, None]})
    first = store.put("t", "o", payload)
    assert first.created is True
    again = store.put("t", "o", payload)
    assert again.created is False and again.ref == first.ref  # If-None-Match: nothing overwritten
    assert store.read(first.ref, payload.hash) == payload.body
    with pytest.raises(PayloadMissing):  # another operation's key was never written
        store.read(store.ref_for(store.key_for("t", "other", payload.hash)), payload.hash)
    with pytest.raises(PayloadMissing):  # bytes that do not match the operation's hash
        store.read(first.ref, "sha256:" + "0" * 64)
    store.delete_quietly(first.key)
    with pytest.raises(PayloadMissing):  # gone: an error, never None
        store.read(first.ref, payload.hash)
    store.delete(first.ref)  # deleting what is gone is harmless
    store.delete_quietly("payloads/never/existed.json")  # best effort: never raises
    with pytest.raises(LeaseFenceError):  # a ref of another bucket is refused
        store.read("s3://elsewhere/payloads/x.json", payload.hash)


class _RefusingS3:
    """An S3 client whose every call fails with one error code, as S3 answers it."""

    def __init__(self, code: str, status: int) -> None:
        self.code, self.status = code, status

    def _refuse(self, operation: str, **_kwargs):
        from botocore.exceptions import ClientError

        raise ClientError(
            {"Error": {"Code": self.code, "Message": "injected"},
             "ResponseMetadata": {"HTTPStatusCode": self.status}},
            operation,
        )

    def get_object(self, **kwargs):
        self._refuse("GetObject", **kwargs)

    def put_object(self, **kwargs):
        self._refuse("PutObject", **kwargs)

    def delete_object(self, **kwargs):
        self._refuse("DeleteObject", **kwargs)


@pytest.mark.parametrize(
    ("code", "status"),
    [("AccessDenied", 403), ("KMS.DisabledException", 400), ("KMS.KMSInvalidStateException", 400),
     ("InvalidObjectState", 403)],
)
def test_a_payload_store_that_refuses_access_is_unavailable_and_counted_never_missing(code, status):
    """A permission, KMS key or archived-object fault is an operator's fault to fix: 503
    ``unavailable`` (the worker neither quarantines nor fails the job), counted as
    ``PayloadAccessDenied`` for the alarm; never ``payload_missing``."""
    from leasefence.errors import PayloadAccessDenied

    counted = []
    store = PayloadStore("bucket", secret="k", client=_RefusingS3(code, status),
                         events=lambda name, value: counted.append((name, value)))
    payload = canonicalize({"a": 1})
    ref = store.ref_for(store.key_for("tenant-x", "op-secret-id", payload.hash))
    with pytest.raises(Unavailable) as refused:
        store.read(ref, payload.hash)
    assert not isinstance(refused.value, PayloadMissing)
    assert isinstance(refused.value, PayloadAccessDenied)
    assert (refused.value.status, refused.value.code, refused.value.retryable) == (503, "unavailable", True)
    assert code in refused.value.message and "op-secret-id" not in refused.value.message
    assert errors.describe(refused.value) == (503, errors.error_body("unavailable", refused.value.message))
    with pytest.raises(PayloadAccessDenied):
        store.put("tenant-x", "op-secret-id", payload)
    with pytest.raises(PayloadAccessDenied):
        store.delete(ref)
    assert counted == [("PayloadAccessDenied", 1)] * 3


def test_only_a_missing_object_is_a_missing_payload():
    counted = []
    store = PayloadStore("bucket", secret="k", client=_RefusingS3("NoSuchKey", 404),
                         events=lambda name, value: counted.append((name, value)))
    payload = canonicalize({"a": 1})
    with pytest.raises(PayloadMissing):
        store.read(store.ref_for(store.key_for("t", "o", payload.hash)), payload.hash)
    assert counted == []


# ---------------------------------------------------------------------------------- JSON


@pytest.mark.parametrize(
    "text", ["NaN", '{"a": Infinity}', '{"a": 1, "a": 2}', "[" * 50_000, "1" * 5000, '{"a": 1'],
    ids=["nan", "infinity", "duplicate", "deep", "huge-int", "truncated"],
)
def test_strict_json_refuses_what_is_not_i_json(text):
    with pytest.raises(json.JSONDecodeError):
        strict_json_loads(text)


def test_strict_json_reads_json():
    assert strict_json_loads('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}


# ---------------------------------------------------------------------------------- security


def _event(claims=None, scopes=None):
    context = {"http": {"method": "GET"}}
    if claims is not None:
        context["authorizer"] = {"jwt": {"claims": claims, "scopes": scopes}}
    return {"requestContext": context}


def test_a_shadow_tenant_needs_the_shadow_scope():
    """``shadow:`` tenants are reserved for shadow mode: an ordinary token for one is 403."""
    with pytest.raises(Forbidden, match="leasefence/shadow"):
        caller_from_event(_event({"tenant_id": "shadow:acme", "scope": f"{PRODUCE} {WORK} {OPERATE}"}))
    caller = caller_from_event(_event({"tenant_id": "shadow:acme", "scope": f"{WORK} leasefence/shadow"}))
    assert caller.tenant_id == "shadow:acme" and caller.require(WORK) is caller
    assert caller_from_event(_event({"tenant_id": "shadowy", "scope": WORK})).tenant_id == "shadowy"


def test_caller_from_the_authorizer_context():
    caller = caller_from_event(_event({"tenant_id": "t1", "scope": f"{PRODUCE} {WORK}"}))
    assert caller.tenant_id == "t1" and caller.scopes == {PRODUCE, WORK}
    assert caller.require(PRODUCE) is caller and caller.require(None) is caller
    with pytest.raises(Forbidden):
        caller.require(OPERATE)
    # API Gateway's stringified array claim, and the authorizer's own scopes list.
    assert caller_from_event(_event({"tenant_id": "t", "scope": f"[{OPERATE} {WORK}]"})).scopes == {OPERATE, WORK}
    assert caller_from_event(_event({"tenant_id": "t"}, scopes=[WORK])).scopes == {WORK}


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"requestContext": None},
        _event(None),
        _event({}),
        _event({"sub": "x", "scope": PRODUCE}),
        _event({"tenant_id": ""}),
        _event({"tenant_id": "a\nb"}),
        _event({"tenant_id": "x" * 257}),
        _event({"tenant_id": 7}),
    ],
)
def test_no_usable_tenant_is_unauthorized(event):
    with pytest.raises(Unauthorized):
        caller_from_event(event)


def test_route_matching_uses_the_raw_path():
    spec, params = match_route("post", "/v1/operations/a%2Fb/complete")
    assert spec.key == "POST /v1/operations/{id}/complete" and params == {"id": "a%2Fb"}
    assert match_route("GET", "/v1/operations/a/b") is None
    assert match_route("PUT", "/v1/operations") is None


# ---------------------------------------------------------------------------------- errors


def test_error_mapping():
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

    assert errors.describe(NotFound("gone")) == (404, {"error": {"code": "not_found", "message": "gone"}})
    assert errors.describe(Unavailable("busy"))[0] == 503
    assert errors.describe(Unauthorized("no"))[0] == 401
    assert errors.describe(StoreMisconfigured("table missing")) == (
        500, {"error": {"code": "internal_error", "message": "internal error"}}
    )
    assert errors.describe(LeaseFenceError("store error X"))[1]["error"]["message"] == "internal error"
    status, body = errors.describe(KeyError("tenant-42"))
    assert status == 500 and "tenant-42" not in json.dumps(body)
    bad_json = RequestValidationError([{"type": "json_invalid", "loc": ("body", 3), "msg": "x"}])
    assert errors.describe(bad_json)[0] == 400
    invalid = RequestValidationError([{"type": "missing", "loc": ("body", "fence"), "msg": "Field required"}])
    status, body = errors.describe(invalid)
    assert status == 422 and body["error"]["message"] == "fence: Field required"
    result = errors.to_proxy_result(Forbidden("scope"))
    assert result["statusCode"] == 403 and json.loads(result["body"])["error"]["code"] == "forbidden"


# ---------------------------------------------------------------------------------- settings


def test_settings_from_env():
    settings = Settings.from_env(
        {"LEASEFENCE_TABLE": "t", "LEASEFENCE_DUE_SHARDS": "8", "LEASEFENCE_SWEEP_SHARDS": "2",
         "LEASEFENCE_RETENTION_DAYS": "7", "AWS_DEFAULT_REGION": "eu-west-1"}
    )
    assert settings.table_spec.table_name == "t" and settings.table_spec.due_shards == 8
    assert settings.table_spec.sweep_shards == 2 and settings.payload_retention_days == 7 and settings.region == "eu-west-1"
    assert Settings.from_env({}).payload_bucket == "leasefence-payloads"
    with pytest.raises(ValueError):
        Settings.from_env({"LEASEFENCE_DUE_SHARDS": "zero"})
    with pytest.raises(ValueError):
        Settings.from_env({"LEASEFENCE_DUE_SHARDS": "0"})
    # The fence epoch (raised after a point-in-time restore) reaches the engine; 0 is a value.
    assert Settings.from_env({}).engine_options["fence_epoch"] == 0
    assert Settings.from_env({"LEASEFENCE_FENCE_EPOCH": "2"}).engine_options["fence_epoch"] == 2
    with pytest.raises(ValueError):
        Settings.from_env({"LEASEFENCE_FENCE_EPOCH": "-1"})


def test_runtime_is_lazy_and_loads_the_hash_key_from_secrets_manager(aws):
    secrets = aws.client("secretsmanager")
    arn = secrets.create_secret(Name="unit-log-hash-key", SecretString="k" * 32)["ARN"]
    runtime = Runtime(Settings(log_hash_key_param=arn))
    assert runtime._clients == {} and runtime._engine is None  # nothing built yet
    runtime._clients["secretsmanager"] = secrets  # (the local endpoint)
    saved = privacy._KEY
    try:
        runtime.prepare()
        assert privacy._KEY == b"k" * 32
        runtime.prepare()  # once per container
        # Payload object names never depend on the log-hash key (rotating it must orphan nothing).
        unkeyed = PayloadStore("leasefence-payloads")
        assert runtime.payloads.key_for("t", "o", "h") == unkeyed.key_for("t", "o", "h")
    finally:
        privacy.set_key(saved) if saved is not None else setattr(privacy, "_KEY", None)


# ---------------------------------------------------------------------------------- sweeper


class _FakeEngine:
    def __init__(self, batches):
        self.batches = list(batches)
        self.calls = 0

    def sweep(self, limit):
        self.calls += 1
        examined, swept, *expired = self.batches.pop(0) if self.batches else (0, 0)
        return SimpleNamespace(
            examined=examined, swept=swept, repaired=0, approvals_expired=sum(expired)
        )


def test_sweeper_loop_is_bounded():
    sweep = load_function("sweeper").sweep
    engine = _FakeEngine([(10, 10), (10, 9), (3, 3)])
    assert sweep(engine, 10, 50, lambda: 60_000) == {
        "batches": 3, "examined": 23, "swept": 22, "repaired": 0, "approvals_expired": 0,
        "stopped": "drained",
    }
    # Expired approvals count as progress: a full batch of them is followed by the next batch.
    engine = _FakeEngine([(10, 0, 10), (4, 0, 4)])
    totals = sweep(engine, 10, 50, lambda: 60_000)
    assert (totals["batches"], totals["approvals_expired"]) == (2, 14)
    engine = _FakeEngine([(10, 10)] * 100)
    assert sweep(engine, 10, 4, lambda: 60_000)["stopped"] == "max_batches" and engine.calls == 4
    clock = iter([60_000, 30_000, 4_000])
    engine = _FakeEngine([(10, 10)] * 100)
    assert sweep(engine, 10, 50, lambda: next(clock))["stopped"] == "time" and engine.calls == 2
    engine = _FakeEngine([(10, 0)] * 100)  # a full batch that changed nothing: do not spin on it
    assert sweep(engine, 10, 50, lambda: 60_000)["batches"] == 1


# ---------------------------------------------------------------------------------- local events


def test_http_api_event_shape():
    event = http_api_event(
        "POST",
        "/v1/operations/a%2fb%20c/complete?x=1&x=2&y=%C3%A9",
        [("Content-Type", "application/json"), ("X-Multi", "a"), ("x-multi", "b"), ("Cookie", "s=1; t=2")],
        b'{"fence": 1}',
        {"tenant_id": "t", "scope": "a b", "exp": 1700000000, "admin": True, "groups": ["g1", "g2"]},
    )
    assert event["version"] == "2.0" and event["routeKey"] == "POST /v1/operations/{id}/complete"
    assert event["rawPath"] == "/v1/operations/a%2Fb%20c/complete"
    assert event["pathParameters"] == {"id": "a/b c"}
    assert event["queryStringParameters"] == {"x": "1,2", "y": "é"}
    assert event["headers"]["x-multi"] == "a,b" and event["cookies"] == ["s=1", "t=2"]
    claims = event["requestContext"]["authorizer"]["jwt"]["claims"]
    assert claims == {"tenant_id": "t", "scope": "a b", "exp": "1700000000", "admin": "true", "groups": "[g1 g2]"}
    assert event["requestContext"]["authorizer"]["jwt"]["scopes"] == ["a", "b"]
    assert event["body"] == '{"fence": 1}' and event["isBase64Encoded"] is False
    binary = http_api_event("POST", "/v1/claims", [], b"\xff\xfe", None)
    assert binary["isBase64Encoded"] is True and "authorizer" not in binary["requestContext"]


def test_a_base64_body_that_is_not_utf8_is_400(stack):
    event = http_api_event("POST", "/v1/claims", [], b"\xff\xfe", {"tenant_id": "t", "scope": WORK})
    result = stack.invoker.invoke("api", event)
    assert result["statusCode"] == 400 and json.loads(result["body"])["error"]["code"] == "invalid_request"


# ---------------------------------------------------------------------------------- cold import


def test_cold_import_is_small_and_connects_to_nothing():
    probe = """
import json, sys, time, importlib.util
started = time.perf_counter()
for name in ("api", "sweeper"):
    spec = importlib.util.spec_from_file_location(name + "_handler", f"functions/{name}/handler.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
elapsed = time.perf_counter() - started
import leasefence.settings as settings
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"moto", "typer", "jwt", "rich", "werkzeug", "schemathesis",
                                                          "requests", "hypothesis", "aws_cdk"})
print(json.dumps({"elapsed": elapsed, "heavy": heavy, "runtime": settings._runtime is not None}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEFENCE_")}
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["heavy"] == [], facts
    assert facts["runtime"] is False  # no settings read, no client, no engine at import
    assert facts["elapsed"] < 5, facts


# ---------------------------------------------------------------------------------- tenant isolation


def test_tenant_isolation_uses_the_tenant_role_per_tenant(aws):
    from leasefence.schema import TableSpec

    spec = aws.create_tables(TableSpec(table_name="isolated-ops"))
    runtime = Runtime(
        Settings(
            table_name=spec.table_name,
            dynamodb_endpoint=aws.endpoint,
            region="us-east-1",
            tenant_role_arn="arn:aws:iam::123456789012:role/leasefence-tenant",
        )
    )
    calls = []
    sts = aws.client("sts")
    original = sts.assume_role

    def assume_role(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    sts.assume_role = assume_role
    runtime._clients["sts"] = sts  # (the local endpoint)
    acme = runtime.engine_for("acme")
    assert runtime.engine_for("acme") is acme  # cached per container
    assert runtime.engine_for("globex") is not acme
    assert [c["Tags"] for c in calls] == [[{"Key": "tenant_id", "Value": "acme"}], [{"Key": "tenant_id", "Value": "globex"}]]
    assert all(c["RoleArn"].endswith("role/leasefence-tenant") and "acme" not in c["RoleSessionName"] for c in calls)
    credentials = acme.store.client._request_signer._credentials.get_frozen_credentials()
    assert credentials.token  # a role session, not the function's own credentials
    result = acme.enqueue("acme", "op-1", "job", "sha256:" + "0" * 64, "s3://elsewhere/x")
    assert result.created and acme.get("acme", "op-1").operation_id == "op-1"
    with pytest.raises(Forbidden):
        runtime.engine_for("acme#0")  # not a valid session tag value: refused, not guessed at
    plain = Runtime(Settings())
    assert plain.engine_for("acme") is plain.engine_for("globex") is plain.engine  # no isolation: one engine
