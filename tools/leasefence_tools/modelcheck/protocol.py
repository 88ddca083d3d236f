"""The actors of the protocol and their steps, each one real engine call (or a target's answer).

A configuration (:class:`Bound`) names the operations (their kinds), the workers and the fault
budgets. The actors' local state is plain JSON (:func:`initial_local`) so that it can be hashed
with the table. :func:`enabled` lists the steps an actor can take in a state; :func:`apply` runs
one on a fresh engine and returns what it observed (:class:`Observed`) for the invariants.

Kinds of operation:

- ``b``: class B, ``attempts`` attempts. The target is a dict keyed by operation holding the
  highest fence seen (a new holder raises it right after its claim, then writes).
- ``d``: class D (one attempt): record the intent under the fence, call once (a call counter),
  complete; a claim that finds an intent parks the operation as ``unknown`` (the reconcile).
- ``g``: needs approval, its payload kept by leasefence (inline), enqueued by ``producer``.
- ``r``: needs approval, its payload by reference (the enqueue must refuse it: nobody could read
  what they approve).

Faults and other actors: a claim or a completion whose answer is lost (the call ran; the worker
learns nothing and sends it again with the same token), a worker stalled past its lease (it is
never forced to act, and the clock jumps past a lease), the sweeper, an operator (resolve,
cancel, erase), an approver (approve what it read, reject) and a producer sending an identity
again with another payload; with ``inflight``, a claim-next whose answer will be lost, advanced a
store request per step (:mod:`~leasefence_tools.modelcheck.inflight`) while its worker resends it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from leasefence import errors, history
from leasefence.model import Claim, State, TargetClass
from leasefence_tools.modelcheck import fenced_target
from leasefence_tools.modelcheck.inflight import advance, stepping_client
from leasefence_tools.modelcheck.size_limit import at_limit_client

if TYPE_CHECKING:
    from leasefence_tools.modelcheck.world import World

TENANT = "t"
LEASE_MS = 10_000
PRODUCER = "producer"
APPROVER = "approver"


@dataclass(frozen=True)
class Bound:
    """The configuration explored: every interleaving of these actors and budgets."""

    kinds: tuple[str, ...] = ("b",)
    workers: int = 1
    attempts: int = 2
    clock_jumps: int = 1
    lost_answers: int = 1
    requeues: int = 1
    erase: bool = True
    cancel: bool = True
    #: Claim-next requests resent while the first one still runs (advanced a request at a time).
    inflight: int = 0
    #: The engine's history bounds scaled down to this room (:mod:`.small_history`); None: as is.
    history_room: int | None = None
    #: Items put at the store's size limit (:mod:`.size_limit`), at most one per operation.
    size_limits: int = 0
    #: Erasures in all (with ``erase``); None: each operation can be erased once.
    erases: int | None = None
    #: Requeues in all (each operation still at most ``requeues``); None: ``requeues`` each.
    total_requeues: int | None = None
    #: Every claim-next names the first operation as ``after``: its token's marker lives in
    #: that operation's payload item (:mod:`leasefence.engine._marker`).
    after: bool = False

    def ops(self) -> list[tuple[str, str]]:
        return [(f"o{index + 1}", kind) for index, kind in enumerate(self.kinds)]

    def describe(self) -> str:
        return (
            f"operations {''.join(self.kinds)}, {self.workers} worker(s), {self.attempts} attempts,"
            f" {self.clock_jumps} clock jump(s), {self.lost_answers} lost answer(s),"
            f" {self.requeues} requeue(s) per operation"
            + (f" ({self.total_requeues} in all)" if self.total_requeues is not None else "")
            + (", erase" if self.erase else "")
            + (f" ({self.erases} in all)" if self.erase and self.erases is not None else "")
            + (", cancel" if self.cancel else "")
            + (f", {self.inflight} claim-next resent while it runs" if self.inflight else "")
            + (f", history room {self.history_room}" if self.history_room else "")
            + (f", {self.size_limits} item(s) put at the size limit" if self.size_limits else "")
            + (", claims naming o1 (after)" if self.after else "")
        )


def payload_of(op: str, other: bool = False) -> tuple[bytes, str]:
    body = json.dumps({"op": op, "other": other}, separators=(",", ":"), sort_keys=True).encode()
    return body, "sha256:" + hashlib.sha256(body).hexdigest()


def asked_lease(bound: Bound, index: int) -> int:
    """The lease worker ``index`` (from 0) asks for: with operations of kind ``f``, the workers
    after the first ask for more than the job type allows (their leases are cut)."""
    return LEASE_MS if index == 0 or fenced_target.KIND not in bound.kinds else 3 * LEASE_MS


def initial_local(bound: Bound) -> dict[str, Any]:
    ops = [op for op, _ in bound.ops()]
    return {
        "jumps": bound.clock_jumps,
        "lost": bound.lost_answers,
        "requeues": dict.fromkeys(ops, bound.requeues),
        "erased": [],
        "workers": {
            f"w{index + 1}": {"n": 0, "hold": None, "asks": asked_lease(bound, index)}
            for index in range(bound.workers)
        },
        "fenced": [op for op, kind in bound.ops() if kind == fenced_target.KIND],
        "target_b": {},
        "calls_d": {},
        "history": {},
        "inflight_budget": bound.inflight,
        "inflight": {},
        "size_limits": bound.size_limits,
        "at_limit": [],
        "after": ops[0] if bound.after else None,
    }


def enqueue_all(engine: Any, bound: Bound, local: dict[str, Any]) -> None:
    """The producer's enqueues (step zero): refused ones leave their operation absent."""
    if fenced_target.KIND in bound.kinds:
        entry = fenced_target.catalogue_entry(bound.attempts, LEASE_MS)
        engine.catalogue.put(TENANT, fenced_target.JOB_TYPE, entry)
    for op, kind in bound.ops():
        body, digest = payload_of(op)
        arguments: dict[str, Any] = {"actor": PRODUCER}
        job_type = fenced_target.JOB_TYPE if kind == fenced_target.KIND else "job"
        if kind in ("b", fenced_target.KIND):
            arguments.update(target_class=TargetClass.B, max_attempts=bound.attempts)
        elif kind == "d":
            arguments.update(target_class=TargetClass.D, max_attempts=1)
        else:
            arguments.update(target_class=TargetClass.C, max_attempts=1, approval_required=True)
        if kind == "r":
            arguments.update(payload_ref=f"s3://theirs/{op}")
        else:
            arguments.update(payload_json=body, payload_inline=True)
        with contextlib.suppress(errors.LeaseFenceError):
            engine.enqueue(TENANT, op, job_type, digest, **arguments)
            local["history"][op] = ["enqueue"]


@dataclass
class Observed:
    """What one step saw: its name, whether the engine accepted it, and facts for the
    invariants (a class-B write accepted, a class-D call made, an approval's bytes...)."""

    step: str
    accepted: bool = False
    facts: dict[str, Any] = field(default_factory=dict)


def ops_view(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The operation items by operation id, as plain values (what the invariants read)."""
    out = {}
    for item in items:
        if "tenant_id" in item and "operation_id" in item and "state" in item:
            out[item["operation_id"]["S"]] = {k: _plain(v) for k, v in item.items()}
    return out


def _plain(value: dict[str, Any]) -> Any:
    ((kind, inner),) = value.items()
    if kind == "N":
        return int(inner) if "." not in inner else float(inner)
    if kind == "M":
        return {k: _plain(v) for k, v in inner.items()}
    if kind == "L":
        return [_plain(v) for v in inner]
    return inner


def enabled(bound: Bound, local: dict[str, Any], ops: dict[str, dict[str, Any]]) -> list[tuple]:
    """Every step some actor can take now (a step refused by the engine is still a step)."""
    kinds = dict(bound.ops())
    steps: list[tuple] = []
    requeues_left = requeues_in_all(bound, local)
    may_erase = bound.erase and (bound.erases is None or len(local["erased"]) < bound.erases)
    for worker, wstate in local["workers"].items():
        hold = wstate["hold"]
        if worker in local["inflight"]:
            steps.append(("advance", worker))
        if hold is None:
            if local["inflight_budget"] and worker not in local["inflight"] and ops:
                steps.append(("claim_next_inflight", worker))
            for op in ops:
                steps.append(("claim", worker, op, False))
                if local["lost"]:
                    steps.append(("claim", worker, op, True))
            if local["lost"] and ops:
                steps.append(("claim_next", worker, None, True))
        elif "resend" in hold:
            steps.append(("resend", worker))
        else:
            kind, stage = kinds[hold["op"]], hold["stage"]
            if kind in ("b", fenced_target.KIND):
                nxt = {"claimed": "raise", "raised": "write", "written": "complete"}[stage]
                steps.append((nxt, worker))
                if stage == "claimed":
                    steps.append(("fail", worker))
                if stage == "raised" and not hold.get("renewed"):
                    steps.append(("heartbeat", worker))
            elif kind == "d":
                if stage == "claimed":
                    steps.append(("park" if hold.get("intent") else "intent", worker))
                else:
                    steps.append(
                        {"intent": ("call", worker), "called": ("complete", worker)}[stage]
                    )
            else:
                steps.append(("complete", worker))
            if steps[-1][0] == "complete" and local["lost"]:
                steps.append(("complete_lost", worker))
    steps.append(("sweep",))
    if local["jumps"]:
        steps.append(("jump",))
    for op, item in ops.items():
        state = item["state"]
        if state in (State.UNKNOWN, State.QUARANTINED):
            steps.append(("resolve", op, "succeeded"))
            if local["requeues"][op] and requeues_left:
                steps.append(("resolve", op, "requeue"))
        if bound.cancel and state in (State.QUEUED, State.AWAITING_APPROVAL):
            steps.append(("cancel", op))
        if (
            may_erase
            and op not in local["erased"]
            and state != State.CLAIMED
            and kinds[op] not in ("g", "r")
        ):
            steps.append(("erase", op))
        if state == State.AWAITING_APPROVAL:
            steps.extend([("approve", op, APPROVER), ("approve", op, PRODUCER), ("reject", op)])
        if state in (State.SUCCEEDED, State.FAILED_TERMINAL, State.CANCELLED):
            steps.append(("conflict", op))  # an ended identity, its payload purged or erased
        if local["size_limits"] and op not in local["at_limit"] and history.needs_room(item):
            steps.append(("limit", op))  # its history as long as an item at the limit holds
    return steps


def requeues_in_all(bound: Bound, local: dict[str, Any]) -> bool:
    """Whether the bound's requeues in all (:attr:`Bound.total_requeues`) leave one more."""
    if bound.total_requeues is None:
        return True
    used = sum(bound.requeues - left for left in local["requeues"].values())
    return used < bound.total_requeues


def step_name(step: tuple) -> str:
    """A step as a counterexample shows it: ``claim w1 o1``, ``claim_next w1 (answer lost)``."""
    if step[0] in ("claim", "claim_next"):
        name = " ".join(str(part) for part in step[:3] if part is not None)
        return name + (" (answer lost)" if step[3] else "")
    if step[0] == "complete_lost":
        return f"complete {step[1]} (answer lost)"
    if step[0] == "claim_next_inflight":
        return f"claim_next {step[1]} (answer to be lost, resent while it runs)"
    if step[0] == "advance":
        return f"claim_next {step[1]} in flight"
    return " ".join(str(part) for part in step)


def _hold(local: dict[str, Any], worker: str, claim: Claim) -> dict[str, Any]:
    hold = {
        "op": claim.operation_id,
        "fence": claim.fence,
        "stage": "claimed",
        "intent": claim.intent is not None,
    }
    if claim.operation_id in local["fenced"]:
        asked = local["workers"][worker]["asks"]
        hold["claim"] = fenced_target.worker_claim(claim, worker, asked)
    return hold


def expected(refused: errors.LeaseFenceError) -> None:
    """A refusal the protocol allows (the step is refused, the actor moves on); an internal error
    (status 500: the store's untranslated refusal, a misconfigured store) is the engine's bug or
    the harness's, never a refusal: it stops the search."""
    if refused.status >= 500 and not refused.retryable:
        raise refused


def _claim(
    engine: Any, local: dict[str, Any], kind: str, worker: str, op: str | None, token: str
) -> Claim | None:
    asked = local["workers"][worker]["asks"]
    try:
        if kind == "claim_next":
            after = local.get("after")
            return engine.claim_next(TENANT, worker, asked, claim_token=token, after=after)
        return engine.claim(TENANT, op, worker, asked, claim_token=token)
    except errors.LeaseFenceError as refused:
        expected(refused)
        return None


def apply(world: World, local: dict[str, Any], step: tuple, now: int) -> Observed:
    """Run ``step`` (mutating ``local``); the caller restored the state before."""
    name = step[0]
    seen = Observed(step_name(step))
    if name in ("claim_next_inflight", "advance"):
        return _inflight(world, local, step, now, seen)
    at_limit = local["at_limit"]
    engine = world.engine(now, client=at_limit_client(world, at_limit) if at_limit else None)
    if name in ("claim", "claim_next"):
        _, worker, op, lost = step
        wstate = local["workers"][worker]
        token = f"{worker}.{wstate['n']}"
        claim = _claim(engine, local, name, worker, op, token)
        if claim is not None or name == "claim_next":
            wstate["n"] += 1
        seen.accepted = claim is not None
        if lost:
            local["lost"] -= 1
            wstate["hold"] = {"resend": name, "op": op, "token": token, "got": _brief(claim)}
        elif claim is not None:
            wstate["hold"] = _hold(local, worker, claim)
            seen.facts["claimed"] = (worker, claim.operation_id, claim.fence, token)
        return seen
    if name == "resend":
        worker = step[1]
        hold = local["workers"][worker]["hold"]
        if hold["resend"] == "complete":
            return _complete(engine, local, worker, hold, seen, resent=True)
        claim = _claim(engine, local, hold["resend"], worker, hold["op"], hold["token"])
        seen.accepted = claim is not None
        seen.facts["resent_claim"] = (hold["got"], _brief(claim))
        local["workers"][worker]["hold"] = None if claim is None else _hold(local, worker, claim)
        if claim is not None:
            seen.facts["claimed"] = (worker, claim.operation_id, claim.fence, hold["token"])
        return seen
    if name == "sweep":
        engine.sweep(limit=10)
        return seen
    if name == "limit":
        local["size_limits"] -= 1
        at_limit.append(step[1])
        return seen
    if name == "jump":
        local["jumps"] -= 1
        local["now"] = now + LEASE_MS + 1
        return seen
    if name in ("resolve", "cancel", "erase", "approve", "reject", "conflict"):
        return _operator(engine, local, step, seen)
    worker = step[1]
    hold = local["workers"][worker]["hold"]
    op, fence = hold["op"], hold["fence"]
    seen.facts["fenced"] = (op, fence)
    try:
        if name in {"raise", "write"} and op in local["fenced"]:
            highest = local["target_b"].get(op, 0)
            seen.accepted = fenced_target.target_write(
                world, now, TENANT, op, fence, hold["claim"], write=name == "write"
            )
            if seen.accepted:
                local["target_b"][op] = max(fence, highest)
                hold["stage"] = "raised" if name == "raise" else "written"
                seen.facts["b_write"] = (op, fence, highest)
            else:
                local["workers"][worker]["hold"] = None
            return seen
        if name in {"raise", "write"}:
            highest = local["target_b"].get(op, 0)
            seen.accepted = fence >= highest
            if seen.accepted:
                local["target_b"][op] = fence
                hold["stage"] = "raised" if name == "raise" else "written"
                if name == "write":
                    seen.facts["b_write"] = (op, fence, highest)
            else:
                local["workers"][worker]["hold"] = None
            return seen
        if name == "call":
            local["calls_d"][op] = local["calls_d"].get(op, 0) + 1
            hold["stage"] = "called"
            seen.accepted = True
            return seen
        if name == "complete":
            return _complete(engine, local, worker, hold, seen)
        if name == "complete_lost":
            local["lost"] -= 1
            _complete(engine, local, worker, hold, seen)
            seen.facts["first_accepted"] = seen.accepted
            local["workers"][worker]["hold"] = {
                "resend": "complete",
                "op": op,
                "fence": fence,
                "first": seen.accepted,
            }
            return seen
        if name == "fail":
            engine.fail(TENANT, op, fence, True, "retry", retry_after_ms=0)
            local["workers"][worker]["hold"] = None
        elif name == "park":
            engine.park_unknown(TENANT, op, fence, "an intent was recorded")
            local["workers"][worker]["hold"] = None
        elif name == "intent":
            engine.heartbeat(TENANT, op, fence, worker, LEASE_MS, intent="call")
            hold["stage"] = "intent"
        elif name == "heartbeat":
            engine.heartbeat(TENANT, op, fence, worker, LEASE_MS)
            hold["renewed"] = True
        seen.accepted = True
    except errors.LeaseFenceError as refused:
        expected(refused)
        local["workers"][worker]["hold"] = None  # lost ownership: stop
    return seen


def _complete(
    engine: Any, local: dict[str, Any], worker: str, hold: dict, seen: Observed, resent=False
) -> Observed:
    op, fence = hold["op"], hold["fence"]
    seen.facts["fenced"] = (op, fence)
    try:
        engine.complete(TENANT, op, fence, "ok")
        seen.accepted = True
    except errors.LeaseFenceError as refused:
        expected(refused)
        seen.accepted = False
    if resent:
        seen.facts["resent_complete"] = (hold["first"], seen.accepted)
    local["workers"][worker]["hold"] = None
    return seen


def _operator(engine: Any, local: dict[str, Any], step: tuple, seen: Observed) -> Observed:
    name, op = step[0], step[1]
    try:
        if name == "resolve":
            if step[2] == "requeue":
                local["requeues"][op] -= 1
            token = f"{op}.r{local['requeues'][op]}.{step[2]}"
            engine.resolve(TENANT, op, step[2], actor="operator", request_token=token)
        elif name == "cancel":
            engine.cancel(TENANT, op, actor=PRODUCER)
        elif name == "erase":
            local["erased"].append(op)
            engine.erase(TENANT, op, actor="operator")
        elif name == "reject":
            engine.reject(TENANT, op, APPROVER, "no")
        elif name == "conflict":
            body, digest = payload_of(op, other=True)
            result = engine.enqueue(
                TENANT, op, "job", digest, payload_json=body, payload_inline=True, actor=PRODUCER
            )
            seen.facts["conflict_accepted"] = result.created
        elif name == "approve":
            # The approver approves the bytes it read; what it cannot read it approves by the
            # hash the request names (bytes nobody saw: the invariant flags it if accepted).
            try:
                read = engine.payload(engine.get(TENANT, op))
                digest = "sha256:" + hashlib.sha256(read).hexdigest()
                seen.facts["approved_read"] = True
            except errors.LeaseFenceError as refused:
                expected(refused)
                digest = engine.get(TENANT, op).payload_hash
                seen.facts["approved_read"] = False
            engine.approve(TENANT, op, digest, step[2])
            seen.facts["approved_by"] = step[2]
        seen.accepted = True
    except errors.LeaseFenceError as refused:
        expected(refused)
        seen.accepted = False
    return seen


def _inflight(
    world: World, local: dict[str, Any], step: tuple, now: int, seen: Observed
) -> Observed:
    """A claim-next whose answer will be lost, advanced one store request per step; the worker
    resends it (the ``resend`` step, a whole call) while it runs."""
    worker = step[1]
    if step[0] == "claim_next_inflight":
        wstate = local["workers"][worker]
        token = f"{worker}.{wstate['n']}"
        wstate["n"] += 1
        local["inflight_budget"] -= 1
        local["inflight"][worker] = {"token": token, "now": now, "answers": []}
        wstate["hold"] = {"resend": "claim_next", "op": None, "token": token, "got": None}
    record = local["inflight"][worker]
    engine = world.engine(record["now"], client=stepping_client(world.client, record))
    done, claim = advance(
        lambda: _claim(engine, local, "claim_next", worker, None, record["token"])
    )
    if done:
        del local["inflight"][worker]
        seen.accepted = claim is not None
        seen.step += ": returns, its answer lost"
    else:
        seen.step += f": sends {record['answers'][-1][0]}"
    return seen


def _brief(claim: Claim | None) -> list[Any] | None:
    return None if claim is None else [claim.operation_id, claim.fence]
