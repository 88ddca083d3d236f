"""The worker fleet's round route (``POST /v1/batch/work``) over the local stack: closes, then
renewals, then claims, each item its own write and answer in its list; a malformed body refused
whole with nothing written; a resend after a lost answer answered as replays (the claim by its
token, no attempt spent); and the batched HTTP worker closing a job and claiming its next one in
one request, also when that request's answer is lost or the worker stops meanwhile."""

from __future__ import annotations

import threading

from leasefence.client import LeaseFenceClient
from leasefence.limits import MAX_BATCH_ITEMS
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.http_backend import HttpBackend
from tests.support.api import claimed, enqueue, op_path
from tests.support.proxy import FaultyProxy

WORK = "/v1/batch/work"


def state(api, operation_id: str) -> dict:
    reply = api.get(op_path(operation_id))
    assert reply.status == 200, reply.text
    return reply.json


def statuses(reply, kind: str) -> list[int]:
    assert reply.status == 200, reply.text
    return [r["status"] for r in reply.json[kind]]


def test_a_round_closes_renews_then_claims_each_in_its_list(api):
    for name in ("wr-done", "wr-held", "wr-next"):
        enqueue(api, name, job_type="wr")
    claimed(api, "wr-done")
    claimed(api, "wr-held")
    reply = api.post(WORK, {
        "finish": [
            {"action": "complete", "operation_id": "wr-done", "fence": 1, "outcome_code": "ok"},
            {"action": "complete", "operation_id": "wr-held", "fence": 7, "outcome_code": "ok"},
        ],
        "heartbeat": [{"operation_id": "wr-held", "fence": 1, "worker_id": "worker-1"}],
        "claim": [
            {"worker_id": "worker-2", "job_types": ["wr"], "claim_token": "t-1"},
            {"worker_id": "worker-2", "job_types": ["wr"], "claim_token": "t-2"},
        ],
    })
    assert statuses(reply, "finish") == [200, 409]
    assert reply.json["finish"][1]["body"]["error"]["code"] == "stale_fence"
    assert statuses(reply, "heartbeat") == [200]
    assert statuses(reply, "claim") == [200, 204]
    got = reply.json["claim"][0]
    assert got["operation_id"] == "wr-next" and got["body"]["claim"]["fence"] == 1
    assert reply.json["claim"][1] == {"operation_id": None, "status": 204, "body": None}
    assert [state(api, n)["state"] for n in ("wr-done", "wr-held", "wr-next")] == [
        "succeeded", "claimed", "claimed"]


def test_a_close_comes_before_the_claim_in_the_same_round(api):
    """The finish frees nothing for the claim (a succeeded job is not claimable), but a failed
    retryable one with no delay is: the claim in the same request sees the close's write."""
    enqueue(api, "wo-1", job_type="wo")
    claimed(api, "wo-1")
    reply = api.post(WORK, {
        "claim": [{"worker_id": "worker-1", "job_types": ["wo"], "claim_token": "wo-t"}],
        "finish": [{"action": "fail", "operation_id": "wo-1", "fence": 1, "retryable": True,
                    "reason": "again", "retry_after_seconds": 0}],
    })
    assert statuses(reply, "finish") == [200]
    assert statuses(reply, "claim") == [200]
    assert reply.json["claim"][0]["body"]["claim"]["fence"] == 2
    assert reply.json["heartbeat"] == []


def test_a_malformed_round_writes_nothing(api):
    enqueue(api, "wm-1", job_type="wm")
    claim = {"worker_id": "w1", "job_types": ["wm"]}
    for body in (
        {},
        {"finish": [], "heartbeat": [], "claim": []},
        {"claim": [claim] * (MAX_BATCH_ITEMS + 1)},
        {"claim": [claim], "heartbeat": [{"operation_id": "x", "fence": 1, "worker_id": "w"}] * (MAX_BATCH_ITEMS + 1)},
        {"finish": [], "heartbeat": [], "claim": [], "items": [claim]},
        {"claim": [claim], "finish": [{"action": "explode", "operation_id": "wm-1", "fence": 1}]},
        {"claim": [claim], "renew": []},
    ):
        reply = api.post(WORK, body)
        assert reply.status == 422, (body, reply.text)
        assert reply.json["error"]["code"] == "invalid_request"
    assert state(api, "wm-1")["state"] == "queued"


def test_a_round_resent_after_a_lost_answer_is_answered_as_replays(stack, token, api):
    enqueue(api, "wl-1", job_type="wl")
    enqueue(api, "wl-2", job_type="wl")
    claimed(api, "wl-1")
    proxy = FaultyProxy(stack.base_url, lambda _m, path, n: "drop" if path == WORK and n == 0 else None)
    try:
        sdk = LeaseFenceClient(proxy.url, token, retries=2, backoff=0.001)
        answer = sdk.work_batch(
            finish=[{"action": "complete", "operation_id": "wl-1", "fence": 1, "outcome_code": "ok"}],
            claim=[{"worker_id": "worker-1", "job_types": ["wl"], "claim_token": "wl-t"}],
        )
        assert proxy.count("POST", WORK) == 2  # lost once, resent whole
        assert answer.finish[0].result().state == "succeeded"
        grant = answer.claim[0].result()
        assert grant.operation_id == "wl-2" and grant.fence == 1 and grant.claim_token == "wl-t"
        assert state(api, "wl-2")["attempts"] == 1  # the resend answered the first claim
        assert answer.heartbeat == []
    finally:
        proxy.close()


def fleet_run(stack, token, tenant, api, names, plan=None, stop_on_round=None):
    """One looping batched worker over a proxy until every name ran; returns (proxy, runs)."""
    runs: list[str] = []
    done = threading.Event()
    worker_box: list[Worker] = []

    def planned(method, path, n):
        if stop_on_round is not None and path == WORK and n == stop_on_round:
            worker_box[0].stop()
        return plan(method, path, n) if plan else None

    proxy = FaultyProxy(stack.base_url, planned)
    backend = HttpBackend(LeaseFenceClient(proxy.url, token, retries=2, backoff=0.001), tenant, batched=True)

    def run(job):
        runs.append(job.claim.operation_id)
        if len(runs) >= len(names):
            done.set()
        return "ok"

    worker = Worker(backend, {"wf": FunctionHandler(run)}, worker_id="fleet-1", lease_ms=6_000)
    worker_box.append(worker)
    for name in names:
        enqueue(api, name, job_type="wf")
    thread = threading.Thread(target=worker.run, kwargs={"until": done.is_set})
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    return proxy, runs


def test_a_looping_batched_worker_closes_and_claims_in_one_request(stack, token, tenant, api):
    names = [f"wf-{i}" for i in range(3)]
    proxy, runs = fleet_run(stack, token, tenant, api, names)
    try:
        assert sorted(runs) == names
        assert [state(api, n)["state"] for n in names] == ["succeeded"] * 3
        # The first claim, then a close carrying the next claim for each of the first two
        # jobs; the last close claims nothing more (until() is true by then): 4 requests for
        # 3 jobs, where claim and close apart would be 6.
        assert proxy.count("POST", WORK) == len(proxy.seen) == 4, proxy.seen
    finally:
        proxy.close()


def test_a_lost_round_answer_spends_no_attempt(stack, token, tenant, api):
    """The answer of the round that closed the first job and claimed the second is lost: the
    close is resent (a replay) with the same claim token, which answers the claim already made."""
    names = [f"wx-{i}" for i in range(2)]
    proxy, runs = fleet_run(stack, token, tenant, api, names, plan=lambda _m, p, n: "drop" if p == WORK and n == 1 else None)
    try:
        assert sorted(runs) == names
        assert [(state(api, n)["state"], state(api, n)["attempts"]) for n in names] == [("succeeded", 1)] * 2
    finally:
        proxy.close()


def test_a_worker_stopped_during_its_round_runs_the_job_that_round_claimed(stack, token, tenant, api):
    """stop() lands while the close-and-claim request is on its way: the claim it made is run,
    not left to lapse with an attempt spent."""
    names = [f"ws-{i}" for i in range(3)]
    proxy, runs = fleet_run(stack, token, tenant, api, names, stop_on_round=1)
    try:
        assert len(runs) == 2, runs
        ran = [n for n in names if state(api, n)["state"] == "succeeded"]
        assert sorted(ran) == sorted(runs)
        left = [state(api, n) for n in names if n not in ran]
        assert [(s["state"], s["attempts"]) for s in left] == [("queued", 0)]
    finally:
        proxy.close()


def test_a_close_answered_503_is_retried_without_a_second_claim(stack, token, tenant, api, monkeypatch):
    """The round's close is answered 503 in its place while its claim is made: the worker retries
    the close alone, and runs the claim that round made (no second claim, no attempt lapsed)."""
    import leasefence.api._batch as batch_routes

    real = batch_routes._finishes
    busy = [1]

    def first_busy(one, tenant_id, items):
        if busy and items:
            busy.pop()
            error = {"error": {"code": "unavailable", "message": "injected"}}
            return [{"operation_id": item.operation_id, "status": 503, "body": error} for item in items]
        return real(one, tenant_id, items)

    monkeypatch.setattr(batch_routes, "_finishes", first_busy)
    names = [f"wb-{i}" for i in range(3)]
    proxy, runs = fleet_run(stack, token, tenant, api, names)
    try:
        assert not busy and sorted(runs) == names
        assert [(state(api, n)["state"], state(api, n)["attempts"]) for n in names] == [("succeeded", 1)] * 3
    finally:
        proxy.close()


def test_a_looping_batched_worker_names_each_close_in_its_next_claim(stack, token, tenant, api, monkeypatch):
    """Each claim that rides with its worker's close names it (``after``): its marker is then
    written with that close's payload expiry, in one write."""
    import leasefence.api._batch as batch_routes

    real, seen = batch_routes._claims, []

    def recording(one, tenant_id, items):
        seen.extend(item.after for item in items)
        return real(one, tenant_id, items)

    monkeypatch.setattr(batch_routes, "_claims", recording)
    names = [f"wa-{i}" for i in range(3)]
    proxy, runs = fleet_run(stack, token, tenant, api, names)
    try:
        assert sorted(runs) == names
        assert seen == [None, runs[0], runs[1]], (seen, runs)
    finally:
        proxy.close()


def test_a_close_whose_payload_expiry_failed_is_answered_503_and_its_resend_writes_it(api, monkeypatch):
    """The round closed the operation, then could not write its payload's expiry (the store
    unavailable): the finish is answered 503 in its place, and its resend (a replay) writes it."""
    from leasefence.engine import _payload_items
    from leasefence.errors import Unavailable

    enqueue(api, "we-1", job_type="we")
    claimed(api, "we-1")
    real, written = _payload_items.after_end, []

    def unavailable(ctx, item):
        raise Unavailable("injected")

    def recording(ctx, item):
        written.append(item["operation_id"])
        return real(ctx, item)

    close = {"finish": [{"action": "complete", "operation_id": "we-1", "fence": 1, "outcome_code": "ok"}]}
    monkeypatch.setattr(_payload_items, "after_end", unavailable)
    reply = api.post(WORK, close)
    assert statuses(reply, "finish") == [503]
    assert reply.json["finish"][0]["body"]["error"]["code"] == "unavailable"
    assert state(api, "we-1")["state"] == "succeeded"
    monkeypatch.setattr(_payload_items, "after_end", recording)
    reply = api.post(WORK, close)
    assert statuses(reply, "finish") == [200] and written == ["we-1"]
