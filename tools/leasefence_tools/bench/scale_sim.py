"""Scale on paper: sustainable lifecycles (claims) per second against DynamoDB partition limits.

``python -m leasefence_tools.bench.scale_sim [--shards 1,2,4,8,16,32,64] [--json]``

DynamoDB serves at most 1,000 write units and 3,000 read units per second per partition, for the
table and for each index. One tenant's lifecycles load three kinds of partition:

* **its ``due`` index shards** (partition ``<tenant>#<shard>``, one per shard): per lifecycle, an
  index put at enqueue, a delete plus a put when the claim moves ``due_at`` to the lease
  expiry, and a delete at completion: 4 write units, all on the operation's shard; the claim's
  query reads 0.5 unit from the shard it probes. The sort key (``due_at``) only grows, so
  DynamoDB cannot relieve a hot shard by splitting it: each shard is a hard 1,000 write units/s.
* **its base-table partition** (partition key ``tenant_id``): 3 write units per lifecycle, plus 1
  per refused claim write (contention). With split-for-heat (random operation ids as sort keys,
  no local secondary index) DynamoDB can spread one partition key over several partitions; without
  it one tenant is capped at 1,000 / (3 + waste) lifecycles/s whatever the shard count.
* **the ``sweep`` index shards** (``sweep#<shard>``, shared by all tenants): only claims on the
  final attempt (every class-D operation, and the last retry of others) enter it: a put at the
  claim and a delete at completion, 2 write units.

The simulation draws, second by second, each shard's lifecycles as independent Poisson counts
(the ops hash uniformly to shards) and finds, by bisection, the highest rate at which the
hottest shard stays within its limit in 99% of seconds (no burst credit assumed). Unit costs are
the ones the benchmark's meter measures (``leasefence bench``: 7 write units and 0.5 read unit
per lifecycle, of which 4 are due-index writes).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict, dataclass
from typing import Any

PARTITION_WCU = 1000.0
PARTITION_RCU = 3000.0


@dataclass(frozen=True)
class UnitCosts:
    """Per-lifecycle units by the kind of partition they land on (measured by the bench)."""

    due_index_wcu: float = 4.0  # enqueue put + claim delete/put + complete delete
    base_table_wcu: float = 3.0  # enqueue put, claim update, complete update
    claim_rcu: float = 0.5  # one index page per claim
    sweep_index_wcu: float = 2.0  # final-attempt claims only: put at claim, delete at completion
    wasted_per_claim: float = 0.0  # refused claim writes per claim (1 base-table unit each)


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 60:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    threshold, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= threshold:
            return k
        k += 1


def hottest_ok(
    rate: float,
    shards: int,
    per_op_units: float,
    limit: float,
    seconds: int,
    rng: random.Random,
    quantile: float = 0.99,
) -> bool:
    """Whether, at ``rate`` ops/s spread over ``shards``, the hottest shard stays within ``limit``
    units in ``quantile`` of the simulated seconds."""
    over = 0
    allowed = int(seconds * (1 - quantile))
    for _ in range(seconds):
        hottest = max(_poisson(rng, rate / shards) for _ in range(shards))
        if hottest * per_op_units > limit:
            over += 1
            if over > allowed:
                return False
    return True


def max_rate(
    shards: int, per_op_units: float, limit: float, seconds: int = 200, seed: int = 1
) -> float:
    """Highest rate (ops/s) at which the hottest of ``shards`` partitions stays within ``limit``."""
    if per_op_units <= 0:
        return math.inf
    lo, hi = 0.0, shards * limit / per_op_units
    for _ in range(22):
        mid = (lo + hi) / 2
        if hottest_ok(mid, shards, per_op_units, limit, seconds, random.Random(seed)):
            lo = mid
        else:
            hi = mid
    return lo


def table(
    shard_counts: list[int], costs: UnitCosts, sweep_shards: int = 4, seconds: int = 200
) -> dict[str, Any]:
    base_wcu = costs.base_table_wcu + costs.wasted_per_claim
    base_no_split = PARTITION_WCU / base_wcu
    rows = []
    for shards in shard_counts:
        write_bound = max_rate(shards, costs.due_index_wcu, PARTITION_WCU, seconds)
        read_bound = max_rate(shards, costs.claim_rcu, PARTITION_RCU, seconds)
        index_bound = min(write_bound, read_bound)
        rows.append(
            {
                "due_shards": shards,
                "due_index_bound_per_s": round(index_bound),
                "ideal_per_s": round(shards * PARTITION_WCU / costs.due_index_wcu),
                "tenant_bound_no_split_per_s": round(min(index_bound, base_no_split)),
                "binding_without_split": "base-table partition"
                if base_no_split < index_bound
                else "due-index shards",
                "idle_poll_rcu": shards * costs.claim_rcu,
            }
        )
    sweep_bound = max_rate(sweep_shards, costs.sweep_index_wcu, PARTITION_WCU, seconds)
    return {
        "partition_limits": {"wcu_per_s": PARTITION_WCU, "rcu_per_s": PARTITION_RCU},
        "unit_costs": asdict(costs),
        "base_table_bound_no_split_per_s": round(base_no_split),
        "rows": rows,
        "sweep_shards": sweep_shards,
        "final_attempt_claims_bound_all_tenants_per_s": round(sweep_bound),
        "method": "Poisson per-shard load, hottest shard within the limit in 99% of seconds, no burst credit",
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        "| due shards | lifecycles/s per tenant (index bound) | ideal (uniform) | without "
        "split-for-heat | binding | idle poll RCU |",
        "| ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['due_shards']} | {row['due_index_bound_per_s']:,} | {row['ideal_per_s']:,} | "
            f"{row['tenant_bound_no_split_per_s']:,} | {row['binding_without_split']} | {row['idle_poll_rcu']:g} |"
        )
    lines.append("")
    lines.append(
        f"Final-attempt claims (all tenants together) with {result['sweep_shards']} sweep shards: "
        f"{result['final_attempt_claims_bound_all_tenants_per_s']:,}/s."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leasefence_tools.bench.scale_sim", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--shards", default="1,2,4,8,16,32,64", help="comma-separated due-shard counts"
    )
    parser.add_argument("--sweep-shards", type=int, default=4)
    parser.add_argument("--wasted", type=float, default=0.0, help="refused claim writes per claim")
    parser.add_argument("--seconds", type=int, default=200, help="simulated seconds per trial")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = table(
        [int(s) for s in args.shards.split(",")],
        UnitCosts(wasted_per_claim=args.wasted),
        sweep_shards=args.sweep_shards,
        seconds=args.seconds,
    )
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
