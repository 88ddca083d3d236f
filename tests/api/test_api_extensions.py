"""The extensions of the shared contract (docs/api-contract-extensions.md), over HTTP against the
local stack: erasure (route, fields, SDK, CLI, tenant-wide), 410 ``payload_missing`` and the
HTTP worker's quarantine of it (case 2), the heartbeat ``intent`` and the claim's ``intent``
(case 7), a stale fence repeating its own command (case 8), and the sweeper's payload purge."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from tests.support.api import claim, claimed, enqueue, new_tenant, op_path
from tests.support.payload_items import noise, text_of
from typer.testing import CliRunner

from leasefence.api.security import OPERATE, PRODUCE, WORK
from leasefence_tools.cli import app as cli
from leasefence.errors import InvalidTransition, NotFound
from leasefence_tools.local.server import load_function
from leasefence.payloads import canonicalize
from leasefence.settings import runtime
from leasefence.targets import single_shot
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.http_backend import HttpBackend

RFC3339_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


def assert_error(reply, status: int, code: str) -> None:
    assert reply.status == status, reply.text
    assert reply.json["error"]["code"] == code, reply.text


def tenant_objects(stack, tenant: str) -> list[str]:
    """The payload objects stored under this tenant's prefix in the stack's bucket."""
    listing = stack.aws.client("s3").list_objects_v2(Bucket=stack.bucket, Prefix=runtime().payloads.tenant_prefix(tenant))
    return [o["Key"] for o in listing.get("Contents", [])]


#: Padding that puts a payload past what a payload item keeps (1 KiB, packed or not): stored in S3.
BIG = noise(1500)


def raw_item(tenant: str, operation_id: str) -> dict:
    return runtime().engine.store.get_operation({"tenant_id": tenant, "operation_id": operation_id})


def kept_payloads(tenant: str, operation_id: str) -> list[str]:
    """The texts of the operation's payload items (layout 2: a payload of up to 1 KiB)."""
    from leasefence import keys

    page = runtime().engine.store.query(
        KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
        values={":t": tenant, ":p": keys.payload_prefix(operation_id)},
        ConsistentRead=True,
    )
    return [text_of(item) for item in page.items]


def http_worker(sdk, tenant, handlers, events=None, name="w1"):
    return Worker(HttpBackend(sdk, tenant), handlers, worker_id=name, lease_ms=5_000,
                  heartbeat_interval_ms=10_000, idle_sleep_ms=20, events=events)


# ---------------------------------------------------------------------------------- case 8


def test_case8_a_stale_fence_repeating_its_fail_is_409(api):
    """Case 8: fence 1 fails retryable, fence 2 claims, then fence 1's fail again is refused
    (409 stale_fence; it used to be recognized as fence 1's own repeat: 200)."""
    enqueue(api, "c8-1", max_attempts=3)
    claimed(api, "c8-1")
    body = {"fence": 1, "retryable": True, "reason": "busy", "retry_after_seconds": 0}
    assert api.post(op_path("c8-1", "fail"), body).json["operation"]["state"] == "queued"
    assert api.post(op_path("c8-1", "fail"), body).status == 200  # a repeat before anyone claimed: its answer again
    assert claimed(api, "c8-1", worker="worker-2")["fence"] == 2
    assert_error(api.post(op_path("c8-1", "fail"), body), 409, "stale_fence")
    op = api.get(op_path("c8-1")).json
    assert (op["state"], op["fence"], op["lease_owner"]) == ("claimed", 2, "worker-2")


# ---------------------------------------------------------------------------------- erasure


def test_operation_resource_has_payload_state_and_erased_at(api):
    inline = enqueue(api, "ps-1").json["operation"]
    assert (inline["payload_state"], inline["erased_at"]) == ("stored", None)
    by_ref = api.post("/v1/operations", {"operation_id": "ps-2", "job_type": "job", "payload_ref": "s3://mine/x",
                                         "payload_hash": "sha256:" + "3" * 64}).json["operation"]
    assert by_ref["payload_state"] == "external"
    listed = api.get("/v1/operations").json["operations"]
    assert {o["operation_id"]: o["payload_state"] for o in listed} == {"ps-1": "stored", "ps-2": "external"}


@pytest.mark.parametrize("where", ["item", "s3"])
def test_erase_keeps_the_identity_and_deletes_the_payload(stack, api, tenant, where):
    payload = {"card": "4111-1111-1111-1111", "name": "A. Person"}
    if where == "s3":
        payload["notes"] = BIG
    created = enqueue(api, "er-1", payload)
    objects = 1 if where == "s3" else 0
    assert created.status == 201 and len(tenant_objects(stack, tenant)) == objects
    assert bool(kept_payloads(tenant, "er-1")) is (where == "item")
    assert "payload_json" not in raw_item(tenant, "er-1")  # layout 2: never in the operation item
    claimed(api, "er-1")
    api.post(op_path("er-1", "quarantine"), {"fence": 1, "reason": "the card number looks wrong"})
    erased = api.post(op_path("er-1", "erase"), {})
    assert erased.status == 200, erased.text
    op = erased.json["operation"]
    assert set(erased.json) == {"operation"}
    assert op["payload_state"] == "erased" and RFC3339_RE.match(op["erased_at"])
    assert (op["state"], op["fence"], op["payload_hash"]) == ("quarantined", 1, created.json["operation"]["payload_hash"])
    assert tenant_objects(stack, tenant) == []
    item = raw_item(tenant, "er-1")
    assert kept_payloads(tenant, "er-1") == [] and "4111" not in json.dumps(item)  # gone too
    assert "purge_pk" not in item and "purge_at" not in item  # nothing left for the sweeper
    assert runtime().engine.get(tenant, "er-1").reason is None  # free text is erased too
    assert_error(api.get(op_path("er-1", "payload")), 410, "payload_missing")
    # A replay is still a replay, and does not store the payload again; another payload conflicts.
    replay = api.post("/v1/operations", {"operation_id": "er-1", "job_type": "job", "payload": payload})
    assert replay.status == 200 and replay.json["created"] is False, replay.text
    assert replay.json["operation"]["payload_state"] == "erased"
    assert tenant_objects(stack, tenant) == []
    other = api.post("/v1/operations", {"operation_id": "er-1", "job_type": "job", "payload": {"other": 1}})
    assert_error(other, 409, "payload_conflict")
    assert tenant_objects(stack, tenant) == []
    # Erasing again is harmless; the body may be omitted.
    again = api.post(op_path("er-1", "erase"))
    assert again.status == 200 and again.json["operation"]["erased_at"] == op["erased_at"]


def test_erase_refusals(stack, api, tenant, make_api):
    enqueue(api, "er-2")
    assert_error(api.post(op_path("er-missing", "erase"), {}), 404, "not_found")
    stranger = make_api(new_tenant())
    assert_error(stranger.post(op_path("er-2", "erase"), {}), 404, "not_found")  # another tenant's: as if missing
    claimed(api, "er-2")
    assert_error(api.post(op_path("er-2", "erase"), {}), 409, "invalid_transition")
    assert api.get(op_path("er-2")).json["payload_state"] == "stored"
    assert_error(api.post(op_path("er-2", "erase"), {"reason": "gdpr"}), 422, "invalid_request")
    assert_error(api.post(op_path("er-2", "erase"), raw="[]"), 422, "invalid_request")
    for scopes in ([PRODUCE, WORK], [PRODUCE], [WORK]):
        assert_error(make_api(tenant, scopes).post(op_path("er-2", "erase"), {}), 403, "forbidden")
    assert make_api(tenant, [OPERATE]).post(op_path("er-2", "erase"), {}).status == 409  # the scope is enough


def test_sdk_and_cli_erase(stack, sdk, tenant, token):
    from leasefence.errors import PayloadMissing

    sdk.enqueue("er-3", "job", {"x": 1})
    sdk.enqueue("er-4", "job", {"x": 2})
    erased = sdk.erase("er-3")
    assert erased.payload_state == "erased" and erased.erased_at is not None and erased.state == "queued"
    with pytest.raises(PayloadMissing) as missing:
        sdk.payload("er-3")
    assert missing.value.status == 410 and missing.value.code == "payload_missing"
    with pytest.raises(NotFound):
        sdk.erase("er-none")
    sdk.claim("w", operation_id="er-4")
    with pytest.raises(InvalidTransition):
        sdk.erase("er-4")
    runner = CliRunner()
    base = ["--base-url", stack.base_url, "--token", token]
    shown = runner.invoke(cli, ["ops", "erase", "er-3", *base])
    assert shown.exit_code == 0, shown.output
    assert re.search(r"payload_state\s+erased", shown.output)
    refused = runner.invoke(cli, ["ops", "erase", "er-4", *base])
    assert refused.exit_code == 1 and "409 invalid_transition" in refused.output


def test_erase_tenant_command(stack, make_api):
    tenant = new_tenant()
    api = make_api(tenant)
    for i in range(5):  # the even ones in S3, the odd ones kept in their items
        enqueue(api, f"et-{i}", {"i": i, **({"pad": BIG} if i % 2 == 0 else {})})
    claimed(api, "et-4")  # held: a claim may be acting on it
    bystander = make_api(new_tenant())
    enqueue(bystander, "et-0", {"i": "kept"})
    assert len(tenant_objects(stack, tenant)) == 3
    runner = CliRunner()
    step = runner.invoke(cli, ["erase-tenant", "--tenant", tenant, "--limit", "2"])
    assert step.exit_code == 0, step.output
    assert re.search(r"rows deleted:\s+2", step.output)
    cursor = re.search(r"next cursor:\s+(\S+)", step.output).group(1)
    # Held from the first step on: an enqueue meanwhile is 409 tenant_erasing, and nothing is stored.
    refused = api.post("/v1/operations", {"operation_id": "et-new", "job_type": "job", "payload": {"i": 9}})
    assert (refused.status, refused.json["error"]["code"]) == (409, "tenant_erasing"), refused.text
    # Nothing stored either. (The first step took the rows that sort first: the payload items of
    # et-1 and et-3, which layout 2 keeps beside their operations.)
    assert len(tenant_objects(stack, tenant)) == 3
    rest = runner.invoke(cli, ["erase-tenant", "--tenant", tenant, "--limit", "2", "--cursor", cursor, "--all", "--json"])
    assert rest.exit_code == 0, rest.output
    totals = json.loads(rest.output)
    assert totals["payloads_deleted"] == 4  # et-0, et-2 (their objects), et-1, et-3 (their items)
    assert len(tenant_objects(stack, tenant)) == 1  # et-4's: held with it
    # The 4 unclaimed operations; the claimed one is held, and with it the tenant
    # (its directory and hold stay: it is not finished).
    assert totals["rows_deleted"] == 4 and totals["held"] == 1 and totals["next_cursor"] is None
    assert totals["steps"] >= 2 and totals["finished"] is False
    assert [o["operation_id"] for o in api.get("/v1/operations").json["operations"]] == ["et-4"]
    assert bystander.get(op_path("et-0", "payload")).json == {"i": "kept"}
    assert runner.invoke(cli, ["erase-tenant", "--tenant", tenant, "--cursor", "!!"]).exit_code == 1


# ---------------------------------------------------------------------------------- payloads kept in the item


def test_a_payload_that_fits_1_kib_packed_or_not_is_kept_in_the_item_and_any_other_goes_to_s3(stack, api, tenant):
    """What a payload item keeps: canonical JSON of MAX_ITEM_PAYLOAD_BYTES (whatever it packs to),
    or of up to MAX_PACKED_PAYLOAD_BYTES that packs to MAX_ITEM_PAYLOAD_BYTES: in DynamoDB, no
    object, no payload_ref. One that packs to more (1,500 bytes of noise), or that is longer than
    MAX_PACKED_PAYLOAD_BYTES however well it packs, is stored in S3 as before. All read, hash and
    claim alike."""
    from leasefence.limits import MAX_ITEM_PAYLOAD_BYTES, MAX_PACKED_PAYLOAD_BYTES
    from leasefence.payloads import pack

    at = {"p": noise(MAX_ITEM_PAYLOAD_BYTES - 8)}  # '{"p":"' + n + '"}': n + 8 bytes
    packs = {"p": "x" * (MAX_PACKED_PAYLOAD_BYTES - 8)}
    over = {"p": noise(1500)}
    beyond = {"p": "x" * (MAX_PACKED_PAYLOAD_BYTES - 7)}
    bodies = {k: canonicalize(v).body for k, v in (("at", at), ("packs", packs), ("over", over), ("beyond", beyond))}
    assert [len(bodies[k]) for k in ("at", "packs", "beyond")] == [
        MAX_ITEM_PAYLOAD_BYTES, MAX_PACKED_PAYLOAD_BYTES, MAX_PACKED_PAYLOAD_BYTES + 1
    ]
    assert len(pack(bodies["packs"])) <= MAX_ITEM_PAYLOAD_BYTES < len(pack(bodies["over"]))
    kept = {k: enqueue(api, f"th-{k}", v).json["operation"] for k, v in (("at", at), ("packs", packs))}
    assert tenant_objects(stack, tenant) == [] and {op["payload_ref"] for op in kept.values()} == {None}
    for k in ("at", "packs"):
        assert [t.encode() for t in kept_payloads(tenant, f"th-{k}")] == [bodies[k]]
    in_s3 = {k: enqueue(api, f"th-{k}", v).json["operation"] for k, v in (("over", over), ("beyond", beyond))}
    assert len(tenant_objects(stack, tenant)) == 2
    assert all(op["payload_ref"].startswith("s3://") for op in in_s3.values())
    assert kept_payloads(tenant, "th-over") == kept_payloads(tenant, "th-beyond") == []
    for k, value in (("at", at), ("packs", packs), ("over", over), ("beyond", beyond)):
        op = {**kept, **in_s3}[k]
        assert op["payload_state"] == "stored" and op["payload_hash"] == canonicalize(value).hash
        reply = api.get(op_path(f"th-{k}", "payload"))
        assert reply.status == 200 and reply.text.encode() == bodies[k]
        assert claimed(api, f"th-{k}")["payload"] == value
    # A replay stores nothing; another payload of either kind is still a conflict.
    for k, value in (("at", at), ("over", over)):
        assert api.post("/v1/operations", {"operation_id": f"th-{k}", "job_type": "job", "payload": value}).status == 200
    assert len(tenant_objects(stack, tenant)) == 2
    for operation_id, other in (("th-at", over), ("th-over", at), ("th-packs", beyond)):
        assert_error(api.post("/v1/operations", {"operation_id": operation_id, "job_type": "job", "payload": other}),
                     409, "payload_conflict")
    assert len(tenant_objects(stack, tenant)) == 2


def test_an_approval_binds_the_hash_of_a_payload_kept_in_the_item(stack, api, tenant):
    from tests.support.api import Api

    from leasefence.api.security import APPROVE

    approver = Api(stack.base_url, stack.token(tenant, [APPROVE], subject="approver-1"))
    assert api.call("PUT", "/v1/job-types/gated", {"target_class": "C", "approval_required": True}).status == 200
    payload = {"wire": 250}
    created = enqueue(api, "ap-1", payload, job_type="gated").json["operation"]
    assert created["state"] == "awaiting_approval" and tenant_objects(stack, tenant) == []
    assert kept_payloads(tenant, "ap-1") != []
    seen = approver.get(op_path("ap-1", "payload"))
    assert seen.status == 200 and seen.json == payload
    assert_error(approver.post(op_path("ap-1", "approve"), {"payload_hash": canonicalize({"wire": 251}).hash}),
                 409, "payload_mismatch")
    approved = approver.post(op_path("ap-1", "approve"), {"payload_hash": canonicalize(payload).hash})
    assert approved.status == 200, approved.text
    assert claimed(api, "ap-1")["payload"] == payload


# ---------------------------------------------------------------------------------- case 2 over HTTP


def test_case2_the_http_worker_quarantines_a_missing_payload(sdk, tenant):
    """Case 2 (HTTP backend): GET .../payload answers 410 payload_missing, load_payload raises
    PayloadMissing, and the runtime quarantines the operation exactly as in-process."""
    from leasefence.errors import PayloadMissing

    sdk.enqueue("pm-1", "charge", {"amount": 5})
    sdk.erase("pm-1")
    acted, events = [], Events()

    def handler(job):
        acted.append(job.payload)
        return "charged"

    worker = http_worker(sdk, tenant, {"charge": FunctionHandler(handler)}, events=events)
    with pytest.raises(PayloadMissing):
        worker.backend.load_payload(SimpleNamespace(operation_id="pm-1"))
    assert worker.run_once()
    assert acted == [] and events["PayloadMissing"] == 1
    op = sdk.get("pm-1")
    assert (op.state, op.attempts) == ("quarantined", 1)
    assert runtime().engine.get(tenant, "pm-1").reason == "payload missing: the payload was erased"


class _DeniedReads:
    """The stack's S3 client, except that reads are refused (a bucket policy, role or KMS key
    misconfiguration)."""

    def __init__(self, client, code):
        self._client, self.code = client, code

    def get_object(self, **kwargs):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": self.code, "Message": "injected"},
                           "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.mark.parametrize("code", ["AccessDenied", "KMS.KMSInvalidStateException"])
def test_a_payload_the_store_refuses_is_503_unavailable_and_the_http_worker_does_not_quarantine(
    api, sdk, tenant, monkeypatch, capfd, code
):
    """GET .../payload when S3 refuses the read: 503 with the contract's error body (not 410
    payload_missing), the PayloadAccessDenied metric is emitted, and the HTTP worker leaves the
    claim to lapse (no quarantine, no fail write)."""
    sdk.enqueue("pd-1", "charge", {"amount": 5, "pad": BIG})  # in S3
    sdk.enqueue("pd-kept", "kept", {"amount": 6})  # in its item: no S3 call to refuse
    payloads = runtime().payloads
    monkeypatch.setattr(payloads, "_client", _DeniedReads(payloads.client, code))
    capfd.readouterr()
    reply = api.get(op_path("pd-1", "payload"))
    assert reply.status == 503, reply.text
    assert set(reply.json) == {"error"} and set(reply.json["error"]) >= {"code", "message"}
    assert reply.json["error"]["code"] == "unavailable" and code in reply.json["error"]["message"]
    emitted = [json.loads(line) for line in capfd.readouterr().out.splitlines()
               if line.startswith("{") and '"_aws"' in line]
    assert any(m.get("PayloadAccessDenied") == [1.0] or m.get("PayloadAccessDenied") == 1.0
               for m in emitted), emitted

    acted, events = [], Events()

    def handler(job):
        acted.append(job.payload)
        return "charged"

    worker = http_worker(sdk, tenant, {"charge": FunctionHandler(handler)}, events=events)
    assert worker.run_once()
    assert acted == [] and "PayloadMissing" not in events and events["AbandonedStoreUnavailable"] == 1
    op = sdk.get("pd-1")
    assert (op.state, op.attempts) == ("claimed", 1)
    assert api.get(op_path("pd-kept", "payload")).json == {"amount": 6}
    kept = http_worker(sdk, tenant, {"kept": FunctionHandler(lambda job: acted.append(job.payload) or "ok")})
    assert kept.run_once() and acted == [{"amount": 6}] and sdk.get("pd-kept").state == "succeeded"


# ---------------------------------------------------------------------------------- case 7 over HTTP


def test_case7_intent_over_http(api, sdk, tenant):
    """Case 7 (HTTP): a heartbeat's intent is kept apart from checkpoints and handed to the
    claim after an operator's requeue; the HTTP worker's reconcile parks it unknown."""
    sdk.enqueue("sms-1", "sms", {"to": "+100"}, target_class="D")
    grant = sdk.claim("w1", operation_id="sms-1")
    assert grant.intent is None
    assert_error(api.post(op_path("sms-1", "heartbeat"), {"fence": 1, "worker_id": "w1", "intent": ""}), 422,
                 "invalid_request")
    assert_error(api.post(op_path("sms-1", "heartbeat"), {"fence": 1, "worker_id": "w1", "intent": "a\nb"}), 422,
                 "invalid_request")
    sdk.heartbeat("sms-1", 1, "w1", intent="sms")
    sdk.heartbeat("sms-1", 1, "w1", checkpoint={"step": "sending"})
    sdk.unknown("sms-1", 1, "the provider timed out")
    sdk.resolve("sms-1", "requeue", "retry after checking")
    raw = claim(api, "w2", operation_id="sms-1").json["claim"]
    assert raw["intent"] == {"fence": 1, "what": "sms"} and raw["checkpoint"] == {"step": "sending"}
    assert raw["reconcile_required"] is True
    # Let that claim lapse (it is not acted on) and have the HTTP worker take it over.
    sdk.unknown("sms-1", raw["fence"], "handed back")
    sdk.resolve("sms-1", "requeue")
    calls = []
    worker = http_worker(sdk, tenant, {"sms": FunctionHandler(lambda job: calls.append(1) or "sent",
                                                              single_shot.reconcile)})
    assert worker.run_once()
    op = sdk.get("sms-1")
    assert calls == [] and op.state == "unknown" and op.fence == 3


# ---------------------------------------------------------------------------------- sweeper


def test_sweeper_purges_due_payloads_and_reports_the_oldest_due_age(stack, tenant):
    engine = runtime().engine
    # Enqueued, claimed and completed two minutes ago (an injected clock) with no payload
    # retention: its stored payload is due for purging.
    past = type(engine)(spec=engine.spec, client=engine.store.client, clock=lambda: engine.clock() - 120_000,
                        events=engine.events, payloads=engine.payloads, payload_retention_ms=0)
    canonical = canonicalize({"purge": "me"})
    stored = engine.payloads.put(tenant, "old-1", canonical)
    past.enqueue(tenant, "old-1", "job", canonical.hash, stored.ref, payload_inline=True)
    grant = past.claim(tenant, "old-1", "worker-1")
    past.complete(tenant, "old-1", grant.fence, "done")
    past.enqueue(tenant, "waiting-1", "nobody-serves-this", "sha256:" + "4" * 64, "s3://elsewhere/z")
    result = stack.sweep_now()
    assert {"payloads_purged", "purge_batches", "purge_stopped", "oldest_due_age_s"} <= set(result)
    assert result["payloads_purged"] >= 1 and result["purge_stopped"] == "drained"
    # The sweeper samples at most 200 due partitions per run (tenants in random order): on this
    # shared stack it may miss waiting-1, so it reports a lower bound of the exact figure.
    exact_s = engine.oldest_due_age_ms(max_queries=1_000_000) / 1000
    assert exact_s >= 119
    assert 0 <= result["oldest_due_age_s"] <= exact_s + 5
    assert engine.get(tenant, "old-1").payload_state == "purged"
    assert tenant_objects(stack, tenant) == []


def _due_for_purge(tenant, op, payload):
    """An operation enqueued through the API with an S3-stored payload, ended two minutes ago
    with no payload retention: due for purging. Returns its engine and a purging engine whose
    DynamoDB and S3 clients are fault-injection proxies."""
    import copy

    from leasefence_tools.testing.faults import FaultyClient

    engine = runtime().engine
    past = type(engine)(spec=engine.spec, client=engine.store.client, clock=lambda: engine.clock() - 120_000,
                        events=engine.events, payloads=engine.payloads, payload_retention_ms=0)
    grant = engine.claim(tenant, op, "worker-1")
    past.complete(tenant, op, grant.fence, "done")  # ended two minutes ago
    payloads = copy.copy(engine.payloads)
    payloads._client = s3 = FaultyClient(engine.payloads.client)
    ddb = FaultyClient(engine.store.client)
    purger = type(engine)(spec=engine.spec, client=ddb, clock=engine.clock, events=engine.events,
                          payloads=payloads, payload_retention_ms=0)
    return purger, ddb, s3


def _writes(needle):
    return lambda request: needle in request.get("UpdateExpression", "")


@pytest.mark.parametrize("moment", ["before_mark", "before_delete", "before_unfile"])
def test_a_replay_racing_the_purge_leaves_no_object_behind(stack, api, tenant, moment):
    """Issue 32, failure 3: on main 4f60178 the purge deleted the object first and marked the
    payload purged after; a same-id replay in between wrote the object again through the enqueue
    route, and nothing deleted it. Now the purge marks first and deletes after, and leaves the
    purge index only once the object is gone: a replay at any moment leaves no object."""
    payload = {"notes": BIG, "moment": moment}
    assert enqueue(api, "race-1", payload).status == 201
    assert len(tenant_objects(stack, tenant)) == 1
    purger, ddb, s3 = _due_for_purge(tenant, "race-1", payload)
    replays = []

    def replay():
        replays.append(api.post("/v1/operations", {"operation_id": "race-1", "job_type": "job", "payload": payload}))

    if moment == "before_mark":
        ddb.before_next("update_item", replay, when=_writes("payload_purged_at"))
    elif moment == "before_delete":
        s3.before_next("delete_object", replay)
    else:
        ddb.before_next("update_item", replay, when=_writes("REMOVE #ppk, #pat"))
    assert purger.purge_payloads(limit=1000).purged >= 1
    assert [r.status for r in replays] == [200] and replays[0].json["created"] is False
    assert tenant_objects(stack, tenant) == []
    item = raw_item(tenant, "race-1")
    assert "payload_purged_at" in item and "purge_pk" not in item  # nothing left to do
    assert runtime().engine.get(tenant, "race-1").payload_state == "purged"


def test_a_failed_delete_leaves_the_purge_filed_and_the_next_pass_finishes(stack, api, tenant):
    from leasefence_tools.testing.faults import BEFORE

    assert enqueue(api, "race-2", {"notes": BIG}).status == 201
    purger, _, s3 = _due_for_purge(tenant, "race-2", {"notes": BIG})
    s3.fail_next("delete_object", BEFORE)  # S3 unreachable after the payload was marked
    assert purger.purge_payloads(limit=1000).failed >= 1
    item = raw_item(tenant, "race-2")
    assert "payload_purged_at" in item and "purge_pk" in item  # marked, and still filed
    assert len(tenant_objects(stack, tenant)) == 1
    assert purger.purge_payloads(limit=1000).purged >= 1  # the next pass
    assert tenant_objects(stack, tenant) == [] and "purge_pk" not in raw_item(tenant, "race-2")


def test_erasure_deletes_an_object_written_again_after_its_purge(stack, api, tenant):
    """A payload object written again after the purge (a replay whose route could not delete it)
    is found by the operation's erasure, which on main 4f60178 skipped a purged payload."""
    payload = {"notes": BIG}
    assert enqueue(api, "race-3", payload).status == 201
    purger, _, _ = _due_for_purge(tenant, "race-3", payload)
    assert purger.purge_payloads(limit=1000).purged >= 1
    assert tenant_objects(stack, tenant) == []
    runtime().payloads.put(tenant, "race-3", canonicalize(payload))  # the orphan
    assert len(tenant_objects(stack, tenant)) == 1
    assert api.post(op_path("race-3", "erase"), {}).status == 200
    assert tenant_objects(stack, tenant) == []
    assert "purge_pk" not in raw_item(tenant, "race-3")


class _FakePurger:
    def __init__(self, batches):
        self.batches = list(batches)
        self.calls = 0

    def purge_payloads(self, limit):
        self.calls += 1
        examined, purged = self.batches.pop(0) if self.batches else (0, 0)
        return SimpleNamespace(examined=examined, purged=purged)


def test_sweeper_purge_loop_is_bounded():
    purge = load_function("sweeper").purge
    engine = _FakePurger([(10, 10), (10, 9), (3, 3)])
    assert purge(engine, 10, 50, lambda: 60_000) == {"purge_batches": 3, "payloads_purged": 22, "purge_stopped": "drained"}
    engine = _FakePurger([(10, 10)] * 100)
    assert purge(engine, 10, 4, lambda: 60_000)["purge_stopped"] == "max_batches" and engine.calls == 4
    clock = iter([60_000, 30_000, 4_000])
    engine = _FakePurger([(10, 10)] * 100)
    assert purge(engine, 10, 50, lambda: next(clock))["purge_stopped"] == "time" and engine.calls == 2
    engine = _FakePurger([(10, 0)] * 100)  # a full batch that purged nothing: do not spin on it
    assert purge(engine, 10, 50, lambda: 60_000)["purge_batches"] == 1

    class Down:
        def purge_payloads(self, limit):
            from leasefence.errors import Unavailable

            raise Unavailable("s3 down")

    assert purge(Down(), 10, 50, lambda: 60_000) == {"purge_batches": 0, "payloads_purged": 0,
                                                      "purge_stopped": "unavailable"}
