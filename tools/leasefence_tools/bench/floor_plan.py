"""The lifecycle-floor plan (issue 24), estimated: what each engine change would take off the
all-in bill, applied one after the other to what the bench measured.

``python -m leasefence_tools.bench.floor_plan bench-report.json`` prints the table. These are
estimates, not measurements: each step edits the measured usage windows of
:mod:`leasefence_tools.bench.profiles` the way the change would (stated in each step) and prices
them with :mod:`leasefence_tools.bench.allin` at its defaults. The changes come after the engine
split; every guarantee of the README must still hold after each (the torture run proves it).
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from leasefence.limits import MAX_ITEM_PAYLOAD_BYTES
from leasefence_tools.bench import allin

#: A slim ended record (keys, payload hash, fence, state, outcome, TTL), bytes.
SLIM_ITEM_BYTES = 220
#: Payloads up to this size are kept in the operation's item (S3 above it): built, see
#: :data:`leasefence.limits.MAX_ITEM_PAYLOAD_BYTES` (1 KiB: at most one write unit more per write).
INLINE_PAYLOAD_MAX_BYTES = MAX_ITEM_PAYLOAD_BYTES
KB = 1024


def _node(w: dict[str, Any], function: str) -> dict[str, Any]:
    return w["functions"].setdefault(
        function,
        {"invocations": 0, "cpu_ms": 0, "requests": {}, "log_bytes": {}, "log_lines": {}},
    )


def _drop(w: dict[str, Any], function: str) -> None:
    """The function is no longer invoked for this window (its units go with it)."""
    node = w["functions"].pop(function, None)
    if node is None:
        return
    for key in ("wcu", "wcu_index", "rcu"):
        w[key] -= node.get(key, 0)
    if function == "publisher":
        w["wcu_history"] = 0
        w["events"] = 0
    if function == "api":
        w["api_requests"] -= node.get("invocations", 0)


def _fewer_invocations(w: dict[str, Any], function: str, fewer: float) -> None:
    """``fewer`` invocations of ``function``, each taking an average one's CPU and log lines."""
    node = w["functions"].get(function)
    if not node or not node.get("invocations"):
        return
    keep = max(0.0, node["invocations"] - fewer) / node["invocations"]
    node["invocations"] -= fewer
    node["cpu_ms"] = node.get("cpu_ms", 0) * keep
    for key in ("log_bytes", "log_lines"):
        node[key] = {k: v * keep for k, v in node.get(key, {}).items()}
    node["emf_bytes"] = node.get("emf_bytes", 0) * keep
    node["emf_lines"] = node.get("emf_lines", 0) * keep
    if function == "api":
        w["api_requests"] -= fewer


def _units(
    w: dict[str, Any], function: str, wcu: float = 0, wcu_index: float = 0, rcu: float = 0
) -> None:
    node = _node(w, function)
    node["wcu"] = node.get("wcu", 0) + wcu + wcu_index
    node["wcu_index"] = node.get("wcu_index", 0) + wcu_index
    node["rcu"] = node.get("rcu", 0) + rcu
    w["wcu"] += wcu + wcu_index
    w["wcu_index"] += wcu_index
    w["rcu"] += rcu


def _requests(w: dict[str, Any], function: str, service: str, delta: float) -> None:
    node = _node(w, function)
    node.setdefault("requests", {})[service] = max(0.0, node["requests"].get(service, 0) + delta)


def _writer(profile: str) -> str:
    """The function whose invocations make the lifecycle's writes."""
    return "api" if profile.startswith("http_workers") else "worker"


# ------------------------------------------------------------------------------ the steps


def filters(m: dict[str, Any]) -> None:
    """Heartbeat and purge records never invoke the publisher (the stream mapping's filter
    passes transitions only; a heartbeat or purge write carries no new transition)."""
    for event in ("heartbeat_http", "heartbeat_in_process", "purge"):
        _drop(m["events"][event], "publisher")


def history_in_the_item(m: dict[str, Any]) -> None:
    """The history kept in the operation's own item, written by the transition's conditional
    write (bounded: older entries dropped past a stated count): no history item, no history
    writes; the publisher is invoked once per lifecycle, for the outcome event, and not at all
    by the end of retention."""
    for name, profile in m["profiles"].items():
        publisher = profile["functions"].get("publisher")
        if publisher:
            _units(profile, "publisher", wcu=-publisher.get("wcu", 0))
            profile["wcu_history"] = 0
            _requests(profile, "publisher", "dynamodb", -publisher["requests"].get("dynamodb", 0))
            _fewer_invocations(profile, "publisher", max(0.0, publisher["invocations"] - 1))
        ended = profile["stored"]["ended"]
        grown = ended["item_bytes"] + max(0, ended["history_bytes"] - 120)
        extra = math.ceil(grown / KB) - math.ceil(ended["item_bytes"] / KB)
        if extra > 0:  # the transitions' writes cross a KB: each costs that much more
            _units(profile, _writer(name), wcu=3 * extra)
        ended["item_bytes"] = grown
        ended["history_bytes"] = 0
        ended["table_bytes"] = grown + 100
        after = profile["stored"]["after_purge"]
        if after.get("history_bytes", 0) > 0:  # (none measured: the history is in the item)
            after["table_bytes"] = max(0, after["table_bytes"] - after["history_bytes"] - 100)
        after["history_bytes"] = 0
    _drop(m["events"]["end_of_retention"], "publisher")


def slim_record(m: dict[str, Any]) -> None:
    """After an operation ends: the whole item (with its history) for a stated history
    retention (here the payload's, 30 days), then a slim record of what the identity guarantees
    need for the rest of the identity window (written by the run that purges the payload).
    Built (:func:`leasefence.engine._erasure.purge_one`): a report that measured it (its purged
    items slimmed, ``history_expired``) is left as measured."""
    for profile in m["profiles"].values():
        after = profile["stored"]["after_purge"]
        if after.get("history_expired"):
            continue  # built: measured
        after["table_bytes"] = SLIM_ITEM_BYTES + 100


def inline_payloads(m: dict[str, Any]) -> None:
    """Payloads up to 2 KB kept in the item (S3 above): no S3 PUT or GET, no S3 storage, no
    purge of the object; the item is larger until the completing write drops the payload, so
    each write before it costs more units; no purge index entry (the completion drops it)."""
    payload = m["payload_bytes"]
    if payload > INLINE_PAYLOAD_MAX_BYTES:
        return
    if all(not p.get("s3_put") for p in m["profiles"].values()):
        return  # built: the measurement already keeps the payload in the item
    for name, profile in m["profiles"].items():
        item = profile["stored"]["ended"]["item_bytes"]
        extra = math.ceil((item + payload) / KB) - math.ceil(item / KB)
        writes = 3  # enqueue, claim, complete (the completion's before-image holds the payload)
        _units(profile, _writer(name), wcu=writes * extra, wcu_index=-1)  # no purge entry
        for function in ("api", "worker"):
            _requests(
                profile,
                function,
                "s3",
                -profile["functions"].get(function, {}).get("requests", {}).get("s3", 0),
            )
        profile["s3_put"] = profile["s3_get"] = 0
        profile["payload_object_bytes"] = 0
        ended = profile["stored"]["ended"]
        ended["index_bytes"] = max(0, ended["index_bytes"] - 180)  # the purge entry
    for event in ("heartbeat_http", "heartbeat_in_process"):
        w = m["events"][event]
        item = m["profiles"]["http_workers"]["stored"]["ended"]["item_bytes"]
        extra = math.ceil((item + payload) / KB) - math.ceil(item / KB)
        _units(w, "api" if event == "heartbeat_http" else "worker", wcu=extra)
    m["events"]["purge"] = _empty()


def claim_carries_payload(m: dict[str, Any]) -> None:
    """HTTP workers: the claim answer carries the payload (no ``GET .../payload``: one API
    request, invocation and item read fewer)."""
    if m.get("claim_carries_payload"):
        return  # built: the measurement's HTTP worker already sends no GET .../payload
    w = m["profiles"]["http_workers"]
    _fewer_invocations(w, "api", 1)
    _units(w, "api", rcu=-0.5)
    _requests(w, "api", "dynamodb", -1)


def complete_and_claim_next(m: dict[str, Any]) -> None:
    """HTTP workers: completing a job claims the next one in the same request (a busy worker
    makes one request fewer per lifecycle; each is still its own conditional write)."""
    _fewer_invocations(m["profiles"]["http_workers"], "api", 1)


def due_entry_updated(m: dict[str, Any]) -> None:
    """A claim updates its due entry in place (the entry keeps its key; claimers skip a live
    lease they read) instead of deleting it and filing a new one at the lease's expiry: one
    index write fewer per claim."""
    for name, profile in m["profiles"].items():
        _units(profile, _writer(name), wcu_index=-1)


def _empty() -> dict[str, Any]:
    return {
        "functions": {},
        "wcu": 0,
        "wcu_index": 0,
        "rcu": 0,
        "dynamodb_requests": 0,
        "wcu_history": 0,
        "api_requests": 0,
        "s3_put": 0,
        "s3_get": 0,
        "s3_delete": 0,
        "events": 0,
    }


STEPS: tuple[tuple[str, Callable[[dict[str, Any]], None]], ...] = (
    ("heartbeat and purge records invoke nothing (stream filter)", filters),
    ("history kept in the operation's item (same conditional write, bounded)", history_in_the_item),
    ("slim ended record after the history retention (30 days; built: measured)", slim_record),
    ("payloads up to 1 KiB in the item, S3 above (built: measured)", inline_payloads),
    ("the claim answer carries the payload (HTTP; built: measured)", claim_carries_payload),
    ("complete-and-claim-next in one request (HTTP, busy worker)", complete_and_claim_next),
    ("a claim updates its due entry in place (one index write fewer)", due_entry_updated),
)


def estimate(
    measured: dict[str, Any], assumptions: allin.Assumptions | None = None
) -> list[dict[str, Any]]:
    """The all-in totals and write units of the two main profiles after each step, cumulative."""
    a = assumptions or allin.Assumptions()
    m = copy.deepcopy(measured)
    for profile in m["profiles"].values():
        for key in ("ended", "after_purge"):
            profile["stored"][key].setdefault(
                "item_bytes", profile["stored"][key]["table_bytes"] - 500
            )
            profile["stored"][key].setdefault("history_bytes", 300)
    rows = []

    def row(step: str) -> dict[str, Any]:
        out: dict[str, Any] = {"step": step}
        for name in allin.MAIN_PROFILES:
            priced = allin.leasefence_profile(name, m, a)
            out[name] = {"total": priced["total"], "wru": priced["wru_per_lifecycle_all"]}
        return out

    rows.append(row("measured (today)"))
    for step, apply in STEPS:
        apply(m)
        rows.append(row(step))
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| step (cumulative, estimated) | HTTP workers $/M | write units | worker function $/M | write units |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        h, s = r["http_workers"], r["worker_function"]
        lines.append(
            f"| {r['step']} | ${h['total']:.2f} | {h['wru']:g} | ${s['total']:.2f} | {s['wru']:g} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    report = json.loads(Path(args[0] if args else "bench-report.json").read_text())
    print(render(estimate(report["sections"]["profiles"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
