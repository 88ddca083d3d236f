"""Budgets in all: a bound can give its operations one erasure and one requeue between them
(``Bound.erases``, ``Bound.total_requeues``) instead of one each."""

from __future__ import annotations

import dataclasses

from leasefence.model import State
from leasefence_tools.modelcheck.protocol import Bound, enabled, initial_local

EACH = Bound(kinds=("b", "b"), workers=1, attempts=1)


def _ops(state: State) -> dict:
    return {op: {"state": state.value} for op in ("o1", "o2")}


def _steps(bound: Bound, local: dict, state: State, name: str) -> list[tuple]:
    return [step for step in enabled(bound, local, _ops(state)) if step[0] == name]


def test_one_erasure_in_all():
    local = initial_local(EACH)
    local["erased"] = ["o1"]
    assert _steps(EACH, local, State.QUEUED, "erase") == [("erase", "o2")]
    shared = dataclasses.replace(EACH, erases=1)
    assert _steps(shared, local, State.QUEUED, "erase") == []
    local["erased"] = []
    assert _steps(shared, local, State.QUEUED, "erase") == [("erase", "o1"), ("erase", "o2")]
    assert "1 in all" in shared.describe()


def test_one_requeue_in_all():
    local = initial_local(EACH)
    local["requeues"]["o1"] = 0  # o1 was requeued
    requeue = ("resolve", "o2", "requeue")
    assert requeue in _steps(EACH, local, State.UNKNOWN, "resolve")
    shared = dataclasses.replace(EACH, total_requeues=1)
    resolves = _steps(shared, local, State.UNKNOWN, "resolve")
    assert resolves == [("resolve", "o1", "succeeded"), ("resolve", "o2", "succeeded")]
    local["requeues"]["o1"] = 1
    assert requeue in _steps(shared, local, State.UNKNOWN, "resolve")
