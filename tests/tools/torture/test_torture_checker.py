"""Proof that the torture run's checker catches what it claims to: a sabotaged target in a small
run, and each rule of the composed run fed a violating record on its own (and a clean one)."""

from __future__ import annotations

import logging

import pytest

from leasefence.targets.fenced_table import FencedTable
from leasefence_tools.torture import Settings, run_torture
from leasefence_tools.torture.checker import (
    approval_rule,
    approver_rule,
    cancel_rule,
    claim_token_rule,
    event_delivery_rule,
    event_order_rule,
    fence_order_rule,
    healthy_lease_rule,
    history_content_rule,
    history_expiry_rule,
    history_rule,
    retry_rule,
    single_call_rule,
)


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


def kinds(findings):
    return [kind for kind, _detail in findings]


def test_checker_catches_a_target_that_does_not_enforce_the_fence(monkeypatch):
    """Sabotage class B: the target ignores fences. Stalled holders then write after the new
    holder, and the checker must report it, naming the operation and its history."""

    def unfenced_write(self, job, key, update, names, values, business):
        condition = business or "attribute_not_exists(#never) OR attribute_not_exists(#never)"
        names = {**names, "#never": "never_set"}
        self.store.update(key, update, condition, names, values, returns="NONE")

    monkeypatch.setattr(FencedTable, "_write", unfenced_write)
    summary = run_torture(
        Settings(
            operations=60,
            seed=7,
            workers=8,
            stall_rate=0.6,
            crash_rate=0.0,
            store_fault_rate=0.0,
            ambiguous_rate=0.0,
            compose=False,
        )
    )
    assert summary["violations"] > 0
    assert summary["duplicates"] > 0 or summary["stale_commits"] > 0
    first = summary["first_violations"][0]
    assert first["operation_id"] and any("fault:stall" in event for event in first["history"])


# ---------------------------------------------------------------- histories


def entry(seq, transition="claim", state="claimed"):
    return {"seq": seq, "transition": transition, "state": state}


def test_history_rule_reports_a_missing_sequence():
    findings = history_rule(
        [entry(1, "enqueue", "queued"), entry(2), entry(4, "complete", "succeeded")], 0, 4
    )
    assert kinds(findings) == ["history_gap"] and "missing [3]" in findings[0][1]


def test_history_rule_reports_a_history_short_of_the_operation():
    assert kinds(history_rule([entry(1, "enqueue", "queued"), entry(2)], 0, 3)) == ["history_gap"]


def test_history_rule_reports_a_sequence_twice_and_out_of_order():
    found = kinds(history_rule([entry(1, "enqueue"), entry(3), entry(2), entry(3)], 0, 3))
    assert "history_duplicate" in found and "history_order" in found


def test_history_rule_reports_a_history_without_its_start_or_missing_altogether():
    assert "history_gap" in kinds(history_rule([entry(2), entry(3)], 0, 3))
    assert kinds(history_rule([], 0, 2)) == ["history_missing"]


def test_history_content_rule_reports_an_entry_that_does_not_follow_or_a_stale_newest():
    ok = [
        {"seq": 1, "state": "queued", "fence": 0, "attempt": 0},
        {"seq": 2, "previous_state": "queued", "state": "claimed", "fence": 1, "attempt": 1},
    ]
    item = {"seq": 2, "state": "claimed", "fence": 1, "attempts": 1}
    assert history_content_rule(ok, item) == []
    wrong_previous = [ok[0], {**ok[1], "previous_state": "unknown"}]
    assert kinds(history_content_rule(wrong_previous, item)) == ["history_content"]
    fence_down = [{**ok[0], "fence": 2}, ok[1]]
    assert kinds(history_content_rule(fence_down, item)) == ["history_content"]
    assert kinds(history_content_rule(ok, {**item, "attempts": 2})) == ["history_content"]
    assert history_content_rule(ok, {**item, "seq": 3, "state": "queued"}) == []  # not the newest


def test_history_rule_accepts_whole_erased_and_bounded_histories():
    assert history_rule([entry(1, "enqueue"), entry(2), entry(3, "complete")], 0, 3) == []
    assert history_rule([entry(5, "erase", "unknown"), entry(6, "requeue", "queued")], 0, 6) == []
    # Bounded: the first entry and the newest ones, the dropped ones counted.
    assert history_rule([entry(1, "enqueue"), entry(60), entry(61)], 58, 61) == []
    assert kinds(history_rule([entry(1, "enqueue"), entry(60), entry(61)], 57, 61)) == [
        "history_gap"
    ]


# ---------------------------------------------------------------- events


def test_event_order_rule_reports_a_later_event_published_before_an_earlier_one():
    assert kinds(event_order_rule([2, 5, 4, 5])) == ["events_out_of_order"]


def test_event_order_rule_accepts_events_delivered_again_in_order():
    assert event_order_rule([2, 4, 4, 5]) == []
    assert event_order_rule([2, 4, 2, 5]) == []  # a repeat of 2, after 4: deduplicated, in order


def test_event_delivery_rule_reports_a_transition_whose_event_never_came():
    history = [entry(1, "enqueue", "queued"), entry(2), entry(3, "complete", "succeeded")]
    assert kinds(event_delivery_rule(history, set())) == ["event_missing"]
    assert event_delivery_rule(history, {3}) == []  # an enqueue and a first claim publish nothing


# ---------------------------------------------------------------- targets


def test_fence_order_rule_reports_a_lower_fence_accepted_after_a_higher_one():
    assert kinds(fence_order_rule([1, 3, 2])) == ["lower_fence_accepted"]
    assert fence_order_rule([1, 2, 2, 4]) == []


def test_single_call_rule_reports_a_second_class_d_call():
    assert kinds(single_call_rule(2)) == ["class_d_called_twice"]
    assert single_call_rule(1) == single_call_rule(0) == []


# ---------------------------------------------------------------- approvals and cancels

H, OTHER = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_approval_rule_reports_bytes_other_than_the_approved_ones():
    assert kinds(approval_rule(H, [H, OTHER])) == ["approval_released_other_bytes"]
    assert approval_rule(H, [H, H]) == []


def test_approval_rule_reports_an_operation_that_ran_without_an_approval():
    assert kinds(approval_rule(None, [H])) == ["ran_unapproved"]
    assert approval_rule(None, []) == []


def test_approver_rule_reports_self_approval_another_hash_and_no_enqueuer():
    assert kinds(approver_rule(True, False, "producer:t")) == ["self_approved"]
    assert kinds(approver_rule(False, True, "producer:t")) == ["approved_other_hash"]
    assert kinds(approver_rule(False, False, None)) == ["approval_without_enqueuer"]
    assert approver_rule(False, False, "producer:t") == []


def test_cancel_rule_reports_a_cancel_after_an_attempt():
    assert kinds(cancel_rule("cancelled", 1)) == ["cancelled_after_attempt"]
    assert cancel_rule("cancelled", 0) == cancel_rule("succeeded", 2) == []


# ---------------------------------------------------------------- retried commands


def lost_claim(token="tok-1", lease_expires_at=10_000):
    return {
        "operation_id": "op-1",
        "fence": 2,
        "lease_expires_at": lease_expires_at,
        "token": token,
    }


def test_retry_rule_reports_a_tokened_claim_not_recognized_while_it_holds():
    record = {"claim": lost_claim(), "retry_claim": ["op-7", 1], "at": 9_000}
    assert kinds(retry_rule(record)) == ["lost_claim_not_recognized"]
    assert kinds(retry_rule({**record, "retry_claim": None})) == ["lost_claim_not_recognized"]


def test_retry_rule_accepts_the_same_claim_an_expired_one_or_a_claim_without_token():
    assert retry_rule({"claim": lost_claim(), "retry_claim": ["op-1", 2], "at": 9_000}) == []
    assert retry_rule({"claim": lost_claim(), "retry_claim": None, "at": 10_000}) == []
    assert retry_rule({"claim": lost_claim(token=None), "retry_claim": None, "at": 9_000}) == []


def test_retry_rule_reports_a_catalogue_put_that_denies_its_own_change():
    record = {"path": "/v1/job-types/ledger-b", "changed": True, "retry_changed": False}
    assert kinds(retry_rule(record)) == ["retry_untruthful"]
    assert retry_rule({**record, "retry_changed": True}) == []
    assert retry_rule({**record, "changed": False}) == []


def test_retry_rule_reports_a_command_refused_on_retry_when_nothing_changed_in_between():
    operation = {"state": "queued", "fence": 3, "updated_at": 1_000}
    record = {
        "method": "POST",
        "path": "/v1/operations/op-1/resolve",
        "status": 200,
        "retry_status": 409,
        "operation": operation,
        "snapshot": dict(operation),
    }
    assert kinds(retry_rule(record)) == ["retry_refused"]
    # Something happened in between (a worker claimed it): a refusal is then the truth.
    assert retry_rule({**record, "snapshot": {**operation, "state": "claimed", "fence": 4}}) == []
    assert retry_rule({**record, "retry_status": 200}) == []


def test_claim_token_rule_reports_claims_without_a_token_once_expected():
    assert kinds(claim_token_rule(True, 3)) == ["claim_without_token"]
    assert claim_token_rule(False, 3) == claim_token_rule(True, 0) == []


# ---------------------------------------------------------------- leases


def slow(backend, cut, lapsed):
    return {"backend": backend, "cut": cut, "lapsed": lapsed}


def test_healthy_lease_rule_reports_a_kind_of_worker_whose_healthy_jobs_lose_their_lease():
    jobs = [slow("http", True, True)] * 3 + [slow("http", True, False)]
    jobs += [slow("engine", True, False)] * 4
    findings = healthy_lease_rule(jobs)
    assert kinds(findings) == ["healthy_claims_lapsed"] and "3 of 4" in findings[0][1]
    assert "http" in findings[0][1] and "cut" in findings[0][1]


def test_healthy_lease_rule_leaves_out_jobs_whose_lease_was_gone_before_they_began():
    jobs = [{**slow("http", True, True), "late_start": True}] * 4 + [slow("http", True, False)]
    assert healthy_lease_rule(jobs) == []
    assert kinds(healthy_lease_rule([{**j, "late_start": False} for j in jobs])) == [
        "healthy_claims_lapsed"
    ]


def test_healthy_lease_rule_tolerates_some_lapses_and_too_few_samples():
    assert (
        healthy_lease_rule([slow("http", True, True)] * 2 + [slow("http", True, False)] * 2) == []
    )
    assert healthy_lease_rule([slow("http", True, True)] * 3) == []


def test_healthy_lease_rule_leaves_out_lapses_whose_renewals_were_all_sent_in_time():
    on_time = [{**slow("http", True, True), "renewal_late": False}] * 4
    assert healthy_lease_rule(on_time) == []
    late = [{**job, "renewal_late": True} for job in on_time]
    assert kinds(healthy_lease_rule(late)) == ["healthy_claims_lapsed"]


def test_an_expired_history_is_accepted_only_for_an_ended_operation_past_the_retention():
    day = 86_400_000
    ended = {"state": "succeeded", "updated_at": 10 * day, "seq": 3}
    assert history_rule([], 0, 3, expired=True) == []  # empty: judged by the expiry rule
    assert kinds(history_rule([], 0, 3)) == ["history_missing"]
    assert history_expiry_rule(None, [], ended, 30 * day) == []
    assert history_expiry_rule(40 * day, [], ended, 30 * day) == []
    assert kinds(history_expiry_rule(39 * day, [], ended, 30 * day)) == ["history_expired_early"]
    live = {**ended, "state": "queued"}
    assert kinds(history_expiry_rule(40 * day, [], live, 30 * day)) == ["history_expired_early"]
    erased = [{**entry(4, "erase", "succeeded"), "at": 41 * day}]
    assert history_expiry_rule(40 * day, erased, {**ended, "updated_at": 41 * day}, 30 * day) == []
    older = [{**entry(3, "complete", "succeeded"), "at": 10 * day}]
    assert kinds(history_expiry_rule(40 * day, older, ended, 30 * day)) == ["history_expired_early"]
