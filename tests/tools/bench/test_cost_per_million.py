"""The cost per million lifecycles is computed from the measured inputs and the one price table."""

from __future__ import annotations

import copy

import pytest

from leasefence_tools.bench import cost_per_million as C
from leasefence_tools.bench import prices

MEASURED = {
    "runs": 3,
    "payload_bytes": 979,
    "memory_mb": {"api": 1024, "worker": 512, "publisher": 256},
    "profiles": {
        "worker_function": {
            "wcu": 11.0,
            "rcu": 0.5,
            "api_requests": 1.0,
            "invocations": {"api": 1.0, "worker": 1.0, "publisher": 3.0},
            "billed_ms": {"api": 40.0, "worker": 90.0, "publisher": 60.0},
            "s3_put": 1.0,
            "s3_get": 1.0,
            "events": 1.0,
            "stored_item_bytes": 1250,
            "payload_object_bytes": 979,
        }
    },
}


def _lines(measured, powertools_wcu=2.0):
    return C.compute(measured, powertools_wcu)


def test_doubling_the_measured_units_doubles_the_dynamodb_lines():
    base = _lines(MEASURED)["profiles"]["worker_function"]
    doubled_input = copy.deepcopy(MEASURED)
    doubled_input["profiles"]["worker_function"]["wcu"] *= 2
    doubled_input["profiles"]["worker_function"]["rcu"] *= 2
    doubled = _lines(doubled_input)["profiles"]["worker_function"]
    assert doubled["dynamodb_writes"] == pytest.approx(2 * base["dynamodb_writes"])
    assert doubled["dynamodb_reads"] == pytest.approx(2 * base["dynamodb_reads"], abs=1e-3)
    assert base["dynamodb_writes"] == pytest.approx(11.0 * prices.PRICES["dynamodb_write_request_unit"].usd)
    added = doubled["dynamodb_writes"] + doubled["dynamodb_reads"] - base["dynamodb_writes"] - base["dynamodb_reads"]
    assert doubled["total"] - base["total"] == pytest.approx(added, abs=0.01)
    for line in ("api_gateway", "lambda_requests", "lambda_duration", "s3_requests", "events"):
        assert doubled[line] == base[line]


def test_lambda_duration_is_measured_time_at_each_functions_memory():
    lines = _lines(MEASURED)["profiles"]["worker_function"]
    gb_s = 0.040 * 1 + 0.090 * 0.5 + 0.060 * 0.25
    per_gb_s = prices.usd("lambda_gb_second_arm64")
    assert lines["lambda_duration"] == pytest.approx(gb_s * per_gb_s * 1e6, abs=1e-3)
    slower = copy.deepcopy(MEASURED)
    slower["profiles"]["worker_function"]["billed_ms"]["worker"] += 100
    more = _lines(slower)["profiles"]["worker_function"]["lambda_duration"]
    assert more - lines["lambda_duration"] == pytest.approx(0.1 * 0.5 * per_gb_s * 1e6, abs=1e-3)
    assert lines["lambda_requests"] == pytest.approx(5 * 0.20)  # five invocations at $0.20 per million


def test_storage_follows_the_stored_bytes_and_the_retention():
    lines = _lines(MEASURED)["profiles"]["worker_function"]
    months = 400 / prices.DAYS_PER_MONTH
    assert lines["identity_storage"] == pytest.approx(1250 / prices.GB * months * 0.25 * 1e6, abs=1e-3)
    payload_months = 30 / prices.DAYS_PER_MONTH
    assert lines["payload_storage"] == pytest.approx(979 / prices.GB * payload_months * 0.023 * 1e6, abs=1e-3)


def test_alternatives_use_the_measured_powertools_units_and_the_price_table():
    one = _lines(MEASURED, powertools_wcu=2.0)["alternatives"]
    two = _lines(MEASURED, powertools_wcu=4.0)["alternatives"]
    assert two["sqs_lambda_powertools"]["lines"]["dynamodb_write_request_unit"] == pytest.approx(
        2 * one["sqs_lambda_powertools"]["lines"]["dynamodb_write_request_unit"]
    )
    assert one["step_functions_standard"]["lines"]["total"] == pytest.approx(25.0 + 0.20)
    temporal = one["temporal_cloud"]["lines"]
    assert temporal["temporal_cloud_action"] == pytest.approx(2 * 50.0)
    assert temporal["total"] == pytest.approx(110.0)  # plus the plan's 10% of usage


def test_summary_and_table_name_every_profile_and_alternative():
    computed = _lines(MEASURED)
    summary = C.summary(computed)
    assert set(summary) == {"leasefence_worker_function", *C.ALTERNATIVES}
    assert summary["leasefence_worker_function"] == computed["profiles"]["worker_function"]["total"]
    table = C.render(computed)
    assert f"**${computed['profiles']['worker_function']['total']:,.2f}**" in table
    assert prices.READ_ON in table


def test_every_price_names_its_page_and_how_it_was_checked():
    for name, price in prices.PRICES.items():
        assert price.source.startswith("https://"), name
        assert price.status in ("vendor", "secondary", "unverified"), name
        if price.status == "secondary":
            assert price.checked_in, name
