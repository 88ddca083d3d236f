"""Erasure removes personal data and keeps what safety needs: a class-D intent's fence survives an
erasure, so an operator's requeue of an erased ``unknown`` operation never calls the target again;
and a tenant erasure holds the tenant first, then finishes idempotently."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, InvalidTransition, NotFound, State


from leasefence.targets import single_shot
from leasefence.worker import EngineBackend, FunctionHandler, Worker

H = "sha256:" + "5" * 64
H2 = "sha256:" + "6" * 64
T = "acme"
LEASE = 1_000


class TargetDown(Exception):
    """The provider's answer never came: the call may or may not have happened."""


def sms_worker(engine, calls, name):
    def send(job):
        def call():
            calls.append(job.fence)
            raise TargetDown()

        return single_shot.call_once(job, call, what="sms to +44 7700 900123")

    handlers = {"sms": FunctionHandler(send, single_shot.reconcile)}
    return Worker(EngineBackend(engine, [T]), handlers, worker_id=name, lease_ms=LEASE)


def test_an_erased_unknown_class_d_operation_is_never_called_again_after_a_requeue(engine):
    engine.enqueue(T, "sms-1", "sms", H, target_class="D")
    calls: list[int] = []
    assert sms_worker(engine, calls, "w1").run_once()
    parked = engine.get(T, "sms-1")
    assert parked.state is State.UNKNOWN and calls == [1]
    assert parked.intent == {"fence": 1, "what": "sms to +44 7700 900123"}

    erased = engine.erase(T, "sms-1", actor="ops-dpo")
    engine.erase(T, "sms-1")  # erasing again: harmless
    engine.resolve(T, "sms-1", "requeue", note="operator: try again")
    assert sms_worker(engine, calls, "w2").run_once()
    op = engine.get(T, "sms-1")
    assert calls == [1]  # the target was called at most once
    assert op.state is State.UNKNOWN and op.fence == 2
    assert op.reason == "intent recorded by fence 1; no lookup exists"
    # The personal text is gone; the fence under which a call may have started stays.
    assert erased.intent == op.intent == {"fence": 1, "what": "erased"} and erased.reason is None
    assert "+44" not in str(engine.store.get({"tenant_id": T, "operation_id": "sms-1"}))


def test_a_class_d_intent_kept_in_an_old_checkpoint_survives_an_erasure(engine, clock):
    """Operations recorded before the intent attribute existed kept it in the checkpoint: the
    erasure lifts its fence into the intent before the checkpoint goes."""
    engine.enqueue(T, "old-1", "sms", H, target_class="D")
    held = engine.claim_next(T, "w0", lease_ms=LEASE)
    engine.heartbeat(T, "old-1", held.fence, "w0", checkpoint={"intent_fence": 1, "intent": "call"})
    clock.advance(LEASE)
    assert engine.sweep().swept == 1
    erased = engine.erase(T, "old-1")
    assert erased.checkpoint is None and erased.intent == {"fence": 1, "what": "erased"}
    engine.resolve(T, "old-1", "requeue")
    calls: list[int] = []
    assert sms_worker(engine, calls, "w1").run_once()
    assert calls == [] and engine.get(T, "old-1").state is State.UNKNOWN


def test_an_erasure_keeps_no_intent_where_none_was_recorded_and_the_requeue_runs(engine, clock):
    """No intent on record proves no call was started: after the erasure and a requeue the
    handler runs (once)."""
    engine.enqueue(T, "sms-2", "sms", H, target_class="D")
    held = engine.claim_next(T, "w0", lease_ms=LEASE)
    engine.heartbeat(T, "sms-2", held.fence, "w0", checkpoint={"step": "before the intent"})
    engine.park_unknown(T, "sms-2", held.fence, "crashed before the call")
    erased = engine.erase(T, "sms-2")
    assert erased.intent is None and erased.checkpoint is None
    engine.resolve(T, "sms-2", "requeue")
    sent: list[int] = []
    handlers = {"sms": FunctionHandler(lambda job: single_shot.call_once(job, lambda: sent.append(job.fence)) or "sent", single_shot.reconcile)}
    assert Worker(EngineBackend(engine, [T]), handlers, lease_ms=LEASE).run_once()
    assert sent == [2] and engine.get(T, "sms-2").state is State.SUCCEEDED


def test_the_runtime_never_calls_a_class_d_target_twice_whatever_the_handlers_reconcile_says(engine):
    engine.enqueue(T, "sms-3", "sms", H, target_class="D")
    held = engine.claim_next(T, "w0", lease_ms=LEASE)
    engine.heartbeat(T, "sms-3", held.fence, "w0", intent="sms")
    engine.park_unknown(T, "sms-3", held.fence, "timeout")
    engine.erase(T, "sms-3")
    engine.resolve(T, "sms-3", "requeue")
    ran: list[int] = []
    careless = FunctionHandler(lambda job: ran.append(job.fence) or "sent", lambda job: single_shot.Reconciled.not_done())
    assert Worker(EngineBackend(engine, [T]), {"sms": careless}, lease_ms=LEASE).run_once()
    op = engine.get(T, "sms-3")
    assert ran == [] and op.state is State.UNKNOWN and "intent recorded by fence 1" in op.reason


def test_erasing_a_claimed_operation_is_refused_and_changes_nothing(engine):
    engine.enqueue(T, "op-1", "refund", H)
    engine.claim_next(T, "w0", lease_ms=LEASE)
    before = engine.store.get({"tenant_id": T, "operation_id": "op-1"})
    with pytest.raises(InvalidTransition):
        engine.erase(T, "op-1")
    assert engine.store.get({"tenant_id": T, "operation_id": "op-1"}) == before
    with pytest.raises(NotFound):
        engine.erase(T, "nope")
