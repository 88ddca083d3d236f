"""The README's table "Compared with the alternatives", rendered from a bench report (issue 32).

Every figure comes from the report's ``cost_per_million_all_in.comparison``
(:func:`leasefence_tools.bench.allin.comparison`): each alternative priced for leasefence's job,
beside leasefence doing that job, at its defaults and with its options off. What each guarantees
is stated here, once. ``leasefence bench --readme-table REPORT`` prints it, so a change of the
item layout only needs a run of the bench and a paste.
"""

from __future__ import annotations

from typing import Any

from leasefence_tools.bench.cost_per_million import LABELS

#: What each guarantees for a job with a side effect, and what it does not.
GUARANTEES: dict[str, tuple[str, str]] = {
    "leasefence": (
        "the table above; a stalled worker's writes refused by fence; `unknown` for ambiguity",
        "exactly-once at classes C and D",
    ),
    "sqs_lambda_powertools": (
        "at-least-once delivery; a payload hash answered from its completed record until the "
        "record expires (kept here for the identity window)",
        "no lease, no fence, no retry or unknown state: a side effect whose record expired or "
        "was never completed runs again",
    ),
    "step_functions_standard": (
        "exactly-once workflow execution; an execution name starts once while its history is "
        "kept (90 days at most)",
        "a Task retried after an error or a timeout calls its target again; no fence for the "
        "target",
    ),
    "lambda_durable_functions": (
        "checkpoint and replay: a completed step is not run again; an interrupted step re-runs "
        "(default) or, at most once per retry, is not",
        "no fence for the target; an execution is kept 90 days at most",
    ),
    "temporal_cloud": (
        "durable workflows; activities retried on failure and timeout (at least once), heartbeats",
        "activities should be idempotent: no fence for the target; history kept 90 days at most",
    ),
}
_PROFILES = ("worker_function", "http_workers")


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _leasefence_cell(totals: dict[str, dict[str, float]], key: str) -> str:
    stream, http = (totals[p][key] for p in _PROFILES)
    return f"**{_usd(stream)}** (worker function, stream) to **{_usd(http)}** (HTTP workers)"


def _job(c: dict[str, Any], name: str) -> str:
    """What an alternative does of leasefence's job."""
    job = c["alternatives"][name]["same_job"]
    days = job["identity_days"]
    window = c["assumes"]["identity_retention_days"]
    kept = f"identity {days} days" + (
        "" if job["identity_window_kept"] else f" (cannot keep {window})"
    )
    return f"{kept}; heartbeat: {job['heartbeat']}; {job['outcome_notification']}; {job['alarms']} alarms"


def render(c: dict[str, Any]) -> str:
    """The table (markdown) and the sentence of what every figure assumes, from ``comparison``."""
    a = c["assumes"]
    lf = c["leasefence"]
    guaranteed, not_guaranteed = GUARANTEES["leasefence"]
    rows = [
        "| | guarantees | does not | for the same job | $ per million, all in |",
        "| --- | --- | --- | --- | ---: |",
        f"| **leasefence** | {guaranteed} | {not_guaranteed} | identity "
        f"{a['identity_retention_days']} days; {a['heartbeats_per_job']} heartbeat; outcome events "
        f"on (EventBridge); {a['leasefence_alarms']} alarms | {_leasefence_cell(lf, 'same_job')} |",
        "| leasefence at its defaults | the same | the same | outcome events off, alarms on, no "
        f"dashboard | {_leasefence_cell(lf, 'defaults')} |",
        "| leasefence, every option off | the same | the same, and nobody is alarmed | no outcome "
        f"event, no alarm, no dashboard | {_leasefence_cell(lf, 'options_off')} |",
    ]
    for name, alt in c["alternatives"].items():
        yes, no = GUARANTEES[name]
        rows.append(
            f"| {LABELS.get(name, name)} | {yes} | {no} | {_job(c, name)} | "
            f"**{_usd(alt['total'])}** |"
        )
    payload = a.get("payload") or {}
    ids = a.get("ids") or {}
    rows += [
        "",
        f"Every figure: {a['volume_per_month']:,} lifecycles a month, DynamoDB "
        f"{a['capacity'].replace('_', '-')}, a {a['payload_bytes']:,}-byte payload"
        + (
            f" ({payload['made_of']}; zlib ratio {payload['zlib_ratio']:g})"
            if payload.get("made_of")
            else ""
        )
        + (
            f", ASCII ids (tenants {ids['tenants']}, job type {ids['job_type']!r}, operation ids "
            f"{ids['operations']})"
            if ids
            else ""
        )
        + f", a {a['job_seconds']:g}-second job, an identity window of "
        f"{a['identity_retention_days']} days.",
    ]
    return "\n".join(rows)
