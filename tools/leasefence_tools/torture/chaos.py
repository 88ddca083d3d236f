"""The faults: in handlers (stalls, crashes, retries, slow healthy jobs), in the class C provider,
in the engine's DynamoDB calls, and in the publisher's history writes and event puts.

Every decision is a hash of the seed and of what it applies to (:func:`chance`), never a draw
from one sequence the threads share.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any

from botocore.exceptions import ReadTimeoutError

from leasefence.engine import Engine
from leasefence.errors import PayloadMissing
from leasefence.model import State, TargetClass
from leasefence.payloads import canonicalize
from leasefence.targets.idempotent_api import InMemoryIdempotentApi
from leasefence.worker import Job, Retry
from leasefence_tools.testing.faults import AFTER, BEFORE, CONFLICT, THROTTLE, TXN_THROTTLE
from leasefence_tools.testing.kits import Hooks, overtaken
from leasefence_tools.torture.settings import Crash, FastClock, Report, Settings, chance, payload

#: The variant of a by-reference payload its producer swapped after the approval (compose).
SWAPPED = "swapped"


class ChaosHooks(Hooks):
    """Stalls before the side effect and crashes after it, decided per (operation, fence). Before
    any side effect the handler loads its payload and checks it is its operation's.

    Composed runs add, per (operation, fence): a handler asking for a retry (the operation is
    queued again after an attempt: what cancels race), and a healthy long job that calls
    ``progress`` and must keep its lease (:attr:`Report.slow_jobs` records whether it did)."""

    def __init__(
        self, settings: Settings, clock: FastClock, report: Report, observer: Engine
    ) -> None:
        super().__init__()
        self.settings, self.clock, self.report = settings, clock, report
        self.observer = observer
        self.erased: set[tuple[str, str]] = set()
        #: By-reference payloads their producer replaced after the approval.
        self.swapped: set[tuple[str, str]] = set()
        #: Per worker id: (its kind, the lease it asks for in engine ms, its renewal interval
        #: in wall ms).
        self.workers: dict[str, tuple[str, int, int]] = {}

    def before(self, job: Job) -> None:
        key = (job.tenant_id, job.operation_id)
        try:
            loaded = job.payload
        except PayloadMissing:
            self.report.note(
                job.tenant_id, job.operation_id, f"payload missing at fence {job.fence}"
            )
            if key not in self.erased:
                self.report.violate(
                    "payload_lost",
                    job.tenant_id,
                    job.operation_id,
                    "a live operation's payload was gone when its handler ran",
                )
            raise
        if self.settings.compose:
            with self.report.lock:
                self.report.executed[key].append(canonicalize(loaded).hash)
        if loaded != payload(job.tenant_id, job.operation_id) and not (
            key in self.swapped and loaded == payload(*key, SWAPPED)
        ):
            self.report.violate(
                "ran_without_payload",
                job.tenant_id,
                job.operation_id,
                f"the handler got {loaded!r} instead of its payload",
            )
            raise Crash()
        seed = self.settings.seed
        if (
            self.settings.compose
            and chance(seed, "retry", job.tenant_id, job.operation_id, job.fence)
            < self.settings.retry_rate
        ):
            self.report.fault("retry", job.tenant_id, job.operation_id, f"fence {job.fence}")
            raise Retry("injected: try again later")
        stall_rate = self.settings.stall_rate
        in_process = self.workers.get(job.claim.worker_id, ("engine",))[0] == "engine"
        if self.settings.compose and job.target_class is TargetClass.B and in_process:
            stall_rate = self.settings.b_stall_rate
        if chance(seed, "stall", job.tenant_id, job.operation_id, job.fence) < stall_rate:
            self.report.fault("stall", job.tenant_id, job.operation_id, f"fence {job.fence}")
            time.sleep(self.clock.wall_seconds(self.settings.lease_ms * 1.5))
            # Then stay paused until someone else acted on the operation (a takeover raised the
            # fence, or the sweeper parked it), however loaded the machine is, for at most a
            # few more leases: the zombie must wake up into the situation it is meant to test.
            deadline = time.monotonic() + self.clock.wall_seconds(self.settings.lease_ms * 5)
            while time.monotonic() < deadline and not overtaken(self.observer, job):
                time.sleep(0.05)
            if self.settings.compose:
                # And wakes up some time after that (while its successor and other operations
                # write the same shared items), not at once.
                time.sleep(
                    0.5 + 2 * chance(seed, "wake", job.tenant_id, job.operation_id, job.fence)
                )
            return
        if (
            self.settings.compose
            and job.target_class is not TargetClass.B  # its leases are cut to the bone
            and chance(seed, "slow", job.tenant_id, job.operation_id, job.fence)
            < self.settings.slow_rate
        ):
            self._slow(job)

    def _slow(self, job: Job) -> None:
        """A healthy job that takes one and a half renewal intervals of its worker, calling
        ``progress`` all along: its runtime must keep the lease it was granted. Whether the lease
        ever lapsed (the table's own lease, read every 50 ms) is recorded, with whether the job
        type's maximum cut the lease the worker asked for, and whether it had lapsed already
        when the job began (``late_start``: not the renewals' doing)."""
        kind, asked_ms, interval_ms = self.workers.get(
            job.claim.worker_id, ("engine", self.settings.lease_ms, 1_000)
        )
        # Each lease is compared with the time its read was sent: an answer that took long to
        # come shows the lease as it was then, not now.
        asked = self.clock()
        item = self.observer.store.get(
            {"tenant_id": job.tenant_id, "operation_id": job.operation_id}
        )
        granted = int((item or {}).get("lease_ms", asked_ms))
        self.report.fault("slow", job.tenant_id, job.operation_id, f"fence {job.fence}")
        # The work before the first progress (claim, reconcile, payload) may already have taken
        # the whole lease on a loaded machine: that is the handler's, not the renewals'.
        late = (
            item is None
            or int(item.get("fence", 0)) != job.fence
            or item.get("state") != State.CLAIMED
            or int(item.get("lease_expires_at", 0)) <= asked
        )
        lapsed = late
        started = time.monotonic()
        end = started + (0 if late else 1.5 * interval_ms / 1000)
        expires = int((item or {}).get("lease_expires_at", 0))
        asked_at_start = asked
        renewed_at = started
        longest = 0.0  # the longest wait for a renewal (wall seconds), as the table shows them
        while time.monotonic() < end:
            job.progress()  # LostOwnership once a renewal was refused
            time.sleep(0.05)
            asked = self.clock()
            current = self.observer.get(job.tenant_id, job.operation_id)
            now = time.monotonic()
            if (current.lease_expires_at or 0) > expires:
                longest = max(longest, now - renewed_at)
                expires, renewed_at = current.lease_expires_at or 0, now
            if (
                current.fence != job.fence
                or current.state != State.CLAIMED
                or (current.lease_expires_at or 0) <= asked
            ):
                lapsed = True
                break
        finished = time.monotonic()
        longest = max(longest, finished - renewed_at)
        # Were the renewals sent in time? Each must leave before the lease it extends runs out
        # (the granted lease, in wall seconds, from the previous one). A lapse with every
        # renewal sent in time is the machine's doing (an answer that came late), not the
        # runtime's; one sent too late (or none before the lease ran out) is the runtime's.
        wall_lease = granted / self.settings.speed / 1000
        deadline = started + max(0, expires - asked_at_start) / self.settings.speed / 1000
        renewal_late = False
        with self.report.lock:
            sends = sorted(
                self.report.renewals.get((job.tenant_id, job.operation_id, job.fence), [])
            )
        for sent in sends:
            if sent < started:
                continue
            if sent > deadline:
                renewal_late = True
            deadline = sent + wall_lease
        if lapsed and not late and finished > deadline:
            renewal_late = True
        with self.report.lock:
            self.report.slow_jobs.append(
                {
                    "tenant_id": job.tenant_id,
                    "operation_id": job.operation_id,
                    "fence": job.fence,
                    "backend": kind,
                    "cut": granted < asked_ms,
                    "granted_ms": granted,
                    "lapsed": lapsed,
                    "late_start": late,
                    "renewal_late": renewal_late,
                    "longest_renewal_wait_ms": int(longest * 1000),
                }
            )
        if lapsed:
            self.report.note(
                job.tenant_id, job.operation_id, f"healthy claim lapsed, fence {job.fence}"
            )

    def after(self, job: Job) -> None:
        if (
            chance(self.settings.seed, "crash", job.tenant_id, job.operation_id, job.fence)
            < self.settings.crash_rate
        ):
            self.report.fault("crash", job.tenant_id, job.operation_id, f"fence {job.fence}")
            raise Crash()


class ChaosApi(InMemoryIdempotentApi):
    """A class C provider whose answer is lost for some (key, call) pairs after executing."""

    def __init__(self, settings: Settings, report: Report) -> None:
        super().__init__()
        self.settings, self.report = settings, report
        self.calls_per_key: Counter[str] = Counter()

    def execute(self, key: str, request: Any) -> Any:
        with self._lock:
            self.calls_per_key[key] += 1
            nth = self.calls_per_key[key]
        if chance(self.settings.seed, "ambiguous-c", key, nth) < self.settings.ambiguous_rate:
            self.report.fault("ambiguous_call")
            self.lose_answer_next = True  # guarded by the parent's lock inside execute
        return super().execute(key, request)


class StoreChaos:
    """Faults in DynamoDB calls (of the engine, the API's engine, the publisher's history writes;
    not of the targets: those are the real world).

    Each decision is a hash of the seed, the call, what it applies to (its key, its partition,
    or its transaction's keys) and how many times that call was made for it before, not a draw
    from one shared sequence: a seed injects nearly the same faults into the same operations
    whatever order the threads run in (a count can differ by a heartbeat or a poll). ``salt``
    tells two callers of the same store apart; ``prefix`` names their faults in the report.
    """

    def __init__(
        self,
        settings: Settings,
        report: Report,
        salt: str = "",
        rate: float | None = None,
        prefix: str = "",
    ) -> None:
        self.seed = settings.seed
        self.rate = settings.store_fault_rate if rate is None else rate
        self.report = report
        self.salt, self.prefix = salt, prefix
        self.calls: Counter[tuple[str, str]] = Counter()  # FaultyClient calls this under its lock

    @staticmethod
    def subject(request: dict[str, Any]) -> str:
        if "TransactItems" in request:
            parts = [
                op.get("Key") or op.get("Item", {})
                for entry in request["TransactItems"]
                for op in entry.values()
            ]
            return json.dumps(
                [
                    {k: v for k, v in part.items() if k in ("tenant_id", "operation_id", "pk")}
                    for part in parts
                ],
                sort_keys=True,
            )
        if "Key" in request:
            return json.dumps(request["Key"], sort_keys=True)
        if "Item" in request:
            return json.dumps(
                {k: request["Item"].get(k) for k in ("tenant_id", "operation_id")}, sort_keys=True
            )
        values = request.get("ExpressionAttributeValues", {})  # a query: its partition
        return json.dumps({k: v for k, v in values.items() if "S" in v}, sort_keys=True)

    def __call__(self, method: str, request: dict[str, Any]) -> str | None:
        if method not in (
            "update_item",
            "put_item",
            "delete_item",
            "transact_write_items",
            "query",
            "get_item",
        ):
            return None
        subject = self.subject(request)
        self.calls[(method, subject)] += 1
        nth = self.calls[(method, subject)]
        if chance(self.seed, "store", self.salt, method, subject, nth) >= self.rate:
            return None
        if method == "transact_write_items":
            modes = [BEFORE, THROTTLE, AFTER, CONFLICT, CONFLICT, TXN_THROTTLE]
        elif method in ("update_item", "put_item", "delete_item"):
            modes = [BEFORE, THROTTLE, AFTER, AFTER]
        else:
            modes = [BEFORE, THROTTLE]
        mode = modes[
            int(chance(self.seed, "store-mode", self.salt, method, subject, nth) * len(modes))
        ]
        self.report.fault(
            self.prefix
            + {
                AFTER: "lost_response",
                BEFORE: "not_sent",
                THROTTLE: "throttle",
                CONFLICT: "txn_conflict",
                TXN_THROTTLE: "txn_throttle",
            }[mode]
        )
        return mode


class ChaosEvents:
    """EventBridge for the publisher: keeps what it accepted, in order, and fails some
    ``PutEvents`` calls: refused (``FailedEntryCount``: nothing published) or answered into the
    void (published, but the publisher hears an error and its record is delivered again)."""

    def __init__(self, settings: Settings, report: Report) -> None:
        self.settings, self.report = settings, report
        self.published: list[dict[str, Any]] = []  # each event's detail, in publish order
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        details = [json.loads(entry["Detail"]) for entry in Entries]
        subject = json.dumps(
            [[d["tenant_id"], d["operation_id"], d.get("seq", d.get("sequence"))] for d in details]
        )
        with self.lock:
            self.calls[subject] += 1
            nth = self.calls[subject]
        coin = chance(self.settings.seed, "events", subject, nth)
        rate = self.settings.publisher_fault_rate
        if coin < rate / 2:
            self.report.fault("event_refused")
            return {
                "FailedEntryCount": len(Entries),
                "Entries": [
                    {"ErrorCode": "ThrottlingException", "ErrorMessage": "injected"}
                    for _ in Entries
                ],
            }
        with self.lock:
            self.published.extend(details)
        if coin < rate:
            self.report.fault("event_answer_lost")
            raise ReadTimeoutError(endpoint_url="injected://put-events")
        return {"FailedEntryCount": 0, "Entries": [{"EventId": f"e{nth}"} for _ in Entries]}
