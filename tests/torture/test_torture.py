"""The bounded torture run of `make test`, and proof that its checker catches what it claims to."""

from __future__ import annotations

import logging

import pytest

from leasefence.targets.fenced_table import FencedTable
from leasefence.torture import Settings, run_torture


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


@pytest.mark.timeout(900)  # 90 to 115 s on 2 cores; generous, since other load on a shared machine slows it
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


def test_checker_catches_a_target_that_does_not_enforce_the_fence(monkeypatch):
    """Sabotage class B: the target ignores fences. Stalled holders then write after the new
    holder, and the checker must report it, naming the operation and its history."""

    def unfenced_write(self, job, key, update, names, values, business):
        condition = business or "attribute_not_exists(#never) OR attribute_not_exists(#never)"
        names = {**names, "#never": "never_set"}
        self.store.update(key, update, condition, names, values, returns="NONE")

    monkeypatch.setattr(FencedTable, "_write", unfenced_write)
    summary = run_torture(Settings(operations=60, seed=7, workers=8, stall_rate=0.6, crash_rate=0.0,
                                   store_fault_rate=0.0, ambiguous_rate=0.0))
    assert summary["violations"] > 0
    assert summary["duplicates"] > 0 or summary["stale_commits"] > 0
    first = summary["first_violations"][0]
    assert first["operation_id"] and any("fault:stall" in event for event in first["history"])
