"""The all-in cost model (issue 24): its arithmetic checked against counted requests by hand.

Every expected figure below is computed here from the counts and the published prices, not by
the model's own functions; nothing is timed.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from leasefence_tools.bench import allin, prices
from leasefence_tools.bench.allin import Assumptions, Bill

ROOT = Path(__file__).resolve().parents[3]
M = 1_000_000
GB = 2**30

#: One window as the profiles measure it: an API function called twice (4 DynamoDB requests and
#: an S3 PUT between them) and the publisher once (2 history writes, one event).
API = {
    "invocations": 2, "cpu_ms": 10.0, "requests": {"dynamodb": 4, "s3": 1},
    "log_bytes": {"INFO": 1000, "WARNING": 200}, "log_lines": {"INFO": 2, "WARNING": 1},
    "emf_bytes": 300, "emf_lines": 1, "wcu": 6, "wcu_index": 2, "rcu": 1,
}
PUBLISHER = {
    "invocations": 1, "cpu_ms": 2.0, "requests": {"dynamodb": 2, "events": 1},
    "log_bytes": {"INFO": 400}, "log_lines": {"INFO": 1}, "emf_bytes": 0, "emf_lines": 0,
    "wcu": 2, "wcu_index": 0, "rcu": 0,
}
WINDOW = {
    "functions": {"api": API, "publisher": PUBLISHER},
    "wcu": 8, "wcu_index": 2, "rcu": 1, "api_requests": 2,
    "s3_put": 1, "s3_get": 0, "s3_delete": 0, "events": 1,
}
MEASURED = {"memory_mb": {"api": 1024, "publisher": 256}, "payload_bytes": 979}
ACCESS_LINE = len(json.dumps(allin.ACCESS_LOG_LINE, separators=(",", ":")).encode()) + 1


def _bill(**kwargs) -> Bill:
    defaults = {"volume": M, "tracing": False, "log_level": "WARNING"}
    return Bill(Assumptions(**{**defaults, **kwargs}), MEASURED)


def _lines(bill: Bill) -> dict[str, float]:
    bill.window("lifecycle", copy.deepcopy(WINDOW))
    return {k: v * M for k, v in bill.lines.items()}


def test_request_and_unit_lines_follow_the_counted_requests() -> None:
    lines = _lines(_bill())
    assert lines["dynamodb_writes_table"] == pytest.approx((8 - 2 - 2) * 0.625)  # 4 on the table
    assert lines["dynamodb_writes_index"] == pytest.approx(2 * 0.625)
    assert lines["dynamodb_writes_history"] == pytest.approx(2 * 0.625)  # the publisher's
    assert lines["dynamodb_reads"] == pytest.approx(1 * 0.125)
    assert lines["api_gateway_requests"] == pytest.approx(2 * 1.00)
    assert lines["lambda_requests"] == pytest.approx(3 * 0.20)
    assert lines["s3_requests"] == pytest.approx(1 * 5.00)  # $0.005 per 1,000 PUTs
    assert lines["eventbridge_events"] == 0  # outcome events are off by default (the construct's)
    assert _lines(_bill(events=True))["eventbridge_events"] == pytest.approx(1 * 1.00)
    assert lines["xray_traces"] == 0  # tracing off


def test_invocations_only_outcome_events_cause_are_billed_with_events_on_only() -> None:
    """A stream batch that a mapping without events would not deliver is measured as
    ``<function>+events``: without events (the default) none of its lines is billed, with them
    all of it, at its function's memory."""
    window = copy.deepcopy(WINDOW)
    window["functions"]["publisher" + allin.EVENTS_ONLY] = window["functions"].pop("publisher")
    for events in (False, True):
        bill = _bill(events=events)
        bill.window("lifecycle", copy.deepcopy(window))
        tagged = {k: v * M for k, v in bill.lines.items()}
        assert tagged == pytest.approx(_lines(_bill(events=events)) if events else _lines_without_publisher())
    # Without events: the API's lines alone.
    lines = _lines_without_publisher()
    assert lines["lambda_requests"] == pytest.approx(2 * 0.20)
    assert lines["dynamodb_writes_table"] == pytest.approx((6 - 2) * 0.625)
    assert lines["dynamodb_writes_history"] == 0


def _lines_without_publisher() -> dict[str, float]:
    window = copy.deepcopy(WINDOW)
    window["functions"].pop("publisher")
    window.update({"wcu": 6, "wcu_index": 2, "rcu": 1})
    bill = _bill()
    bill.window("lifecycle", window)
    return {k: v * M for k, v in bill.lines.items()}


def test_duration_is_cpu_at_the_memory_share_plus_request_latency() -> None:
    lines = _lines(_bill())
    # api: 10 CPU-ms at 1024/1769 of a vCPU, 4 DynamoDB requests at 5 ms and a PUT at 15 ms,
    # half a ms of rounding per invocation; 1 GB. publisher: 2 CPU-ms at 256/1769, two requests
    # at 5 ms, one PutEvents at 15 ms; 0.25 GB.
    api_ms = 10 / (1024 / 1769) + 4 * 5 + 15 + 2 * 0.5
    pub_ms = 2 / (256 / 1769) + 2 * 5 + 0.5  # no PutEvents: events are off by default
    gb_s = api_ms / 1000 * 1.0 + pub_ms / 1000 * 0.25
    assert lines["lambda_duration"] == pytest.approx(gb_s * 0.0000133334 * M)
    with_events = _lines(_bill(events=True))["lambda_duration"]
    assert with_events == pytest.approx((gb_s + 15 / 1000 * 0.25) * 0.0000133334 * M)
    slower = _bill(cpu_factor=2.0)
    assert _lines(slower)["lambda_duration"] > lines["lambda_duration"]


def test_logs_apply_the_levels_emf_and_platform_lines() -> None:
    retention = 30 / prices.DAYS_PER_MONTH
    per_gb = 0.50 + 0.03 * retention

    # WARNING: the API's WARNING line and its EMF line (Lambda keeps EMF: application level
    # INFO), no INFO line, no platform lines (system WARN); one access log line per request.
    warning = 200 + 26 + 300 + 26 + 2 * (ACCESS_LINE + 26)
    assert _lines(_bill())["logs_ingestion"] + _lines(_bill())["logs_storage"] == pytest.approx(
        warning / GB * per_gb * M
    )
    # INFO: the INFO lines too, and Lambda's start and report lines of the 3 invocations.
    platform = allin.platform_bytes_per_invocation(tracing=False)
    info = warning + 1000 + 2 * 26 + 400 + 26 + 3 * platform
    lines = _lines(_bill(log_level="INFO"))
    assert lines["logs_ingestion"] == pytest.approx(info / GB * 0.50 * M)
    assert platform > 300 and allin.platform_bytes_per_invocation(tracing=True) > platform


def test_traces_follow_the_default_sampling_at_the_volume() -> None:
    # 2 API invocations per lifecycle at 1M lifecycles a month: 0.76 a second, all recorded.
    rate = 2 * M / allin.SECONDS_PER_MONTH
    assert allin.traced_share(2 * M, tracing=True) == 1.0 and rate < 1
    # At 100M: 76 a second, the first each second and 5% of the rest.
    fast = 2 * 100 * M / allin.SECONDS_PER_MONTH
    assert allin.traced_share(200 * M, tracing=True) == pytest.approx((1 + 0.05 * (fast - 1)) / fast)
    assert allin.traced_share(200 * M, tracing=False) == 0
    bill = _bill(tracing=True)
    bill.traced_share = {"api": 1.0, "publisher": 1.0}
    assert _lines(bill)["xray_traces"] == pytest.approx(3 * 5.00)


def test_a_function_tallied_in_two_parts_is_sampled_as_one() -> None:
    """``publisher`` and ``publisher+events`` are one function: one sampling of its invocations
    (the first each second, then 5%), not one for each part."""
    measured = _profiles_measured()
    a = Assumptions(volume=100 * M, tracing=True, events=True, log_level="WARNING")
    whole = allin.leasefence_profile("http_workers", measured, a)
    split = copy.deepcopy(measured)
    for name in ("http_workers", "worker_function"):
        functions = split["profiles"][name]["functions"]
        if "publisher" in functions:
            half = copy.deepcopy(functions["publisher"])
            for key in ("invocations", "cpu_ms", "emf_bytes", "emf_lines", "wcu", "rcu", "wcu_index"):
                if key in half:
                    half[key] = half[key] / 2
                    functions["publisher"][key] = functions["publisher"][key] / 2
            half["requests"] = {k: v / 2 for k, v in half["requests"].items()}
            functions["publisher"]["requests"] = dict(half["requests"])
            half["log_bytes"] = {k: v / 2 for k, v in half["log_bytes"].items()}
            functions["publisher"]["log_bytes"] = dict(half["log_bytes"])
            half["log_lines"] = {k: v / 2 for k, v in half["log_lines"].items()}
            functions["publisher"]["log_lines"] = dict(half["log_lines"])
            functions["publisher" + allin.EVENTS_ONLY] = half
    parts = allin.leasefence_profile("http_workers", split, a)
    assert parts["lines"]["xray_traces"] == pytest.approx(whole["lines"]["xray_traces"], rel=1e-3)
    assert parts["total"] == pytest.approx(whole["total"], abs=0.011)


def test_provisioned_capacity_prices_the_same_units_as_capacity_hours() -> None:
    on_demand = _lines(_bill())
    provisioned = _lines(_bill(capacity="provisioned"))
    per_wru = 0.00065 / 3600 / 0.7 * M
    assert provisioned["dynamodb_writes_index"] == pytest.approx(2 * per_wru)
    assert provisioned["dynamodb_reads"] == pytest.approx(0.00013 / 3600 / 0.7 * M)
    assert provisioned["dynamodb_writes_table"] < on_demand["dynamodb_writes_table"]
    assert provisioned["api_gateway_requests"] == on_demand["api_gateway_requests"]


def test_storage_spans_each_retention_window() -> None:
    bill = _bill()
    stored = {"ended": {"table_bytes": 1200, "index_bytes": 180},
              "after_purge": {"table_bytes": 1100, "index_bytes": 0}}
    bill.storage("storage", stored, payload_bytes=979)
    lines = {k: v * M for k, v in bill.lines.items()}
    keep, rest = 30 / prices.DAYS_PER_MONTH, 370 / prices.DAYS_PER_MONTH
    assert lines["dynamodb_storage"] == pytest.approx(((1200 + 180) * keep + 1100 * rest) / GB * 0.25 * M)
    assert lines["dynamodb_backup_pitr"] == pytest.approx((1200 * keep + 1100 * rest) / GB * 0.20 * M)
    assert lines["s3_storage"] == pytest.approx(979 * keep / GB * 0.023 * M)


def test_heartbeats_and_tiers() -> None:
    assert Assumptions(job_seconds=30, lease_seconds=60).heartbeats() == 1
    assert Assumptions(job_seconds=60, lease_seconds=60).heartbeats() == 2
    assert Assumptions(job_seconds=10, lease_seconds=60).heartbeats() == 0
    # Temporal: 30M actions, 1M included: 5M at $50, 5M at $45, 10M at $40, 9M at $35.
    assert allin._tiered(29 * M, prices.TEMPORAL_ACTION_TIERS) == pytest.approx(250 + 225 + 400 + 315)


def test_alternatives_are_priced_with_the_same_kinds_of_lines() -> None:
    a = Assumptions(volume=10 * M, tracing=False, log_level="WARNING")
    measured = {**MEASURED, "profiles": {}, "events": {}}
    sqs = allin.alternative("sqs_lambda_powertools", measured, 2.0, a)["lines"]
    assert sqs["api_gateway_requests"] == pytest.approx(1.00)  # the producer's API
    # send, receive, delete; and the event source mapping's idle long polls (5 x 3 a minute)
    idle = 5 * 3 * allin.MINUTES_PER_MONTH * 0.40 / (10 * M)
    assert sqs["sqs_requests"] == pytest.approx(3 * 0.40 + idle, abs=1e-4)  # lines: 4 decimals
    assert sqs["dynamodb_writes_table"] == pytest.approx(2 * 0.625)  # the measured idempotency writes
    sfn = allin.alternative("step_functions_standard", measured, 2.0, a)["lines"]
    assert sfn["step_functions_transitions"] == pytest.approx(25.00)
    durable = allin.alternative("lambda_durable_functions", measured, 2.0, a)["lines"]
    assert durable["durable_operations"] == pytest.approx(2 * 8.00)  # start and one step
    temporal = allin.alternative("temporal_cloud", measured, 2.0, a)
    actions = 3 * 10 * M - M  # started, activity, one heartbeat; 1M included
    assert temporal["lines"]["temporal_actions"] == pytest.approx(
        allin._tiered(actions, prices.TEMPORAL_ACTION_TIERS) / (10 * M) * M, abs=1e-4
    )
    for name in allin.ALTERNATIVES:
        assert allin.ALTERNATIVES[name]["does_not_guarantee"]


def test_the_deployment_and_the_access_log_line_are_the_constructs() -> None:
    snapshot = json.loads((ROOT / "tests/infra/snapshots/default.json").read_text())["resource_types"]
    full = json.loads((ROOT / "tests/infra/snapshots/full.json").read_text())["resource_types"]
    assert "AWS::CloudWatch::Dashboard" not in snapshot  # opt-in: on in the full stack
    assert {
        "alarms": snapshot["AWS::CloudWatch::Alarm"],
        "dashboards": full["AWS::CloudWatch::Dashboard"],
        "secrets": snapshot["AWS::SecretsManager::Secret"],
        "kms_keys": snapshot["AWS::KMS::Key"],
    } == allin.DEPLOYMENT
    from dataclasses import fields

    from leasefence_infra.props import LeaseFenceServiceProps

    defaults = {f.name: f.default for f in fields(LeaseFenceServiceProps)}
    assert {name: defaults[name] for name in allin.OPTIONS} == allin.OPTIONS
    from leasefence_infra.api import _ACCESS_LOG_FORMAT

    assert set(json.loads(_ACCESS_LOG_FORMAT)) == set(allin.ACCESS_LOG_LINE)


def test_every_new_price_names_its_page_and_date() -> None:
    for name, price in prices.PRICES.items():
        assert price.source.startswith("https://"), name
        assert price.read_on in (prices.READ_ON, prices.ALL_IN_READ_ON), name
    assert math.isclose(prices.usd("xray_trace_recorded"), 5e-6)


def test_the_throughput_replay_reads_the_backlog_partitions_the_engine_claims_from() -> None:
    """The replayed claim query names a partition as the engine does (tenant, shard, job type):
    a stale name reads an empty partition and flatters the engine's orchestration ratio."""
    import random

    from leasefence import Engine, keys
    from leasefence.schema import TableSpec, create_table
    from leasefence_tools.bench import throughput as T
    from leasefence_tools.local.embedded import EmbeddedAws

    with EmbeddedAws() as aws:
        client = aws.client()
        spec = TableSpec(table_name="bench-replay-shape")
        create_table(client, spec)
        seed = Engine(client=client, spec=spec, rng=random.Random(3))
        for i in range(8):
            seed.enqueue(T.TENANT, f"backlog-{i}", "refund", T.HASH)
        shapes = T._capture_lifecycle(client, spec)
        for shard in range(spec.due_shards):
            request = T.replay_query(shapes, shard)
            assert request["ExpressionAttributeValues"][":pk"]["S"] == keys.due_partition(T.TENANT, shard, "refund")
        found = sum(client.query(**T.replay_query(shapes, s))["Count"] for s in range(spec.due_shards))
        assert found == 8  # every backlog operation is in a partition the replay reads


def _window(api_requests: float = 0, s3_put: float = 0, s3_get: float = 0, events: float = 0,
            **functions: dict) -> dict:
    """A measured window with its totals summed from its functions, as the profiles give it."""
    full = {name: {"invocations": 0, "cpu_ms": 0.0, "requests": {}, "wcu": 0, "wcu_index": 0, "rcu": 0,
                   **node} for name, node in functions.items()}
    return {
        "functions": full,
        **{key: sum(n[key] for n in full.values()) for key in ("wcu", "wcu_index", "rcu")},
        "api_requests": api_requests, "s3_put": s3_put, "s3_get": s3_get, "s3_delete": 0, "events": events,
    }


def test_a_profile_adds_up_its_lifecycle_the_work_around_it_and_the_month() -> None:
    """leasefence_profile composes the windows: the lifecycle once, one heartbeat per renewal of
    the stated job, the purge and the end of retention once each, and per month the sweeper's
    runs, the idle worker's polls and the deployment; every line is the counted requests times
    the price, and the total is the sum of the lines."""
    volume = 10 * M
    measured = {
        "memory_mb": {"api": 1024, "publisher": 256, "sweeper": 512},
        "payload_bytes": 979,
        "custom_metrics": ["Claims[service]", "EventsPublished[service]"],
        "profiles": {"http_workers": {
            **WINDOW,
            "stored": {"ended": {"table_bytes": 1200, "index_bytes": 180},
                       "after_purge": {"table_bytes": 1100, "index_bytes": 0}},
            "payload_object_bytes": 979,
        }},
        "events": {
            "heartbeat_http": _window(api_requests=1, api={"invocations": 1, "wcu": 1},
                                      publisher={"invocations": 1}),
            "purge": _window(sweeper={"wcu": 2, "wcu_index": 1, "rcu": 1}, publisher={"invocations": 1}),
            "end_of_retention": _window(publisher={"invocations": 1, "wcu": 1}),
            "idle_poll_http": _window(api_requests=1, api={"invocations": 1, "rcu": 3}),
            "idle_sweeper_run": _window(sweeper={"invocations": 1, "rcu": 20}),
        },
    }
    a = Assumptions(volume=volume, tracing=False, log_level="WARNING", job_seconds=70, lease_seconds=60)
    assert a.heartbeats() == 3  # renewals at 20, 40 and 60 s of a 70 s job
    out = allin.leasefence_profile("http_workers", measured, a)
    lines = out["lines"]
    polls = allin.SECONDS_PER_MONTH / a.idle_poll_mean_s / volume  # idle polls per lifecycle
    runs = allin.MINUTES_PER_MONTH / volume  # sweeper runs per lifecycle

    # Writes: lifecycle 8 (2 index, 2 history), 3 heartbeats of 1, purge 2 (1 index), deletion 1
    # (the publisher's: history).
    assert out["wru_per_lifecycle_all"] == 8
    assert out["wru_per_lifecycle_all_in"] == 8 + 3 * 1 + 2 + 1
    assert lines["dynamodb_writes_table"] == pytest.approx((4 + 3 + 1) * 0.625, abs=1e-4)
    assert lines["dynamodb_writes_index"] == pytest.approx((2 + 1) * 0.625, abs=1e-4)
    assert lines["dynamodb_writes_history"] == pytest.approx((2 + 1) * 0.625, abs=1e-4)
    assert lines["dynamodb_reads"] == pytest.approx((1 + 1 + 3 * polls + 20 * runs) * 0.125, abs=1e-4)
    assert lines["api_gateway_requests"] == pytest.approx((2 + 3 + polls) * 1.00, abs=1e-4)
    # Invocations: lifecycle 3, heartbeats 2 each, purge 1 and deletion 1 (the publisher's), the
    # idle polls and the sweeper's runs.
    assert lines["lambda_requests"] == pytest.approx((3 + 3 * 2 + 1 + 1 + polls + runs) * 0.20, abs=1e-4)
    assert lines["s3_requests"] == pytest.approx(5.00, abs=1e-4)
    assert lines["schedules"] == pytest.approx(runs * 1.00, abs=1e-4)
    # By the month: 29 alarms (one stream reader: no worker iterator-age alarm), 2 custom metrics, a secret and a key, over the volume; the
    # dashboard is opt-in.
    assert lines["cloudwatch_alarms"] == pytest.approx(29 * 0.10 / volume * M)
    assert lines["cloudwatch_dashboard"] == 0
    dashboard = allin.leasefence_profile("http_workers", measured, replace(a, dashboard=True))
    assert dashboard["lines"]["cloudwatch_dashboard"] == pytest.approx(3.00 / volume * M)
    # EventsPublished is emitted only with events on (off here, the default): one metric billed.
    assert lines["cloudwatch_metrics"] == pytest.approx(1 * 0.30 / volume * M)
    with_events = allin.leasefence_profile("http_workers", measured, replace(a, events=True))
    assert with_events["lines"]["cloudwatch_metrics"] == pytest.approx(2 * 0.30 / volume * M)
    assert lines["secrets_and_keys"] == pytest.approx((0.40 + 1.00) / volume * M)
    assert out["total"] == pytest.approx(sum(lines.values()), abs=0.01)
    # The same profile at 1M a month: the lifecycle's lines unchanged, the month's ten times more.
    small = allin.leasefence_profile("http_workers", measured, replace(a, volume=M))
    assert small["lines"]["dynamodb_writes_index"] == lines["dynamodb_writes_index"]
    assert small["lines"]["cloudwatch_alarms"] == pytest.approx(10 * lines["cloudwatch_alarms"])



def _profiles_measured() -> dict:
    """Both main profiles measured as one small window each (what options and comparison read)."""
    stored = {"ended": {"table_bytes": 1200, "index_bytes": 180},
              "after_purge": {"table_bytes": 400, "index_bytes": 0}}
    life = {**copy.deepcopy(WINDOW), "stored": stored, "payload_object_bytes": 0}
    quiet = _window()
    return {
        "memory_mb": {"api": 1024, "publisher": 256, "sweeper": 512, "worker": 512},
        "payload_bytes": 979,
        "payload": {"bytes": 979, "zlib_ratio": 0.8, "made_of": "random bytes, base64"},
        "ids": {"tenants": "'t'", "job_type": "refund", "operations": "uuids"},
        "profiles": {"http_workers": life, "worker_function": copy.deepcopy(life)},
        "events": {name: quiet for name in (
            "heartbeat_http", "heartbeat_in_process", "purge", "end_of_retention", "idle_poll_http",
            "idle_sweeper_run", "idle_worker_tick")},
    }


def test_each_option_costs_what_its_lines_add_and_says_what_is_lost() -> None:
    measured = _profiles_measured()
    a = Assumptions(volume=10 * M, tracing=False, log_level="WARNING")
    options = allin.options(measured, a)
    assert {k: v["default"] for k, v in options.items()} == allin.OPTIONS
    for profile in allin.MAIN_PROFILES:
        # One event per lifecycle (the window's publisher publishes one) and its PutEvents time.
        put_events = 15 / 1000 * 256 / 1024 * 0.0000133334 * M
        assert options["events"]["usd_per_million"][profile] == pytest.approx(1.00 + put_events, abs=0.011)
        assert options["alarms"]["usd_per_million"][profile] == pytest.approx(30 * 0.10 / 10, abs=0.011)
        assert options["dashboard"]["usd_per_million"][profile] == pytest.approx(3.00 / 10, abs=0.011)
    assert all(v["without_it"] for v in options.values())


def test_the_alternatives_do_the_same_job_where_they_can() -> None:
    """Same job: the identity kept 400 days where the alternative can (else its longest, said),
    a visibility extension per heartbeat, an outcome event, alarms."""
    measured = _profiles_measured()
    a = Assumptions(volume=10 * M, tracing=False, log_level="WARNING")
    job = replace(a, same_job=True)
    plain = allin.alternative("sqs_lambda_powertools", measured, 2.0, a)
    sqs = allin.alternative("sqs_lambda_powertools", measured, 2.0, job)
    assert sqs["same_job"]["identity_days"] == 400 and sqs["same_job"]["identity_window_kept"]
    months = 400 / prices.DAYS_PER_MONTH
    assert sqs["lines"]["dynamodb_storage"] == pytest.approx(400 / GB * months * 0.25 * M, abs=1e-4)
    assert sqs["lines"]["dynamodb_backup_pitr"] == pytest.approx(400 / GB * months * 0.20 * M, abs=1e-4)
    # One ChangeMessageVisibility for the one heartbeat of a 30 s job on a 60 s lease.
    assert sqs["lines"]["sqs_requests"] - plain["lines"]["sqs_requests"] == pytest.approx(0.40, abs=1e-4)
    assert sqs["lines"]["eventbridge_events"] == pytest.approx(1.00)
    assert sqs["lines"]["cloudwatch_alarms"] == pytest.approx(5 * 0.10 / 10, abs=1e-4)
    for name in ("step_functions_standard", "lambda_durable_functions", "temporal_cloud"):
        out = allin.alternative(name, measured, 2.0, job)["same_job"]
        assert out["identity_days"] == 90 and out["identity_window_kept"] is False, name
    comparison = allin.comparison(measured, 2.0, a)
    for profile, totals in comparison["leasefence"].items():
        assert totals["same_job"] > totals["defaults"] > totals["options_off"], profile
    assert set(comparison["alternatives"]) == set(allin.ALTERNATIVES)


def test_the_readme_table_is_rendered_from_the_comparison() -> None:
    from leasefence_tools.bench import comparison_table

    comparison = allin.comparison(_profiles_measured(), 2.0, Assumptions(volume=10 * M))
    table = comparison_table.render(comparison)
    lines = table.splitlines()
    assert lines[0].startswith("| | guarantees |") and len(lines) == 2 + 3 + len(allin.ALTERNATIVES) + 2
    for name, alt in comparison["alternatives"].items():
        assert f"**${alt['total']:,.2f}**" in table, name
    stream = comparison["leasefence"]["worker_function"]["options_off"]
    assert f"**${stream:,.2f}** (worker function, stream)" in table
    assert "cannot keep 400" in table and "979-byte payload" in table and "zlib ratio 0.8" in table


def test_the_bench_payload_is_incompressible_and_repeatable() -> None:
    import subprocess
    import sys
    import zlib

    from leasefence_tools.bench import payload

    body = payload.canonical()
    assert len(body) == 979
    assert len(zlib.compress(body, 9)) / len(body) > 0.7  # a repetitive payload is about 0.08
    assert payload.zlib_ratio() > 0.7 and payload.describe()["bytes"] == 979
    # The same bytes in another interpreter: seeded, not random per run.
    other = subprocess.run(
        [sys.executable, "-c", "from leasefence_tools.bench import payload; print(payload.canonical().hex())"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    assert bytes.fromhex(other) == body


def test_the_readme_table_is_the_renderers_with_the_command_beside_it() -> None:
    """No report is committed: the README's rows must be the renderer's rows (every cell but the
    figures, which a bench run gives), and the command that prints them is named beside them."""
    import re

    from leasefence_tools.bench import comparison_table

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Compared with the alternatives", 1)[1].split("\n## ", 1)[0]
    assert "leasefence bench --readme-table bench-report.json" in section
    rendered = comparison_table.render(allin.comparison(_profiles_measured(), 2.0, Assumptions(volume=10 * M)))

    def shape(text: str) -> list[str]:
        rows = [line for line in text.splitlines() if line.startswith("| ")]
        return [re.sub(r"\$[\d,]+\.\d\d", "$", row) for row in rows]

    assert shape(section) == shape(rendered)


def test_the_batched_http_row_bills_the_requests_its_busy_fleet_sent() -> None:
    """HTTP workers, batched: the batch routes' units and CPU as measured, with the API requests
    (and so the invocations, access log lines and their half ms) that the busy fleet sent per
    lifecycle and per lease renewed; the idle month from the batch claim route's poll."""
    measured = _profiles_measured()
    life = measured["profiles"]["http_workers"]
    measured["profiles"]["http_workers_batched"] = copy.deepcopy(life)
    measured["events"]["heartbeat_http_batched"] = _window(
        api_requests=0.125, api={"invocations": 0.125, "wcu": 1})
    measured["events"]["idle_poll_http_batched"] = _window(
        api_requests=1, api={"invocations": 1, "rcu": 2})
    a = Assumptions(volume=10 * M, tracing=False, log_level="WARNING")  # one heartbeat a job
    polls = allin.SECONDS_PER_MONTH / a.idle_poll_mean_s / a.volume

    def billed(lifecycle_requests: float, leases_per_renewal: float) -> dict:
        fleet = {"lifecycle_requests": lifecycle_requests, "leases_per_renewal": leases_per_renewal,
                 "workers": 8}
        return allin.leasefence_profile("http_workers_batched", {**measured, "batched_fleet": fleet}, a)

    busy = billed(1.25, 4)
    # 1.25 lifecycle requests, a quarter of a renewal request, the idle worker's polls.
    assert busy["lines"]["api_gateway_requests"] == pytest.approx((1.25 + 0.25 + polls) * 1.00, abs=1e-4)
    # The lifecycle's publisher invocation besides.
    assert busy["lines"]["lambda_requests"] == pytest.approx((1.25 + 1 + 0.25 + polls) * 0.20, abs=1e-4)
    # Units as measured: the lifecycle's table writes (8, 2 of them index and 2 history) and the
    # renewal's one.
    assert busy["lines"]["dynamodb_writes_table"] == pytest.approx((4 + 1) * 1.25 / 2, abs=1e-4)
    # Fewer requests, a lower bill: by the requests' own lines, nothing else.
    fewer = billed(0.5, 8)
    saved = busy["total"] - fewer["total"]
    assert saved > 0.75 + 0.125
    assert fewer["lines"]["dynamodb_writes_table"] == busy["lines"]["dynamodb_writes_table"]
    # Without the fleet's figures: the profile's own requests (its full batches).
    own = allin.leasefence_profile("http_workers_batched", measured, a)
    assert own["lines"]["api_gateway_requests"] == pytest.approx((2 + 0.125 + polls) * 1.00, abs=1e-4)
    idle = allin.idle_worker_month_usd(measured, a, "http_workers_batched")
    plain = allin.idle_worker_month_usd(measured, a)
    assert idle["lines"]["dynamodb_reads"] > plain["lines"]["dynamodb_reads"]  # 2 units a poll, not 0


def test_the_batched_row_weighs_the_paired_round_by_the_fleets_share_of_claims_after_a_close() -> None:
    """A claim that rode with its worker's close (``after``) writes its marker with that close's
    payload expiry: the profile's paired window has a unit less. The batched row takes the paired
    window for the share of the busy fleet's claims that did, the other for the rest."""
    measured = _profiles_measured()
    life = copy.deepcopy(measured["profiles"]["http_workers"])
    measured["profiles"]["http_workers_batched"] = life
    paired = copy.deepcopy(life)
    paired["wcu"] -= 1
    paired["functions"]["api"]["wcu"] -= 1
    paired["functions"]["api"]["requests"]["dynamodb"] -= 1
    measured["paired"] = {"http_workers_batched": paired}
    measured["events"]["heartbeat_http_batched"] = _window(api_requests=0.125, api={"invocations": 0.125, "wcu": 1})
    measured["events"]["idle_poll_http_batched"] = _window(api_requests=1, api={"invocations": 1, "rcu": 2})
    a = Assumptions(volume=10 * M, tracing=False, log_level="WARNING")

    def billed(share: float) -> dict:
        fleet = {"lifecycle_requests": 1.0, "leases_per_renewal": 8, "workers": 8, "claims_after_close": share}
        return allin.leasefence_profile("http_workers_batched", {**measured, "batched_fleet": fleet}, a)

    none, half, every = billed(0.0), billed(0.5), billed(1.0)
    # One write unit and one request's 5 ms at 1 GB, weighed by the share.
    unit = prices.usd("dynamodb_write_request_unit") * M
    assert none["lines"]["dynamodb_writes_table"] - every["lines"]["dynamodb_writes_table"] == pytest.approx(unit, abs=1e-4)
    assert none["lines"]["dynamodb_writes_table"] - half["lines"]["dynamodb_writes_table"] == pytest.approx(unit / 2, abs=1e-4)
    assert none["lines"]["lambda_duration"] > half["lines"]["lambda_duration"] > every["lines"]["lambda_duration"]
    assert none["total"] > half["total"] > every["total"]
    # Without the paired window (a report from before it), the row is the unpaired window's.
    del measured["paired"]
    assert billed(1.0)["total"] == pytest.approx(none["total"])


def test_two_windows_are_mixed_number_by_number() -> None:
    a = {"wcu": 10, "functions": {"api": {"cpu_ms": 4.0, "requests": {"dynamodb": 8}}}, "name": "x"}
    b = {"wcu": 9, "functions": {"api": {"cpu_ms": 6.0, "requests": {"dynamodb": 7, "s3": 1}}}, "name": "y"}
    mixed = allin.mixed(a, b, 0.25)
    assert mixed == {
        "wcu": 9.75,
        "functions": {"api": {"cpu_ms": 4.5, "requests": {"dynamodb": 7.75, "s3": 0.25}}},
        "name": "x",
    }
