"""The zombie demo, as `make demo` runs it (fewer operations): no duplicates, honest class D."""

from __future__ import annotations

from leasefence_tools.demo.zombie import run_demo


def test_demo_sees_no_duplicates_and_parks_class_d_ambiguity():
    summary = run_demo(per_class=2, lease_ms=1_000)
    by_class = {row["target_class"]: row for row in summary["classes"]}
    assert summary["duplicates"] == 0
    for cls in "ABC":
        row = by_class[cls]
        assert row["side_effects"] == row["operations"] == row["succeeded"] == 2
        assert row["stale_writes_rejected"] == 2  # every zombie was refused when it woke up
    d = by_class["D"]
    assert d["operations"] == 3 and d["unknown"] == 3  # two zombies parked, one lost answer
    assert d["side_effects"] == 1  # only the call that really went out; never a second
    assert summary["unknown"] == 3 and summary["side_effects"] == 7
