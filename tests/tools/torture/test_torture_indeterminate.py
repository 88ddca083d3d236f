"""Histories with indeterminate calls (:mod:`leasefence_tools.torture.indeterminate`): the rule
fed histories by hand, and a bug that only shows through a lost answer planted in a small run,
caught by the indeterminate checker and by none of the checker's other rules."""

from __future__ import annotations

import logging

import pytest

from leasefence.engine import _rules
from leasefence.model import State
from leasefence_tools.torture import Settings, run_torture
from leasefence_tools.torture.indeterminate import (
    FAIL,
    INFO,
    MAX_INDETERMINATE,
    OK,
    Call,
    CallLog,
    RecordedEngine,
    indeterminate_rule,
)

HASH, OTHER = "sha256:aa", "sha256:bb"


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


def call(number, kind, invoked, completed, outcome, answer="", **fields):
    fields.setdefault("process", "w1")
    made = Call(kind, tenant_id="t", recovery="", operation_id=fields.pop("op", "op-1"), **fields)
    made.number, made.invoked, made.completed = number, invoked, completed
    made.outcome, made.answer = outcome, answer
    return made


def entry(transition, at, fence=0, actor=None):
    return {"transition": transition, "at": at, "fence": fence, "actor": actor}


ENQUEUED = entry("enqueue", 5)
CLAIMED = entry("claim", 25, fence=1, actor="w1")
COMPLETED = entry("complete", 45, fence=1, actor="w1")
ENQUEUE = call(0, "enqueue", 0, 10, OK, "created", payload_hash=HASH)
CLAIM = call(1, "claim", 20, 30, OK, "claimed", fence=1, token="k1")


def kinds(judged):
    return [kind for kind, _ in judged.findings]


def test_a_lost_completion_that_took_effect_is_explained_by_its_retry_answered_done():
    lost = call(2, "complete", 40, 50, INFO, fence=1)
    retry = call(3, "complete", 60, 70, OK, "done", fence=1)
    judged = indeterminate_rule([ENQUEUE, CLAIM, lost, retry], [ENQUEUED, CLAIMED, COMPLETED], HASH)
    assert judged.findings == [] and judged.indeterminate == 1
    assert judged.resolutions_tried == 2  # none applied: the entry has no producer; then {lost}


def test_a_completion_retry_by_the_same_fence_answered_stale_has_no_resolution():
    lost = call(2, "complete", 40, 50, INFO, fence=1)
    stale = call(3, "complete", 60, 70, FAIL, "stale_fence", fence=1)
    judged = indeterminate_rule([ENQUEUE, CLAIM, lost, stale], [ENQUEUED, CLAIMED, COMPLETED], HASH)
    assert kinds(judged) == ["no_resolution"] and "stale_fence" in judged.findings[0][1]
    # Answered stale when nothing was completed (a takeover came first): the truth.
    taken = entry("takeover", 55, fence=2, actor="w2")
    other = call(4, "claim", 50, 58, OK, "claimed", fence=2, token="k2", process="w2")
    judged = indeterminate_rule(
        [ENQUEUE, CLAIM, lost, stale, other], [ENQUEUED, CLAIMED, taken], HASH
    )
    assert judged.findings == []


def test_an_enqueue_replay_answered_as_a_conflict_has_no_resolution():
    lost = call(0, "enqueue", 0, 10, INFO, payload_hash=HASH)
    replay = call(1, "enqueue", 12, 15, FAIL, "payload_conflict", payload_hash=HASH)
    assert kinds(indeterminate_rule([lost, replay], [ENQUEUED], HASH)) == ["no_resolution"]
    replay = call(1, "enqueue", 12, 15, OK, "replay", payload_hash=HASH)
    conflict = call(2, "enqueue", 16, 18, FAIL, "payload_conflict", payload_hash=OTHER)
    assert indeterminate_rule([lost, replay, conflict], [ENQUEUED], HASH).findings == []
    accepted = call(2, "enqueue", 16, 18, OK, "replay", payload_hash=OTHER)
    assert kinds(indeterminate_rule([lost, replay, accepted], [ENQUEUED], HASH)) == [
        "no_resolution"
    ]


def test_every_entry_needs_a_call_that_ran_while_it_was_written():
    # A claim nobody sent (no claim call of that worker ran at that time): no resolution.
    judged = indeterminate_rule([ENQUEUE], [ENQUEUED, CLAIMED], HASH)
    assert kinds(judged) == ["no_resolution"]
    # A lost claim naming no operation, by that worker, then: it explains the entry.
    unnamed = call(1, "claim", 20, 30, INFO, token="k1", op=None)
    assert indeterminate_rule([ENQUEUE], [ENQUEUED, CLAIMED], HASH, [unnamed]).findings == []
    # By another worker, or sent after the entry was written: it cannot.
    elsewhere = call(1, "claim", 20, 30, INFO, token="k1", op=None, process="w9")
    late = call(1, "claim", 26, 30, INFO, token="k1", op=None)
    for candidate in (elsewhere, late):
        judged = indeterminate_rule([ENQUEUE], [ENQUEUED, CLAIMED], HASH, [candidate])
        assert kinds(judged) == ["no_resolution"]
    # Two entries from one logical request (a claim and its resend with the same token): no.
    again = entry("takeover", 28, fence=2, actor="w1")
    resend = call(2, "claim", 27, 29, OK, "claimed", fence=2, token="k1")
    assert kinds(indeterminate_rule([ENQUEUE, CLAIM, resend], [ENQUEUED, CLAIMED, again], HASH))
    # An enqueue answered "created" must be the one that wrote the enqueue.
    lost = call(0, "enqueue", 0, 10, INFO, payload_hash=HASH)
    created = call(1, "enqueue", 12, 15, OK, "created", payload_hash=HASH)
    assert kinds(indeterminate_rule([lost, created], [ENQUEUED], HASH)) == ["no_resolution"]


def test_after_an_erasure_a_call_sent_before_it_may_still_explain_an_entry_after_it():
    """An erasure replaces the history with its own entry; a claim sent before it (waiting for a
    busy API, or reading a lagging index) may have claimed after the operator's requeue."""
    erased = [
        entry("erase", 30, fence=1),
        entry("requeue", 40, fence=1),
        entry("claim", 60, 2, "w1"),
    ]
    requeue = call(2, "resolve", 35, 45, OK, "done", token="r1", resolution="requeue")
    waited = call(3, "claim", 20, 65, OK, "claimed", fence=2, token="k2")
    stale = call(1, "complete", 22, 31, FAIL, "invalid_transition", fence=1)
    judged = indeterminate_rule([requeue, waited, stale], erased, HASH, answers_from=30)
    assert judged.findings == []
    # Sent after the erasure and answered about nothing in the history: judged.
    ghost = call(4, "complete", 70, 75, OK, "done", fence=2)
    judged = indeterminate_rule([requeue, waited, ghost], erased, HASH, answers_from=30)
    assert kinds(judged) == ["no_resolution"]


def test_more_indeterminate_calls_than_the_bound_are_counted_not_judged():
    lost = [
        call(i, "complete", 40, 50, INFO, fence=1, process=f"p{i}")
        for i in range(MAX_INDETERMINATE + 1)
    ]
    judged = indeterminate_rule(lost, [entry("complete", 45, fence=1)], HASH)
    assert judged.over_bound and judged.findings == []


def test_the_call_log_loses_about_its_rate_before_and_after_the_request_ran():
    class Engine:
        ran = 0

        def complete(self, *_args):
            Engine.ran += 1
            return "done"

    log = CallLog(seed=3, rate=0.3, clock=iter(range(10**6)).__next__)
    engine = RecordedEngine(Engine(), log)
    answered = 0
    for fence in range(1, 401):
        try:
            engine.complete("t", "op", fence, "ok")
            answered += 1
        except Exception:  # noqa: BLE001 - the lost answers
            pass
    rates = log.rates()["complete"]
    assert rates["calls"] == 400 and 0.22 < rates["rate"] < 0.38
    assert rates["indeterminate"] == 400 - answered == rates["lost_by_chaos"]
    # Lost before: the request never ran; lost after: it ran, unknown to the client.
    assert Engine.ran == answered + rates["lost_by_chaos"] - rates["lost_before_running"]
    assert 0 < rates["lost_before_running"] < rates["lost_by_chaos"]


def test_a_bug_that_only_shows_through_a_lost_answer_is_caught_by_the_indeterminate_checker(
    monkeypatch,
):
    """Plant a bug: a completion retried by the same fence after its answer was lost is answered
    as stale instead of done. The worker takes that as lost ownership and stops, and the
    operation stays succeeded with one side effect, so every other rule of the checker (the old
    checker, which knows the truth from inside) is satisfied; only the indeterminate checker
    sees that no resolution of the lost calls explains the history."""
    replay = _rules.classify_close_refusal

    def stale_on_retry(current, fence, command, fields, target):
        decided = replay(current, fence, command, fields, target)
        if decided is _rules.CloseRefusal.REPLAY and target is State.SUCCEEDED:
            return _rules.CloseRefusal.REFUSED  # raises StaleFence
        return decided

    monkeypatch.setattr(_rules, "classify_close_refusal", stale_on_retry)
    settings = Settings(
        operations=40, seed=5, workers=4, compose=False, months=False, lost_answer_rate=0.25
    )
    summary = run_torture(settings)
    found = summary["violation_kinds"]
    # Caught by the indeterminate checker ...
    assert found.get("no_resolution", 0) > 0, summary["indeterminate"]
    first = next(v for v in summary["first_violations"] if v["kind"] == "no_resolution")
    assert "stale_fence" in first["detail"]
    # ... and by nothing else: the old checker's rules all hold on this run.
    assert set(found) == {"no_resolution"}
    assert summary["duplicates"] == summary["missing_effects"] == summary["stuck"] == 0
    assert summary["fence_violations"] == summary["stale_commits"] == summary["lost"] == 0


def test_the_same_small_run_without_the_bug_has_a_resolution_for_every_operation():
    summary = run_torture(
        Settings(
            operations=40, seed=5, workers=4, compose=False, months=False, lost_answer_rate=0.25
        )
    )
    assert summary["violations"] == 0, summary["first_violations"]
    judged = summary["indeterminate"]
    assert judged["operations_judged"] == summary["operations"]
    for kind in ("enqueue", "claim", "complete"):
        assert judged["calls"][kind]["rate"] >= 0.05, judged["calls"]
