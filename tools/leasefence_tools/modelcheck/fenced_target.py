"""Operations of kind ``f``: class B with the real :class:`~leasefence.targets.FencedTable` as the
target, and workers whose claims come over HTTP.

Every ``f`` operation writes one target item (in the operations table, under a key of its own
that the engine never reads), and the target keeps at most two fence entries per item
(``max_entries=2``), so two operations writing it prune each other's entries and the item's
*horizon* decides (the claim time a stale holder must be younger than). The job type ``cut``
allows a lease of at most :data:`LEASE_MS` and the workers after the first ask for three times
that, so their leases are cut. A worker's claim is what the HTTP worker backend builds from the
API's claim answer (:func:`worker_claim`: the engine's claim shaped by the API's own resource
code, through JSON, read by the client's resource class and
:class:`~leasefence.worker.http_backend.HttpBackend`), and that is the claim the target gets: a
backend that takes the lease it asked for instead of the one granted states a claim time too
early, which is the finding "a cut lease with a class-B target over HTTP".
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from leasefence import errors, resources
from leasefence.clock import ManualClock
from leasefence.model import Claim, TargetClass
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker.handler import Job, LostOwnership
from leasefence.worker.http_backend import HttpBackend

if TYPE_CHECKING:
    from leasefence_tools.modelcheck.world import World

KIND = "f"
JOB_TYPE = "cut"
#: The target item every ``f`` operation writes (a partition no tenant uses).
TARGET_KEY = {"tenant_id": "\x00fenced-target", "operation_id": "item"}
MAX_ENTRIES = 2


def catalogue_entry(attempts: int, lease_ms: int) -> dict[str, Any]:
    """The job type ``cut``: at most ``lease_ms``, whatever a worker asks for."""
    seconds = lease_ms // 1000
    return {
        "target_class": "B",
        "max_attempts": attempts,
        "lease_seconds": seconds,
        "max_lease_seconds": seconds,
    }


def worker_claim(claim: Claim, worker: str, asked_ms: int) -> list[int | None]:
    """What the HTTP worker's claim says of its lease (``[lease_expires_at, lease_ms,
    claimed_at]``): the engine's grant as the API answers it, read back by the client and the
    HTTP backend, which was asked for ``asked_ms``."""
    # The API's claim resource (as ``leasefence.api`` shapes its answer), through JSON.
    shaped = resources.dump(resources.Claim, claim, lease_seconds=claim.lease_ms // 1000)
    answer = json.loads(json.dumps(shaped))
    backend = HttpBackend(None, claim.tenant_id)  # type: ignore[arg-type]  # no request made
    built = backend._claim(resources.Claim.from_json(answer), worker, asked_ms)
    return [built.lease_expires_at, built.lease_ms, built.claimed_at]


def target_write(
    world: World, now: int, tenant: str, op: str, fence: int, seen_claim: list, write: bool
) -> bool:
    """The holder's raise (``write`` False) or write through the real target, with the claim
    the worker holds; whether the target accepted it."""
    expires, lease_ms, claimed_at = seen_claim
    claim = Claim(
        tenant_id=tenant,
        operation_id=op,
        job_type=JOB_TYPE,
        fence=fence,
        attempts=fence,
        lease_expires_at=expires,
        lease_ms=lease_ms,
        payload_ref=None,
        payload_hash="",
        target_class=TargetClass.B,
        reconcile_required=False,
        checkpoint=None,
        takeover=False,
        worker_id="",
        claimed_at=claimed_at,
    )
    job = Job(claim, backend=None, events=lambda _name, _value: None)  # type: ignore[arg-type]
    target = FencedTable(
        world.client, world.spec.table_name, clock=ManualClock(now), max_entries=MAX_ENTRIES
    )
    try:
        if write:
            target.write(job, TARGET_KEY, {"by": f"{op}.{fence}"})
        else:
            target.raise_fence(job, TARGET_KEY)
    except (LostOwnership, errors.LeaseFenceError):
        return False
    return True
