"""Scale on paper: sustainable lifecycles (claims) per second against DynamoDB partition limits.

``python -m leasefence_tools.bench.scale_sim [--shards 1,2,4,8,16,32,64] [--json]``

DynamoDB serves at most 1,000 write units and 3,000 read units per second per partition, for the
table and for each index. One tenant's lifecycles load three kinds of partition:

* **its ``due`` index shards** (partition ``<tenant>#<shard>``, one per shard): per lifecycle, an
  index put at enqueue, a delete plus a put when the claim moves ``due_at`` to the lease
  expiry, and a delete at completion: 4 write units, all on the operation's shard; the claim's
  query reads 0.5 unit from the shard it probes. The sort key (``due_at``) only grows, so
  DynamoDB cannot relieve a hot shard by splitting it: each shard is a hard 1,000 write units/s.
* **its base-table partitions** (one per write shard, :func:`leasefence.keys.operation_partition`):
  3 write units per lifecycle, plus 1 per refused claim write (contention); a claim token's
  marker, 1 read and 1 write unit, on a write shard of its own
  (:func:`leasefence.keys.claim_marker_key`). With one write shard and no split for heat one
  tenant is capped at 1,000 / (3 + waste) lifecycles/s whatever the due shard count
  (:func:`table`; :func:`layouts` puts every measured unit where the keys put it).
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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from leasefence import keys
from leasefence.limits import SPREAD_CACHE_MS, SPREAD_FULL_PROBE_MS
from leasefence.schema import DEFAULT_DUE_SHARDS, DEFAULT_SWEEP_SHARDS, DUE_INDEX
from leasefence_tools.bench.units import PartitionUnits

#: The due shards of the one-shard layout: the default before the recorded layout (issue 33).
ONE_SHARD_DUE_SHARDS = 4
PARTITION_WCU = 1000.0
PARTITION_RCU = 3000.0
#: An idle worker's mean wait between polls (s): the worker runtime's backoff, up to 20 s.
IDLE_POLL_MEAN_S = 15.0
#: Engines (API function instances) serving one tenant's busy job type at 10,000 lifecycles/s:
#: 4 requests a lifecycle of about 30 ms each. Each reads the pair's spread hint once per
#: ``SPREAD_CACHE_MS``, eventually consistent (0.5 unit), on the tenant's bare partition.
HINT_ENGINES = 1_200


def idle_poll_rcu(due_shards: int, claim_rcu: float = 0.5) -> dict[str, float]:
    """Read units of one idle poll of one job type (no claim token), with the due spread: the
    spread hint (0.5), one empty page (shard 0), and the full probe of every shard an engine
    makes once per ``SPREAD_FULL_PROBE_MS`` spread over the polls in it; before the spread:
    one empty page per shard."""
    if due_shards == 1:
        return {"idle_poll_rcu": claim_rcu, "idle_poll_rcu_every_shard": claim_rcu}
    polls_per_full = SPREAD_FULL_PROBE_MS / 1000 / IDLE_POLL_MEAN_S
    full = (due_shards - 1) * claim_rcu / polls_per_full
    return {
        "idle_poll_rcu": round(0.5 + claim_rcu + full, 3),
        "idle_poll_rcu_every_shard": due_shards * claim_rcu,
    }


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
                **idle_poll_rcu(shards, costs.claim_rcu),
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


# ------------------------------------------------------------------ layouts (issue 33)

_KINDS = (("Write", PARTITION_WCU), ("Read", PARTITION_RCU))


@dataclass
class LifecycleLoad:
    """One lifecycle's units by the kind of partition they land on, each ``{"Write": w, "Read":
    r}``, as :mod:`leasefence.keys` places each item (:func:`placement`): the operation's own items
    on the table (its write shard's partition: :func:`~leasefence.keys.operation_partition`), its
    claim token's marker (a write shard of its own, a hash of the marker's id:
    :func:`~leasefence.keys.claim_marker_key`), the tenant's own items (directory, catalogue,
    settings: :func:`~leasefence.keys.tenant_key`, the bare tenant partition, which is also write
    shard 0's), the ``due`` index (the operation's due shard) and every other index (partitions
    shared by all tenants: ``sweep``, ``parked``, ``purge``), by name."""

    operation: dict[str, float] = field(default_factory=lambda: {"Write": 0.0, "Read": 0.0})
    tenant: dict[str, float] = field(default_factory=lambda: {"Write": 0.0, "Read": 0.0})
    marker: dict[str, float] = field(default_factory=lambda: {"Write": 0.0, "Read": 0.0})
    due: dict[str, float] = field(default_factory=lambda: {"Write": 0.0, "Read": 0.0})
    shared: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def from_costs(cls, costs: UnitCosts) -> LifecycleLoad:
        """From :class:`UnitCosts` (the standalone simulation's defaults)."""
        return cls(
            operation={"Write": costs.base_table_wcu + costs.wasted_per_claim, "Read": 0.0},
            due={"Write": costs.due_index_wcu, "Read": costs.claim_rcu},
        )

    @classmethod
    def from_partitions(cls, landed: Iterable[PartitionUnits], lifecycles: int) -> LifecycleLoad:
        """From the meter's record of where each request's units landed, over ``lifecycles``."""
        load = cls()
        for p in landed:
            if p.index is None:
                sort = next(iter((p.sort_key or {"S": ""}).values()))
                bucket = getattr(load, placement(str(sort)))
            elif p.index == DUE_INDEX:
                bucket = load.due
            else:
                bucket = load.shared.setdefault(p.index, {"Write": 0.0, "Read": 0.0})
            bucket[p.kind] += p.units / lifecycles
        return load


def placement(sort_key: str) -> str:
    """Which :class:`LifecycleLoad` bucket a table item with ``sort_key`` lands in: the key
    function of :mod:`leasefence.keys` that places it. ``"marker"``: a claim marker
    (:func:`~leasefence.keys.claim_marker_key`, spread over the write shards by its own id);
    ``"tenant"``: the tenant's own items (:func:`~leasefence.keys.tenant_key`, the bare
    partition); ``"operation"``: the operation item, its payload and history items
    (:func:`~leasefence.keys.operation_partition` of the operation's id). The bench's test checks
    this against the keys an engine with write shards really writes."""
    if sort_key.startswith(keys.CLAIM_MARKER_PREFIX):
        return "marker"
    if sort_key.startswith(keys.TENANT_ITEM_PREFIX):
        return "tenant"
    return "operation"


def _over(counts: list[int], units: float, limit: float) -> bool:
    return bool(counts) and units > 0 and max(counts) * units > limit


def _second_over(
    rate: float,
    load: LifecycleLoad,
    shards: dict[str, int],
    rng: random.Random,
    fixed_tenant_reads: float = 0.0,
) -> str | None:
    """Draw one second at ``rate`` lifecycles/s; the first partition kind past its limit, if any."""
    ops = [_poisson(rng, rate / shards["operation"]) for _ in range(shards["operation"])]
    # A claim's marker hashes to a write shard of its own (its id, not the operation's).
    markers = [_poisson(rng, rate / shards["operation"]) for _ in range(shards["operation"])]
    dues = [_poisson(rng, rate / shards["due"]) for _ in range(shards["due"])]
    total = sum(ops)
    shared = {
        name: [_poisson(rng, rate / shards["shared"]) for _ in range(shards["shared"])]
        for name in load.shared
    }
    for kind, limit in _KINDS:
        # Write shard 0 is the bare tenant partition: it also holds the tenant's own items.
        table = [
            o * load.operation[kind] + m * load.marker[kind]
            for o, m in zip(ops, markers, strict=True)
        ]
        table[0] += total * load.tenant[kind]
        if kind == "Read":
            table[0] += fixed_tenant_reads  # the due spread's hint, per engine and second
        if max(table) > limit:
            return f"table {kind.lower()}"
        if _over(dues, load.due[kind], limit):
            return f"due index {kind.lower()}"
        for name, counts in shared.items():
            if _over(counts, load.shared[name][kind], limit):
                return f"{name} index {kind.lower()}"
    return None


def layout_bound(
    load: LifecycleLoad,
    operation_shards: int,
    due_shards: int,
    shared_shards: int = DEFAULT_SWEEP_SHARDS,
    seconds: int = 200,
    seed: int = 1,
    quantile: float = 0.99,
    hint_engines: int = HINT_ENGINES,
) -> dict[str, Any]:
    """The highest rate (lifecycles/s, one tenant) at which no partition, table or index, passes
    its limit in ``quantile`` of simulated seconds, and the partition that binds just above it.

    Each lifecycle's operation falls in a write shard and a due shard uniformly (hashes of its
    id); each second's count per shard is Poisson; no burst credit, no split for heat. Under load
    the due spread is at its widest (every due shard: raised by contention, throttling or rate),
    and ``hint_engines`` engines read its hint item, 0.5 unit each per cache period, on the
    tenant's bare partition (write shard 0)."""
    shards = {"operation": operation_shards, "due": due_shards, "shared": shared_shards}
    hint_reads = hint_engines * 0.5 * 1000 / SPREAD_CACHE_MS
    allowed = int(seconds * (1 - quantile))

    def binding(rate: float) -> str | None:
        rng, over, first = random.Random(seed), 0, None
        for _ in range(seconds):
            which = _second_over(rate, load, shards, rng, hint_reads)
            if which is not None:
                over, first = over + 1, first or which
                if over > allowed:
                    return first
        return None

    table_extra = {kind: load.tenant[kind] + load.marker[kind] for kind, _ in _KINDS}
    per_lifecycle = [
        (count, units[kind] + (table_extra[kind] if units is load.operation else 0.0), limit)
        for count, units in ((operation_shards, load.operation), (due_shards, load.due))
        for kind, limit in _KINDS
    ] + [
        (shared_shards, units[kind], limit)
        for units in load.shared.values()
        for kind, limit in _KINDS
    ]
    ceilings = [count * limit / units for count, units, limit in per_lifecycle if units > 0]
    lo, hi = 0.0, min(ceilings, default=math.inf)
    if math.isinf(hi):
        return {"bound_per_s": None, "binding": None}
    bound_by = binding(hi)  # what fails first just above the bound (at the lowest failing rate)
    for _ in range(22):
        mid = (lo + hi) / 2
        failed = binding(mid)
        if failed is None:
            lo = mid
        else:
            hi, bound_by = mid, failed
    return {"bound_per_s": round(lo), "binding": bound_by}


def layouts(
    load: LifecycleLoad,
    operation_shards: int,
    due_shards: int | None = None,
    seconds: int = 200,
) -> dict[str, Any]:
    """The one-shard layout (the defaults before the recorded layout: one write shard, 4 due
    shards) beside ``N`` write shards (and ``N`` due shards, or ``due_shards``), for one
    tenant."""
    sharded_due = due_shards or max(operation_shards, DEFAULT_DUE_SHARDS)
    rows = {}
    for name, ops, dues in (
        ("one_shard", 1, ONE_SHARD_DUE_SHARDS),
        ("sharded", operation_shards, sharded_due),
    ):
        rows[name] = {
            "operation_shards": ops,
            "due_shards": dues,
            **layout_bound(load, ops, dues, seconds=seconds),
        }
    return {
        "per_lifecycle_units": asdict(load),
        **rows,
        "assumes": {
            "partition_limits": {"wcu_per_s": PARTITION_WCU, "rcu_per_s": PARTITION_RCU},
            "quantile_of_seconds_within_limit": 0.99,
            "split_for_heat": False,
            "burst_credit": False,
            "shared_index_shards": DEFAULT_SWEEP_SHARDS,
            "one_tenant_one_job_type": True,
            "shards_uniform": "operation ids hash uniformly to write and due shards",
            "due_spread": "at its widest under load (every due shard)",
            "spread_hint_reads_per_s": HINT_ENGINES * 0.5 * 1000 / SPREAD_CACHE_MS,
        },
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        "| due shards | lifecycles/s per tenant (index bound) | ideal (uniform) | without "
        "split-for-heat | binding | idle poll RCU | before the spread |",
        "| ---: | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['due_shards']} | {row['due_index_bound_per_s']:,} | {row['ideal_per_s']:,} | "
            f"{row['tenant_bound_no_split_per_s']:,} | {row['binding_without_split']} | {row['idle_poll_rcu']:g} | "
            f"{row['idle_poll_rcu_every_shard']:g} |"
        )
    lines.append("")
    lines.append(
        f"Final-attempt claims (all tenants together) with {result['sweep_shards']} sweep shards: "
        f"{result['final_attempt_claims_bound_all_tenants_per_s']:,}/s."
    )
    for name in ("one_shard", "sharded"):
        row = result.get("layouts", {}).get(name)
        if row:
            lines.append(
                f"{name.replace('_', ' ')} layout ({row['operation_shards']} write shard(s), "
                f"{row['due_shards']} due shards): {row['bound_per_s']:,} lifecycles/s for one "
                f"tenant, bound by {row['binding']}."
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
    parser.add_argument(
        "--operation-shards",
        type=int,
        default=64,
        help="write shards of the base table's partition key for the sharded layout",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    costs = UnitCosts(wasted_per_claim=args.wasted)
    result = table(
        [int(s) for s in args.shards.split(",")],
        costs,
        sweep_shards=args.sweep_shards,
        seconds=args.seconds,
    )
    result["layouts"] = layouts(
        LifecycleLoad.from_costs(costs), args.operation_shards, seconds=args.seconds
    )
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
