"""Every route of the contract and each status code it names, over HTTP against the local stack."""

from __future__ import annotations

import hashlib
import json
import re
import time
from datetime import datetime

import pytest
import rfc8785
from tests.support.api import claim, claimed, enqueue, op_path

HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
RFC3339_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
OPERATION_FIELDS = {
    "operation_id", "job_type", "state", "fence", "attempts", "max_attempts", "target_class", "payload_hash",
    "payload_ref", "outcome_code", "lease_owner", "lease_expires_at", "created_at", "updated_at",
    "payload_state", "erased_at", "job_type_version",  # extensions: docs/api-contract-extensions.md
    "approval_expires_at", "approved_by",  # extensions: the approval gate
    "enqueued_by", "reason", "intent", "checkpoint",  # extensions: the operator console (issue 25)
}
CLAIM_FIELDS = {
    "operation_id", "job_type", "fence", "attempts", "lease_expires_at", "payload_ref", "payload_hash",
    "target_class", "reconcile_required", "checkpoint",
    "intent",  # extension: docs/api-contract-extensions.md
    "claimed_at", "lease_ms", "lease_seconds",  # extension: the lease as granted
    "payload",  # extension: the claim answer carries the stored payload
    "traceparent", "tracestate",  # extension: the trace context to continue (issue 36)
}


def ms(stamp: str) -> int:
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000)


def sha(value) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def assert_error(reply, status: int, code: str) -> None:
    assert reply.status == status, reply.text
    body = reply.json
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert reply.headers.get("Content-Type", "").startswith("application/json")


# ---------------------------------------------------------------------------------- health


def test_health_is_open(api):
    reply = api.get("/v1/health", token=None)
    assert reply.status == 200
    assert reply.json == {"status": "ok"}


def test_unknown_route_is_404_in_the_contract_shape(api):
    assert_error(api.get("/v1/nothing-here"), 404, "not_found")
    assert_error(api.call("PATCH", "/v1/operations/x/nothing"), 404, "not_found")
    assert_error(api.get("/v1/nothing-here", token=None), 404, "not_found")  # no route, no authorizer


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/operations/x", "GET"),
        ("PUT", "/v1/operations", "GET, POST"),
        ("GET", "/v1/claims", "POST"),
        ("PATCH", "/v1/job-types/refund", "DELETE, GET, PUT"),
        ("OPTIONS", "/v1/settings", "GET, PUT"),
        ("TRACE", "/v1/health", "GET"),
        ("QUERY", "/v1/operations/x/history", "GET"),
        ("GET", "/v1/operations/x/complete", "POST"),
    ],
)
def test_an_undeclared_method_on_a_known_path_is_405_with_allow(api, method, path, allow):
    # Before any token is read (a 405 tells nothing the OpenAPI document does not), and writing nothing.
    for token in (True, None):
        reply = api.call(method, path, {"fence": 1}, token=token)
        assert_error(reply, 405, "method_not_allowed")
        assert reply.headers["Allow"] == allow
    assert_error(api.get("/v1/operations/x"), 404, "not_found")


# ---------------------------------------------------------------------------------- enqueue


def test_enqueue_creates_then_replays(api):
    payload = {"amount": 1200, "currency": "EUR", "items": [1, 2, 3]}
    first = api.post("/v1/operations", {"operation_id": "order-1", "job_type": "charge", "payload": payload})
    assert first.status == 201, first.text
    body = first.json
    assert body["created"] is True
    op = body["operation"]
    assert set(op) == OPERATION_FIELDS
    assert op["operation_id"] == "order-1" and op["job_type"] == "charge"
    assert op["state"] == "queued" and op["fence"] == 0 and op["attempts"] == 0
    assert op["max_attempts"] == 5 and op["target_class"] == "C"
    assert op["payload_hash"] == sha(payload)
    assert op["payload_ref"] is None  # kept in the operation's item (payload_state "stored"): no object
    assert op["payload_state"] == "stored" and op["outcome_code"] is None and op["lease_owner"] is None
    assert op["lease_expires_at"] is None
    assert RFC3339_RE.match(op["created_at"]) and RFC3339_RE.match(op["updated_at"])

    # Same id, same canonical JSON (other key order, other whitespace): a replay.
    raw = '{ "payload" : {"items":[1,2,3],   "currency":"EUR","amount":1200.0},\n "job_type":"charge","operation_id":"order-1"}'
    replay = api.post("/v1/operations", raw=raw)
    assert replay.status == 200, replay.text
    assert replay.json == {"operation": op, "created": False}


def test_replay_changes_nothing(api):
    enqueue(api, "op-r", {"a": 1})
    grant = claimed(api, "op-r")
    again = api.post("/v1/operations", {"operation_id": "op-r", "job_type": "job", "payload": {"a": 1}})
    assert again.status == 200 and again.json["created"] is False
    current = api.get(op_path("op-r")).json
    assert current["state"] == "claimed" and current["fence"] == grant["fence"] == 1
    assert current["updated_at"] == again.json["operation"]["updated_at"]


def test_conflict_when_the_same_id_has_another_payload(api):
    enqueue(api, "op-c", {"a": 1})
    reply = api.post("/v1/operations", {"operation_id": "op-c", "job_type": "job", "payload": {"a": 2}})
    assert_error(reply, 409, "payload_conflict")
    assert api.get(op_path("op-c")).json["payload_hash"] == sha({"a": 1})
    # By reference too: the hash decides.
    reply = api.post(
        "/v1/operations", {"operation_id": "op-c", "job_type": "job", "payload_ref": "s3://x/y", "payload_hash": sha({"a": 3})}
    )
    assert_error(reply, 409, "payload_conflict")


def test_enqueue_by_reference(api):
    digest = "sha256:" + "ab" * 32
    reply = api.post(
        "/v1/operations",
        {"operation_id": "ref-1", "job_type": "job", "payload_ref": "s3://mine/obj-1", "payload_hash": digest},
    )
    assert reply.status == 201, reply.text
    assert reply.json["operation"]["payload_ref"] == "s3://mine/obj-1"
    assert reply.json["operation"]["payload_hash"] == digest
    # An inline payload with the same hash is a replay of it (the hash alone decides).
    assert_error(api.get(op_path("ref-1", "payload")), 404, "not_found")


@pytest.mark.parametrize(
    "fields",
    [
        {},  # neither payload nor reference
        {"payload": None},  # null is not a payload
        {"payload": 1, "payload_ref": "s3://x/y", "payload_hash": "sha256:" + "0" * 64},  # both
        {"payload_ref": "s3://x/y"},  # reference without hash
        {"payload_ref": "s3://x/y", "payload_hash": "sha256:XYZ"},  # malformed hash
        {"payload": 1, "payload_hash": "sha256:" + "0" * 64},  # hash does not match the payload
        {"payload": 1, "max_attempts": 0},
        {"payload": 1, "max_attempts": 101},
        {"payload": 1, "max_attempts": "3"},  # no coercion
        {"payload": 1, "target_class": "E"},
        {"payload": 1, "target_class": "D", "max_attempts": 2},
        {"payload": 1, "max_attemps": 3},  # misspelt field
        {"payload": 1, "tenant_id": "someone-else"},  # the tenant never comes from the body
        {"payload": float("inf")},
    ],
    ids=lambda f: ",".join(f) or "empty",
)
def test_enqueue_refuses_invalid_bodies_and_writes_nothing(api, fields):
    body = {"operation_id": "bad-1", "job_type": "job", **fields}
    raw = json.dumps(body, allow_nan=True)
    reply = api.post("/v1/operations", raw=raw)
    expected = 400 if "Infinity" in raw else 422
    assert_error(reply, expected, "invalid_request")
    assert_error(api.get(op_path("bad-1")), 404, "not_found")


def test_class_d_defaults_to_one_attempt(api):
    reply = api.post("/v1/operations", {"operation_id": "d-1", "job_type": "job", "payload": 1, "target_class": "D"})
    assert reply.status == 201 and reply.json["operation"]["max_attempts"] == 1
    reply = api.post(
        "/v1/operations", {"operation_id": "d-2", "job_type": "job", "payload": 1, "target_class": "D", "max_attempts": 1}
    )
    assert reply.status == 201


@pytest.mark.parametrize(
    "bad_id",
    ["", "x" * 257, "tab\there", "nul\x00", "del\x7f", "c1\x85"],
    ids=["empty", "too-long", "tab", "nul", "del", "c1"],
)
def test_ids_are_1_to_256_characters_without_control_characters(api, bad_id):
    for field in ("operation_id", "job_type"):
        body = {"operation_id": "fine", "job_type": "fine", "payload": 1, field: bad_id}
        assert_error(api.post("/v1/operations", body), 422, "invalid_request")
    assert_error(claim(api, bad_id), 422, "invalid_request")
    if bad_id:
        assert_error(api.get(op_path(bad_id)), 422, "invalid_request")


def test_id_of_256_characters_is_fine(api):
    long_id = "é" * 256
    enqueue(api, long_id)
    assert api.get(op_path(long_id)).json["operation_id"] == long_id


@pytest.mark.parametrize("odd_id", ["a/b", "a#b", "a?b=c&d", "100%", "sp ace", "ünï-☃", "..", "a+b", "%2F"])
def test_ids_with_reserved_characters_round_trip_through_the_path(api, odd_id):
    enqueue(api, odd_id)
    grant = claimed(api, odd_id)
    assert api.get(op_path(odd_id)).json["operation_id"] == odd_id
    done = api.post(op_path(odd_id, "complete"), {"fence": grant["fence"], "outcome_code": "ok"})
    assert done.status == 200 and done.json["operation"]["operation_id"] == odd_id


def test_path_id_that_is_not_utf8_is_refused(api):
    assert_error(api.get("/v1/operations/%ff%fe"), 422, "invalid_request")


def test_oversize_payload_is_413_and_the_limit_is_inclusive(api):
    # A JSON string's canonical form is the text plus two quotes.
    limit = 256 * 1024
    fits = api.post("/v1/operations", {"operation_id": "big-ok", "job_type": "job", "payload": "x" * (limit - 2)})
    assert fits.status == 201, fits.text[:200]
    too_big = api.post("/v1/operations", {"operation_id": "big-no", "job_type": "job", "payload": "x" * (limit - 1)})
    assert_error(too_big, 413, "payload_too_large")
    assert_error(api.get(op_path("big-no")), 404, "not_found")
    # Whitespace does not count: the limit is on canonical JSON.
    padded = '{"operation_id":"big-ws","job_type":"job","payload":[' + ",".join(["1" + " " * 64] * 8000) + "]}"
    assert len(padded) > limit
    assert api.post("/v1/operations", raw=padded).status == 201


@pytest.mark.parametrize(
    "raw",
    ['{"operation_id": ', "not json", '{"a": NaN}', '{"operation_id":"x","operation_id":"y"}', "[" * 100_000],
    ids=["truncated", "text", "nan", "duplicate-key", "deep"],
)
def test_malformed_json_is_400(api, raw):
    assert_error(api.post("/v1/operations", raw=raw), 400, "invalid_request")
    assert_error(api.post("/v1/claims", raw=raw), 400, "invalid_request")


@pytest.mark.parametrize("raw", ["[]", '"text"', "42", "null", ""], ids=["array", "string", "number", "null", "empty"])
def test_a_body_that_is_not_an_object_is_422(api, raw):
    assert_error(api.post("/v1/operations", raw=raw), 422, "invalid_request")


@pytest.mark.parametrize("route", ["/v1/operations", "/v1/claims", "/v1/operations/arr/erase", "/v1/operations/arr/complete"])
def test_an_array_body_is_422_even_when_its_first_item_would_do(api, route):
    enqueue(api, "arr")
    first_item = {
        "/v1/operations": {"operation_id": "arr-2", "job_type": "job", "payload": 1},
        "/v1/claims": {"worker_id": "w"},
        "/v1/operations/arr/erase": None,
        "/v1/operations/arr/complete": {"fence": 1, "outcome_code": "ok"},
    }[route]
    assert_error(api.post(route, raw=json.dumps([first_item, first_item])), 422, "invalid_request")
    assert_error(api.get(op_path("arr-2")), 404, "not_found")
    assert api.get(op_path("arr")).json["state"] == "queued"
    assert api.get(op_path("arr")).json["payload_state"] == "stored"


def test_integers_are_json_schema_integers_2_0_included(api):
    # JSON Schema's integer is any number without a fraction: 2.0 is the integer 2 (the OpenAPI
    # document says integer, so it is accepted); 2.5, "2" and true are not integers.
    reply = api.post("/v1/operations", raw='{"operation_id":"i-1","job_type":"job","payload":1,"max_attempts":3.0}')
    assert reply.status == 201 and reply.json["operation"]["max_attempts"] == 3
    grant = claim(api, "w-i", lease_seconds=30).json["claim"]
    assert grant["lease_seconds"] == 30
    fence = grant["fence"]
    beat = api.post(op_path("i-1", "heartbeat"), raw=f'{{"fence":{fence}.0,"worker_id":"w-i","lease_seconds":20.0}}')
    assert beat.status == 200, beat.text
    for bad in (f"{fence}.5", f'"{fence}"', "true", "1e400"):
        reply = api.post(op_path("i-1", "complete"), raw=f'{{"fence":{bad},"outcome_code":"ok"}}')
        assert reply.status in (400, 422), (bad, reply.text)
        assert reply.json["error"]["code"] == "invalid_request"
    done = api.post(op_path("i-1", "complete"), raw=f'{{"fence":{float(fence)},"outcome_code":"ok"}}')
    assert done.status == 200 and done.json["operation"]["state"] == "succeeded"


def test_a_payload_integer_beyond_2_53_is_refused_as_the_document_says(api):
    reply = api.post("/v1/operations", {"operation_id": "big-int", "job_type": "job", "payload": {"n": 2**53}})
    assert_error(reply, 422, "invalid_request")
    assert_error(api.get(op_path("big-int")), 404, "not_found")
    assert enqueue(api, "safe-int", {"n": 2**53 - 1}).status == 201


def test_a_payload_ref_of_any_characters_is_never_a_5xx(api):
    # A caller's own payload_ref is compared with the store's keys: non-ASCII characters once made
    # that comparison raise (500) on reading the payload and on erasure.
    body = {"operation_id": "ref-ü", "job_type": "job", "payload_ref": "s3://mine/ünï-☃", "payload_hash": "sha256:" + "cd" * 32}
    assert api.post("/v1/operations", body).status == 201
    assert_error(api.get(op_path("ref-ü", "payload")), 404, "not_found")
    erased = api.post(op_path("ref-ü", "erase"), {})
    assert erased.status == 200 and erased.json["operation"]["payload_state"] == "erased"


def test_json_body_is_read_whatever_its_content_type_label(api):
    body = json.dumps({"operation_id": "ct-1", "job_type": "job", "payload": 1}).encode()
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-8"):
        reply = api.call("POST", "/v1/operations", raw=body, headers={"Content-Type": content_type})
        assert reply.status in (200, 201), (content_type, reply.text)


def test_validation_errors_name_the_fields(api):
    reply = api.post("/v1/operations", {"operation_id": "v", "job_type": "job", "payload": 1, "max_attemps": 3})
    assert_error(reply, 422, "invalid_request")
    assert "max_attemps" in reply.json["error"]["message"]
    assert reply.json["error"]["details"][0]["field"] == "max_attemps"


# ---------------------------------------------------------------------------------- reads


def test_get_returns_the_operation_and_404_when_absent(api):
    created = enqueue(api, "g-1").json["operation"]
    assert api.get(op_path("g-1")).json == created
    assert_error(api.get(op_path("never-created")), 404, "not_found")


def test_list_pages_with_a_cursor_and_filters_by_state(api):
    for i in range(7):
        enqueue(api, f"l-{i}")
    claimed(api, "l-3")
    seen, cursor = [], None
    while True:
        path = "/v1/operations?limit=3" + (f"&cursor={cursor}" if cursor else "")
        reply = api.get(path)
        assert reply.status == 200, reply.text
        assert set(reply.json) == {"operations", "next_cursor"}
        assert len(reply.json["operations"]) <= 3
        seen += [o["operation_id"] for o in reply.json["operations"]]
        cursor = reply.json["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(seen) == [f"l-{i}" for i in range(7)]
    claimed_only = api.get("/v1/operations?state=claimed").json
    assert [o["operation_id"] for o in claimed_only["operations"]] == ["l-3"]
    assert claimed_only["next_cursor"] is None
    assert len(api.get("/v1/operations").json["operations"]) == 7  # default limit 50


@pytest.mark.parametrize(
    "query",
    [
        "state=bogus",
        "limit=0",
        "limit=501",
        "limit=ten",
        "cursor=%21%21not-a-cursor",
        "cursor=eyJvIjogImwtMSJ9",  # an earlier version's cursor: refused, never read as a position
        "cursor=oA",  # not base64url of whole bytes
    ],
)
def test_list_refuses_bad_queries(api, query):
    assert_error(api.get(f"/v1/operations?{query}"), 422, "invalid_request")


def test_any_cursor_the_pattern_admits_is_a_position(api):
    for i in range(4):
        enqueue(api, f"p-{i}")
    # "o" + base64url("p-1"): the page starts after p-1, whether or not a page ever ended there.
    assert [o["operation_id"] for o in api.get("/v1/operations?cursor=ocC0x").json["operations"]] == ["p-2", "p-3"]
    assert [o["operation_id"] for o in api.get("/v1/operations?cursor=ocC0").json["operations"]] == ["p-0", "p-1", "p-2", "p-3"]
    assert api.get("/v1/operations?cursor=o_w").json == {"operations": [], "next_cursor": None}  # after U+FFFD
    assert len(api.get("/v1/operations?cursor=o").json["operations"]) == 4  # empty position: the start
    assert len(api.get("/v1/operations?cursor=").json["operations"]) == 4  # no cursor


# ---------------------------------------------------------------------------------- claims


def test_claim_shape_and_204_when_nothing_is_claimable(api):
    reply = claim(api)
    assert reply.status == 204 and reply.text == ""
    enqueue(api, "c-1", job_type="resize")
    reply = claim(api, "worker-9", lease_seconds=30)
    assert reply.status == 200, reply.text
    grant = reply.json["claim"]
    assert set(reply.json) == {"claim"} and set(grant) == CLAIM_FIELDS
    assert grant["operation_id"] == "c-1" and grant["job_type"] == "resize"
    assert grant["fence"] == 1 and grant["attempts"] == 1 and grant["reconcile_required"] is False
    assert grant["checkpoint"] is None and HASH_RE.match(grant["payload_hash"])
    assert RFC3339_RE.match(grant["lease_expires_at"]) and RFC3339_RE.match(grant["claimed_at"])
    assert (grant["lease_ms"], grant["lease_seconds"]) == (30_000, 30)
    assert ms(grant["claimed_at"]) + grant["lease_ms"] == ms(grant["lease_expires_at"])
    op = api.get(op_path("c-1")).json
    assert op["state"] == "claimed" and op["lease_owner"] == "worker-9"
    assert op["lease_expires_at"] == grant["lease_expires_at"]
    assert claim(api).status == 204


def test_claim_filters_by_job_type_and_names_operations(api):
    enqueue(api, "j-a", job_type="a")
    enqueue(api, "j-b", job_type="b")
    assert claim(api, job_types=["c"]).status == 204
    assert claim(api, job_types=["b"]).json["claim"]["operation_id"] == "j-b"
    assert_error(claim(api, operation_id="no-such-op"), 404, "not_found")
    assert claim(api, operation_id="j-b").status == 204  # exists, but leased
    assert claim(api, operation_id="j-a", job_types=["b"]).status == 204
    assert claim(api, operation_id="j-a").json["claim"]["operation_id"] == "j-a"


def test_a_claim_resent_with_its_claim_token_answers_the_same_claim(api):
    """A claim request resent with its claim_token (its answer was lost) gets the claim it made,
    not a second one, while that claim holds; another worker's request with the same token, or a
    resend once the claim ended, is a claim request like any other."""
    enqueue(api, "t-1")
    first = claim(api, "worker-1", lease_seconds=30, claim_token="tok-1")
    assert first.status == 200, first.text
    for _ in range(2):
        again = claim(api, "worker-1", lease_seconds=30, claim_token="tok-1")
        assert again.status == 200 and again.json == first.json
    named = claim(api, "worker-1", lease_seconds=30, claim_token="tok-1", operation_id="t-1")
    assert named.status == 200 and named.json == first.json
    op = api.get(op_path("t-1")).json
    assert (op["fence"], op["attempts"], op["lease_expires_at"]) == (1, 1, first.json["claim"]["lease_expires_at"])
    assert claim(api, "worker-2", claim_token="tok-1").status == 204
    assert claim(api, "worker-1", claim_token="tok-2").status == 204  # another request: nothing due
    done = api.post(op_path("t-1", "complete"), {"fence": 1, "outcome_code": "ok"})
    assert done.status == 200, done.text
    assert claim(api, "worker-1", claim_token="tok-1").status == 204
    assert claim(api, "worker-1", claim_token="tok-1", operation_id="t-1").status == 204


def test_the_claim_answer_carries_the_stored_payload_and_a_resend_carries_it_again(api):
    """Claim-next and the claim of a named operation answer with the payload leasefence stores
    (the value, beside its hash): an HTTP worker needs no GET .../payload. A resend with the claim
    token answers the same claim, payload included. A payload by reference is not carried."""
    payload = {"b": [1, 2, {"c": None}], "a": "ü", "x": 3.5}
    enqueue(api, "cp-1", payload)
    enqueue(api, "cp-2", [1, "two"])
    api.post("/v1/operations", {"operation_id": "cp-3", "job_type": "job", "payload_ref": "s3://mine/x",
                                "payload_hash": "sha256:" + "3" * 64})
    first = claimed(api, "cp-1", claim_token="tok-cp")
    assert first["payload"] == payload and first["payload_hash"] == sha(payload)
    resent = claim(api, "worker-1", claim_token="tok-cp", operation_id="cp-1")
    assert resent.status == 200 and resent.json["claim"] == first
    nxt = claim(api, "worker-2", job_types=["job"], claim_token="tok-next")
    assert nxt.status == 200, nxt.text
    grants = {nxt.json["claim"]["operation_id"]: nxt.json["claim"]}
    again = claim(api, "worker-2", job_types=["job"], claim_token="tok-next")
    assert again.json == nxt.json  # the resend of a claim-next: the same claim, payload included
    grants.update({g["operation_id"]: g for g in (claimed(api, op) for op in ("cp-2", "cp-3") if op not in grants)})
    assert grants["cp-2"]["payload"] == [1, "two"]
    assert grants["cp-3"]["payload"] is None and grants["cp-3"]["payload_ref"] == "s3://mine/x"


@pytest.mark.parametrize(
    "fields",
    [
        {"claim_token": ""},
        {"claim_token": "x" * 257},
        {"claim_token": "bad\u0000token"},
        {"claim_token": 7},
        {"lease_seconds": 0},
        {"lease_seconds": 901},
        {"lease_seconds": 1.5},
        {"job_types": []},
        {"job_types": "a"},
        {"operation_id": ""},
        {"extra": True},
    ],
    ids=lambda f: json.dumps(f),
)
def test_claim_refuses_invalid_bodies(api, fields):
    enqueue(api, "cv-1")
    assert_error(claim(api, **fields), 422, "invalid_request")
    assert api.get(op_path("cv-1")).json["state"] == "queued"


def test_claim_without_worker_is_422(api):
    assert_error(api.post("/v1/claims", {}), 422, "invalid_request")


# ---------------------------------------------------------------------------------- fenced transitions


def test_heartbeat_extends_the_lease_and_keeps_a_checkpoint(api):
    enqueue(api, "h-1")
    grant = claimed(api, "h-1", lease_seconds=5)
    reply = api.post(op_path("h-1", "heartbeat"), {"fence": 1, "worker_id": "worker-1", "lease_seconds": 600,
                                                   "checkpoint": {"page": 3}})
    assert reply.status == 200, reply.text
    assert set(reply.json) == {"lease_expires_at"}
    assert reply.json["lease_expires_at"] > grant["lease_expires_at"]
    expires = datetime.fromisoformat(reply.json["lease_expires_at"].replace("Z", "+00:00")).timestamp()
    assert abs(expires - (time.time() + 600)) < 5  # lease_seconds from now
    assert api.get(op_path("h-1")).json["lease_expires_at"] == reply.json["lease_expires_at"]
    # The checkpoint is handed to the next claim of this operation.
    failed = api.post(op_path("h-1", "fail"), {"fence": 1, "retryable": True, "reason": "flaky", "retry_after_seconds": 0})
    assert failed.status == 200 and failed.json["operation"]["state"] == "queued"
    again = claimed(api, "h-1", worker="worker-2")
    assert again["fence"] == 2 and again["checkpoint"] == {"page": 3} and again["reconcile_required"] is True


def test_heartbeat_without_lease_seconds_uses_the_claims(api):
    enqueue(api, "h-2")
    claimed(api, "h-2", lease_seconds=300)
    reply = api.post(op_path("h-2", "heartbeat"), {"fence": 1, "worker_id": "worker-1"})
    assert reply.status == 200


def test_heartbeat_refusals(api):
    enqueue(api, "h-3")
    claimed(api, "h-3")
    assert_error(api.post(op_path("h-3", "heartbeat"), {"fence": 2, "worker_id": "worker-1"}), 409, "stale_fence")
    assert_error(api.post(op_path("h-3", "heartbeat"), {"fence": 1, "worker_id": "other"}), 409, "stale_fence")
    assert_error(api.post(op_path("nope", "heartbeat"), {"fence": 1, "worker_id": "worker-1"}), 404, "not_found")
    assert_error(api.post(op_path("h-3", "heartbeat"), {"fence": 0, "worker_id": "worker-1"}), 422, "invalid_request")
    assert_error(api.post(op_path("h-3", "heartbeat"), {"fence": "1", "worker_id": "worker-1"}), 422,
                 "invalid_request")
    assert_error(api.post(op_path("h-3", "heartbeat"), {"fence": 1, "worker_id": "worker-1", "lease_seconds": 901}),
                 422, "invalid_request")
    deep = {"fence": 1, "worker_id": "worker-1", "checkpoint": json.loads("[" * 40 + "]" * 40)}
    assert_error(api.post(op_path("h-3", "heartbeat"), deep), 422, "invalid_request")
    big = {"fence": 1, "worker_id": "worker-1", "checkpoint": "x" * 5000}
    assert_error(api.post(op_path("h-3", "heartbeat"), big), 422, "invalid_request")


def test_complete_is_repeatable_by_the_same_fence_only(api):
    enqueue(api, "k-1")
    claimed(api, "k-1")
    done = api.post(op_path("k-1", "complete"), {"fence": 1, "outcome_code": "charged"})
    assert done.status == 200, done.text
    op = done.json["operation"]
    assert set(done.json) == {"operation"} and set(op) == OPERATION_FIELDS
    assert op["state"] == "succeeded" and op["outcome_code"] == "charged" and op["lease_owner"] is None
    again = api.post(op_path("k-1", "complete"), {"fence": 1, "outcome_code": "charged"})
    assert again.status == 200 and again.json == done.json
    assert_error(api.post(op_path("k-1", "complete"), {"fence": 1, "outcome_code": "other"}), 409, "stale_fence")
    assert_error(api.post(op_path("k-1", "complete"), {"fence": 2, "outcome_code": "charged"}), 409, "stale_fence")
    assert_error(api.post(op_path("k-x", "complete"), {"fence": 1, "outcome_code": "charged"}), 404, "not_found")
    assert_error(api.post(op_path("k-1", "complete"), {"fence": 1}), 422, "invalid_request")


def test_complete_before_any_claim_is_stale(api):
    enqueue(api, "k-2")
    assert_error(api.post(op_path("k-2", "complete"), {"fence": 1, "outcome_code": "x"}), 409, "stale_fence")


def test_fail_requeues_or_terminates(api):
    enqueue(api, "f-1", max_attempts=2)
    claimed(api, "f-1")
    reply = api.post(op_path("f-1", "fail"), {"fence": 1, "retryable": True, "reason": "busy", "retry_after_seconds": 600})
    assert reply.status == 200 and reply.json["operation"]["state"] == "queued"
    assert claim(api, operation_id="f-1").status == 204  # not before the delay
    enqueue(api, "f-2", max_attempts=1)
    claimed(api, "f-2")
    reply = api.post(op_path("f-2", "fail"), {"fence": 1, "retryable": True, "reason": "busy"})
    assert reply.status == 200 and reply.json["operation"]["state"] == "failed_terminal"  # no attempts left
    enqueue(api, "f-3")
    claimed(api, "f-3")
    reply = api.post(op_path("f-3", "fail"), {"fence": 1, "retryable": False, "reason": "card declined"})
    assert reply.status == 200 and reply.json["operation"]["state"] == "failed_terminal"
    assert_error(api.post(op_path("f-3", "fail"), {"fence": 2, "retryable": False, "reason": "x"}), 409, "stale_fence")
    assert_error(api.post(op_path("f-3", "fail"), {"fence": 1, "retryable": "no", "reason": "x"}), 422, "invalid_request")
    assert_error(api.post(op_path("f-3", "fail"), {"fence": 1, "retryable": True, "reason": ""}), 422, "invalid_request")
    assert_error(api.post(op_path("f-3", "fail"), {"fence": 1, "retryable": True, "reason": "x",
                                                   "retry_after_seconds": -1}), 422, "invalid_request")
    assert_error(api.post(op_path("f-9", "fail"), {"fence": 1, "retryable": True, "reason": "x"}), 404, "not_found")


@pytest.mark.parametrize("action,state", [("unknown", "unknown"), ("quarantine", "quarantined")])
def test_park(api, action, state):
    enqueue(api, f"p-{action}")
    claimed(api, f"p-{action}")
    assert_error(api.post(op_path(f"p-{action}", action), {"fence": 2, "reason": "why"}), 409, "stale_fence")
    reply = api.post(op_path(f"p-{action}", action), {"fence": 1, "reason": "why"})
    assert reply.status == 200, reply.text
    assert reply.json["operation"]["state"] == state
    assert claim(api, operation_id=f"p-{action}").status == 204  # parked: nothing automatic takes it
    assert_error(api.post(op_path(f"p-{action}", action), {"fence": 1}), 422, "invalid_request")
    assert_error(api.post(op_path("p-none", action), {"fence": 1, "reason": "why"}), 404, "not_found")


# ---------------------------------------------------------------------------------- payload


@pytest.mark.parametrize(
    "payload",
    [{"b": [1, 2, {"c": None}], "a": "ü"}, [1, "two", 3.5], "just text", 0, False, {}],
    ids=["object", "array", "string", "zero", "false", "empty-object"],
)
def test_payload_is_returned_as_enqueued(api, payload):
    enqueue(api, "pl-1", payload)
    reply = api.get(op_path("pl-1", "payload"))
    assert reply.status == 200, reply.text
    assert reply.json == payload
    assert reply.text.encode() == rfc8785.dumps(payload)  # its canonical JSON, which hashes to payload_hash
    assert sha(payload) == api.get(op_path("pl-1")).json["payload_hash"]


def test_payload_404s(api):
    assert_error(api.get(op_path("pl-none", "payload")), 404, "not_found")


# ---------------------------------------------------------------------------------- resolve


def test_resolve_only_parked_operations(api):
    enqueue(api, "rs-1")
    assert_error(api.post(op_path("rs-1", "resolve"), {"resolution": "succeeded", "note": "x"}), 409,
                 "invalid_transition")
    claimed(api, "rs-1")
    assert_error(api.post(op_path("rs-1", "resolve"), {"resolution": "succeeded"}), 409, "invalid_transition")
    api.post(op_path("rs-1", "unknown"), {"fence": 1, "reason": "timeout"})
    assert_error(api.post(op_path("rs-1", "resolve"), {"resolution": "maybe"}), 422, "invalid_request")
    reply = api.post(op_path("rs-1", "resolve"), {"resolution": "succeeded", "note": "checked the ledger"})
    assert reply.status == 200, reply.text
    assert reply.json["operation"]["state"] == "succeeded"
    assert_error(api.post(op_path("rs-1", "resolve"), {"resolution": "requeue"}), 409, "invalid_transition")
    assert_error(api.post(op_path("rs-none", "resolve"), {"resolution": "requeue"}), 404, "not_found")


def test_a_resolve_sent_again_after_it_succeeded_is_a_replay(api):
    """What a client does when the answer was lost: send it again. 200 with the same answer (it
    was 409 invalid_transition); another decision is still 409."""
    enqueue(api, "rr-1")
    claimed(api, "rr-1")
    api.post(op_path("rr-1", "unknown"), {"fence": 1, "reason": "timeout"})
    body = {"resolution": "succeeded", "note": "checked the ledger"}
    first = api.post(op_path("rr-1", "resolve"), body)
    assert first.status == 200, first.text
    again = api.post(op_path("rr-1", "resolve"), body)
    assert (again.status, again.json) == (200, first.json), again.text
    assert_error(api.post(op_path("rr-1", "resolve"), {"resolution": "failed_terminal"}), 409, "invalid_transition")
    # With a request token, even once a worker claimed what the requeue released.
    enqueue(api, "rr-2")
    claimed(api, "rr-2")
    api.post(op_path("rr-2", "quarantine"), {"fence": 1, "reason": "bad input"})
    body = {"resolution": "requeue", "note": "fixed", "request_token": "4f1c-requeue"}
    assert api.post(op_path("rr-2", "resolve"), body).json["operation"]["state"] == "queued"
    claimed(api, "rr-2")
    again = api.post(op_path("rr-2", "resolve"), body)
    assert (again.status, again.json["operation"]["state"], again.json["operation"]["fence"]) == (200, "claimed", 2)
    other = {**body, "request_token": "another"}
    assert_error(api.post(op_path("rr-2", "resolve"), other), 409, "invalid_transition")
    assert_error(api.post(op_path("rr-2", "resolve"), {**body, "request_token": ""}), 422, "invalid_request")


def test_requeue_from_quarantine_gives_a_fresh_budget_and_a_rising_fence(api):
    enqueue(api, "rq-1", max_attempts=1)
    claimed(api, "rq-1")
    api.post(op_path("rq-1", "quarantine"), {"fence": 1, "reason": "bad input"})
    reply = api.post(op_path("rq-1", "resolve"), {"resolution": "requeue", "note": "fixed"})
    assert reply.status == 200 and reply.json["operation"]["state"] == "queued"
    grant = claimed(api, "rq-1")
    assert grant["fence"] == 2 and grant["reconcile_required"] is True
    failed = api.post(op_path("rq-1", "fail"), {"fence": 2, "retryable": False, "reason": "still bad"})
    assert failed.json["operation"]["state"] == "failed_terminal"
    resolved = api.post(op_path("rq-1", "resolve"), {"resolution": "failed_terminal"})
    assert_error(resolved, 409, "invalid_transition")
