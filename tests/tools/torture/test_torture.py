"""The bounded torture run of `make test`, every feature on (its checker's own tests:
test_torture_checker.py)."""

from __future__ import annotations

import logging

import pytest

from leasefence_tools.torture import Settings, run_torture

OPERATIONS = 1_000


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


@pytest.mark.long_pole  # the suite's longest test: make test starts it first
@pytest.mark.timeout(
    900
)  # about 230 s on a busy shared 2-core machine; generous, since other load slows it
def test_bounded_torture_run_with_every_feature_on_has_no_violation():
    """1,000 operations and 500+ injected faults with every feature composed on the same
    operations (catalogue limits that cut leases, HTTP workers one at a time and batched beside
    in-process workers, by-reference
    payloads, shared class-B accounts, approvals, cancels, erasure and requeue of parked
    operations, lost answers on every command, the publisher with failing writes and events),
    index lag and TTL deletion on, then months passing (the months phase). The composed run
    costs about twice the single-feature one per operation (its table holds each operation's
    history too, and the embedded endpoint's index queries read the whole table): half the
    operations, about the same time."""
    settings = Settings(operations=OPERATIONS, seed=20261129, workers=6)
    assert settings.compose and settings.fidelity and settings.months and settings.index_lag_ms > 0
    summary = run_torture(settings)
    assert summary["violations"] == 0, (summary["violation_kinds"], summary["first_violations"])
    months = summary["months"]
    assert summary["operations"] == OPERATIONS + months["backlog"]
    assert summary["faults_total"] >= 500, summary["faults"]
    for kind in (
        "stall",
        "crash",
        "lost_response",
        "not_sent",
        "throttle",
        "replay",
        "conflict",
        "sweep",
        "retry",
        "slow",
        "cancel",
        "requeue",
        "erase_parked",
        "http_answer_lost",
        "api_not_sent",
        "api_throttle",
        "event_refused",
        "event_answer_lost",
    ):
        assert summary["faults"].get(kind, 0) > 0, f"no {kind} fault was injected"
    # The publisher's own writes (history_* faults) are now rare: the history is written by each
    # transition's own write, and the publisher writes only to compact a history past its bound or
    # for an operation enqueued before that (none here); its PutEvents faults (event_*) stay.
    assert (
        summary["duplicates"]
        == summary["lost"]
        == summary["cross_tenant"]
        == summary["stale_commits"]
        == 0
    )
    states = summary["states"]
    assert states["queued"] == states["claimed"] == states["awaiting_approval"] == 0
    assert states["cancelled"] > 0
    assert sum(states.values()) == summary["operations"]
    # Every feature was exercised, and every history and event stream judged.
    composed = summary["composed"]
    assert composed["histories_checked"] == summary["operations"]
    assert composed["events_published"] > summary["operations"] // 2
    assert composed["account_postings"] > 0 and composed["retried_after_lost_answer"] > 0
    assert composed["approval_operations"] > 0 and composed["approved"] > 0
    assert any(k.startswith("http_") for k in composed["slow_jobs"])
    assert any(k.startswith("engine_") for k in composed["slow_jobs"])
    # Batched HTTP workers (a fleet sharing one batched backend) ended lifecycles through the
    # batch routes; some producers enqueued through the enqueue batch.
    batched = composed["batched"]
    assert batched["lifecycles"] > 0 and batched["claims"] >= batched["lifecycles"], batched
    assert batched["requests"].get("enqueue", 0) > 0, batched
    # The fleet's claims, renewals and closes go in rounds (POST /v1/batch/work), which carry
    # each kind, and fewer rounds than the items they carried.
    assert all(batched["round_items"][kind] > 0 for kind in ("finish", "heartbeat", "claim")), batched
    assert 0 < batched["requests"]["work"] < batched["items"]["work"], batched
    assert summary["publisher"]["records_to_destination"] == 0
    # Histories with indeterminate calls: at least 5% of each kind lost its answer, and every
    # operation whose history shows its calls was explained by some resolution of them.
    indeterminate = summary["indeterminate"]
    for kind, rate in indeterminate["calls"].items():
        assert rate["rate"] >= 0.05 and rate["lost_by_chaos"] > 0, (kind, rate)
    assert indeterminate["operations_judged"] >= summary["operations"] * 0.9
    assert indeterminate["over_bound"] == 0
    # Months passed while operations were queued, parked and finished.
    assert (
        months["backlog"] >= 50 and months["late_replays"] >= 60 and months["requeued_unknown"] > 0
    )
    assert months["erased_finished"] > 0 and months["erased_queued"] > 0
    assert (
        months["payloads_purged_after_45_days"] >= OPERATIONS // 2
    )  # inline, ended 30+ days before
    assert months["ttl_deleted_within_window"] == 0
    assert months["identities_deleted_after_window"] == months["ended_identities"] > 0
