"""Depth independence: what one claim reads at queue depth 10 and at 100,000, and what one sweep
costs in a small table and in a large one.

Queues are filled with engine-built items straight into the backend (setup only) and the
accelerator answers index queries (see :mod:`leasefence_tools.bench.harness`); everything measured is
a request the engine really sent, with units computed by the meter. The claimer runs alone on a
manual clock, so the meter's item images are exact. After each claim a replacement operation is
enqueued (unmetered), so the depth stays where it was set.
"""

from __future__ import annotations

import random
from typing import Any

from leasefence import Engine, keys
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec
from leasefence_tools.bench.harness import HASH, ServerProcess
from leasefence_tools.bench.meter import Meter

TENANT = "deep"
START_MS = 1_900_000_000_000


def _claims_at_depth(server: ServerProcess, depth: int, claims: int, label: str) -> dict[str, Any]:
    spec = server.create_tables(TableSpec(table_name=f"bench-depth-{label}"))
    seconds = server.populate(spec, TENANT, depth, now_ms=START_MS)
    clock = ManualClock(START_MS + 1)
    raw = server.client()
    meter = Meter(raw, units=True)
    engine = Engine(
        client=meter.client(server.client()), spec=spec, clock=clock, rng=random.Random(21)
    )
    refill = Engine(client=raw, spec=spec, clock=clock)
    got = 0
    for i in range(claims):
        with meter.phase("claim"):
            claim = engine.claim_next(TENANT, "depth-worker", lease_ms=60_000, job_types=["refund"])
        if claim is not None:
            got += 1
        refill.enqueue(TENANT, f"refill-{i:05d}", "refund", HASH)
        clock.advance(1)
    usage = meter.usage("claim")
    verified = server.verify(
        spec.table_name,
        "due",
        [keys.due_partition(TENANT, s, "refund") for s in range(min(2, spec.due_shards))],
        [clock()],
    )
    return {
        "depth": depth,
        "claims": got,
        "rcu_per_claim": round(usage.rcu / max(got, 1), 4),
        "requests_per_claim": round(usage.total_requests / max(got, 1), 4),
        "queries_per_claim": round(usage.requests["query"] / max(got, 1), 4),
        "index_entries_read_per_claim": round(usage.items_read / max(got, 1), 2),
        "wcu_per_claim": round(usage.wcu / max(got, 1), 4),
        "populate_s": seconds,
        "accelerator_answers_verified": verified,
        "_table": spec.table_name,
    }


def _sweeps(
    server: ServerProcess, background: int, due_counts: list[int], label: str
) -> list[dict[str, Any]]:
    """One ``Engine.sweep`` per due count, in a table holding ``background`` queued operations plus
    1,000 final-attempt claims whose leases have not expired (in the sweep index, not due)."""
    spec = server.create_tables(TableSpec(table_name=f"bench-sweep-{label}"))
    if background:
        server.populate(spec, "bulk", background, now_ms=START_MS)
    server.populate(
        spec,
        "live",
        1000,
        now_ms=START_MS,
        kind="final_claim",
        prefix="live",
        lease_expires_at=START_MS + 3_600_000,
    )
    clock = ManualClock(START_MS + 60_000)
    meter = Meter(server.client(), units=True)
    engine = Engine(
        client=meter.client(server.client()), spec=spec, clock=clock, rng=random.Random(4)
    )
    out = []
    for round_, due in enumerate(due_counts):
        if due:
            server.populate(
                spec,
                f"gone{round_}",
                due,
                now_ms=START_MS,
                kind="final_claim",
                prefix=f"gone{round_}",
                lease_expires_at=START_MS + 30_000,
            )
        meter.reset()
        with meter.phase("sweep"):
            result = engine.sweep(limit=max(due, 1) + 50)
        usage = meter.usage("sweep")
        out.append(
            {
                "table_items": background + 1000 + due,
                "due": due,
                "swept": result.swept,
                "requests": usage.total_requests,
                "queries": usage.requests["query"],
                "rcu": usage.rcu,
                "wcu": usage.wcu,
            }
        )
    server.client().delete_table(TableName=spec.table_name)
    return out


def measure(
    server: ServerProcess,
    shallow: int = 10,
    deep: int = 100_000,
    claims: int = 20,
    due_counts: tuple[int, ...] = (0, 10, 100),
) -> dict[str, Any]:
    with server.accelerated():
        small = _claims_at_depth(server, shallow, claims, "shallow")
        large = _claims_at_depth(server, deep, claims, "deep")
        for row in (small, large):
            server.client().delete_table(TableName=row.pop("_table"))
        sweeps_small = _sweeps(server, 0, list(due_counts), "small")
        sweeps_large = _sweeps(server, deep, list(due_counts), "large")
    return {
        "shallow": small,
        "deep": large,
        "depth_read_ratio": round(large["rcu_per_claim"] / small["rcu_per_claim"], 3),
        "depth_request_ratio": round(large["requests_per_claim"] / small["requests_per_claim"], 3),
        "sweeper_small_table": sweeps_small,
        "sweeper_large_table": sweeps_large,
        "sweeper_requests_equal_shards_plus_due": all(
            row["requests"] == row["queries"] + row["due"] for row in sweeps_small + sweeps_large
        ),
        "sweeper_same_cost_small_vs_large": [
            (a["requests"], a["rcu"], a["wcu"]) == (b["requests"], b["rcu"], b["wcu"])
            for a, b in zip(sweeps_small, sweeps_large, strict=True)
        ],
    }
