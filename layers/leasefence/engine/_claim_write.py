"""The claim's one conditional write (:func:`claim_write`), built from the snapshot a claimer read:
pinned to its fence and attempt counters, the lease computed inside the write, the due entry
moved to the lease's expiry (or the sweep entry filed)."""

from __future__ import annotations

from leasefence import history
from leasefence.engine import _expr as x
from leasefence.engine import _rules as rules
from leasefence.engine._expr import Write
from leasefence.limits import DEFAULT_LEASE_MS
from leasefence.model import State, Transition
from leasefence.schema import DUE_PK, DUE_SK, SWEEP_PK, SWEEP_SK, OperationItem


def claim_write(
    snapshot: OperationItem,
    now: int,
    worker_id: str,
    lease_ms: int | None,
    types: tuple[str, ...] | None,
    claim_token: str,
    sweep_pk: str,
    fence_floor: int,
) -> Write:
    """The claim's conditional update at time ``now``, pinned to the snapshot's counters.

    ``lease_ms`` None: the item's ``lease_default_ms`` (its job type's default), else
    :data:`~leasefence.limits.DEFAULT_LEASE_MS`, computed inside the write. A lease asked for is
    refused above the item's ``lease_max_ms`` (the caller retries with that maximum)."""
    fence, attempts, max_attempts = (
        int(snapshot["fence"]),
        int(snapshot["attempts"]),
        int(snapshot["max_attempts"]),
    )
    expr = x.Expr(x.STATE_FENCE, x.TRANSITION_NAMES, x.ACTOR, {"#due": DUE_SK})
    # Pinned to the snapshot's fence (the condition).
    new_fence = rules.claim_fence(fence, fence_floor)
    expr.history(
        history.compact_entry(
            Transition.CLAIM, now, actor=worker_id, fence=new_fence, attempts=attempts + 1
        )
    )
    expr.value(
        {
            ":tr": Transition.CLAIM.value,
            ":one": 1,
            ":f": fence,
            ":f1": new_fence,
            ":a": attempts,
            ":a1": attempts + 1,
            ":m": max_attempts,
            ":queued": State.QUEUED.value,
            ":claimed": State.CLAIMED.value,
            ":now": now,
            ":w": worker_id,
            ":tok": claim_token,
        }
    )
    # Nobody claimed it since it was read, and it is claimable now: queued and due, or its
    # holder's lease lapsed (a takeover).
    condition = f"{x.FENCE_UNCHANGED} AND {x.COUNTERS_UNCHANGED} AND ({x.QUEUED_AND_DUE} OR {x.LEASE_LAPSED})"
    # Every loop of an operation passes a claim: its history must have room (a refusal for that
    # compacts it and claims again), so the list stays bounded without the publisher.
    condition += f" AND {expr.history_room()}"
    if lease_ms is None:
        expr.values[":lease"] = DEFAULT_LEASE_MS
        # Every operand is read from the item as it was before this write.
        lease = "if_not_exists(lease_default_ms, :lease)"
        expires = f":now + {lease}"
    else:
        expr.values[":lease"] = lease_ms
        lease, expires = ":lease", ":now + :lease"
        condition += f" AND {x.LEASE_ALLOWED}"
    if types:
        of_types, type_values = x.job_type_in(types)
        condition += f" AND {of_types}"
        expr.value(type_values)
    expr.set(
        "claimed_from = #state",
        "#state = :claimed",
        "#fence = :f1",
        "attempts = :a1",
        "lease_owner = :w",
        f"lease_expires_at = {expires}",
        f"lease_ms = {lease}",
        "claimed_at = :now",
        "claim_token = :tok",
        "updated_at = :now",
        "#tr = :tr",
        "#actor = :w",
    )
    if attempts + 1 >= max_attempts:
        # The final attempt leaves the claim index for the sweeper's index: if this lease
        # lapses, the operation is parked as unknown, never claimed again.
        expr.name({"#dpk": DUE_PK, "#spk": SWEEP_PK, "#sat": SWEEP_SK})
        expr.value({":spk": sweep_pk})
        expr.set("#spk = :spk", f"#sat = {expires}").remove("#dpk", "#due")
    else:
        expr.set(f"#due = {expires}")
    return expr.add("#seq :one").write(condition)
