"""The design's five fault-injection cases for each target class, through the worker runtime.

Stalls are simulated with the engine's manual clock: the stalled worker's hook advances time
past its lease and lets a second worker run to completion before the first one resumes.
"""

from __future__ import annotations

import itertools
import random

import pytest

from leasefence import Engine, PayloadConflict, State
from leasefence_tools.testing.kits import FencedTableKit, Hooks, IdempotentApiKit, SameTableKit, SingleShotKit
from leasefence_tools.testing.faults import AFTER, FaultyClient
from leasefence.schema import PARTITION_KEY, SORT_KEY
from leasefence.targets import fenced_table
from leasefence.worker import EngineBackend, Job, LostOwnership, Worker
from leasefence.worker import FunctionHandler

H1 = "sha256:" + "6" * 64
H2 = "sha256:" + "7" * 64
LEASE = 1_000
_names = itertools.count()


class Crash(BaseException):
    """The worker process dies: no handler, no runtime code runs after this."""


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


@pytest.fixture(params=["A", "B", "C", "D"])
def kit(request, ddb):
    hooks, events = Hooks(), Events()
    prefix = f"target-{next(_names)}"
    kits = {
        "A": lambda: SameTableKit(ddb, f"{prefix}-orders", hooks=hooks, events=events),
        "B": lambda: FencedTableKit(ddb, f"{prefix}-ledger", hooks=hooks, events=events),
        "C": lambda: IdempotentApiKit(hooks=hooks, events=events),
        "D": lambda: SingleShotKit(hooks=hooks, events=events),
    }
    return kits[request.param]()


@pytest.fixture
def faulty(ddb):
    return FaultyClient(ddb)


@pytest.fixture
def engine(faulty, spec, clock):
    return Engine(client=faulty, spec=spec, clock=clock, rng=random.Random(11))


def worker(engine, kit, name, tenants=("acme",)):
    return Worker(EngineBackend(engine, list(tenants)), {kit.job_type: kit.handler()}, worker_id=name,
                  lease_ms=LEASE, heartbeat_interval_ms=10_000)


def enqueue(engine, kit, tenant="acme", op="op-1", payload_hash=H1):
    kit.setup(tenant, op)
    return engine.enqueue(tenant, op, kit.job_type, payload_hash, target_class=kit.target_class)


def test_pause_after_claim_past_expiry(engine, clock, kit):
    """1. The stalled holder wakes up after a takeover: its side effect does not happen twice."""
    enqueue(engine, kit)
    w1, w2 = worker(engine, kit, "w1"), worker(engine, kit, "w2")

    def stall(job):
        clock.advance(LEASE * 2)
        if kit.target_class == "D":
            engine.sweep()  # one attempt only: the expired claim is parked, never taken over
        else:
            assert w2.run_once()  # takeover, reconcile, act, complete: all while w1 sleeps

    kit.hooks.on_before("acme", "op-1", 1, stall)
    job = w1.process(engine.claim_next("acme", "w1", lease_ms=LEASE))
    op = engine.get("acme", "op-1")
    assert job.cancelled.is_set()  # w1 found out it lost ownership, and stopped
    if kit.target_class == "D":
        assert (op.state, kit.effects("acme", "op-1")) == (State.UNKNOWN, 0)  # intent refused: no call
    else:
        assert (op.state, op.fence) == (State.SUCCEEDED, 2)
        assert kit.effects("acme", "op-1") == 1


def test_crash_after_the_side_effect_before_completion(engine, clock, kit):
    """2. The next claim reconciles instead of repeating; class D parks the ambiguity."""
    enqueue(engine, kit)

    def crash(job):
        raise Crash()

    kit.hooks.on_after("acme", "op-1", 1, crash)
    with pytest.raises(Crash):
        worker(engine, kit, "w1").run_once()
    clock.advance(LEASE)
    if kit.target_class == "A":
        # The side effect and the completion are one transaction: nothing is left to redo.
        assert engine.get("acme", "op-1").state == State.SUCCEEDED
        assert not worker(engine, kit, "w2").run_once()
    elif kit.target_class == "D":
        assert not worker(engine, kit, "w2").run_once()  # no second attempt, ever
        engine.sweep()
        assert engine.get("acme", "op-1").state == State.UNKNOWN
    else:
        assert worker(engine, kit, "w2").run_once()
        op = engine.get("acme", "op-1")
        assert (op.state, op.fence) == (State.SUCCEEDED, 2)
    assert kit.effects("acme", "op-1") == 1


def test_same_key_same_payload_then_different_payload(engine, kit):
    """3. A replay schedules nothing new; a conflict changes nothing; one effect."""
    enqueue(engine, kit)
    assert not engine.enqueue("acme", "op-1", kit.job_type, H1, target_class=kit.target_class).created
    with pytest.raises(PayloadConflict):
        engine.enqueue("acme", "op-1", kit.job_type, H2, target_class=kit.target_class)
    w = worker(engine, kit, "w1")
    assert w.run_once() and not w.run_once()
    assert kit.effects("acme", "op-1") == 1
    assert engine.get("acme", "op-1").state == State.SUCCEEDED


def test_two_tenants_with_identical_operation_ids(engine, kit):
    """4. Same operation id under two tenants: two operations, two separate effects."""
    enqueue(engine, kit, tenant="acme")
    enqueue(engine, kit, tenant="globex", payload_hash=H2)
    fleet = worker(engine, kit, "w1", tenants=("acme", "globex"))
    assert fleet.run_once() and fleet.run_once() and not fleet.run_once()
    for tenant in ("acme", "globex"):
        assert kit.effects(tenant, "op-1") == 1
        assert engine.get(tenant, "op-1").state == State.SUCCEEDED


def test_lost_responses_mid_claim_and_mid_complete(engine, faulty, kit):
    """5. The store commits, the answer is lost (a failover): no double claim, no lost row, and
    the same fence's retried completion is recognized as done."""
    enqueue(engine, kit)
    faulty.fail_next("update_item", AFTER, when=lambda kw: "claim_token = :tok" in kw.get("UpdateExpression", ""))
    if kit.target_class == "A":
        faulty.fail_next("transact_write_items", AFTER)
    else:
        faulty.fail_next("update_item", AFTER, when=lambda kw: "closed_by = :cmd" in kw.get("UpdateExpression", ""))
    assert worker(engine, kit, "w1").run_once()
    assert faulty.injected[AFTER] == 2
    op = engine.get("acme", "op-1")
    assert (op.state, op.fence, op.attempts) == (State.SUCCEEDED, 1, 1)
    assert kit.effects("acme", "op-1") == 1


def test_class_b_refuses_a_stale_write_before_the_new_holder_has_written(ddb, engine, clock):
    events = Events()
    table = fenced_table.FencedTable(ddb, "ledger-raise")
    ddb.create_table(
        TableName="ledger-raise",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    table.events = events
    backend = EngineBackend(engine, ["acme"])
    engine.enqueue("acme", "op", "ledger", H1, target_class="B")
    stale = Job(engine.claim_next("acme", "w1", lease_ms=LEASE), backend, events)
    clock.advance(LEASE)
    fresh = Job(engine.claim_next("acme", "w2", lease_ms=LEASE), backend, events)
    table.raise_fence(fresh, {"pk": "acct-9"})  # on claim, before any business write
    with pytest.raises(LostOwnership):
        table.write(stale, {"pk": "acct-9"}, {"balance": 0})
    assert stale.cancelled.is_set() and events["StaleTargetWritesRejected"] == 1
    table.write(fresh, {"pk": "acct-9"}, {"balance": 100})
    assert table.read({"pk": "acct-9"})["balance"] == 100
    # Another operation writing the same item has its own fence: fence 1 of it is not stale.
    engine.enqueue("acme", "other-op", "ledger", H1, target_class="B")
    other = Job(engine.claim_next("acme", "w3", lease_ms=LEASE), backend, events)
    assert other.fence == 1
    table.write(other, {"pk": "acct-9"}, {"note": "written by another operation"})
    assert table.read({"pk": "acct-9"})["note"] == "written by another operation"


def test_class_a_business_guard_refusal_fails_the_operation(engine, ddb):
    kit = SameTableKit(ddb, "orders-guard")
    engine.enqueue("acme", "op", kit.job_type, H1, target_class="A")
    ddb.put_item(TableName="orders-guard", Item={"pk": {"S": kit._key("acme", "op")["pk"]}, "status": {"S": "shipped"}})
    worker(engine, kit, "w1").run_once()
    op = engine.get("acme", "op")
    assert op.state == State.FAILED_TERMINAL and "business guard" in op.reason
    assert kit.effects("acme", "op") == 0


def test_class_a_malformed_business_writes_fail_the_operation_at_once(engine, ddb):
    """A business write of the wrong shape is refused the same way every time: the operation
    ends failed_terminal on its first attempt, never retried as a busy store nor left to lapse."""
    def handler(job):
        job.complete_with("paid", [{"Put": {"TableName": "orders-malformed", "Item": {"pk": "o1"}}}])

    engine.enqueue("acme", "op", "pay", H1, target_class="A")
    Worker(EngineBackend(engine, ["acme"]), {"pay": FunctionHandler(handler)}, worker_id="w1",
           lease_ms=LEASE, heartbeat_interval_ms=10_000).run_once()
    op = engine.get("acme", "op")
    assert (op.state, op.attempts) == (State.FAILED_TERMINAL, 1)
    assert "business writes refused" in op.reason and "Put.Item.pk" in op.reason


def test_class_c_ambiguous_call_is_reconciled_by_lookup(engine, clock):
    kit = IdempotentApiKit()
    kit.api.lose_answer_next = True
    engine.enqueue("acme", "op", kit.job_type, H1, target_class="C")
    worker(engine, kit, "w1").run_once()
    assert engine.get("acme", "op").state == State.UNKNOWN  # executed, but the answer was lost
    engine.resolve("acme", "op", "requeue", note="check provider")
    assert worker(engine, kit, "w2").run_once()
    op = engine.get("acme", "op")
    assert (op.state, op.outcome_code) == (State.SUCCEEDED, "sent:effect-1")
    assert kit.effects("acme", "op") == 1 and kit.attempts_at_target("acme", "op") == 1


def test_class_d_ambiguous_call_is_unknown_and_never_repeated(engine):
    kit = SingleShotKit()
    kit.lose_answer.add(("acme", "op"))
    engine.enqueue("acme", "op", kit.job_type, H1, target_class="D")
    worker(engine, kit, "w1").run_once()
    assert engine.get("acme", "op").state == State.UNKNOWN
    engine.resolve("acme", "op", "requeue", note="operator retries")
    worker(engine, kit, "w2").run_once()  # reconcile: an intent is on record -> cannot tell
    assert engine.get("acme", "op").state == State.UNKNOWN
    assert kit.effects("acme", "op") == 1


def test_class_d_without_an_intent_on_record_may_act_after_requeue(engine, clock):
    kit = SingleShotKit()
    engine.enqueue("acme", "op", kit.job_type, H1, target_class="D")
    engine.claim_next("acme", "w0", lease_ms=LEASE)  # a worker that died before recording intent
    clock.advance(LEASE)
    engine.sweep()
    engine.resolve("acme", "op", "requeue", note="no call was made")
    assert worker(engine, kit, "w1").run_once()
    assert engine.get("acme", "op").state == State.SUCCEEDED and kit.effects("acme", "op") == 1


def test_handler_for_unused_hooks_is_harmless(engine, ddb):
    """Hooks fire once per (operation, fence); a later fence runs unhooked."""
    hooks = Hooks()
    calls = []
    hooks.on_before("acme", "op", 1, lambda job: calls.append(job.fence))
    kit = IdempotentApiKit(hooks=hooks)
    engine.enqueue("acme", "op", kit.job_type, H1)
    worker(engine, kit, "w1").run_once()
    assert calls == [1]
    assert isinstance(kit.handler(), FunctionHandler)


def _snapshot(ddb, table):
    """Every item of ``table``: what a point-in-time restore brings back."""
    return ddb.scan(TableName=table, ConsistentRead=True)["Items"]


def _restore(ddb, table, items, key_names=("pk", "sk")):
    """The table as it was at the snapshot: later items gone, earlier ones as they were."""
    for item in _snapshot(ddb, table):
        ddb.delete_item(TableName=table, Key={k: item[k] for k in key_names if k in item})
    for item in items:
        ddb.put_item(TableName=table, Item=item)


@pytest.mark.parametrize("epoch_after_restore", [0, 1])
def test_after_a_point_in_time_restore_the_next_fence_epoch_keeps_class_b_targets_safe(
    ddb, spec, clock, epoch_after_restore
):
    """A restore rolls the operation's fence back, not what the class-B target saw. Under the next
    fence epoch, every claim after the restore is above every fence handed out before it: the
    target refuses no legitimate new claim and accepts no stale one. Under the same epoch the
    next claim repeats a fence the target already saw (why the runbook raises the epoch)."""
    ledger = f"ledger-restore-{next(_names)}"
    ddb.create_table(
        TableName=ledger,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    table, events = fenced_table.FencedTable(ddb, ledger), Events()
    before = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(3))
    before.enqueue("acme", "op", "ledger", H1, target_class="B")
    backend = EngineBackend(before, ["acme"])
    first = Job(before.claim_next("acme", "w1", lease_ms=LEASE), backend, events)
    assert first.fence == 1
    table.write(first, {"pk": "acct"}, {"balance": 1})
    backup = _snapshot(ddb, spec.table_name)  # the restore point: fence 1 held by w1
    clock.advance(LEASE)
    second = Job(before.claim_next("acme", "w2", lease_ms=LEASE), backend, events)
    assert second.fence == 2
    table.write(second, {"pk": "acct"}, {"balance": 2})  # the target saw fence 2
    # Disaster: the table is restored to the backup (a new table, the service pointed at it).
    _restore(ddb, spec.table_name, backup, (PARTITION_KEY, SORT_KEY))
    after = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(4), fence_epoch=epoch_after_restore)
    clock.advance(LEASE)
    claim = after.claim_next("acme", "w3", lease_ms=LEASE)
    third = Job(claim, EngineBackend(after, ["acme"]), events)
    if epoch_after_restore == 0:
        # The fence repeats: two holders (w2 before the restore, w3 after it) share fence 2.
        assert third.fence == second.fence
        return
    assert third.fence == 1_000_000_001 > second.fence
    table.write(third, {"pk": "acct"}, {"balance": 3})  # the legitimate new holder is accepted
    assert table.read({"pk": "acct"})["balance"] == 3
    for stale in (first, second):  # holders from before the restore are refused by the target
        with pytest.raises(LostOwnership):
            table.write(stale, {"pk": "acct"}, {"balance": -1})
    assert table.read({"pk": "acct"})["balance"] == 3
    # Later claims keep rising from the epoch's floor; the engine's own writes accept the fence.
    after.fail("acme", "op", third.fence, retryable=True, reason="transient", retry_after_ms=0)
    fourth = after.claim_next("acme", "w4", lease_ms=LEASE)
    assert fourth is not None and fourth.fence == 1_000_000_002
    assert after.complete("acme", "op", fourth.fence, "done").state == State.SUCCEEDED


def test_a_fence_epoch_outside_its_range_is_refused(ddb, spec):
    for epoch in (-1, True, 9_007_199, "1"):
        with pytest.raises(ValueError, match="fence_epoch"):
            Engine(client=ddb, spec=spec, fence_epoch=epoch)
