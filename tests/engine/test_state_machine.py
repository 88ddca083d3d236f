"""Property-based test: the engine over DynamoDB against a small reference model.

Hypothesis drives random enqueues (some awaiting approval), claims, expiries, heartbeats,
completions, failures, parks, sweeps, resolves, approvals, rejections and cancels; after every step the engine's stored operations must equal the model's, and
fences only rise.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from leasefence import (
    Engine,
    InvalidTransition,
    NotFound,
    PayloadConflict,
    StaleFence,
    State,
)
from leasefence.errors import PayloadMismatch, SelfApproval
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec

HASHES = ["sha256:" + "a" * 64, "sha256:" + "b" * 64]
KEYS = [("t1", "a"), ("t1", "b#1"), ("t1#1", "b"), ("t2", "a")]
PRODUCER, APPROVAL_VALID_MS = "producer-1", 2_000
TENANTS = sorted({t for t, _ in KEYS})
_tables = itertools.count()


@dataclass
class ModelOp:
    payload_hash: str
    max_attempts: int
    budget: int
    due_at: int
    state: State = State.QUEUED
    fence: int = 0
    attempts: int = 0
    lease_expires_at: int | None = None
    lease_ms: int | None = None
    holder: str | None = None
    closed: tuple | None = None  # (fence, command, outcome)
    requeued: bool = False
    history: list = field(default_factory=list)
    approval_expires_at: int | None = None  # set while it awaits approval
    approved_by: str | None = None
    rejected: bool = False

    def claimable(self, now: int) -> bool:
        if self.attempts >= self.max_attempts:
            return False
        if self.state == State.QUEUED:
            return self.due_at <= now
        return self.state == State.CLAIMED and self.lease_expires_at <= now


keys = st.sampled_from(KEYS)
fence_offsets = st.sampled_from([0, 0, 0, 0, -1, 1])


class LeaseFenceMachine(RuleBasedStateMachine):
    aws = None  # set by the test below

    def __init__(self):
        super().__init__()
        spec = TableSpec(table_name=f"sm-{next(_tables)}", due_shards=2, sweep_shards=2)
        spec = self.aws.create_tables(spec)
        self.clock = ManualClock()
        self.engine = Engine(client=self.aws.client(), spec=spec, clock=self.clock, rng=random.Random(0))
        self.model: dict[tuple[str, str], ModelOp] = {}
        self.max_fence_seen: dict[tuple[str, str], int] = {}
        self.workers = itertools.count()

    # ---------------------------------------------------------------- helpers

    def _fenced(self, key, offset, expected_ok, call, apply, command, outcome=None):
        op = self.model.get(key)
        fence = max(1, (op.fence if op else 1) + offset)
        try:
            result = call(fence)
        except NotFound:
            assert op is None
            return
        except StaleFence:
            assert op is not None
            assert not (op.state == State.CLAIMED and op.fence == fence), "the holding fence was refused"
            assert not (op.closed and op.closed[:2] == (fence, command) and (outcome is None or op.closed[2] == outcome))
            return
        assert op is not None
        if op.state == State.CLAIMED and op.fence == fence:
            assert expected_ok(op)
            apply(op, fence)
            op.closed = (fence, command, outcome) if command != "heartbeat" else op.closed
        else:
            # Only a retry of the same transition by the same fence may succeed here.
            assert command != "heartbeat"
            assert op.closed is not None and op.closed[:2] == (fence, command)
            assert outcome is None or op.closed[2] == outcome
        return result

    # ---------------------------------------------------------------- rules

    @initialize(budgets=st.lists(st.integers(1, 3), min_size=len(KEYS), max_size=len(KEYS)))
    def enqueue_some(self, budgets):
        for key, budget in zip(KEYS[:-1], budgets):
            self.enqueue(key, HASHES[0], budget)

    @rule(
        key=keys,
        h=st.sampled_from(HASHES),
        max_attempts=st.integers(1, 3),
        approval=st.sampled_from([False, False, True]),
    )
    def enqueue(self, key, h, max_attempts, approval=False):
        existing = self.model.get(key)
        try:
            result = self.engine.enqueue(
                *key, "job", h, max_attempts=max_attempts, actor=PRODUCER,
                approval_required=approval, approval_valid_ms=APPROVAL_VALID_MS,
                payload_ref=f"stored/{h}", payload_inline=True,  # an approval binds stored bytes
            )
        except PayloadConflict:
            assert existing is not None and existing.payload_hash != h
            return
        if existing is None:
            assert result.created
            op = self.model[key] = ModelOp(h, max_attempts, max_attempts, due_at=self.clock())
            if approval:
                op.state = State.AWAITING_APPROVAL
                op.approval_expires_at = self.clock() + APPROVAL_VALID_MS
        else:
            assert not result.created and existing.payload_hash == h

    def _apply_claim(self, claim, lease_ms):
        key = (claim.tenant_id, claim.operation_id)
        op = self.model[key]
        assert op.claimable(self.clock()), f"claimed a non-claimable operation {key}: {op}"
        was_claimed = op.state == State.CLAIMED
        op.fence += 1
        op.attempts += 1
        op.state = State.CLAIMED
        op.lease_expires_at = self.clock() + lease_ms
        op.lease_ms = lease_ms
        op.holder = claim.worker_id
        assert claim.fence == op.fence and claim.attempts == op.attempts
        assert claim.takeover == was_claimed
        assert claim.reconcile_required == (op.attempts > 1 or op.requeued)

    @rule(tenant=st.sampled_from(TENANTS), lease_ms=st.sampled_from([1_000, 3_000]))
    def claim_next(self, tenant, lease_ms):
        worker = f"w{next(self.workers)}"
        claim = self.engine.claim_next(tenant, worker, lease_ms=lease_ms)
        claimable = [k for k, op in self.model.items() if k[0] == tenant and op.claimable(self.clock())]
        if claim is None:
            assert not claimable, f"nothing claimed although {claimable} were claimable"
        else:
            self._apply_claim(claim, lease_ms)

    @rule(key=keys)
    def claim_named(self, key):
        op = self.model.get(key)
        worker = f"w{next(self.workers)}"
        try:
            claim = self.engine.claim(*key, worker, lease_ms=2_000)
        except NotFound:
            assert op is None
            return
        if claim is None:
            assert not op.claimable(self.clock())
        else:
            self._apply_claim(claim, 2_000)

    @rule(ms=st.sampled_from([0, 500, 1_000, 2_000, 3_500]))
    def advance(self, ms):
        self.clock.advance(ms)

    @rule(key=keys, offset=fence_offsets, lease_ms=st.sampled_from([None, 4_000]))
    def heartbeat(self, key, offset, lease_ms):
        op = self.model.get(key)
        worker = op.holder if op and op.holder else "nobody"

        def apply(op, fence):
            op.lease_ms = lease_ms or op.lease_ms
            op.lease_expires_at = self.clock() + op.lease_ms

        self._fenced(
            key, offset, lambda op: True,
            lambda fence: self.engine.heartbeat(*key, fence, worker, lease_ms=lease_ms),
            apply, "heartbeat",
        )

    @rule(key=keys, offset=fence_offsets, outcome=st.sampled_from(["ok", "other"]))
    def complete(self, key, offset, outcome):
        def apply(op, fence):
            op.state = State.SUCCEEDED
            op.holder = None

        self._fenced(key, offset, lambda op: True, lambda f: self.engine.complete(*key, f, outcome), apply, "complete", outcome)

    @rule(key=keys, offset=fence_offsets, retryable=st.booleans(), delay=st.sampled_from([0, 2_000]))
    def fail(self, key, offset, retryable, delay):
        def apply(op, fence):
            op.holder = None
            if retryable and op.attempts < op.max_attempts:
                op.state = State.QUEUED
                op.due_at = self.clock() + delay
            else:
                op.state = State.FAILED_TERMINAL

        self._fenced(
            key, offset, lambda op: True,
            lambda f: self.engine.fail(*key, f, retryable=retryable, reason="r", retry_after_ms=delay),
            apply, "fail",
        )

    @rule(key=keys, offset=fence_offsets, quarantine=st.booleans())
    def park(self, key, offset, quarantine):
        target = State.QUARANTINED if quarantine else State.UNKNOWN
        command = "quarantine" if quarantine else "unknown"
        method = self.engine.quarantine if quarantine else self.engine.park_unknown

        def apply(op, fence):
            op.state = target
            op.holder = None

        self._fenced(key, offset, lambda op: True, lambda f: method(*key, f, "why"), apply, command)

    @rule()
    def sweep(self):
        now = self.clock()
        result = self.engine.sweep(limit=100)
        due = {
            k for k, op in self.model.items()
            if op.state == State.CLAIMED and op.lease_expires_at <= now and op.attempts >= op.max_attempts
        }
        assert set(result.swept_keys) == due
        for k in due:
            self.model[k].state = State.UNKNOWN
            self.model[k].holder = None
        expired = [
            op for op in self.model.values()
            if op.state == State.AWAITING_APPROVAL and op.approval_expires_at <= now
        ]
        assert result.approvals_expired == len(expired)
        for op in expired:
            op.state = State.FAILED_TERMINAL

    @rule(key=keys, h=st.sampled_from(HASHES), approver=st.sampled_from(["approver-1", PRODUCER]))
    def approve(self, key, h, approver):
        op = self.model.get(key)
        try:
            result = self.engine.approve(*key, h, actor=approver)
        except NotFound:
            assert op is None
            return
        except PayloadMismatch:
            assert op.payload_hash != h
            return
        except SelfApproval:
            assert op.state == State.AWAITING_APPROVAL and approver == PRODUCER and op.approved_by is None
            return
        except InvalidTransition:
            assert op.approved_by is None and (
                op.state != State.AWAITING_APPROVAL or op.approval_expires_at <= self.clock()
            )
            return
        assert op.payload_hash == h
        if op.approved_by is not None:
            assert result.approved_by == op.approved_by  # a replay
            return
        assert op.state == State.AWAITING_APPROVAL and approver != PRODUCER
        assert self.clock() < op.approval_expires_at
        op.state, op.due_at, op.approved_by = State.QUEUED, self.clock(), approver

    @rule(key=keys)
    def reject(self, key):
        op = self.model.get(key)
        try:
            self.engine.reject(*key, actor="approver-1")
        except NotFound:
            assert op is None
            return
        except InvalidTransition:
            assert op.state != State.AWAITING_APPROVAL and not op.rejected
            return
        assert op.state == State.AWAITING_APPROVAL or op.rejected
        op.state, op.rejected = State.FAILED_TERMINAL, True

    @rule(key=keys)
    def cancel(self, key):
        op = self.model.get(key)
        try:
            self.engine.cancel(*key, actor=PRODUCER)
        except NotFound:
            assert op is None
            return
        except InvalidTransition:
            assert op.state not in (State.QUEUED, State.AWAITING_APPROVAL, State.CANCELLED)
            return
        assert op.state in (State.QUEUED, State.AWAITING_APPROVAL, State.CANCELLED)
        op.state = State.CANCELLED

    @rule(key=keys, resolution=st.sampled_from(["succeeded", "failed_terminal", "requeue"]))
    def resolve(self, key, resolution):
        op = self.model.get(key)
        try:
            self.engine.resolve(*key, resolution, note="checked")
        except NotFound:
            assert op is None
            return
        except InvalidTransition:
            assert op.state not in (State.UNKNOWN, State.QUARANTINED)
            return
        assert op.state in (State.UNKNOWN, State.QUARANTINED)
        if resolution == "requeue":
            op.state = State.QUEUED
            op.max_attempts = op.attempts + op.budget
            op.due_at = self.clock()
            op.requeued = True
        else:
            op.state = State(resolution)

    # ---------------------------------------------------------------- invariants

    @invariant()
    def engine_agrees_with_model(self):
        for key, op in self.model.items():
            stored = self.engine.get(*key)
            assert (stored.state, stored.fence, stored.attempts, stored.max_attempts) == (
                op.state, op.fence, op.attempts, op.max_attempts,
            ), f"{key}: engine {stored} != model {op}"
            if op.state == State.CLAIMED:
                assert stored.lease_expires_at == op.lease_expires_at
            assert stored.fence >= self.max_fence_seen.get(key, 0), "a fence went down"
            self.max_fence_seen[key] = stored.fence


def test_engine_matches_reference_model(own_endpoint):
    LeaseFenceMachine.aws = own_endpoint
    run = LeaseFenceMachine.TestCase
    run.settings = settings(
        max_examples=40,
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        derandomize=True,
    )
    run().runTest()
