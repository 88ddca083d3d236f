"""The bounded torture run of `make test` (its checker's own test: test_torture_checker.py)."""

from __future__ import annotations

import logging

import pytest

from leasefence.torture import Settings, run_torture


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


@pytest.mark.long_pole  # the suite's longest test: make test starts it first
@pytest.mark.timeout(900)  # about 230 s on a busy shared 2-core machine; generous, since other load slows it
def test_bounded_torture_run_has_no_violation():
    """At least 2,000 operations and 500 injected faults, every invariant checked, with index lag
    and TTL deletion on, then months passing (the months phase)."""
    settings = Settings(operations=2_000, seed=20261129, workers=6)
    assert settings.fidelity and settings.months and settings.index_lag_ms > 0
    summary = run_torture(settings)
    assert summary["violations"] == 0, summary["first_violations"]
    months = summary["months"]
    assert summary["operations"] == 2_000 + months["backlog"]
    assert summary["faults_total"] >= 500, summary["faults"]
    for kind in ("stall", "crash", "lost_response", "not_sent", "throttle", "txn_conflict", "replay", "conflict", "sweep"):
        assert summary["faults"].get(kind, 0) > 0, f"no {kind} fault was injected"
    assert summary["duplicates"] == summary["lost"] == summary["cross_tenant"] == summary["stale_commits"] == 0
    assert summary["states"]["queued"] == summary["states"]["claimed"] == 0
    assert sum(summary["states"].values()) == summary["operations"]
    # Months passed while operations were queued, parked and finished.
    assert months["backlog"] >= 100 and months["late_replays"] >= 100 and months["requeued_unknown"] > 0
    assert months["erased_finished"] > 0 and months["erased_queued"] > 0
    assert months["payloads_purged_after_45_days"] >= 1_500  # ended more than 30 days before
    assert months["ttl_deleted_within_window"] == 0
    assert months["identities_deleted_after_window"] == months["ended_identities"] > 0
