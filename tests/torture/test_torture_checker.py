"""Proof that the torture run's checker catches what it claims to (a sabotaged target)."""

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
