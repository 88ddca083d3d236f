"""The torture run's settings, its clock, its report and its deterministic coins."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from leasefence.model import State
from leasefence.payloads import canonicalize

FINAL_STATES = {
    State.SUCCEEDED,
    State.FAILED_TERMINAL,
    State.UNKNOWN,
    State.QUARANTINED,
    State.CANCELLED,
}


class Crash(BaseException):
    """The worker process dies here. Nothing after it runs for this claim."""


def chance(seed: int, *parts: Any) -> float:
    """A deterministic coin in [0, 1) for one decision about one thing."""
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class Settings:
    operations: int = 2_000
    seed: int = 1
    tenants: int = 3
    workers: int = 8
    lease_ms: int = 10_000  # engine time
    speed: float = 10.0  # engine ms per wall ms
    stall_rate: float = 0.06
    crash_rate: float = 0.04
    store_fault_rate: float = 0.03
    ambiguous_rate: float = 0.05
    replay_rate: float = 0.05
    conflict_rate: float = 0.03
    window: int = 0  # operations enqueued but not yet final, at most (0: four per worker)
    timeout_s: float = 0.0  # wall-clock budget; 0: 300 s plus 0.75 s per operation (1.5 composed)
    progress: bool = False  # a line on stderr every tenth of the run
    months: bool = True  # the months phase: clock jumps past the retention windows
    fidelity: bool = True  # TTL deletion and index lag in the embedded endpoint
    index_lag_ms: int = 250  # wall-clock lag of index queries (per item, seeded, up to this)
    identity_retention_days: int = 400
    payload_retention_days: int = 30
    #: Write shards of the base table per tenant (issue 33; 1: the bare tenant id; 0: the default
    #: layout, each tenant's counts recorded at its first enqueue: 64 for these new tenants).
    operation_shards: int = 0

    # ---- the composed run (``compose``): every feature at once, on the same operations
    compose: bool = True
    #: Workers over the HTTP API, one tenant each (-1: one per tenant); the rest are in-process.
    http_workers: int = -1
    #: Every other HTTP worker (the second, the fourth...) is a batched fleet: this many worker
    #: threads sharing one ``HttpBackend(batched=True)``, whose claims, renewals and closing
    #: writes made at about the same time share a request (``POST /v1/batch/...``); 0: no
    #: batched worker (each batched HTTP worker adds ``batched_fleet - 1`` threads).
    batched_fleet: int = 2
    #: The lease HTTP workers ask for (engine ms): more than the cut job types allow. Their
    #: renewal interval (a third of it) is longer than the cut lease.
    http_lease_ms: int = 60_000
    #: ``max_lease_seconds`` of the cut job types (engine seconds): below what HTTP workers ask
    #: (in-process workers ask for less: their claims are not cut).
    cut_lease_seconds: int = 15
    #: ``ledger-b``'s while the operator has it cut: below what every worker asks (class B's
    #: holders change hands often, with cut and uncut claim times on the same accounts).
    cut_b_lease_seconds: int = 5
    #: How often the operator flips the class-B job type between cut and uncut (wall seconds).
    catalogue_flip_s: float = 2.0
    #: Enqueues made over the HTTP API (the rest in-process), and by reference (the producer's
    #: own store; the rest inline).
    http_enqueue_rate: float = 0.4
    by_ref_rate: float = 0.25
    #: Of the enqueues over HTTP, those sent as an item of ``POST /v1/batch/enqueue``.
    batched_enqueue_rate: float = 0.3
    #: Operations of the approval-required job type; their producers' tokens name nobody at
    #: this rate (an enqueuer that cannot be told from an approver).
    approval_rate: float = 0.06
    anonymous_producer_rate: float = 0.25
    #: Producers cancelling an operation soon after its enqueue, racing the claims.
    cancel_rate: float = 0.04
    #: Handlers asking for a retry (``Retry``: the operation is queued again after an attempt).
    retry_rate: float = 0.03
    #: Healthy long jobs: they call ``progress`` and must keep their lease.
    slow_rate: float = 0.05
    #: HTTP answers lost after the request ran (the SDK or the caller sends it again).
    http_lost_rate: float = 0.03
    #: The publisher's history writes and event puts that fail (before or after they happened).
    publisher_fault_rate: float = 0.01
    #: Outcome events on (the publisher publishes, and its mapping passes every outcome record);
    #: off, as the construct deploys by default: its mapping passes only the records of
    #: operations enqueued before, so no publisher compacts a history (its writers bound it), and
    #: the checker judges the histories without events.
    events: bool = True
    #: Of the ``unknown`` operations the operator meets in the main phase: erased before its
    #: ``resolve requeue`` (the rest are only requeued).
    erase_parked_rate: float = 0.5
    #: The fence entries each shared class-B item (account) keeps: the fewest allowed, so an
    #: operation's entry is pruned as soon as another operation writes the account.
    account_max_entries: int = 2
    #: Stalls of in-process class-B holders (the zombies whose late writes the accounts must
    #: refuse after an HTTP successor's: the claim times of both kinds of worker meet there).
    b_stall_rate: float = 0.2
    #: Indeterminate calls (:mod:`leasefence_tools.torture.indeterminate`): every enqueue, claim,
    #: complete and resolve is recorded as ok, failed or indeterminate, this share of their
    #: answers is lost (half before the request runs, half after it committed), and the checker
    #: accepts a history only if some resolution of the indeterminate calls explains it.
    indeterminate: bool = True
    lost_answer_rate: float = 0.06
    #: Resolves are few (under 100 in 1,000 operations): twice the rate keeps their share of
    #: lost answers above 5% however the coins fall.
    resolve_lost_answer_rate: float = 0.12
    #: Expect claim tokens: every HTTP claim carries ``claim_token`` (the SDK and the HTTP backend
    #: send one, and send it again after a lost answer: issue 21 case 8).
    claim_tokens: bool = True

    @property
    def http_worker_count(self) -> int:
        if not self.compose:
            return 0
        wanted = self.tenants if self.http_workers < 0 else self.http_workers
        return max(0, min(wanted, self.workers - 1))

    def batched_http_worker(self, number: int) -> bool:
        """Whether HTTP worker ``number`` (from 0) is a batched fleet."""
        return self.batched_fleet > 0 and number % 2 == 1


class FastClock:
    """Engine time: starts at the wall clock and runs ``speed`` times faster; :meth:`jump` moves
    it days or months ahead at once (the months phase)."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.origin_ms = time.time_ns() // 1_000_000
        self.t0 = time.monotonic()
        self.jumped_ms = 0

    def __call__(self) -> int:
        return (
            self.origin_ms + self.jumped_ms + int((time.monotonic() - self.t0) * 1000 * self.speed)
        )

    def jump(self, ms: int) -> int:
        self.jumped_ms += ms
        return self()

    def wall_seconds(self, engine_ms: float) -> float:
        return engine_ms / self.speed / 1000


Key = tuple[str, str]


@dataclass
class Report:
    settings: Settings
    faults: Counter = field(default_factory=Counter)
    history: dict[Key, list[str]] = field(default_factory=lambda: defaultdict(list))
    violations: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    purged: int = 0  # payloads the sweeper deleted after their retention (or erasure)
    #: What the composed run saw, for the checker (see :mod:`leasefence_tools.torture.checker`).
    executed: dict[Key, list[str]] = field(default_factory=lambda: defaultdict(list))
    approved: dict[Key, str] = field(default_factory=dict)
    self_approved: list[Key] = field(default_factory=list)
    mismatch_approved: list[Key] = field(default_factory=list)
    approval_ops: set[Key] = field(default_factory=set)
    retries: list[dict[str, Any]] = field(default_factory=list)
    lost_claims: list[dict[str, Any]] = field(default_factory=list)
    untokened_claims: int = 0
    slow_jobs: list[dict[str, Any]] = field(default_factory=list)
    #: When each claim's renewals were sent (wall ``time.monotonic()`` seconds), per
    #: ``(tenant, operation, fence)``: a slow job's lapse is the renewals' doing only if one of
    #: them was sent after the lease it was to extend had run out.
    renewals: dict[tuple[str, str, int], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    counts: Counter = field(default_factory=Counter)
    #: Each operation's history as read just before a jump of the months phase (entries,
    #: dropped, the operation item): a history expires once the payload retention after the end
    #: is over (the slim ended record), and the checker judges what it held from this copy.
    histories_kept: dict[Key, tuple[list[dict[str, Any]], int, dict[str, Any]]] = field(
        default_factory=dict
    )
    errors: list[str] = field(default_factory=list)  # unexpected failures of actors, workers
    #: Every client call as the client saw it (``Settings.indeterminate``): a
    #: :class:`~leasefence_tools.torture.indeterminate.CallLog`.
    calls: Any = None

    def note(self, tenant_id: str, operation_id: str, event: str) -> None:
        with self.lock:
            self.history[(tenant_id, operation_id)].append(event)

    def renewal_sent(self, tenant_id: str, operation_id: str, fence: int) -> None:
        with self.lock:
            self.renewals[(tenant_id, operation_id, fence)].append(time.monotonic())

    def count(self, name: str, value: int = 1) -> None:
        with self.lock:
            self.counts[name] += value

    def fault(
        self,
        kind: str,
        tenant_id: str | None = None,
        operation_id: str | None = None,
        detail: str = "",
    ) -> None:
        with self.lock:
            self.faults[kind] += 1
        if tenant_id is not None and operation_id is not None:
            self.note(tenant_id, operation_id, f"fault:{kind}{(' ' + detail) if detail else ''}")

    def violate(self, kind: str, tenant_id: str, operation_id: str, detail: str) -> None:
        with self.lock:
            self.violations.append(
                {
                    "kind": kind,
                    "tenant_id": tenant_id,
                    "operation_id": operation_id,
                    "detail": detail,
                    "history": list(self.history.get((tenant_id, operation_id), [])),
                }
            )


def payload(tenant_id: str, operation_id: str, variant: str = "") -> dict[str, str]:
    """Each operation's own payload (a variant: another payload under the same id). One
    operation in three carries a note of about 600 bytes (hex digests of its ids: text that
    packs to about half), so that its payload item is kept packed (``payload_z``) and the runs
    compose packing with everything else; half of those repeat it :data:`NOTE_REPEATS` times
    (about 2.9 KiB of canonical JSON, over the 1 KiB a payload item keeps as text, that packs to
    about 350 bytes: kept packed in DynamoDB, not in S3)."""
    value = {
        "tenant": tenant_id,
        "operation": operation_id,
        **({"variant": variant} if variant else {}),
    }
    seed = hashlib.sha256(f"{tenant_id}\n{operation_id}\n{variant}".encode()).hexdigest()
    if int(seed[:2], 16) % 3 == 0:
        note = "".join(
            hashlib.sha256(f"{seed}{i}".encode()).hexdigest() for i in range(NOTE_DIGESTS)
        )
        value["note"] = note * (NOTE_REPEATS if int(seed[2:4], 16) % 2 else 1)
    return value


#: Digests in a bulky payload's note (64 characters each).
NOTE_DIGESTS = 9
#: How many times a long note repeats them.
NOTE_REPEATS = 5


def payload_hash(tenant_id: str, operation_id: str, variant: str = "") -> str:
    return canonicalize(payload(tenant_id, operation_id, variant)).hash
