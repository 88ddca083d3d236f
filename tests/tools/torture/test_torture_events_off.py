"""The bounded torture run with outcome events off, as the construct deploys by default (the run
with every feature on: test_torture.py)."""

from __future__ import annotations

import logging

import pytest

from leasefence_tools.torture import Settings, run_torture


@pytest.fixture(autouse=True)
def quiet():
    logging.getLogger("leasefence").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("leasefence").setLevel(logging.NOTSET)


@pytest.mark.timeout(600)
def test_bounded_torture_run_without_outcome_events_has_no_violation():
    """The construct's default: outcome events off. The publisher's mapping then passes only the
    records of operations enqueued before the history moved into the item (none here), so no
    publisher compacts a history (its writers bound it) and no event goes out; every history is
    judged all the same, with every other feature composed and months passing."""
    settings = Settings(operations=300, seed=20261207, workers=6, events=False)
    assert settings.compose and settings.months
    summary = run_torture(settings)
    assert summary["violations"] == 0, (summary["violation_kinds"], summary["first_violations"])
    assert summary["duplicates"] == summary["lost"] == summary["stale_commits"] == 0
    composed = summary["composed"]
    assert composed["histories_checked"] == summary["operations"] > 300
    assert composed["events_published"] == 0
    # The mapping read the stream, and invoked the function for none of it.
    assert summary["publisher"]["records_read"] > summary["operations"]
    assert summary["publisher"]["invocations"] == 0
    assert summary["faults"].get("requeue", 0) > 0 and summary["faults"].get("retry", 0) > 0
