"""A compressed run on the partition-limited endpoint (issue 33).

``python -m leasefence_tools.bench.compressed [--rate 10000] [--compression 500] [--json]``

One tenant's lifecycles (enqueue, claim, complete, by in-process workers of the worker runtime)
offered at ``rate / compression`` lifecycles per second against the embedded endpoint with
DynamoDB's partition limits divided by the same ``compression``
(:class:`~leasefence_tools.local.embedded.Fidelity` ``partition_limits``): a run here stands for
one at ``rate`` on DynamoDB, no split for heat. The endpoint's meter clock can run ``speed``
times faster than the wall (windows of ``1 / speed`` s: a shorter run, a tests' setting).

It is burstier than the load it stands for: a one-second window here holds ``rate /
compression`` lifecycles where DynamoDB's second holds ``rate``, so their count varies
``sqrt(compression)`` times more, relative to the mean (and more with ``speed``); and it counts
what the simulation leaves out (idle workers' polls, refused claim writes, the resends
themselves). So it throttles below the simulation's bound: it shows whether a layout throttles at
a load, and that every operation still ends once, not the exact bound.

Every rate the engine derives from a partition's limit is divided by the same ``compression``:
the rate at which one engine widens a pair's due spread (``Engine(spread_shard_rate=...)``,
:data:`~leasefence.limits.SPREAD_SHARD_RATE` / ``compression``), so an engine here widens it at
the rate the run stands for, as it would there, instead of waiting for throttles (runs before
2026-12-07 left it at 100 a second and counted the spread's widening as throttles: 795 to 924 in
the full bench, all on due shard 0).

botocore does not retry (``total_max_attempts=1``): every throttle reaches the store's
translator (``Unavailable``), the producer resends (an enqueue is idempotent) and the runtime
backs off, and the endpoint counts each throttled request.

The layout is the engine's own (:class:`~leasefence.schema.TableSpec`): ``operation_shards``
write shards per tenant (1: the base table's partition key is the tenant id) and ``due_shards``
due shards (the default when not given), so the same run shows the one-shard layout and the
sharded one side by side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.config import Config

from leasefence import Engine, State
from leasefence.errors import Unavailable
from leasefence.limits import SPREAD_SHARD_RATE
from leasefence.schema import TableSpec
from leasefence.worker import FunctionHandler, Reconciled, Worker
from leasefence.worker.backend import EngineBackend
from leasefence.worker.handler import Job
from leasefence_tools.local.embedded import EmbeddedAws, Fidelity

#: The bench's compressed runs (``leasefence bench``, full profile): 10,000 lifecycles/s stand
#: as 20/s here (what this shared machine offers and drains), meter windows of 60 s (a shard's
#: count per window varies less than in 1-s windows; still ``sqrt(compression / 60)`` = 2.9
#: times more than DynamoDB's second at the rate stood for), three workers.
REPORT_COMPRESSION = 500
REPORT_WINDOW_S = 60
REPORT_WORKERS = 3

#: The longest wait of an idle worker here: the in-process worker's default idle wait.
IDLE_MAX_SLEEP_MS = 1_000

#: The offering's and the run's deadline for the bench's shorter runs (1,200 operations offered in
#: about 60 s); a longer run gets :func:`deadline_for`'s.
DEFAULT_DEADLINE_S = 120.0


def deadline_for(operations: int, compression: float, rate: float = 10_000) -> float:
    """A deadline for ``operations`` offered at ``rate / compression`` a second: the offering's
    time and 80% more for the machine's pace and the drain, never under
    :data:`DEFAULT_DEADLINE_S`."""
    return max(DEFAULT_DEADLINE_S, 1.8 * operations * compression / rate)


TENANT = "compressed"
JOB_TYPE = "job"
HASH = "sha256:" + "5" * 64
T = TypeVar("T")


def retried(call: Callable[[], T], wait_s: float = 0.05) -> T:
    """``call()`` again while the store is busy (the caller's own retry of ``Unavailable``)."""
    while True:
        try:
            return call()
        except Unavailable:
            time.sleep(wait_s)


class Ledger:
    """What the handler did, per operation: its runs and every fence it saw (reconciles too);
    and the worker runtime's metrics."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: Counter[str] = Counter()
        self.fences: dict[str, list[int]] = defaultdict(list)
        self.events: Counter[str] = Counter()

    def run(self, job: Job) -> str:
        with self.lock:
            self.runs[job.claim.operation_id] += 1
            self.fences[job.claim.operation_id].append(job.fence)
        return "sent"

    def reconcile(self, job: Job) -> Reconciled:
        """The effect is looked up where it was made."""
        with self.lock:
            done = self.runs[job.claim.operation_id] > 0
            self.fences[job.claim.operation_id].append(job.fence)
        return Reconciled.done("sent") if done else Reconciled.not_done()

    def sink(self, name: str, value: float) -> None:
        with self.lock:
            self.events[name] += int(value)


def run(
    rate: float = 10_000,
    compression: float = 500,
    operations: int = 200,
    workers: int = 1,
    speed: float = 1,
    lease_ms: int = 8_000,
    deadline_s: float = DEFAULT_DEADLINE_S,
    operation_shards: int = 1,
    due_shards: int | None = None,
) -> dict[str, Any]:
    """Offer ``operations`` lifecycles at ``rate / compression`` per second; wait until every one
    succeeded (or ``deadline_s``, which also ends the offering). Returns the figures and the handler's :class:`Ledger`
    (``"ledger"``, not JSON)."""
    fidelity = Fidelity(
        partition_limits=True,
        partition_time_scale=compression * speed,
        ttl_deletion=False,
        index_lag_ms=0,
    )
    aws = EmbeddedAws(fidelity=fidelity).start()
    try:
        assert aws.app is not None
        # Meter windows counted from now, not from the machine's uptime: a window of 500 s at
        # 1/500 speed then holds the run's first 500 s (one second at the rate stood for), not
        # whatever part of them a window boundary of the uptime cuts off.
        anchor = time.monotonic()
        aws.app.state.partitions.clock = lambda: (time.monotonic() - anchor) * speed  # type: ignore[attr-defined]
        # A table of its own: moto's backend outlives the endpoint within a process, and a run
        # after another would find that run's operations already succeeded.
        table = f"compressed-{uuid.uuid4().hex[:12]}"
        layout = TableSpec(table_name=table, operation_shards=(operation_shards,))
        if due_shards is not None:
            layout = dataclasses.replace(layout, due_shards=due_shards)
        spec = aws.create_tables(layout)

        def engine(seed: int) -> Engine:
            client = aws.client(
                config=Config(retries={"mode": "standard", "total_max_attempts": 1})
            )
            # The rate at which an engine widens a pair's due spread is derived from a partition's
            # write limit: divided by the same compression as the endpoint's limits, so an engine
            # here sees the rate it stands for (else it would wait for throttles to widen). Not by
            # ``speed``: the engine's clock is the wall's, only the endpoint's meter runs faster.
            return Engine(
                client=client,
                spec=spec,
                rng=random.Random(seed),
                spread_shard_rate=SPREAD_SHARD_RATE / compression,
            )

        ledger = Ledger()
        pool = [
            Worker(
                EngineBackend(engine(i), [TENANT]),
                {JOB_TYPE: FunctionHandler(ledger.run, ledger.reconcile)},
                worker_id=f"w{i}",
                lease_ms=lease_ms,
                idle_sleep_ms=20,
                # Backing off when idle, as a worker does: waits of up to 20 ms that keep up with
                # the load, the cap doubled after each empty poll up to the in-process worker's
                # default wait (each wait drawn between half the cap and the cap).
                # Without it the idle workers' polls while the run checks its operations after
                # the load (3 workers, 50 a second each, at C = 500 standing for 75,000 a second,
                # all on due shard 0 once the spread fell) were counted as the load's throttles.
                idle_max_sleep_ms=IDLE_MAX_SLEEP_MS,
                events=ledger.sink,
            )
            for i in range(workers)
        ]
        threads = [threading.Thread(target=w.run, daemon=True) for w in pool]
        for thread in threads:
            thread.start()
        producer = engine(workers)
        ops = [f"op-{i:05d}" for i in range(operations)]
        started = time.monotonic()
        for i, op in enumerate(ops):  # open loop at the offered rate; an enqueue is idempotent
            if time.monotonic() - started > deadline_s:
                ops = ops[:i]  # a layout throttled so hard that offering alone passed the deadline
                break
            time.sleep(max(0.0, started + i * compression / rate - time.monotonic()))
            retried(lambda op=op: producer.enqueue(TENANT, op, JOB_TYPE, HASH))  # type: ignore[misc]
        offered_s = time.monotonic() - started

        def succeeded() -> int:
            states = Counter(retried(lambda op=op: producer.get(TENANT, op)).state for op in ops)  # type: ignore[misc]
            return states[State.SUCCEEDED]

        done = succeeded()
        while done < len(ops) and time.monotonic() - started < deadline_s:
            time.sleep(0.5)  # each look reads every operation: in the tenant's partition too
            done = succeeded()
        elapsed = time.monotonic() - started
        for worker in pool:
            worker.stop()
        for thread in threads:
            thread.join(timeout=30)
        stats = aws.fidelity_stats()["stats"]
    finally:
        aws.stop()
    throttled = int(stats.get("partition_throttled", 0))
    return {
        "layout": {"operation_shards": operation_shards, "due_shards": spec.due_shards},
        "rate_offered_per_s": rate,
        "compression": compression,
        "local_rate_offered_per_s": round(len(ops) / max(offered_s, 1e-9), 1),
        # What the run really stood for: the machine may offer less than asked.
        "rate_offered_equivalent_per_s": round(len(ops) / max(offered_s, 1e-9) * compression),
        "operations": operations,
        "meter_window_s": round(1 / speed, 3),
        "offered": len(ops),
        "succeeded": done,
        "elapsed_s": round(elapsed, 2),
        "rate_achieved_equivalent_per_s": round(done / elapsed * compression),
        "throttled_requests": throttled,
        "throttled_by_reason": stats.get("partition_throttled_by_reason", {}),
        "throttled_by_partition": stats.get("partition_throttled_by_partition", {}),
        # By meter window from the run's start: the offering's windows first, then the drain's.
        "throttled_by_window": stats.get("partition_throttled_by_window", {}),
        "throttled_per_lifecycle": round(throttled / max(done, 1), 2),
        "store_retries": ledger.events["StoreRetries"],
        "ledger": ledger,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leasefence_tools.bench.compressed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rate", type=float, default=10_000, help="lifecycles/s stood for")
    parser.add_argument("--compression", type=float, default=500)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--speed", type=float, default=1, help="how many times faster the meter clock runs"
    )
    parser.add_argument(
        "--operation-shards", type=int, default=1, help="write shards per tenant (the layout)"
    )
    parser.add_argument("--due-shards", type=int, default=None, help="due shards (the default)")
    parser.add_argument(
        "--deadline", type=float, default=None, help="seconds (default: the offering's + 80%%)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(
        args.rate,
        args.compression,
        args.operations,
        args.workers,
        args.speed,
        operation_shards=args.operation_shards,
        due_shards=args.due_shards,
        deadline_s=args.deadline or deadline_for(args.operations, args.compression, args.rate),
    )
    result.pop("ledger")
    print(json.dumps(result, indent=2) if args.json else json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
