"""Batched HTTP workers in the torture run: batch requests recorded item by item as the
indeterminate checker's calls (a lost batch answer makes every item indeterminate), a claim
batch sent again after a lost answer judged item by item, and a planted bug in the batch route
caught in a small composed run."""

from __future__ import annotations

import json
import logging
import zlib
from types import SimpleNamespace

import pytest

from leasefence.api import _batch
from leasefence_tools.torture import Settings, run_torture
from leasefence_tools.torture.checker import retry_rule
from leasefence_tools.torture.compose import Http, _ms
from leasefence_tools.torture.indeterminate import (
    FAIL,
    INFO,
    OK,
    CallLog,
    http_answers,
    http_calls,
)
from leasefence_tools.torture.settings import Report


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


def claim_body(operation_id, fence):
    return {
        "claim": {
            "operation_id": operation_id,
            "fence": fence,
            "lease_expires_at": "2026-12-06T20:00:00Z",
        }
    }


FINISH = {
    "items": [
        {"action": "complete", "operation_id": "op/1", "fence": 2, "outcome_code": "ok"},
        {"action": "fail", "operation_id": "op-2", "fence": 1, "retryable": True, "reason": "x"},
        {"action": "complete", "operation_id": "op-3", "fence": 4, "outcome_code": "ok"},
    ]
}


def test_a_finish_batch_is_one_call_per_complete_item_each_judged_by_its_own_status():
    calls = http_calls("w1", "t", "POST", "/v1/batch/finish", FINISH)
    assert [(i, c.kind, c.operation_id, c.fence) for i, c in calls] == [
        (("results", 0), "complete", "op/1", 2),
        (("results", 2), "complete", "op-3", 4),
    ]
    log = CallLog(seed=1, rate=0.0, clock=iter(range(100)).__next__)
    for _, call in calls:
        log.begin(call)
    answer = {
        "results": [
            {"operation_id": "op/1", "status": 200, "body": {"operation": {}}},
            {"operation_id": "op-2", "status": 200, "body": {"operation": {}}},
            {
                "operation_id": "op-3",
                "status": 409,
                "body": {"error": {"code": "stale_fence", "message": "m"}},
            },
        ]
    }
    http_answers(log, calls, 200, answer)
    assert [(c.outcome, c.answer) for _, c in calls] == [(OK, "done"), (FAIL, "stale_fence")]


def test_a_round_is_one_call_per_claim_and_complete_item_each_judged_from_its_own_list():
    body = {
        "finish": FINISH["items"],
        "heartbeat": [{"operation_id": "op-9", "fence": 1, "worker_id": "w1"}],
        "claim": [{"worker_id": "w1", "claim_token": "k1"}],
    }
    calls = http_calls("w1", "t", "POST", "/v1/batch/work", body)
    assert [(i, c.kind) for i, c in calls] == [
        (("finish", 0), "complete"),
        (("finish", 2), "complete"),
        (("claim", 0), "claim"),
    ]
    log = CallLog(seed=1, rate=0.0, clock=iter(range(100)).__next__)
    for _, call in calls:
        log.begin(call)
    stale = {"error": {"code": "stale_fence", "message": "m"}}
    claimed = {"claim": {"operation_id": "op-7", "fence": 3}}
    answer = {
        "finish": [
            {"operation_id": "op/1", "status": 409, "body": stale},
            {"operation_id": "op-2", "status": 200, "body": {"operation": {}}},
            {"operation_id": "op-3", "status": 200, "body": {"operation": {}}},
        ],
        "heartbeat": [{"operation_id": "op-9", "status": 200, "body": {}}],
        "claim": [{"operation_id": "op-7", "status": 200, "body": claimed}],
    }
    http_answers(log, calls, 200, answer)
    assert [(c.outcome, c.answer) for _, c in calls] == [(FAIL, "stale_fence"), (OK, "done"), (OK, "claimed")]
    assert (calls[2][1].operation_id, calls[2][1].fence) == ("op-7", 3)


def test_a_claim_batch_answer_names_each_items_claim_and_a_lost_answer_is_every_items():
    body = {"items": [{"worker_id": "w1", "claim_token": "k1"}, {"worker_id": "w2"}]}
    calls = http_calls("client", "t", "POST", "/v1/batch/claim", body)
    assert [(c.process, c.token) for _, c in calls] == [("w1", "k1"), ("w2", None)]
    log = CallLog(seed=1, rate=0.0, clock=iter(range(100)).__next__)
    answer = {
        "results": [
            {"operation_id": "op-9", "status": 200, "body": claim_body("op-9", 3)},
            {"operation_id": None, "status": 204, "body": None},
        ]
    }
    http_answers(log, calls, 200, answer)
    assert [(c.outcome, c.answer, c.operation_id, c.fence) for _, c in calls] == [
        (OK, "claimed", "op-9", 3),
        (OK, "none", None, None),
    ]
    # The whole request busy (or its answer lost): no item was answered.
    again = http_calls("client", "t", "POST", "/v1/batch/claim", body)
    http_answers(log, again, 503, {"error": {"code": "unavailable", "message": "m"}})
    assert [c.outcome for _, c in again] == [INFO, INFO]
    # Renewals are none of the four kinds; a one-at-a-time request is one call, no item.
    assert http_calls("c", "t", "POST", "/v1/batch/heartbeat", {"items": [{"fence": 1}]}) == []
    [(index, single)] = http_calls("c", "t", "POST", "/v1/claims", {"worker_id": "w1"})
    assert index is None and single.kind == "claim"


def test_the_lost_answer_coin_of_a_batch_is_one_for_all_its_items():
    body = {"items": [{"worker_id": f"w{n}", "claim_token": f"k{n}"} for n in range(3)]}
    log = CallLog(seed=2, rate=1.0, clock=iter(range(100)).__next__)
    calls = [c for _, c in http_calls("client", "t", "POST", "/v1/batch/claim", body)]
    assert log.lose_together(calls) in ("before", "after")
    assert log.rates()["claim"]["lost_by_chaos"] == 3


def test_retry_rule_judges_a_claim_batch_sent_again_item_by_item():
    def lost(operation_id, item, token="k"):
        return {
            "operation_id": operation_id,
            "fence": 2,
            "lease_expires_at": 10_000,
            "token": token,
            "item": item,
        }

    record = {
        "path": "/v1/batch/claim",
        "at": 9_000,
        "claims": [
            {**lost("op-1", 0), "retry_claim": ["op-1", 2]},
            {**lost("op-2", 1), "retry_claim": ["op-5", 1]},
        ],
    }
    [(kind, detail)] = retry_rule(record)
    assert kind == "lost_claim_not_recognized" and "op-2" in detail
    record["claims"][1]["retry_claim"] = ["op-2", 2]
    assert retry_rule(record) == []


class ScriptedApi:
    """An API answering each request with the next of ``answers`` (a claim batch's results)."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def respond(self, *_request):
        status, body = self.answers.pop(0)
        return status, {}, json.dumps(body).encode()


def item(status, body=None, operation_id=None):
    return {"operation_id": operation_id, "status": status, "body": body}


BUSY = {"error": {"code": "unavailable", "message": "store unreachable or response lost, retry"}}


def test_a_claim_batch_item_answered_busy_on_its_resend_is_judged_by_the_next_batch_carrying_it():
    """A claim batch's answer is lost; its resend runs, but that claim's item answers 503 (the
    API's store was busy for it): no answer yet, as a busy one-at-a-time claim, not "nothing
    claimed". The worker keeps its token and sends it again in a later batch (other items beside
    it, in another place): that item's answer is the one compared with the lost claim."""
    settings = SimpleNamespace(seed=1, claim_tokens=True, http_lost_rate=1.0)
    report = Report(settings=settings)
    lease_end = "2026-12-06T20:00:00Z"
    now = _ms("2026-12-06T19:59:00Z")
    claimed = {"claim": {"operation_id": "op-1", "fence": 2, "lease_expires_at": lease_end}}
    api = ScriptedApi(
        (200, {"results": [item(200, claimed, "op-1")]}),  # its answer lost
        (200, {"results": [item(503, BUSY)]}),  # the resend: this item's store was busy
        (200, {"results": [item(204), item(200, claimed, "op-1")]}),  # a later batch
    )
    http = Http(api, settings, report, lambda: now, observer=None)
    client = http.client("w", "t", ["work"], None)
    first = {"items": [{"worker_id": "w1", "claim_token": "k1"}]}
    with pytest.raises(ConnectionResetError):
        client._once("POST", "/v1/batch/claim", first)
    settings.http_lost_rate = 0.0
    client._once("POST", "/v1/batch/claim", first)
    assert [f for record in report.retries for f in retry_rule(record)] == []
    later = {"items": [{"worker_id": "w0", "claim_token": "k0"}, first["items"][0]]}
    client._once("POST", "/v1/batch/claim", later)
    judged = [c for record in report.retries for c in record.get("claims", [])]
    assert [(c["token"], c["retry_claim"]) for c in judged] == [("k1", ["op-1", 2])]
    assert [f for record in report.retries for f in retry_rule(record)] == []
    assert client.awaiting == {}


def test_a_claim_batch_item_that_answers_none_when_carried_again_is_still_caught():
    settings = SimpleNamespace(seed=1, claim_tokens=True, http_lost_rate=1.0)
    report = Report(settings=settings)
    claimed = {
        "claim": {"operation_id": "op-1", "fence": 2, "lease_expires_at": "2026-12-06T20:00:00Z"}
    }
    api = ScriptedApi(
        (200, {"results": [item(200, claimed, "op-1")]}),
        (200, {"results": [item(429, BUSY)]}),
        (503, BUSY),  # the whole next batch busy: still no answer
        (200, {"results": [item(204)]}),  # carried again: nothing claimed
    )
    http = Http(api, settings, report, lambda: _ms("2026-12-06T19:59:00Z"), observer=None)
    client = http.client("w", "t", ["work"], None)
    body = {"items": [{"worker_id": "w1", "claim_token": "k1"}]}
    with pytest.raises(ConnectionResetError):
        client._once("POST", "/v1/batch/claim", body)
    settings.http_lost_rate = 0.0
    for _ in range(3):
        client._once("POST", "/v1/batch/claim", body)
    [(kind, detail)] = [f for record in report.retries for f in retry_rule(record)]
    assert kind == "lost_claim_not_recognized" and "op-1 fence 2" in detail


def test_a_batch_route_that_drops_an_items_claim_from_its_answer_is_caught(monkeypatch):
    """Plant a bug in the batch route: some claim items that claimed are answered 204 (nothing
    claimable), so the worker never runs them and they lapse to a takeover. The one-at-a-time
    route is untouched: only the batched HTTP workers' items are wrong, and the checker finds
    claims their calls cannot explain, judging each item by its own answer."""
    answered = _batch.item_result
    dropped: set[str] = set()

    def drop_some_claims(operation_id, one):
        result = answered(operation_id, one)
        body = result["body"]
        if result["status"] == 200 and isinstance(body, dict) and "claim" in body:
            claimed = body["claim"]["operation_id"]
            if zlib.crc32(claimed.encode()) % 2 == 0:
                dropped.add(claimed)
                return {"operation_id": operation_id, "status": 204, "body": None}
        return result

    monkeypatch.setattr(_batch, "item_result", drop_some_claims)
    summary = run_torture(Settings(operations=30, seed=4, workers=4, months=False))
    assert dropped and summary["composed"]["batched"]["round_items"]["claim"] > 0
    found = summary["violation_kinds"]
    assert found.get("no_resolution", 0) > 0, summary["indeterminate"]
    # Each finding is an operation whose claim was dropped: a claim in its history that no
    # call explains.
    caught = [v for v in summary["first_violations"] if v["kind"] == "no_resolution"]
    assert all(v["operation_id"] in dropped for v in caught), (dropped, caught)
    assert "claim fence 1 at" in caught[0]["detail"]
