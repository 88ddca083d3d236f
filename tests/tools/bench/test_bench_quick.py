"""`leasefence bench --quick` runs and its report has every field (not a timed test).

Runs the ``leasefence bench`` command when the command line has it, and the module
(``python -m leasefence_tools.bench``) otherwise: both end in :func:`leasefence_tools.bench.main`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from numbers import Number
from pathlib import Path

import pytest

from leasefence.limits import MAX_ITEM_PAYLOAD_BYTES
from leasefence.payloads import pack
from leasefence_tools.bench import allin, batched_http, cost_per_million, prices, profiles
from leasefence_tools.bench.payload import canonical
from leasefence_tools.bench.report import BATCHED_KEYS, REQUIRED_KEYS, STREAM_KEYS


def _command() -> list[str]:
    script = Path(sys.executable).parent / "leasefence"
    if script.exists():
        probe = subprocess.run(
            [str(script), "bench", "--help"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode == 0 and "--quick" in probe.stdout:
            return [str(script), "bench"]
    return [sys.executable, "-m", "leasefence_tools.bench"]


def test_quick_bench_reports_every_figure(tmp_path):
    out = tmp_path / "report.json"
    result = subprocess.run(
        [*_command(), "--quick", "--json", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    for key in REQUIRED_KEYS + STREAM_KEYS + BATCHED_KEYS:
        assert key in report, key
        assert isinstance(report[key], Number) and not isinstance(report[key], bool), (
            key,
            report[key],
        )
    assert {row["name"] for row in report["targets"]} >= {
        "wcu_per_lifecycle",
        "rcu_per_lifecycle",
        "wcu_per_heartbeat",
        "throughput_ratio_8",
        "throughput_ratio_32",
        "wasted_claims_per_success",
        "depth_read_ratio",
        "fairness_claims_before_small_tenant",
        "import_ratio_max",
        "stream_start_p50",
        "stream path cost",
    }
    assert json.loads(out.read_text())["wcu_per_lifecycle"] == report["wcu_per_lifecycle"]
    # Issue 16, deterministic at any scale (a manual clock): a long job's heartbeats in a polled
    # tenant, the takeover after a crash, and what an idle poll reads.
    takeover = report["sections"]["cost"]["long_job"]["takeover"]
    assert report["wcu_per_heartbeat"] <= 1.5
    assert report["takeover_latency_max_ms"] == takeover["max_ms"] <= takeover["bound_ms"]
    # The due spread (issue 33): a settled idle poll reads the cached spread hint and shard 0 only.
    assert report["rcu_idle_poll"] == 1.0

    # Issue 16: dollars per million lifecycles by profile, from what this run measured.
    costs = report["cost_per_million"]
    assert set(costs) == {f"leasefence_{p}" for p in profiles.PROFILES} | set(
        cost_per_million.ALTERNATIVES
    )
    assert all(isinstance(v, Number) and v > 0 for v in costs.values()), costs
    measured = report["sections"]["profiles"]["profiles"]
    lines = report["sections"]["cost_per_million"]["profiles"]
    for name in profiles.PROFILES:
        wcu = measured[name]["wcu"]
        assert wcu >= report["wcu_per_lifecycle"]  # the lifecycle's own writes and then some
        assert lines[name]["dynamodb_writes"] == round(
            wcu * prices.usd("dynamodb_write_request_unit") * 1e6, 4
        )
        assert measured[name]["billed_ms"]["api"] > 0 and lines[name]["lambda_duration"] > 0
    # Enqueue, claim (its answer carries the payload: no GET .../payload), complete.
    assert measured["http_workers"]["api_requests"] == 3
    # The bench's payload (979 bytes) is kept in the item: no S3 PUT, GET or object.
    assert report["sections"]["profiles"]["payload_bytes"] <= MAX_ITEM_PAYLOAD_BYTES
    for name in profiles.PROFILES:
        assert (measured[name]["s3_put"], measured[name]["s3_get"]) == (0, 0), name
        assert measured[name]["payload_object_bytes"] == 0, name
    # Claimed from the stream record: no query; the claim reads the payload's own item once
    # (an eventually consistent GetItem of under 4 KB, the claim's: 0.5 read units), and the due
    # spread's hint once its 5 s cache has lapsed (an eventually consistent GetItem: 0.5; the
    # bench's lifecycles are seconds apart, so every claim reads it: an upper bound for a busy
    # worker).
    assert measured["worker_function"]["rcu"] == 1.0

    # Issue 24: all in, every line, at a stated volume and capacity mode.
    all_in = report["cost_per_million_all_in"]
    assert all_in["assumes"]["volume_per_month"] == 10_000_000
    assert all_in["assumes"]["capacity"] == "on_demand"
    for name in ("http_workers", "worker_function"):
        profile = all_in["profiles"][name]
        assert profile["total"] > lines[name]["dynamodb_writes"]
        assert sum(profile["lines"].values()) == pytest.approx(profile["total"], abs=0.02)
        for line in ("dynamodb_backup_pitr", "lambda_duration", "logs_ingestion"):
            assert profile["lines"][line] > 0, (name, line)
        # Outcome events are off by default (the construct's): priced as an option instead.
        assert profile["lines"]["eventbridge_events"] == 0, name
        assert all_in["options"]["events"]["usd_per_million"][name] > 0, name
        assert profile["lines"]["s3_requests"] == 0 and profile["lines"]["s3_storage"] == 0, name
        # The history is in the operation's item, written by each transition's own write.
        assert profile["lines"]["dynamodb_writes_history"] == 0, name
        assert (
            measured[name]["wcu_history"] == 0
            and measured[name]["stored"]["ended"]["history_bytes"] == 0
        )
        # The payload item is stored (and billed) until its expiry, then TTL takes it.
        stored = measured[name]["stored"]
        # Kept packed (raw DEFLATE): an item of under 1 KB around the packed bytes, so its write
        # and its expiry's write cost 1 unit each.
        assert len(pack(canonical())) < stored["ended"]["payload_item_bytes"] <= 1024
        assert stored["after_purge"]["payload_item_bytes"] == 0
        assert (
            stored["ended"]["table_bytes"]
            > stored["ended"]["item_bytes"] + stored["ended"]["payload_item_bytes"]
        )
        # Index writes counted: at least the lifecycle's own units.
        assert report["wru_per_lifecycle_all"][name] >= measured[name]["wcu"] - 1e-9
        assert profile["by_component"]["heartbeats"] > 0
        # The bench's payload is in a payload item: DynamoDB's TTL deletes it, no purge to price.
        assert profile["by_component"]["payload_purge"] == 0
    assert set(all_in["alternatives"]) == set(cost_per_million.ALTERNATIVES)
    assert (
        isinstance(report["idle_worker_month_usd"], Number) and report["idle_worker_month_usd"] > 0
    )
    events = report["sections"]["profiles"]["events"]
    assert (
        events["heartbeat_http"]["api_requests"] == 1 and events["heartbeat_in_process"]["wcu"] >= 1
    )
    assert events["idle_poll_http"]["wcu"] == 0  # an idle poll writes nothing
    # No purge: the payload items carry the table's TTL, and no operation was filed for a purge.
    assert events["purge"]["purged_per_run"] == [0, 0]
    assert events["purge"]["wcu"] == events["purge"]["wcu_index"] == events["purge"]["rcu"] == 0
    # Heartbeat and purge records, and the end of retention, invoke no publisher (its filters).
    for event in ("heartbeat_http", "heartbeat_in_process", "purge", "end_of_retention"):
        assert events[event]["functions"].get("publisher", {}).get("invocations", 0) == 0, event
    assert events["end_of_retention"]["wcu"] == 0  # no history item to delete
    # Issue 32: the lean item's targets, one named field each with its target and met or missed
    # (the shape, not the numbers), measured with an incompressible payload.
    lean = report["lean_item"]
    assert lean["payload"]["bytes"] == report["sections"]["profiles"]["payload_bytes"]
    assert lean["payload"]["zlib_ratio"] > 0.7
    writes = lean["item_write_units"]
    kinds = {"enqueue", "claim", "heartbeat", "fail", "requeue", "complete"}
    assert set(writes["by_kind"]) == set(writes["worst_case_max_ids"]["by_kind"]) == kinds
    assert all(isinstance(v, Number) and v >= 1 for v in writes["by_kind"].values())
    assert min(writes["worst_case_max_ids"]["ids_bytes"].values()) > 1000  # 4-byte characters
    targets = [writes, lean["largest_item_bytes"], lean["engine_efficiency"]]
    for field in ("wru_per_lifecycle_all_in", "all_in_usd_per_million"):
        assert set(lean[field]) == {"stream_worker", "http_workers"}, field
        targets += lean[field].values()
    for target in targets:
        assert isinstance(target["value"], Number) and isinstance(target["met"], bool), target
        assert target["target"].split()[0] in ("<=", ">="), target
    assert lean["all_in_usd_per_million"]["http_workers"]["lines"]["dynamodb_writes_table"] > 0
    assert len(lean["engine_efficiency"]["runs"]) == 1  # three in a full run
    assert {row["name"] for row in report["targets"]} >= {
        "item_write_units",
        "largest_item_bytes",
        "engine_efficiency",
    }
    # The optional parts and the comparison for the same job (what the README's table prints).
    assert {k: v["default"] for k, v in all_in["options"].items()} == {
        "events": False,
        "alarms": True,
        "dashboard": False,
    }
    compared = all_in["comparison"]
    assert set(compared["alternatives"]) == set(cost_per_million.ALTERNATIVES)
    assert all("same_job" in alt for alt in compared["alternatives"].values())
    readme = subprocess.run(
        [*_command(), "--readme-table", str(out)], capture_output=True, text=True, timeout=120
    )
    assert readme.returncode == 0 and readme.stdout.startswith("| | guarantees |"), readme.stderr[
        -2000:
    ]

    # Issue 33: a busy fleet of HTTP workers, one request per call and batched; the batched row
    # of the all-in table priced from what this run measured.
    fleet = report["sections"]["batched_http"]
    one, batched = fleet["one_at_a_time"], fleet["batched"]
    assert report["http_requests_per_lifecycle_batched"] == batched["requests_per_lifecycle"]
    assert report["http_requests_per_lifecycle_one_at_a_time"] == one["requests_per_lifecycle"]
    assert batched["requests_per_lifecycle"] < one["requests_per_lifecycle"]
    assert all(route.startswith("POST /v1/batch/") for route in batched["by_route"]), batched
    assert one["by_route"]["POST /v1/operations"] == 1  # an enqueue request per operation
    figures = report["sections"]["cost_per_million_all_in"]["batched_fleet"]
    assert figures == batched_http.fleet_figures(fleet)
    assert figures["lifecycle_requests"] + figures["renewal_requests"] == pytest.approx(
        batched["requests_per_lifecycle"], abs=0.01
    )
    row = all_in["profiles"]["http_workers_batched"]
    assert report["all_in_http_workers_batched_usd"] == row["total"] > 0
    assert sum(row["lines"].values()) == pytest.approx(row["total"], abs=0.02)
    assumed = allin.Assumptions()
    idle_polls = assumed.idle_worker_months * allin.SECONDS_PER_MONTH / assumed.idle_poll_mean_s
    billed_requests = (
        figures["lifecycle_requests"]
        + assumed.heartbeats() / figures["leases_per_renewal"]
        + idle_polls / assumed.volume
    )
    assert row["lines"]["api_gateway_requests"] == pytest.approx(
        billed_requests * prices.usd("api_gateway_http_request") * 1e6, abs=1e-3
    )
    # The batch routes' own units: each item its own conditional write, as one at a time.
    batch_window = measured["http_workers_batched"]
    assert batch_window["wcu"] >= report["wcu_per_lifecycle"]
    assert row["lines"]["dynamodb_writes_index"] > 0 and row["lines"]["logs_ingestion"] > 0
    for line in ("dynamodb_storage", "dynamodb_backup_pitr", "lambda_duration"):
        assert row["lines"][line] > 0, line
    assert row["by_component"]["heartbeats"] > 0 and row["by_component"]["idle_http_workers"] > 0
    assert row["lines"]["api_gateway_requests"] < all_in["profiles"]["http_workers"]["lines"][
        "api_gateway_requests"
    ]
    renewals = report["sections"]["profiles"]["events"]["heartbeat_http_batched"]
    assert renewals["api_requests"] == pytest.approx(1 / profiles.BATCH, abs=1e-3)
    assert report["idle_worker_month_usd_batched"] > 0
    contended = report["sections"]["contention"]["batched"]
    assert contended["batch"] == report["meta"]["parameters"]["batched_workers"]
    assert contended["claims"] == report["meta"]["parameters"]["ct_batch_claims"]
    assert report["wasted_claims_per_success_batched"] == contended["wasted_claims_per_success"]
    assert {row["name"] for row in report["targets"]} >= {
        "http_requests_per_lifecycle_batched",
        "all_in_http_workers_batched",
        "idle_worker_month_usd_batched",
        "wasted_claims_per_success_batched",
    }

    # Every log and EMF line the functions wrote was checked: no raw id, no payload.
    privacy = report["sections"]["profiles"]["log_privacy"]
    assert privacy["lines_checked"] > 0 and privacy["lines_with_a_raw_id_or_payload"] == {}
