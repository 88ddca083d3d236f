"""What one million lifecycles cost at list prices, by profile, next to the alternatives (issue 16).

Pure arithmetic over measured inputs and :mod:`leasefence_tools.bench.prices` (nothing here measures):

* leasefence's profiles from :mod:`leasefence_tools.bench.profiles` (per lifecycle: request units,
  API requests, invocations and billed handler time per function, S3 requests, events, stored
  bytes) at the functions' memory sizes and the default retention windows;
* the alternatives from what each needs per job (stated in :data:`ALTERNATIVES`), with the one
  measured figure they have here: Powertools idempotency's write units per call, from
  :mod:`leasefence_tools.bench.cost`.

Left out everywhere: the job's own work (the same whichever service runs it), free tiers, data
transfer, logs and metrics. The alternatives' producers call their service directly (no API
Gateway or API function in front); their functions' time is not measured (only leasefence's
is); their own storage (execution histories, idempotency records) is not priced.
"""

from __future__ import annotations

from typing import Any

from leasefence.settings import DEFAULT_IDENTITY_RETENTION_DAYS, DEFAULT_PAYLOAD_RETENTION_DAYS
from leasefence_tools.bench import prices
from leasefence_tools.bench.prices import DAYS_PER_MONTH, GB, usd

MILLION = 1_000_000
#: Records per invocation of an SQS event source mapping (its default batch size).
SQS_BATCH = 10

#: Per job, for a job that is one unit of work with no retry: what each alternative is billed.
ALTERNATIVES: dict[str, dict[str, Any]] = {
    "sqs_lambda_powertools": {
        "what": "SQS standard queue, a Lambda event source mapping (batches of "
        f"{SQS_BATCH}), Powertools idempotency on DynamoDB",
        "per_job": {
            "sqs_standard_request": 1 + 2 / SQS_BATCH,  # send; receive and delete per batch
            "lambda_request": 1 / SQS_BATCH,
        },
        "note": "no lease, fence, retry state or unknown state: a crash after the side effect "
        "and before the idempotency record completes runs it again after the record expires",
    },
    "step_functions_standard": {
        "what": "Step Functions Standard, one Task state invoking a Lambda function",
        "per_job": {"step_functions_standard_transition": 1, "lambda_request": 1},
        "note": "each retry is another transition and another invocation",
    },
    "lambda_durable_functions": {
        "what": "a Lambda durable function with one step",
        "per_job": {"lambda_durable_operation": 1, "lambda_request": 1},
        "note": "price unverified; data written and retained not priced",
    },
    "temporal_cloud": {
        "what": "Temporal Cloud, a workflow with one activity (workflow started, activity "
        "started: 2 actions), Developer plan",
        "per_job": {"temporal_cloud_action": 2},
        "note": "plus the plan's 10% of usage; the workers run on your own compute (not counted); "
        "each activity retry is an action",
    },
}


def assumptions(
    memory_mb: dict[str, int],
    identity_days: float | None = DEFAULT_IDENTITY_RETENTION_DAYS,
    payload_days: float = DEFAULT_PAYLOAD_RETENTION_DAYS,
) -> dict[str, Any]:
    return {
        "region": prices.REGION,
        "prices_read_on": prices.READ_ON,
        "memory_mb": dict(memory_mb),
        "identity_retention_days": identity_days,
        "payload_retention_days": payload_days,
        "excluded": "the job's own work, free tiers, data transfer, logs and metrics",
    }


def profile_lines(profile: dict[str, Any], assumed: dict[str, Any]) -> dict[str, float]:
    """Dollars per million lifecycles of one profile, by line, and the total."""
    memory = assumed["memory_mb"]
    gb_seconds = sum(
        profile["billed_ms"].get(name, 0) / 1000 * mb / 1024 for name, mb in memory.items()
    )
    identity_days = assumed["identity_retention_days"]
    identity_months = (identity_days if identity_days is not None else 365) / DAYS_PER_MONTH
    payload_months = assumed["payload_retention_days"] / DAYS_PER_MONTH
    per_lifecycle = {
        "dynamodb_writes": profile["wcu"] * usd("dynamodb_write_request_unit"),
        "dynamodb_reads": profile["rcu"] * usd("dynamodb_read_request_unit"),
        "api_gateway": profile["api_requests"] * usd("api_gateway_http_request"),
        "lambda_requests": sum(profile["invocations"].values()) * usd("lambda_request"),
        "lambda_duration": gb_seconds * usd("lambda_gb_second_arm64"),
        "s3_requests": profile["s3_put"] * usd("s3_put_request")
        + profile["s3_get"] * usd("s3_get_request"),
        "events": profile["events"] * usd("eventbridge_custom_event"),
        "identity_storage": profile["stored_item_bytes"]
        / GB
        * identity_months
        * usd("dynamodb_storage_gb_month"),
        "payload_storage": profile["payload_object_bytes"]
        / GB
        * payload_months
        * usd("s3_storage_gb_month"),
    }
    lines = {name: round(value * MILLION, 4) for name, value in per_lifecycle.items()}
    lines["total"] = round(sum(per_lifecycle.values()) * MILLION, 2)
    return lines


def alternative_lines(per_job: dict[str, float], plan_share: bool = False) -> dict[str, float]:
    """Dollars per million jobs of one alternative (``per_job``: price name to count), by line,
    and the total; ``plan_share``: add Temporal Cloud's plan charge (a share of usage)."""
    dollars = {price: count * usd(price) for price, count in per_job.items()}
    if plan_share:
        dollars["temporal_cloud_plan"] = sum(dollars.values()) * usd("temporal_cloud_plan_share")
    lines = {line: round(value * MILLION, 4) for line, value in dollars.items()}
    lines["total"] = round(sum(dollars.values()) * MILLION, 2)
    return lines


def _per_job(name: str, powertools_wcu_per_call: float) -> dict[str, float]:
    per_job = dict(ALTERNATIVES[name]["per_job"])
    if name == "sqs_lambda_powertools":  # measured by leasefence_tools.bench.cost
        per_job["dynamodb_write_request_unit"] = powertools_wcu_per_call
    return per_job


def compute(measured: dict[str, Any], powertools_wcu_per_call: float) -> dict[str, Any]:
    """``measured``: :func:`leasefence_tools.bench.profiles.measure`'s report."""
    assumed = assumptions(measured["memory_mb"])
    assumed["payload_bytes"] = measured["payload_bytes"]
    assumed["lifecycles_measured_per_profile"] = measured["runs"]
    return {
        "assumptions": assumed,
        "profiles": {
            name: profile_lines(profile, assumed) for name, profile in measured["profiles"].items()
        },
        "alternatives": {
            name: {
                **spec,
                "per_job": _per_job(name, powertools_wcu_per_call),
                "lines": alternative_lines(
                    _per_job(name, powertools_wcu_per_call), plan_share=name == "temporal_cloud"
                ),
            }
            for name, spec in ALTERNATIVES.items()
        },
        "prices": prices.table(),
    }


def summary(computed: dict[str, Any]) -> dict[str, float]:
    """Total dollars per million lifecycles, by profile and alternative (the report's
    ``cost_per_million``)."""
    return {
        **{f"leasefence_{name}": lines["total"] for name, lines in computed["profiles"].items()},
        **{name: alt["lines"]["total"] for name, alt in computed["alternatives"].items()},
    }


#: Each profile's and alternative's name in the report's tables.
LABELS = {
    "http_workers": "leasefence, HTTP workers",
    "http_workers_batched": "leasefence, HTTP workers, batched",
    "worker_function": "leasefence, worker function (stream)",
    "worker_function_polled": "leasefence, worker function (schedule)",
    "class_a": "leasefence, class A (worker function)",
    "sqs_lambda_powertools": "SQS + Lambda + Powertools idempotency",
    "step_functions_standard": "Step Functions Standard",
    "lambda_durable_functions": "Lambda durable functions",
    "temporal_cloud": "Temporal Cloud",
}
_UNITS = {
    "sqs_standard_request": "SQS requests",
    "lambda_request": "Lambda invocation",
    "dynamodb_write_request_unit": "write units (measured)",
    "step_functions_standard_transition": "state transition",
    "lambda_durable_operation": "durable operation (price unverified)",
    "temporal_cloud_action": "actions",
}
_COLUMNS = {
    "DynamoDB": ("dynamodb_writes", "dynamodb_reads"),
    "API Gateway": ("api_gateway",),
    "Lambda": ("lambda_requests", "lambda_duration"),
    "S3": ("s3_requests",),
    "EventBridge": ("events",),
    "storage": ("identity_storage", "payload_storage"),
}


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def render(computed: dict[str, Any]) -> str:
    """Two markdown tables (leasefence's profiles by line; the alternatives), then the
    assumptions: what the README's performance section leads with."""
    a = computed["assumptions"]
    head = "| $ per million lifecycles | " + " | ".join(_COLUMNS) + " | total |"
    rows = [head, "| --- |" + " ---: |" * (len(_COLUMNS) + 1)]
    for name, lines in computed["profiles"].items():
        cells = [_usd(sum(lines[k] for k in keys)) for keys in _COLUMNS.values()]
        rows.append(
            f"| {LABELS.get(name, name)} | "
            + " | ".join(cells)
            + f" | **{_usd(lines['total'])}** |"
        )
    rows += ["", "| instead | billed per job | $ per million jobs |", "| --- | --- | ---: |"]
    for name, alt in computed["alternatives"].items():
        billed = ", ".join(f"{count:g} {_UNITS[price]}" for price, count in alt["per_job"].items())
        if "temporal_cloud_plan" in alt["lines"]:
            billed += ", the plan's 10% of usage"
        rows.append(f"| {LABELS.get(name, name)} | {billed} | **{_usd(alt['lines']['total'])}** |")
    identity = a["identity_retention_days"]
    rows += [
        "",
        f"{a['region']}, list prices read {a['prices_read_on']} (leasefence_tools.bench.prices: each "
        "with its page and how it was checked). leasefence: measured per lifecycle on the local "
        f"stack ({a['lifecycles_measured_per_profile']} per profile), enqueue over the HTTP API "
        f"with a {a['payload_bytes']:,}-byte inline payload, functions on arm64 at "
        + ", ".join(f"{k} {v} MB" for k, v in a["memory_mb"].items())
        + ", their handler time measured warm (billed per ms), stream batches of one record "
        "(an upper bound on invocations), the publisher's history and events included, the "
        f"identity kept {identity if identity is not None else 365} days and the payload "
        f"{a['payload_retention_days']}. Excluded everywhere: {a['excluded']}. The "
        "alternatives: a job of one step with no retry, the producer calling the service "
        "directly, their functions' time not counted.",
    ]
    return "\n".join(rows)
