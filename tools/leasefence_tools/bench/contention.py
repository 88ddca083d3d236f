"""Contention: refused claim writes per successful claim, 32 claimers over a deep queue.

With ``batch`` (issue 33's batched workers), each claimer is a ``POST /v1/batch/claim`` request
instead: its turn makes up to ``batch`` claims in a row, each with a claim token of its own, as
the API's batch claim runs its items; 32 such requests run at once.

One tenant's queue is filled with the exact items ``Engine.enqueue`` writes (straight into the
backend: setup only), then 32 threads, each with its own engine and client, call ``claim_next``
until they have made the planned number of claims together. Every claim's conditional write
that is refused (another claimer won that candidate first) is a wasted attempt. The endpoint is
the embedded one (own process) with the index-query accelerator (see :mod:`leasefence_tools.bench.harness`):
only counts are measured here, and the endpoint serves one request at a time whichever way the
candidates are found, so the interleaving of claimers is the endpoint's own.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from leasefence.clock import system_clock
from leasefence.engine import DEFAULT_CANDIDATE_PAGE, DEFAULT_CONTENDED_PAGE, Engine
from leasefence.schema import DEFAULT_DUE_SHARDS, TableSpec
from leasefence_tools.bench.harness import ServerProcess
from leasefence_tools.bench.meter import Meter

TENANT = "busy"
#: The type of every queued operation (what the worker asks for, as the worker runtime does).
JOB_TYPE = "refund"


def _segments(snapshots: list[tuple[int, int]], queued: int) -> list[dict[str, Any]]:
    """Refused claim writes per claim within each stretch of the run, with the queue depth left."""
    out, previous = [], (0, 0)
    for claims_so_far, refused_so_far in sorted(snapshots):
        made = claims_so_far - previous[0]
        out.append(
            {
                "claims": f"{previous[0] + 1}-{claims_so_far}",
                "queue_depth_at_end": queued - claims_so_far,
                "wasted_per_success": round((refused_so_far - previous[1]) / max(made, 1), 4),
            }
        )
        previous = (claims_so_far, refused_so_far)
    return out


def run(
    bench: ServerProcess,
    queued: int,
    claimers: int,
    claims: int,
    due_shards: int = DEFAULT_DUE_SHARDS,
    candidate_page: int = DEFAULT_CANDIDATE_PAGE,
    label: str = "default",
    contended_page: int = DEFAULT_CONTENDED_PAGE,
    batch: int = 0,
) -> dict[str, Any]:
    """``contended_page`` equal to ``candidate_page``: no larger pages after a lost race (the
    engine before issue 16); ``batch``: claimers that are batch claim requests (see above)."""
    spec = bench.create_tables(
        TableSpec(table_name=f"bench-contention-{label}", due_shards=due_shards)
    )
    bench.populate(spec, TENANT, queued, now_ms=system_clock())
    meter = Meter(bench.client(), units=False, keep_calls=False)
    engines = [
        Engine(
            client=meter.client(bench.client()),
            spec=spec,
            rng=random.Random(500 + i),
            candidate_page=candidate_page,
            contended_page=contended_page,
        )
        for i in range(claimers)
    ]
    lock = threading.Lock()
    budget = [claims]
    made = [0] * claimers
    barrier = threading.Barrier(claimers)
    marks = sorted({max(1, round(claims * f)) for f in (0.25, 0.5, 0.75, 0.9, 1.0)})
    snapshots: list[tuple[int, int]] = []
    total = [0]

    def work(i: int) -> None:
        barrier.wait()
        while True:
            with lock:
                turn = min(budget[0], max(1, batch))
                if turn <= 0:
                    return
                budget[0] -= turn
            for _ in range(turn):
                with meter.phase("claim"):
                    claim = engines[i].claim_next(
                        TENANT,
                        f"claimer-{i}",
                        lease_ms=600_000,
                        job_types=[JOB_TYPE],
                        claim_token=uuid.uuid4().hex if batch else None,
                    )
                if claim is None:
                    return
                made[i] += 1
                with lock:
                    total[0] += 1
                    if total[0] in marks:
                        snapshots.append((total[0], meter.usage("claim").refused["update_item"]))

    start = time.perf_counter()
    with bench.accelerated(), ThreadPoolExecutor(claimers) as pool:
        list(pool.map(work, range(claimers)))
        # What an idle poll of one of these claimers reads: this tenant, a type with nothing due
        # (read at the page this claimer uses for the tenant now: after a lost race, the larger).
        idle_page = engines[0]._page_for(TENANT)
        with meter.phase("idle"):
            assert engines[0].claim_next(TENANT, "claimer-0", job_types=["nothing-due"]) is None
    elapsed = time.perf_counter() - start
    bench.client().delete_table(TableName=spec.table_name)
    usage = meter.usage("claim")
    successes = sum(made)
    if successes < min(claims, queued):
        raise RuntimeError(
            f"contention: {successes} claims made of {min(claims, queued)} planned from a queue "
            f"of {queued}: the claimers did not find the queued work"
        )
    if not snapshots or snapshots[-1][0] != successes:
        snapshots.append((successes, usage.refused["update_item"]))
    return {
        "queued": queued,
        "claimers": claimers,
        "claims": successes,
        "due_shards": due_shards,
        "candidate_page": candidate_page,
        "contended_page": contended_page,
        "batch": batch,
        "refused_claim_writes": usage.refused["update_item"],
        "rcu_per_claim": round(usage.rcu / max(successes, 1), 3),
        "idle_poll_rcu": meter.usage("idle").rcu,
        "idle_poll_page": idle_page,
        "wasted_claims_per_success": round(usage.refused["update_item"] / max(successes, 1), 4),
        "queries_per_claim": round(usage.requests["query"] / max(successes, 1), 3),
        "requests_per_claim": round(usage.total_requests / max(successes, 1), 3),
        "claimers_that_claimed": sum(1 for m in made if m),
        "by_segment": _segments(snapshots, queued),
        "elapsed_s": round(elapsed, 1),
    }
