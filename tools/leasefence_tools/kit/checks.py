"""The checks ``leasefence verify`` runs against a team's handler: the design's fault tests and the
zombie story, judged by what the targets recorded.

Each check runs on its own tenants of one :class:`~leasefence_tools.kit.rig.Rig` and returns an
:class:`Outcome`: problems (any problem is a no-go; the first one is the sentence shown), the
story of each operation (who claimed, what reached the target, how it ended) and the tenants
whose target actions go into the report.

What is judged, for every operation a check runs (:func:`safety_problems`):

- nothing reaches a target from a worker after it was told it lost ownership;
- classes A, B and D: no side effect lands from a worker that no longer holds the claim (class
  C is dedupe, not fencing: a stale holder's call is deduplicated by the provider instead);
- classes A and B: no target item is written by two claims of one operation; class C: the
  provider executes an operation at most once; class D: the gateway is called at most once.

Pauses are not sleeps: the paused worker's request is held at the target while the clock (the
engine's manual clock) moves past its lease and another worker takes over, in the same thread.
Only ``hang`` waits on the wall clock, for three ticks of the paused worker's heartbeat thread.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from leasefence.errors import PayloadConflict
from leasefence.model import State, TargetClass
from leasefence.payloads import canonicalize
from leasefence_tools.kit.evidence import (
    BOOKKEEPING,
    CALL,
    INTENT,
    LANDED,
    LOOKUP,
    WRITE,
    Action,
    Execution,
    Pending,
)
from leasefence_tools.kit.rig import PAST_LEASE_MS, Rig
from leasefence_tools.testing.faults import AFTER

A, B, C, D = TargetClass.A, TargetClass.B, TargetClass.C, TargetClass.D
#: What a paused worker may be doing when it is paused: its first request to a target.
BOUNDARY_KINDS = (WRITE, BOOKKEEPING, CALL, INTENT)
#: Heartbeat ticks of a hung worker (wall clock), and how many to wait for.
HANG_TICK_MS = 20
HANG_TICKS = 3
#: Moving the clock this far lets any retry backoff (at most 300 s) and any lease lapse.
SETTLE_MS = 301_000 + PAST_LEASE_MS


class WorkerCrashed(BaseException):
    """The worker process dies here: no handler code and no runtime code runs after it."""


@dataclass
class Outcome:
    problems: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    tenants: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: Callable[[Rig], Outcome]
    #: What a go means, per class (the sentence shown with a go).
    go: Callable[[TargetClass], str]


# ---------------------------------------------------------------------------------- judging


def _who(execution: Execution | None) -> str:
    return "setup" if execution is None else f"fence {execution.fence}"


def _first_run_request(
    tenant_id: str, operation_id: str, fence: int, kinds: tuple[str, ...] = BOUNDARY_KINDS
) -> Callable[[Action], bool]:
    """The first request a claim's ``run`` makes to a target (of the given kinds)."""

    def match(action: Action) -> bool:
        execution = action.execution
        return (
            execution is not None
            and execution.matches(tenant_id, operation_id, fence)
            and action.phase == "run"
            and action.kind in kinds
        )

    return match


def story(rig: Rig, tenant_id: str, operation_id: str, scenario: str = "") -> list[str]:
    """What happened to one operation, in order: claims, reconcile answers, the requests that
    reached the target (a fence raise that landed is left out: the report has it), who was told
    it lost ownership, and how the operation ended."""
    events: list[tuple[int, str]] = []
    executions = rig.executions(tenant_id, operation_id)
    for execution in executions:
        events.append((execution.seq, f"{_who(execution)} claimed"))
        if execution.reconciled is not None and execution.reconciled_seq is not None:
            missing = " (the handler has no reconcile)" if execution.reconcile_missing else ""
            events.append(
                (
                    execution.reconciled_seq,
                    f"{_who(execution)} reconciled: {execution.reconciled}{missing}",
                )
            )
    for a in rig.actions(tenant_id, operation_id):
        if a.kind == LOOKUP or (a.kind == BOOKKEEPING and a.outcome == LANDED):
            continue
        events.append((a.performed_seq or a.seq, f"{_who(a.execution)} {a.describe()}"))
    lost = [f"{_who(e)} was told it lost ownership" for e in executions if e.lost]
    op = rig.state(tenant_id, operation_id)
    text = "; ".join([entry for _, entry in sorted(events)] + lost)
    prefix = f"{scenario}: " if scenario else ""
    return [f"{prefix}{text or 'nothing claimed'}; operation {op.state.value} at fence {op.fence}"]


def _stale_cause(rig: Rig, action: Action) -> str:
    if rig.target_class is D:
        return (
            "record the intent under the fence before calling (single_shot.call_once): a stale "
            "holder's intent is refused, so it never calls"
        )
    if action.fenced is False:
        return (
            "the write carried no fence condition; write through FencedTable.write (class B) "
            "or Job.complete_with (class A), so the target refuses an older fence"
        )
    return (
        "the target did not know the newer fence yet; raise it right after the claim "
        "(FencedTable.raise_fence in on_claim), before reconciling or acting"
    )


def _repeat_cause(later: Execution, earlier: Execution) -> str:
    if later is earlier:
        return "the same claim sent it again"
    if later.reconciled == "not_done":
        return (
            f"fence {later.fence}'s reconcile answered not done although fence "
            f"{earlier.fence}'s side effect was there; reconcile must read the target"
        )
    if later.reconciled is None and later.fence > 1:
        return f"fence {later.fence} acted without reconciling"
    return f"fence {later.fence} repeated it"


def safety_problems(rig: Rig, tenant_id: str, operation_id: str) -> list[str]:
    """What must hold for every operation, whatever the check did to it."""
    problems: list[str] = []
    actions = rig.actions(tenant_id, operation_id)
    for a in actions:
        if a.after_lost and a.kind in (WRITE, CALL, BOOKKEEPING) and a.outcome == LANDED:
            problems.append(
                f"{_who(a.execution)} was told it lost ownership (LostOwnership) and still made "
                f"a {a.kind} to {a.target} that landed: a handler must stop at LostOwnership "
                "and make no further write"
            )
            break
    if rig.target_class is not C:
        for a in actions:
            if a.effect and a.held is False:
                problems.append(
                    f"{_who(a.execution)}'s {a.kind} to {a.target} landed after it no longer held "
                    f"the operation: {_stale_cause(rig, a)}"
                )
                break
    effects = [a for a in actions if a.effect]
    if rig.target_class in (A, B):
        writers: dict[str, list[Action]] = defaultdict(list)
        for a in effects:
            for item in a.items:
                writers[item].append(a)
        for item, writes in writers.items():
            fences = sorted({w.execution.fence for w in writes if w.execution is not None})
            if len(fences) > 1:
                first, last = writes[0], writes[-1]
                assert first.execution is not None and last.execution is not None
                problems.append(
                    f"target item {item} was written by fences {', '.join(map(str, fences))} of "
                    f"one operation, so its side effect landed twice: "
                    f"{_repeat_cause(last.execution, first.execution)}"
                )
                break
    elif rig.target_class is C and len(effects) > 1:
        keys = sorted({k for a in effects for k in a.items})
        problems.append(
            f"the provider executed this operation {len(effects)} times (idempotency keys "
            f"{', '.join(keys)}): send one key per operation, derived from (tenant_id, "
            "operation_id) (idempotent_api.idempotency_key), on every attempt"
        )
    elif rig.target_class is D:
        calls = [a for a in actions if a.kind == CALL]
        if len(calls) > 1:
            cause = (
                "it called again after a failed or lost answer; a class-D call is made once, "
                "and anything ambiguous parks unknown (single_shot.call_once raises Ambiguous)"
                if calls[0].execution is calls[-1].execution
                else "a later claim called again; record the intent before the call "
                "(single_shot.call_once), so the next claim's reconcile knows a call may have "
                "happened"
            )
            problems.append(
                f"the gateway was called {len(calls)} times for one operation (class D has no "
                f"idempotency and no lookup, so every call is a side effect): {cause}"
            )
    return problems


def _effect_claims(rig: Rig, tenant_id: str, operation_id: str) -> list[int]:
    return sorted(
        {a.execution.fence for a in rig.effects(tenant_id, operation_id) if a.execution is not None}
    )


def one_effect_problems(rig: Rig, tenant_id: str, operation_id: str, scenario: str) -> list[str]:
    """Classes A-C: the side effect landed (from exactly one claim, checked above)."""
    if rig.target_class is D or _effect_claims(rig, tenant_id, operation_id):
        return []
    return [
        f"{scenario}: the target recorded no side effect for this operation, so nothing "
        "protected it was exercised (does the fixture point the handler at env.dynamodb, "
        "env.idempotent_api or env.gateway?)"
    ]


def end_state_problems(
    rig: Rig, tenant_id: str, operation_id: str, scenario: str, expected: State
) -> list[str]:
    op = rig.state(tenant_id, operation_id)
    if op.state == expected:
        return []
    executions = rig.executions(tenant_id, operation_id)
    if op.state == State.UNKNOWN and rig.target_class is not D:
        if any(e.reconcile_missing for e in executions):
            return [
                f"{scenario}: the operation was parked unknown because the handler has no "
                "reconcile, so a later claim could not tell whether the side effect happened; "
                "classes A to C can look the target up: give the handler a reconcile that reads it"
            ]
        return [
            f"{scenario}: the operation was parked unknown although the target could be looked "
            "up; a reconcile that reads the target answers done or not done"
        ]
    if op.state == State.SUCCEEDED and rig.target_class is D:
        return [
            f"{scenario}: the operation succeeded after an ambiguous call; a class-D outcome that "
            "cannot be confirmed must park unknown (raise Ambiguous), never succeed"
        ]
    return [f"{scenario}: the operation ended {op.state.value}, expected {expected.value}"]


def judge(
    rig: Rig, tenant_id: str, operation_id: str, scenario: str, expected: State
) -> tuple[list[str], list[str]]:
    """The problems and the story of one operation after a scenario."""
    problems = [f"{scenario}: {p}" for p in safety_problems(rig, tenant_id, operation_id)]
    ending = end_state_problems(rig, tenant_id, operation_id, scenario, expected)
    if rig.state(tenant_id, operation_id).state != State.UNKNOWN:
        # (parked unknown: the ending says why no side effect landed)
        problems += one_effect_problems(rig, tenant_id, operation_id, scenario)
    problems += ending
    return problems, story(rig, tenant_id, operation_id, scenario)


def _no_request(scenario: str) -> str:
    return (
        f"{scenario}: fence 1's handler made no request to the target while running, so there "
        "was nothing to pause it before (does the fixture point the handler at env.dynamodb, "
        "env.idempotent_api or env.gateway?)"
    )


def _lost_ownership_problem(execution: Execution | None, scenario: str) -> list[str]:
    if execution is None or execution.lost:
        return []
    return [
        f"{scenario}: fence {execution.fence} was never told it lost ownership after it was "
        "overtaken; its requests to the target should have been refused"
    ]


def settle(rig: Rig, tenant_id: str, operation_id: str, name: str) -> list[str]:
    """Drive an operation to its end as time passes: lapsed leases are taken over (or swept),
    retries come due, and an ``unknown`` one is requeued once by an operator (after checking,
    as an operator would). Returns what happened, for the evidence."""
    notes: list[str] = []
    requeued = False
    for step in range(6):
        op = rig.state(tenant_id, operation_id)
        if op.state in (State.SUCCEEDED, State.FAILED_TERMINAL):
            break
        if op.state in (State.UNKNOWN, State.QUARANTINED):
            if requeued:
                break
            rig.observer.resolve(
                tenant_id, operation_id, "requeue", "leasefence verify: an operator requeued it"
            )
            requeued = True
            notes.append(f"{name}: parked {op.state.value}; an operator requeued it")
        else:
            rig.clock.advance(SETTLE_MS)
            rig.observer.sweep()
        rig.worker(f"{name}-{step}", [tenant_id]).run_once()
    return notes


# ---------------------------------------------------------------------------------- the checks


def stale_write(rig: Rig) -> Outcome:
    """Pause after the claim, past the lease, just before the first request to the target."""
    tenant = rig.tenant("stale-write")
    out = Outcome(tenants=[tenant])

    # Late wake: the paused holder resumes after another worker took over and finished (class D:
    # after the sweeper parked it, since it has one attempt).
    op = "stale-write-late"
    rig.enqueue(tenant, op)

    def late(_action: Action, _pending: Pending) -> None:
        rig.clock.advance(rig.lease_ms + PAST_LEASE_MS)
        if rig.target_class is D:
            rig.observer.sweep()
        else:
            rig.worker("rescuer", [tenant]).run_once()

    hook = rig.log.intercept(_first_run_request(tenant, op, 1), before=late)
    rig.worker("zombie", [tenant]).run_once()
    expected = State.UNKNOWN if rig.target_class is D else State.SUCCEEDED
    _scenario(out, rig, tenant, op, "late wake", bool(hook.fired), expected)

    if rig.target_class is D:
        out.evidence.append("early wake: not run for class D (one attempt: no takeover)")
        return out

    # Early wake: the paused holder's request reaches the target right after the new holder's
    # claim (and its on_claim), before the new holder reconciles or writes.
    op = "stale-write-early"
    rig.enqueue(tenant, op)

    def early(_action: Action, pending: Pending) -> None:
        rig.clock.advance(rig.lease_ms + PAST_LEASE_MS)
        rig.on_phase(
            lambda ex, phase: ex.matches(tenant, op) and ex.fence > 1 and phase != "on_claim",
            lambda _ex: pending.run(),
        )
        rig.worker("rescuer-early", [tenant]).run_once()

    hook = rig.log.intercept(_first_run_request(tenant, op, 1), before=early)
    rig.worker("zombie-early", [tenant]).run_once()
    _scenario(out, rig, tenant, op, "early wake", bool(hook.fired), State.SUCCEEDED)
    return out


def _scenario(
    out: Outcome,
    rig: Rig,
    tenant: str,
    op: str,
    scenario: str,
    fired: bool,
    expected: State,
) -> None:
    if not fired:
        out.problems.append(_no_request(scenario))
        out.evidence += story(rig, tenant, op, scenario)
        return
    problems, lines = judge(rig, tenant, op, scenario, expected)
    zombie = next((e for e in rig.executions(tenant, op) if e.fence == 1), None)
    out.problems += problems + _lost_ownership_problem(zombie, scenario)
    out.evidence += lines


def crash_after_effect(rig: Rig) -> Outcome:
    """Crash right after the side effect landed, before the completion."""
    tenant, op = rig.tenant("crash-after-effect"), "crash-after-effect-op"
    out = Outcome(tenants=[tenant])
    rig.enqueue(tenant, op)

    def crash(_action: Action) -> None:
        raise WorkerCrashed()

    hook = rig.log.intercept(_first_run_request(tenant, op, 1, (WRITE, CALL)), after=crash)
    crashed = False
    try:
        rig.worker("crashes", [tenant]).run_once()
    except WorkerCrashed:
        crashed = True
    if not crashed:
        out.problems.append(
            "fence 1's side effect never landed at the target, so there was no moment to crash "
            "after it" + ("" if hook.fired else " (the handler made no request to the target)")
        )
        out.evidence += story(rig, tenant, op, "crash")
        return out
    rig.clock.advance(rig.lease_ms + PAST_LEASE_MS)
    if rig.target_class is D:
        rig.observer.sweep()  # one attempt: the expired claim is parked, never taken over
        rig.observer.resolve(tenant, op, "requeue", "leasefence verify: an operator requeued it")
        out.evidence.append("crash: parked unknown by the sweeper; an operator requeued it")
        rig.worker("after-requeue", [tenant]).run_once()
        expected = State.UNKNOWN
    else:
        rig.worker("takes-over", [tenant]).run_once()
        expected = State.SUCCEEDED
    problems, lines = judge(rig, tenant, op, "crash", expected)
    out.problems += problems
    out.evidence += lines
    return out


def replay_conflict(rig: Rig) -> Outcome:
    """The same key twice with the same payload (a replay), then with another (a conflict)."""
    tenant, op = rig.tenant("replay-conflict"), "replay-conflict-op"
    out = Outcome(tenants=[tenant])
    first = rig.enqueue(tenant, op)
    payload = rig.payloads[(tenant, op)]
    replay = rig.enqueue(tenant, op, payload, prepare=False)
    try:
        rig.enqueue(tenant, op, {"another payload than": payload}, prepare=False)
        conflict = False
    except PayloadConflict:
        conflict = True
    ran = rig.drain("worker", [tenant])
    current = rig.state(tenant, op)
    out.evidence.append(
        f"enqueue: created={first.created}; same payload again: created={replay.created}; "
        f"another payload: {'payload_conflict' if conflict else 'accepted'}; jobs run: {ran}"
    )
    if not first.created or replay.created or not conflict:
        out.problems.append(
            "replay versus conflict did not hold: a repeat must be a replay and another payload "
            "under the same id a conflict"
        )
    if current.payload_hash != canonicalize(payload).hash:
        out.problems.append("the operation's payload hash changed after the conflict")
    if len(rig.executions(tenant, op)) != 1:
        out.problems.append(
            f"the operation was claimed {len(rig.executions(tenant, op))} times after a replay "
            "and a conflict; once was expected"
        )
    problems, lines = judge(rig, tenant, op, "replay", State.SUCCEEDED)
    out.problems += problems
    out.evidence += lines
    return out


def two_tenants(rig: Rig) -> Outcome:
    """Two tenants, identical operation ids: no cross effects."""
    tenants = [rig.tenant("two-tenants-a"), rig.tenant("two-tenants-b")]
    op = "same-operation-id"
    out = Outcome(tenants=list(tenants))
    for tenant in tenants:
        rig.enqueue(tenant, op)
    rig.drain("worker", tenants)
    for tenant, label in zip(tenants, ("tenant a", "tenant b"), strict=True):
        problems, lines = judge(rig, tenant, op, label, State.SUCCEEDED)
        out.problems += problems
        out.evidence += lines
    touched: dict[str, set[str]] = defaultdict(set)
    for tenant in tenants:
        for a in rig.actions(tenant, op):
            if a.kind in (WRITE, CALL) and rig.target_class is not D:
                for item in a.items:
                    touched[item].add(tenant)
    shared = sorted(item for item, owners in touched.items() if len(owners) > 1)
    if shared:
        what = "idempotency key" if rig.target_class is C else "target item"
        out.problems.insert(
            0,
            f"both tenants' operations reached the same {what} {shared[0]}: derive target keys "
            "from the tenant as well as the operation id (identity is (tenant_id, "
            "operation_id)), or one tenant's job lands on, or is mistaken for, the other's",
        )
    return out


def _request_of(operation_id: str, command_value: str | None = None) -> Callable[..., bool]:
    """A FaultyClient predicate: an operations-table update of this operation (a claim when
    ``command_value`` is None, else the close with that ``:cmd``)."""

    def match(request: dict[str, Any]) -> bool:
        key = (request.get("Key") or {}).get("operation_id", {}).get("S")
        values = request.get("ExpressionAttributeValues") or {}
        if key != operation_id:
            return False
        if command_value is None:
            return ":tok" in values
        return values.get(":cmd") == {"S": command_value}

    return match


def _transaction_of(operation_id: str) -> Callable[..., bool]:
    completion = _request_of(operation_id, "complete")

    def match(request: dict[str, Any]) -> bool:
        return any(
            completion(body)
            for action in request.get("TransactItems", [])
            for body in action.values()
        )

    return match


def lost_answers(rig: Rig) -> Outcome:
    """leasefence's own answers lost: the claim's (mid-claim) and the completion's."""
    plans = {
        "lost claim answer": (("update_item", "claim"),),
        "lost complete answer": (("update_item", "complete"), ("transact_write_items", "complete")),
    }
    out = Outcome()
    for scenario, plan in plans.items():
        tenant = rig.tenant(scenario.replace(" ", "-"))
        out.tenants.append(tenant)
        op = f"{scenario.replace(' ', '-')}-op"
        rig.enqueue(tenant, op)
        before = rig.faulty.injected[AFTER]
        for method, command in plan:
            when = (
                _transaction_of(op)
                if method == "transact_write_items"
                else _request_of(op, None if command == "claim" else command)
            )
            rig.faulty.fail_next(method, AFTER, when=when)
        rig.drain("worker", [tenant])
        lost = rig.faulty.injected[AFTER] - before
        out.evidence.append(f"{scenario}: {lost} answer(s) lost after the write committed")
        problems, lines = judge(rig, tenant, op, scenario, State.SUCCEEDED)
        current = rig.state(tenant, op)
        if current.fence != 1:
            problems.append(
                f"{scenario}: the operation needed {current.fence} claims; the lost answer "
                "should have been recognized, not retried under a new claim"
            )
        out.problems += problems
        out.evidence += lines
    return out


def ambiguous_target(rig: Rig) -> Outcome:
    """The target's answer lost: the side effect landed, the handler cannot know."""
    tenant, op = rig.tenant("ambiguous-target"), "ambiguous-target-op"
    out = Outcome(tenants=[tenant])
    rig.enqueue(tenant, op)
    hook = rig.log.intercept(_first_run_request(tenant, op, 1, (WRITE, CALL)), lose_answer=True)
    rig.worker("answer-lost", [tenant]).run_once()
    if not hook.fired:
        out.problems.append(_no_request("answer lost"))
        out.evidence += story(rig, tenant, op, "answer lost")
        return out
    out.evidence += settle(rig, tenant, op, "answer lost")
    expected = State.UNKNOWN if rig.target_class is D else State.SUCCEEDED
    problems, lines = judge(rig, tenant, op, "answer lost", expected)
    out.problems += problems
    out.evidence += lines
    return out


class _Ticks:
    """A worker's events, counted, with a way to wait for heartbeat ticks."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = defaultdict(float)
        self._changed = threading.Condition()

    def __call__(self, name: str, value: float) -> None:
        with self._changed:
            self.counts[name] += value
            self._changed.notify_all()

    def ticks(self) -> int:
        return int(self.counts["Heartbeats"] + self.counts["HeartbeatsSkippedNoProgress"])

    def wait_for_ticks(self, count: int, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.ticks() >= count, timeout_s)


def hang(rig: Rig) -> Outcome:
    """The handler hangs in its request to the target, with no progress: its lease must lapse
    (no renewal without progress), another worker takes over, and when the request finally goes
    through the fence still protects the target."""
    tenant, op = rig.tenant("hang"), "hang-op"
    out = Outcome(tenants=[tenant])
    rig.enqueue(tenant, op)
    ticks = _Ticks()
    seen: dict[str, object] = {}

    def stuck(_action: Action, _pending: Pending) -> None:
        start, renewed = ticks.ticks(), ticks.counts["Heartbeats"]
        seen["ticked"] = ticks.wait_for_ticks(start + HANG_TICKS, timeout_s=10)
        seen["renewals"] = int(ticks.counts["Heartbeats"] - renewed)
        rig.clock.advance(rig.lease_ms + PAST_LEASE_MS)
        if rig.target_class is D:
            rig.observer.sweep()
        else:
            seen["taken_over"] = rig.worker("rescuer", [tenant]).run_once()

    hook = rig.log.intercept(_first_run_request(tenant, op, 1), before=stuck)
    rig.worker("hangs", [tenant], heartbeat_interval_ms=HANG_TICK_MS, events=ticks).run_once()
    if not hook.fired:
        out.problems.append(_no_request("hang"))
        out.evidence += story(rig, tenant, op, "hang")
        return out
    renewals = int(seen.get("renewals", 0))  # type: ignore[call-overload]
    out.evidence.append(
        f"hang: fence 1 stuck for {HANG_TICKS} heartbeat ticks with no progress; lease renewed "
        f"{renewals} time(s) meanwhile (at most once, for progress made before it hung)"
        + ("" if seen.get("ticked") else "; the heartbeat thread ticked fewer times than asked")
    )
    if renewals > 1:
        out.problems.append(
            f"hang: the lease was renewed {renewals} times while the handler was stuck in its "
            "request to the target: something calls job.progress() without progress (a "
            "heartbeat that lies), so a stuck job never lapses; call it when the work advances"
        )
    if rig.target_class is not D and not seen.get("taken_over"):
        out.problems.append(
            "hang: no other worker could take the operation over after the lease should have lapsed"
        )
    expected = State.UNKNOWN if rig.target_class is D else State.SUCCEEDED
    problems, lines = judge(rig, tenant, op, "hang", expected)
    zombie = next((e for e in rig.executions(tenant, op) if e.fence == 1), None)
    out.problems += problems + _lost_ownership_problem(zombie, "hang")
    out.evidence += lines
    return out


def _same(sentence: str) -> Callable[[TargetClass], str]:
    return lambda _cls: sentence


CHECKS: tuple[Check, ...] = (
    Check(
        "stale-write",
        "pause after the claim, past the lease, before the write",
        stale_write,
        lambda cls: (
            "the paused holder's intent was refused and nothing was called twice; the sweeper "
            "parked the operation unknown"
            if cls is D
            else "the paused holder's late request was refused (or deduplicated), the new "
            "holder's side effect landed once"
        ),
    ),
    Check(
        "crash-after-effect",
        "crash after the side effect, before the completion",
        crash_after_effect,
        lambda cls: (
            "the requeued claim found the intent on record and parked unknown instead of calling "
            "again"
            if cls is D
            else "the next claim reconciled (done) instead of repeating the side effect"
        ),
    ),
    Check(
        "replay-conflict",
        "the same key twice, then with another payload",
        replay_conflict,
        _same("a repeat was a replay, another payload a conflict; the side effect ran once"),
    ),
    Check(
        "two-tenants",
        "two tenants with identical operation ids",
        two_tenants,
        _same("each tenant's operation had its own side effect; nothing crossed tenants"),
    ),
    Check(
        "lost-answers",
        "lost answers mid-claim and mid-complete",
        lost_answers,
        _same("both lost answers were recognized; one claim and one side effect each"),
    ),
    Check(
        "ambiguous-target",
        "the target's answer lost after the side effect",
        ambiguous_target,
        lambda cls: (
            "the ambiguous call was parked unknown and never repeated"
            if cls is D
            else "the next claim reconciled; the side effect landed once"
        ),
    ),
    Check(
        "hang",
        "a handler that hangs without progress",
        hang,
        lambda cls: (
            "the lease lapsed without progress, the sweeper parked the operation unknown, and "
            "the hung worker's intent was refused: it never called"
            if cls is D
            else "the lease lapsed without progress, another worker took over, and the hung "
            "request was refused or deduplicated (the fence still protected the target)"
        ),
    ),
)

CHECK_NAMES = tuple(check.name for check in CHECKS)


def check_named(name: str) -> Check:
    for check in CHECKS:
        if check.name == name:
            return check
    raise LookupError(f"no check named {name!r}; the checks are: {', '.join(CHECK_NAMES)}")
