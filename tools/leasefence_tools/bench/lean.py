"""Issue 32's targets (the lean operation item), as named fields of the report.

``report["lean_item"]`` holds one field per target, each with its value, its target and whether it
was met, and what it was measured on:

* ``item_write_units``: every item write of an ordinary lifecycle (enqueue, claim, heartbeat,
  fail, requeue, complete) at the bench's ids and payload, per kind: the units of its largest
  single write on the table (index writes apart); target 1. ``worst_case_max_ids`` states the
  same with every id at its limit in 4-byte characters (no target);
* ``wru_per_lifecycle_all_in``: write units per lifecycle, everything counted (item writes, the
  heartbeat, a payload item if any, index entries, the claim token's marker, the purge or TTL):
  stream worker <= 6, HTTP workers <= 7 (``lifecycle_only`` beside it: without the heartbeat and
  the purge);
* ``all_in_usd_per_million``: stream worker <= $11.50, HTTP workers <= $16.50, each with its lines;
* ``largest_item_bytes``: the largest reachable operation item, computed from the limits
  (:func:`leasefence.item_budget.max_item_bytes`, 4-byte characters in every id): <= 64 KiB;
* ``engine_efficiency``: the engine's lifecycle rate against its own request mix, the median of
  the runs (three in a full run): >= 0.8.

The payload these assume is :mod:`leasefence_tools.bench.payload` (incompressible; its zlib ratio
is in ``payload``).
"""

from __future__ import annotations

import statistics
from typing import Any

from leasefence_tools.bench.cost import ITEM_WRITE_KINDS

#: The two profiles issue 32 names, by the report's profile names.
PROFILES = {"stream_worker": "worker_function", "http_workers": "http_workers"}
ITEM_WRITE_UNITS = 1
WRU_PER_LIFECYCLE = {"stream_worker": 6.0, "http_workers": 7.0}
ALL_IN_USD = {"stream_worker": 11.50, "http_workers": 16.50}
LARGEST_ITEM_BYTES = 64 * 1024
ENGINE_EFFICIENCY = 0.8


def _at_most(value: float, target: float) -> dict[str, Any]:
    return {"value": value, "target": f"<= {target:g}", "met": value <= target}


def efficiency(throughput_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run the lower of the two fleets' ratios (8 and 32 workers); the median of the runs."""
    per_run = [
        min(run[n]["orchestration_ratio"] for n in run if n.isdigit()) for run in throughput_runs
    ]
    value = round(statistics.median(per_run), 3)
    return {
        "value": value,
        "target": f">= {ENGINE_EFFICIENCY:g}",
        "met": value >= ENGINE_EFFICIENCY,
        "runs": per_run,
        "note": "timed: moves with the machine's load (the target is for an idle machine)",
    }


def _item_writes(measured: dict[str, Any]) -> dict[str, Any]:
    return {kind: measured["by_kind"][kind]["item_write_units_max"] for kind in ITEM_WRITE_KINDS}


def targets(sections: dict[str, Any], throughput_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``lean_item`` (see the module docstring)."""
    from leasefence.item_budget import max_item_bytes

    cost = sections["cost"]
    all_in = sections["cost_per_million_all_in"]["profiles"]
    by_kind = _item_writes(cost["item_writes"])
    worst = max(by_kind.values())
    largest = max_item_bytes()
    return {
        "payload": sections["profiles"].get("payload", {}),
        "item_write_units": {
            "value": worst,
            "target": f"<= {ITEM_WRITE_UNITS}",
            "met": worst <= ITEM_WRITE_UNITS,
            "by_kind": by_kind,
            "ids_bytes": cost["item_writes"]["ids_bytes"],
            "payload_bytes": cost["item_writes"]["payload_bytes"],
            "worst_case_max_ids": {
                "by_kind": _item_writes(cost["item_writes_max_ids"]),
                "ids_bytes": cost["item_writes_max_ids"]["ids_bytes"],
            },
        },
        "wru_per_lifecycle_all_in": {
            name: _at_most(all_in[profile]["wru_per_lifecycle_all_in"], WRU_PER_LIFECYCLE[name])
            # The lifecycle's own writes (enqueue, claim, complete, their index entries and the
            # claim token's marker) without the heartbeat and the purge: the figure issue 32's
            # "today 11 and 12" counts.
            | {"lifecycle_only": all_in[profile]["wru_per_lifecycle_all"]}
            for name, profile in PROFILES.items()
        },
        "all_in_usd_per_million": {
            name: _at_most(all_in[profile]["total"], ALL_IN_USD[name])
            | {"lines": all_in[profile]["lines"]}
            for name, profile in PROFILES.items()
        },
        "largest_item_bytes": _at_most(largest, LARGEST_ITEM_BYTES)
        | {"computed_by": "leasefence.item_budget.max_item_bytes (4-byte characters in every id)"},
        "engine_efficiency": efficiency(throughput_runs),
    }


def rows(lean: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets as rows of the report's short table."""
    iw = lean["item_write_units"]
    out = [
        {
            "name": "item_write_units",
            "target": iw["target"],
            "value": iw["value"],
            "met": iw["met"],
            "result": ", ".join(f"{k} {v:g}" for k, v in iw["by_kind"].items()),
            "note": f"Largest single item write of each kind at the bench's ids and its "
            f"{iw['payload_bytes']}-byte payload (zlib ratio "
            f"{lean['payload'].get('zlib_ratio', '?')}); with every id at its limit in 4-byte "
            "characters: "
            + ", ".join(f"{k} {v:g}" for k, v in iw["worst_case_max_ids"]["by_kind"].items())
            + ".",
        }
    ]
    for field, what in (
        ("wru_per_lifecycle_all_in", "write units per lifecycle, everything counted"),
        ("all_in_usd_per_million", "$ per million lifecycles, all in"),
    ):
        for name, t in lean[field].items():
            note = what
            if "lines" in t:
                top = sorted(t["lines"].items(), key=lambda kv: -kv[1])[:5]
                note += ": " + ", ".join(f"{k} ${v:.2f}" for k, v in top)
            out.append(
                {
                    "name": f"{field}.{name}",
                    "target": t["target"],
                    "value": t["value"],
                    "met": t["met"],
                    "result": f"{t['value']:g}",
                    "note": note + ".",
                }
            )
    for field, note in (
        ("largest_item_bytes", lean["largest_item_bytes"]["computed_by"]),
        ("engine_efficiency", lean["engine_efficiency"]["note"]),
    ):
        t = lean[field]
        extra = f" (runs {t['runs']})" if "runs" in t else ""
        out.append(
            {
                "name": field,
                "target": t["target"],
                "value": t["value"],
                "met": t["met"],
                "result": f"{t['value']:g}{extra}",
                "note": note + ".",
            }
        )
    return out
