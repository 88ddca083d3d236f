"""Protocol bugs fixed before, re-introduced one at a time (a monkeypatch of the engine that
reverts the fix), each with the smallest bound at which the model check finds it.

A mutation is a context manager: inside it the engine has the bug again. The tests and ``python -m
leasefence_tools.modelcheck --mutations`` run each one at its bound and expect a violation.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from leasefence import history
from leasefence.engine import _claim, _enqueue, _expr, _marker, _payload_items, _rules
from leasefence.model import Claim
from leasefence.worker.http_backend import HttpBackend
from leasefence_tools.modelcheck.protocol import Bound


@contextlib.contextmanager
def _patched(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def cancel_after_attempt() -> contextlib.AbstractContextManager[None]:
    """Issue 21 case 5: the cancel's condition checks the state only, not that no attempt was
    made, so an operation queued again after a failed attempt can be cancelled."""
    return _patched(_expr, "NEVER_ATTEMPTED", ":zero = :zero AND attribute_exists(#fence)")


def erasure_forgets_intent() -> contextlib.AbstractContextManager[None]:
    """Issue 21 case 3: erasure removes a class-D intent; after a requeue the reconcile reads
    "no intent" as "nothing was sent" and the target is called a second time."""
    return _patched(_rules, "erased_intent", lambda _item: None)


def approval_by_reference() -> contextlib.AbstractContextManager[None]:
    """Issue 21 case 6: an operation that needs approval is accepted with a payload by
    reference, so the approver approves a hash whose bytes nobody could read."""
    original = _enqueue.Enqueuer.enqueue

    def enqueue(self: Any, *args: Any) -> Any:
        args_list = list(args)
        # (tenant, op, type, hash, ref, attempts, class, inline, actor, admission, approval, ...)
        if args_list[10] and args_list[4] is not None:
            args_list[7] = True  # the check sees an "inline" payload: the one it wanted
        return original(self, *args_list)

    return _patched(_enqueue.Enqueuer, "enqueue", enqueue)


def claim_token_without_marker() -> contextlib.AbstractContextManager[None]:
    """Issue 21 case 8: a claim-next request sent again with its token (the answer of the first
    was lost) does not find what the first one claimed, and claims another operation: two
    claims under one token, the first held by nobody who knows."""

    class NoMarker(_marker.Marker):
        def read(self) -> None:
            return None

        def point(self, operation_id: str, fence: int) -> None:
            pass

        def seal(self) -> None:
            pass

    return _patched(_claim, "Marker", NoMarker)


@contextlib.contextmanager
def unconditional_marker() -> Iterator[None]:
    """Issue 33: the marker is written unconditionally before the claim write, and a resend that
    cannot confirm the operation it names (still queued: the first request has not written its
    claim yet) claims another and re-points the marker; the first then claims the one it named."""

    class Unconditional(_marker.Marker):
        def point(self, operation_id: str, fence: int) -> None:
            self.ctx.store.update(
                self.key,
                "SET claimed_op = :op, claimed_fence = :cf",
                _expr.NOT_AN_OPERATION,
                dict(_expr.STATE),
                {":op": operation_id, ":cf": fence},
                returns="NONE",
            )
            self.pair, self.sole = (operation_id, fence), True

    def resume(self: Any, marker: Any, _lease_ms: Any, types: Any) -> tuple[bool, Any]:
        assert marker.pair is not None
        key = self.ctx.key(marker.tenant_id, marker.pair[0])
        found = self.confirm_claim(key, marker.worker_id, marker.token, types)
        return (True, found) if isinstance(found, Claim) else (False, None)

    with _patched(_claim, "Marker", Unconditional), _patched(_claim.Claimer, "resume", resume):
        yield


def erasure_deletes_the_marker() -> contextlib.AbstractContextManager[None]:
    """A claim marker kept in a payload item (``after``) deleted with the payload by an erasure
    of that operation: the resend finds no marker and claims again."""

    def delete(ctx: Any, key: Any) -> None:
        ctx.store.delete_plain(key)

    return _patched(_payload_items, "_delete_unless_marked", delete)


def no_inline_compaction() -> contextlib.AbstractContextManager[None]:
    """Issue 32 (6b2f83b): a claim or a requeue refused while the history has no room waits
    for the publisher to compact it (a 503 to retry) instead of compacting it itself; with no
    publisher running, or its write failing, the operation is refused forever."""
    return _patched(history, "make_room", lambda _store, _item: False)


def no_room_for_size() -> contextlib.AbstractContextManager[None]:
    """A write refused for the item's size with no transition out: the engine's answer to an
    update refused for size (compact the history, send the update again) removed, so the
    holder's completion is refused, and so is every write after it, forever."""
    return _patched(history, "make_room_at", lambda _store, _key: False)


def http_claim_from_request() -> contextlib.AbstractContextManager[None]:
    """Issue 21 (a cut lease with a class-B target over HTTP): the HTTP worker backend builds
    its claim from the lease it asked for, not the one granted, and states no claim time, so a
    class-B target derives the claim time as ``lease_expires_at - lease asked``: earlier than
    the claim when a job type's maximum lease cut it. Once pruning forgets that holder's entry,
    the target's horizon is older than a stalled predecessor's claim and lets its write in."""
    original = HttpBackend._claim

    def claim(self: Any, answer: Any, worker_id: str, lease_ms: int) -> Any:
        old_answer = dataclasses.replace(answer, lease_ms=None, lease_seconds=None, claimed_at=None)
        return original(self, old_answer, worker_id, lease_ms)

    return _patched(HttpBackend, "_claim", claim)


def _without_faults(**bound: Any) -> Bound:
    """A bound with no clock jump, lost answer, requeue, erase or cancel unless ``bound`` says."""
    quiet: dict[str, Any] = {
        "clock_jumps": 0,
        "lost_answers": 0,
        "requeues": 0,
        "erase": False,
        "cancel": False,
    }
    return Bound(**{**quiet, **bound})


@dataclass(frozen=True)
class Mutation:
    name: str
    finding: str
    apply: Callable[[], contextlib.AbstractContextManager[None]]
    bound: Bound
    #: The safety invariant that finds it, or ``liveness`` (a state with no way out).
    invariant: str


#: One worker, two class-B operations, one lost answer.
_CLAIM_TOKEN_BOUND = _without_faults(kinds=("b", "b"), attempts=1, lost_answers=1)

MUTATIONS = (
    Mutation(
        "cancel_after_attempt",
        "cancel after an attempt",
        cancel_after_attempt,
        Bound(kinds=("b",), attempts=2, clock_jumps=0, lost_answers=0, requeues=0, erase=False),
        "cancel_only_before_an_attempt",
    ),
    Mutation(
        "erasure_forgets_intent",
        "erasure then requeue of a class-D operation (a second call)",
        erasure_forgets_intent,
        Bound(kinds=("d",), clock_jumps=1, lost_answers=0, requeues=1, cancel=False),
        "class_d_called_at_most_once",
    ),
    Mutation(
        "approval_by_reference",
        "an approval of a payload nobody saw",
        approval_by_reference,
        _without_faults(kinds=("r",)),
        "approval_releases_only_approved_bytes",
    ),
    Mutation(
        "claim_token_without_marker",
        "a claim token resent after a lost answer giving two claims",
        claim_token_without_marker,
        _CLAIM_TOKEN_BOUND,
        "one_claim_per_token",
    ),
    Mutation(
        "unconditional_marker",
        "a claim-next resent while it runs giving two claims",
        unconditional_marker,
        # The same, the lost answer replaced by a claim-next resent while it runs.
        dataclasses.replace(_CLAIM_TOKEN_BOUND, lost_answers=0, inflight=1),
        "one_claim_per_token",
    ),
    Mutation(
        "erasure_deletes_the_marker",
        "a marker kept with a payload erased before the resend, giving two claims",
        erasure_deletes_the_marker,
        # The claim token's bound, its claims naming o1 (after), and one erasure.
        dataclasses.replace(_CLAIM_TOKEN_BOUND, after=True, erase=True, erases=1),
        # The resend finds no marker and answers none: the claim its lost answer made is held
        # by nobody who knows, and with no clock jump its lease never lapses.
        "liveness",
    ),
    Mutation(
        "no_inline_compaction",
        "a claim or requeue refused 503 forever while the history has no room",
        no_inline_compaction,
        _without_faults(kinds=("b",), attempts=3, history_room=5),
        "liveness",
    ),
    Mutation(
        "no_room_for_size",
        "a write refused for size with no transition out",
        no_room_for_size,
        _without_faults(kinds=("b",), attempts=3, history_room=4, size_limits=1),
        "liveness",
    ),
)

#: Mutations whose bound is too large for ``make test`` (a few thousand states, minutes of CPU):
#: ``python -m leasefence_tools.modelcheck --mutations`` runs them after the others; a test
#: replays the counterexample.
LARGE_MUTATIONS = (
    Mutation(
        "http_claim_from_request",
        "a cut lease with a class-B target over HTTP",
        http_claim_from_request,
        _without_faults(kinds=("f", "f"), workers=2, attempts=2, clock_jumps=1),
        "only_the_holder_writes",
    ),
)
