"""The invariants the model check holds the engine to, one small function each.

Each safety invariant is checked on every explored transition: it sees the operation items before
and after the step (``before``, ``after``: by operation id, plain values), the actors' local states
after it (``local``) and what the step observed (``seen``), and returns a sentence when it is
broken. Liveness is a property of the explored graph, checked once the search finished
(:func:`leasefence_tools.modelcheck.explorer.dead_ends`).
"""

# Every safety invariant takes the same four arguments, used or not:
# ruff: noqa: ARG001

from __future__ import annotations

from typing import Any

from leasefence.model import State
from leasefence_tools.modelcheck.small_history import shown

TERMINAL = {State.SUCCEEDED.value, State.FAILED_TERMINAL.value, State.CANCELLED.value}
Ops = dict[str, dict[str, Any]]


def fences_only_rise(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """No step lowers an operation's fence or its attempt count (a requeue resets the budget,
    not the count of attempts made, unless it says so through ``max_attempts``)."""
    for op, item in after.items():
        old = before.get(op)
        if old is not None and item["fence"] < old["fence"]:
            return f"{op}: fence fell from {old['fence']} to {item['fence']}"
    return None


def only_the_holder_writes(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """A fenced engine write (heartbeat, intent, complete, fail, park) is accepted only from the
    fence that holds the claim; a class-B target write only from a fence at least the highest it
    has seen (the target's own rule) and never from a fence the engine did not grant."""
    if seen.accepted and "fenced" in seen.facts and "resent_complete" not in seen.facts:
        op, fence = seen.facts["fenced"]
        old = before.get(op)
        if seen.step.split()[0] in ("raise", "write", "call"):
            if old is None or fence > old["fence"]:
                return f"{op}: target write by fence {fence}, never granted"
        elif old is None or old["state"] != State.CLAIMED.value or old["fence"] != fence:
            held = None if old is None else (old["state"], old["fence"])
            return f"{op}: {seen.step} by fence {fence} accepted while {held}"
    if "b_write" in seen.facts:
        op, fence, highest = seen.facts["b_write"]
        if fence < highest:
            return f"{op}: class-B write by fence {fence} after fence {highest}"
    return None


def class_d_called_at_most_once(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """A class-D target is called at most once per operation, whatever the takeovers, sweeps,
    erasures and requeues."""
    for op, calls in local["calls_d"].items():
        if calls > 1:
            return f"{op}: class-D target called {calls} times"
    return None


def identity_keeps_its_payload(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """An enqueued identity never changes payload: the hash stays, and an enqueue of the same id
    with other bytes is refused."""
    if seen.facts.get("conflict_accepted"):
        return f"{seen.step}: another payload accepted under the same identity"
    for op, item in after.items():
        old = before.get(op)
        if old is not None and item["payload_hash"] != old["payload_hash"]:
            return f"{op}: payload hash changed"
    return None


def cancel_only_before_an_attempt(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """A cancel is accepted only for an operation no worker ever claimed (a cancel must never
    skip the reconcile an attempted operation needs)."""
    for op, item in after.items():
        old = before.get(op)
        if (
            old is not None
            and item["state"] == State.CANCELLED.value
            and old["state"] != State.CANCELLED.value
            and (old["attempts"] or old["fence"])
        ):
            return f"{op}: cancelled after {old['attempts']} attempt(s), fence {old['fence']}"
    return None


def approval_releases_only_approved_bytes(
    before: Ops, after: Ops, local: dict, seen: Any
) -> str | None:
    """An approval that releases an operation was given by someone other than its enqueuer, on
    bytes the approver read through leasefence (hash checked), never on a hash alone."""
    if seen.step.startswith("approve") and seen.accepted:
        op = seen.step.split()[1]
        if before.get(op, {}).get("state") == State.AWAITING_APPROVAL.value:
            if not seen.facts.get("approved_read"):
                return f"{op}: approved by hash, bytes nobody could read"
            if seen.facts.get("approved_by") == before[op].get("enqueued_by"):
                return f"{op}: approved by its own enqueuer"
    return None


def one_claim_per_token(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """A claim request sent again with its token (its answer lost) answers the claim it made:
    at no time do two operations hold claims under one worker's one token."""
    held: dict[tuple[str, str], str] = {}
    for op, item in after.items():
        if item["state"] == State.CLAIMED.value and "claim_token" in item:
            key = (item.get("lease_owner", ""), item["claim_token"])
            if key in held:
                return f"{held[key]} and {op} both claimed under token {key[1]}"
            held[key] = op
    return None


def retries_tell_the_truth(before: Ops, after: Ops, local: dict, seen: Any) -> str | None:
    """A completion sent again after its answer was lost is answered as done when the first one
    committed."""
    if "resent_complete" in seen.facts:
        first, again = seen.facts["resent_complete"]
        if first and not again:
            return "a completion that committed was refused when sent again"
    return None


def history_complete_and_in_order(
    before: Ops, after: Ops, local: dict, seen: Any, read: Any = None, ops: Any = None
) -> str | None:
    """The engine's history reader returns exactly the transitions the checker saw commit, in
    order (an erasure replaces the history with its own entry; past the bound, the first and
    the newest: :func:`~leasefence_tools.modelcheck.small_history.shown`); ``ops``: these
    operations only (None: every one)."""
    if read is None:
        return None
    for op, seen_to_commit in local["history"].items():
        if ops is not None and op not in ops:
            continue
        expected = shown(seen_to_commit)
        got = read(op)
        if got != expected:
            return f"{op}: history {got}, transitions seen {expected}"
    return None


SAFETY = (
    fences_only_rise,
    only_the_holder_writes,
    class_d_called_at_most_once,
    identity_keeps_its_payload,
    cancel_only_before_an_attempt,
    approval_releases_only_approved_bytes,
    one_claim_per_token,
    retries_tell_the_truth,
)


def is_end(ops: Ops) -> bool:
    """Liveness's goal: every operation in a final state."""
    return all(item["state"] in TERMINAL for item in ops.values())
