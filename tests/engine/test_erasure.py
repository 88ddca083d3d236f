"""Erasure removes personal data and keeps what safety needs: a class-D intent's fence survives an
erasure, so an operator's requeue of an erased ``unknown`` operation never calls the target again;
and a tenant erasure holds the tenant first, then finishes idempotently."""

from __future__ import annotations

import random

import pytest

from leasefence import Engine, InvalidTransition, NotFound, State
from leasefence.engine import TENANT_ERASURE_SETTLE_MS
from leasefence.errors import TenantErasing
from leasefence.keys import SETTINGS_ID
from leasefence.payloads import PayloadStore, canonicalize
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


def test_an_erasure_keeps_no_intent_where_none_was_recorded_and_the_requeue_runs(engine):
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

    def send(job):
        single_shot.call_once(job, lambda: sent.append(job.fence))
        return "sent"

    handlers = {"sms": FunctionHandler(send, single_shot.reconcile)}
    assert Worker(EngineBackend(engine, [T]), handlers, lease_ms=LEASE).run_once()
    assert sent == [2] and engine.get(T, "sms-2").state is State.SUCCEEDED


def test_the_runtime_never_runs_a_class_d_handler_with_an_intent_on_record_even_if_its_reconcile_says_not_done(engine):
    engine.enqueue(T, "sms-3", "sms", H, target_class="D")
    held = engine.claim_next(T, "w0", lease_ms=LEASE)
    engine.heartbeat(T, "sms-3", held.fence, "w0", intent="sms")
    engine.park_unknown(T, "sms-3", held.fence, "timeout")
    engine.erase(T, "sms-3")
    engine.resolve(T, "sms-3", "requeue")
    ran: list[int] = []
    careless = FunctionHandler(
        lambda job: ran.append(job.fence) or "sent", lambda _job: single_shot.Reconciled.not_done()
    )
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


# ------------------------------------------------------------------------------ tenant erasure

PAYOUT = {"target_class": "B", "max_attempts": 3, "approval_required": True}


def tenant_items(engine, tenant=T):
    return engine.store.query(KeyConditionExpression="tenant_id = :t", values={":t": tenant}, ConsistentRead=True).items


def erase_all(engine, clock, tenant=T, limit=100, cursor=None):
    """Run erase_tenant to its end (waiting out the settle time on the clock); the last step."""
    for _ in range(50):
        step = engine.erase_tenant(tenant, limit=limit, cursor=cursor)
        if step.next_cursor is None:
            return step
        clock.advance(step.wait_ms)
        cursor = step.next_cursor
    raise AssertionError("the erasure did not finish")


@pytest.fixture
def other_engine(ddb, spec, clock):
    """Another API instance: its own catalogue cache."""
    return Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(5))


def test_a_tenant_is_held_first_and_its_enqueues_answer_409_tenant_erasing(engine, other_engine, clock):
    engine.catalogue.put(T, "payout", PAYOUT)
    for i in range(5):
        engine.enqueue(T, f"op-{i}", "misc", H)
    engine.enqueue("bystander", "op-0", "misc", H)
    held_at = clock()
    step = engine.erase_tenant(T, limit=2)
    assert step.next_cursor is not None
    clock.advance(5_000)  # past any catalogue cache of the other engine
    for job_type in ("payout", "misc"):  # catalogued (approval-gated) and uncatalogued alike
        with pytest.raises(TenantErasing) as refused:
            other_engine.enqueue(T, f"new-{job_type}", job_type, H)
        assert (refused.value.code, refused.value.status) == ("tenant_erasing", 409)
        with pytest.raises(NotFound):
            engine.get(T, f"new-{job_type}")  # nothing was written
    with pytest.raises(TenantErasing):
        engine.enqueue(T, "new-3", "payout", H)
    assert other_engine.enqueue("bystander", "op-1", "payout", H).created  # other tenants are not held
    settings = engine.store.get({"tenant_id": T, "operation_id": SETTINGS_ID})
    assert settings["tenant_erasing"] == held_at and not step.finished  # the hold, first of all
    # The catalogue is still there while the tenant is held: the approval gate cannot be lost.
    assert engine.catalogue.get(T, "payout").spec.approval_required
    last = erase_all(engine, clock, cursor=step.next_cursor)
    assert last.finished and tenant_items(engine) == []
    # Finished: the hold is gone with everything else, and the tenant id starts afresh.
    clock.advance(5_000)
    fresh = other_engine.enqueue(T, "op-0", "misc", H)
    assert fresh.created and fresh.operation.state is State.QUEUED


def test_an_enqueue_admitted_before_the_hold_keeps_its_gate_and_is_erased_before_the_end(aws, engine, other_engine, clock):
    """The race the hold cannot refuse: admitted (catalogue read) before the hold, written after
    the rows pass went by. It was admitted under the catalogue, which the erasure keeps to the
    end, so it waits for approval; the erasure finds its row before it deletes the catalogue."""
    engine.catalogue.put(T, "payout", PAYOUT)
    # An approval binds a payload leasefence stores: these two are inline, in a bucket.
    bucket = f"erasure-gated-{random.getrandbits(32):08x}"
    aws.client("s3").create_bucket(Bucket=bucket)
    store = PayloadStore(bucket, client=aws.client("s3"))
    engine.payloads = other_engine.payloads = store
    canonical = canonicalize({"payout": 1})
    payout = canonical.hash
    first = store.put(T, "op-0", canonical)
    engine.enqueue(T, "op-0", "payout", payout, payload_ref=first.ref, payload_inline=True, actor="producer-1")
    admitted = other_engine.admit(T, "late", "payout", payout, inline=True, actor="producer-1")
    step = engine.erase_tenant(T)
    assert step.rows_deleted == 1 and step.wait_ms == TENANT_ERASURE_SETTLE_MS and not step.finished
    late_ref = store.put(T, "late", canonical).ref
    late = other_engine.enqueue(
        T, "late", "payout", payout, payload_ref=late_ref, payload_inline=True, admission=admitted, actor="producer-1"
    )
    assert late.created and late.operation.state is State.AWAITING_APPROVAL  # the gate held
    assert other_engine.claim_next(T, "w1") is None
    clock.advance(step.wait_ms)
    back = engine.erase_tenant(T, cursor=step.next_cursor)
    assert not back.finished and back.next_cursor is not None  # back to the rows
    last = erase_all(engine, clock, cursor=back.next_cursor)
    assert last.finished and tenant_items(engine) == []


def test_tenant_erasure_finishes_idempotently_a_rerun_resumes(engine, clock):
    engine.catalogue.put(T, "payout", PAYOUT)
    for i in range(4):
        engine.enqueue(T, f"op-{i}", "misc", H)
    held = engine.claim(T, "op-2", "w1")
    first = engine.erase_tenant(T, limit=2)
    since = engine.store.get({"tenant_id": T, "operation_id": SETTINGS_ID})["tenant_erasing"]
    clock.advance(1_000)
    # A re-run without the cursor resumes: the hold keeps its first start.
    rerun = erase_all(engine, clock, limit=2)
    assert first.rows_deleted + rerun.rows_deleted >= 2 and not rerun.finished
    assert engine.store.get({"tenant_id": T, "operation_id": SETTINGS_ID})["tenant_erasing"] == since
    assert [op.operation_id for op in engine.list(T).operations] == ["op-2"]  # held, and so is the tenant
    with pytest.raises(TenantErasing):
        engine.enqueue(T, "op-9", "misc", H)
    engine.complete(T, "op-2", held.fence, "ok")
    done = erase_all(engine, clock)
    assert done.finished and tenant_items(engine) == []
    again = erase_all(engine, clock)  # erasing an erased tenant: it holds it a while, finds nothing
    assert again.finished and again.rows_deleted == 1 and tenant_items(engine) == []  # its own hold
