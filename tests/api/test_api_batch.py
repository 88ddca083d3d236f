"""The batch routes (``POST /v1/batch/enqueue``, ``/claim``, ``/heartbeat``, ``/finish``) over the local stack:
each item its own write and its own answer (one stale fence among good ones: the others
succeed), a malformed body or one over the cap refused whole with nothing written, a resend after
a lost answer answered item by item as the one-at-a-time routes answer a replay; the SDK's typed
results; and the HTTP worker runtime renewing and finishing through them."""

from __future__ import annotations

import threading
from collections import Counter
import time

import pytest

from leasefence.api.security import PRODUCE
from leasefence.client import LeaseFenceClient
from leasefence.errors import PayloadConflict, StaleFence
from leasefence.limits import MAX_BATCH_ITEMS
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.http_backend import HttpBackend
from tests.support.api import claimed, enqueue, op_path
from tests.support.proxy import FaultyProxy


def item(operation_id: str, **fields) -> dict:
    return {"operation_id": operation_id, "job_type": "job", "payload": {"n": operation_id}, **fields}


def state(api, operation_id: str) -> dict:
    reply = api.get(op_path(operation_id))
    assert reply.status == 200, reply.text
    return reply.json


def statuses(reply) -> list[int]:
    assert reply.status == 200, reply.text
    return [r["status"] for r in reply.json["results"]]


# ------------------------------------------------------------------------------------ enqueue


def test_batch_enqueue_answers_each_item_in_order(api):
    enqueue(api, "be-taken", {"other": True})
    reply = api.post("/v1/batch/enqueue", {"items": [item("be-1"), item("be-taken"), item("be-2")]})
    assert statuses(reply) == [201, 409, 201]
    first, conflict, second = reply.json["results"]
    assert [first["operation_id"], conflict["operation_id"], second["operation_id"]] == ["be-1", "be-taken", "be-2"]
    assert first["body"]["created"] is True and first["body"]["operation"]["state"] == "queued"
    assert conflict["body"]["error"]["code"] == "payload_conflict"
    assert state(api, "be-2")["state"] == "queued"
    assert state(api, "be-taken")["payload_hash"] != first["body"]["operation"]["payload_hash"]


def test_batch_enqueue_resent_is_a_replay_item_by_item(api):
    body = {"items": [item("br-1"), item("br-2")]}
    assert statuses(api.post("/v1/batch/enqueue", body)) == [201, 201]
    again = api.post("/v1/batch/enqueue", body)
    assert statuses(again) == [200, 200]
    assert [r["body"]["created"] for r in again.json["results"]] == [False, False]
    assert all(r["body"]["operation"]["fence"] == 0 for r in again.json["results"])


@pytest.mark.parametrize(
    "items",
    [
        [item("bm-1"), {"operation_id": "bm-2", "payload": {}}],  # an item without job_type
        [item(f"bm-{i}") for i in range(MAX_BATCH_ITEMS + 1)],  # over the cap
        [],  # nothing
        [item("bm-1"), item("bm-2", payload={"n": 2**53})],  # not I-JSON: no canonical form
        [item("bm-1"), item("bm-2", payload_hash="sha256:" + "0" * 64)],  # not the payload's hash
    ],
    ids=["invalid-item", "over-cap", "empty", "not-i-json", "wrong-hash"],
)
def test_a_malformed_batch_is_refused_whole_and_writes_nothing(api, items):
    reply = api.post("/v1/batch/enqueue", {"items": items})
    assert reply.status == 422, reply.text
    assert reply.json["error"]["code"] == "invalid_request"
    for name in {i["operation_id"] for i in items}:
        assert api.get(op_path(name)).status == 404


def test_over_the_cap_says_so(api):
    reply = api.post("/v1/batch/enqueue", {"items": [item(f"cap-{i}") for i in range(MAX_BATCH_ITEMS + 1)]})
    assert reply.status == 422
    assert f"at most {MAX_BATCH_ITEMS}" in reply.json["error"]["message"]


def test_batch_routes_keep_their_scopes(make_api, tenant):
    producer = make_api(tenant, [PRODUCE])
    reply = producer.post("/v1/batch/heartbeat", {"items": [{"operation_id": "x", "fence": 1, "worker_id": "w"}]})
    assert reply.status == 403 and reply.json["error"]["code"] == "forbidden"


# ------------------------------------------------------------------------------------ heartbeat


def test_batch_heartbeat_renews_the_good_fences_beside_a_stale_one(api):
    for name in ("bh-1", "bh-2", "bh-3"):
        enqueue(api, name, max_attempts=3)
        claimed(api, name, lease_seconds=5)
    before = {name: state(api, name)["lease_expires_at"] for name in ("bh-1", "bh-3")}
    body = {
        "items": [
            {"operation_id": "bh-1", "fence": 1, "worker_id": "worker-1", "lease_seconds": 600},
            {"operation_id": "bh-2", "fence": 2, "worker_id": "worker-1"},  # stale: fence 1 holds it
            {"operation_id": "bh-3", "fence": 1, "worker_id": "worker-1", "lease_seconds": 600,
             "checkpoint": {"at": 3}},
            {"operation_id": "bh-none", "fence": 1, "worker_id": "worker-1"},
        ]
    }
    reply = api.post("/v1/batch/heartbeat", body)
    assert statuses(reply) == [200, 409, 200, 404]
    results = reply.json["results"]
    assert results[1]["body"]["error"]["code"] == "stale_fence"
    assert results[3]["body"]["error"]["code"] == "not_found"
    for name, result in (("bh-1", results[0]), ("bh-3", results[2])):
        assert result["body"]["lease_expires_at"] == state(api, name)["lease_expires_at"] > before[name]
    # A resend (its answer lost): the same answers, nothing else changed.
    assert statuses(api.post("/v1/batch/heartbeat", body)) == [200, 409, 200, 404]
    assert [state(api, n)["fence"] for n in ("bh-1", "bh-2", "bh-3")] == [1, 1, 1]


# ------------------------------------------------------------------------------------ finish


def test_batch_finish_each_action_and_a_stale_fence(api):
    names = ("bf-ok", "bf-fail", "bf-unknown", "bf-quarantine", "bf-stale")
    for name in names:
        enqueue(api, name, max_attempts=3)
        claimed(api, name)
    body = {
        "items": [
            {"action": "complete", "operation_id": "bf-ok", "fence": 1, "outcome_code": "done"},
            {"action": "fail", "operation_id": "bf-fail", "fence": 1, "retryable": True, "reason": "busy",
             "retry_after_seconds": 0},
            {"action": "unknown", "operation_id": "bf-unknown", "fence": 1, "reason": "timeout"},
            {"action": "quarantine", "operation_id": "bf-quarantine", "fence": 1, "reason": "bad input"},
            {"action": "complete", "operation_id": "bf-stale", "fence": 7, "outcome_code": "done"},
        ]
    }
    reply = api.post("/v1/batch/finish", body)
    assert statuses(reply) == [200, 200, 200, 200, 409]
    got = [r["body"].get("operation", {}).get("state") for r in reply.json["results"]]
    assert got == ["succeeded", "queued", "unknown", "quarantined", None]
    assert reply.json["results"][4]["body"]["error"]["code"] == "stale_fence"
    assert state(api, "bf-stale")["state"] == "claimed"
    # A resend after a lost answer: each item's answer again, no second effect.
    again = api.post("/v1/batch/finish", body)
    assert statuses(again) == [200, 200, 200, 200, 409]
    assert [state(api, n)["state"] for n in names] == ["succeeded", "queued", "unknown", "quarantined", "claimed"]
    assert state(api, "bf-fail")["attempts"] == 1


def test_a_malformed_finish_batch_writes_nothing(api):
    enqueue(api, "bfm-1")
    claimed(api, "bfm-1")
    body = {
        "items": [
            {"action": "complete", "operation_id": "bfm-1", "fence": 1, "outcome_code": "done"},
            {"action": "explode", "operation_id": "bfm-1", "fence": 1},
        ]
    }
    reply = api.post("/v1/batch/finish", body)
    assert reply.status == 422 and reply.json["error"]["code"] == "invalid_request"
    assert state(api, "bfm-1")["state"] == "claimed"


# ------------------------------------------------------------------------------------ claim


def test_batch_claim_answers_each_claim_and_its_resend(api):
    for name in ("bc-1", "bc-2"):
        enqueue(api, name, job_type="bc")
    body = {
        "items": [
            {"worker_id": "w1", "job_types": ["bc"], "claim_token": "t-1"},
            {"worker_id": "w1", "operation_id": "bc-none", "job_types": ["bc"], "claim_token": "t-2"},
            {"worker_id": "w2", "job_types": ["bc"], "claim_token": "t-3", "lease_seconds": 30},
            {"worker_id": "w3", "job_types": ["bc"], "claim_token": "t-4"},
        ]
    }
    reply = api.post("/v1/batch/claim", body)
    assert statuses(reply) == [200, 404, 200, 204]
    results = reply.json["results"]
    claimed_ids = {results[0]["operation_id"], results[2]["operation_id"]}
    assert claimed_ids == {"bc-1", "bc-2"}
    assert results[0]["body"]["claim"]["fence"] == results[2]["body"]["claim"]["fence"] == 1
    assert results[2]["body"]["claim"]["lease_seconds"] == 30
    assert results[1]["body"]["error"]["code"] == "not_found"
    assert results[3] == {"operation_id": None, "status": 204, "body": None}
    # The answer was lost: the resend with the same tokens answers the same claims again.
    again = api.post("/v1/batch/claim", body)
    assert statuses(again) == [200, 404, 200, 204]
    assert [r["operation_id"] for r in again.json["results"]] == [r["operation_id"] for r in results]
    assert [state(api, n)["attempts"] for n in ("bc-1", "bc-2")] == [1, 1]
    assert [state(api, n)["fence"] for n in ("bc-1", "bc-2")] == [1, 1]


def test_a_batch_claim_over_the_cap_claims_nothing(api):
    enqueue(api, "bct-1", job_type="bct")
    over = [{"worker_id": "w1", "job_types": ["bct"]}] * (MAX_BATCH_ITEMS + 1)
    assert api.post("/v1/batch/claim", {"items": over}).status == 422
    assert state(api, "bct-1")["state"] == "queued"


def test_claims_not_begun_within_the_budget_are_503_and_not_made(api, monkeypatch):
    import leasefence.api._batch as batch_routes

    enqueue(api, "bcb-1", job_type="bcb")
    monkeypatch.setattr(batch_routes, "CLAIM_BATCH_BUDGET_MS", 0)
    reply = api.post("/v1/batch/claim", {"items": [{"worker_id": "w1", "job_types": ["bcb"], "claim_token": "b1"}]})
    assert statuses(reply) == [503]
    assert reply.json["results"][0]["body"]["error"]["code"] == "unavailable"
    assert state(api, "bcb-1")["state"] == "queued"
    monkeypatch.undo()
    assert statuses(api.post("/v1/batch/claim", {"items": [{"worker_id": "w1", "job_types": ["bcb"]}]})) == [200]


def test_an_id_named_twice_is_written_in_order(api):
    enqueue(api, "bt-1")
    claimed(api, "bt-1")
    body = {
        "items": [
            {"action": "complete", "operation_id": "bt-1", "fence": 1, "outcome_code": "done"},
            {"action": "fail", "operation_id": "bt-1", "fence": 1, "retryable": False, "reason": "late"},
        ]
    }
    assert statuses(api.post("/v1/batch/finish", body)) == [200, 409]
    assert state(api, "bt-1")["state"] == "succeeded"


# ------------------------------------------------------------------------------------ the SDK


def test_sdk_batches_are_typed_and_resent_after_a_lost_answer(stack, token, api):
    enqueue(api, "bs-taken", {"other": True})
    def drop_first(_method, path, n):
        return "drop" if path.startswith("/v1/batch/") and n == 0 else None

    proxy = FaultyProxy(stack.base_url, drop_first)
    try:
        sdk = LeaseFenceClient(proxy.url, token, retries=2, backoff=0.001)
        results = sdk.enqueue_batch([item("bs-1"), item("bs-taken"), item("bs-2")])
        # The first answer was lost after the writes: the resend's answers are the replays.
        assert proxy.count("POST", "/v1/batch/enqueue") == 2
        assert [r.status for r in results] == [200, 409, 200]
        assert results[0].ok and results[0].result().created is False
        assert isinstance(results[1].error, PayloadConflict)
        with pytest.raises(PayloadConflict):
            results[1].result()
        grants = sdk.claim_batch([
            {"worker_id": "worker-1", "operation_id": "bs-1", "job_types": ["job"]},
            {"worker_id": "worker-1", "operation_id": "bs-2", "job_types": ["job"], "claim_token": "mine"},
        ])
        assert proxy.count("POST", "/v1/batch/claim") == 2  # lost once: the same claims again
        assert [g.result().fence for g in grants] == [1, 1]
        assert grants[1].result().claim_token == "mine"
        renewed = sdk.heartbeat_batch([
            {"operation_id": "bs-1", "fence": 1, "worker_id": "worker-1"},
            {"operation_id": "bs-2", "fence": 9, "worker_id": "worker-1"},
        ])
        assert renewed[0].ok and renewed[0].result().year >= 2026
        assert isinstance(renewed[1].error, StaleFence)
        done = sdk.finish_batch([
            {"action": "complete", "operation_id": "bs-1", "fence": 1, "outcome_code": "ok"},
            {"action": "fail", "operation_id": "bs-2", "fence": 1, "retryable": False, "reason": "no"},
        ])
        assert proxy.count("POST", "/v1/batch/finish") == 2  # lost once, resent: same answers
        assert [r.result().state for r in done] == ["succeeded", "failed_terminal"]
        assert state(api, "bs-1")["fence"] == 1 and state(api, "bs-2")["attempts"] == 1
    finally:
        proxy.close()


def test_sdk_splits_a_long_batch_at_the_cap(sdk, api):
    results = sdk.enqueue_batch([item(f"bl-{i}") for i in range(MAX_BATCH_ITEMS + 3)])
    assert [r.status for r in results] == [201] * (MAX_BATCH_ITEMS + 3)
    assert state(api, f"bl-{MAX_BATCH_ITEMS + 2}")["state"] == "queued"


# ------------------------------------------------------------------------------------ the runtime


def test_a_batched_fleet_renews_all_its_leases_in_one_request_per_interval(stack, token, tenant, api):
    """Four workers over one batched backend, each holding a lease while its handler makes
    progress: the renewals of one instant share a request; every job completes."""
    names = [f"bw-{i}" for i in range(4)]
    proxy = FaultyProxy(stack.base_url, lambda *_: None)
    started = threading.Barrier(len(names))
    events = Counter()

    def count(name, value):
        events[str(name)] += value

    def slow(job):
        started.wait(timeout=10)
        for _ in range(6):
            job.progress()
            time.sleep(0.1)
        return "ok"

    try:
        backend = HttpBackend(LeaseFenceClient(proxy.url, token), tenant, batched=True)
        for name in names:
            enqueue(api, name, job_type="slow")
        workers = [
            Worker(backend, {"slow": FunctionHandler(slow)}, worker_id=f"w{i}", lease_ms=3_000,
                   heartbeat_interval_ms=200, events=count)
            for i in range(len(names))
        ]
        threads = [threading.Thread(target=w.run_once) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert [state(api, n)["state"] for n in names] == ["succeeded"] * len(names)
        # A renewal that raced the closing write and was refused is no loss of ownership.
        assert not [name for name in events if "Lost" in name], events
        # Every claim, renewal and close went through the round route; none one at a time.
        rounds = proxy.count("POST", "/v1/batch/work")
        assert len(proxy.seen) == rounds, proxy.seen
        # One claim round, about 3 renewal instants shared by the four, and the closes (run_once:
        # no next claim rides with them): one request per call would be 4 + 12 + 4.
        assert 3 <= rounds <= 10, proxy.seen
        print(f"requests per lifecycle (claim, renewals, finish): {len(proxy.seen) / len(names):.2f}")
    finally:
        proxy.close()

