"""All-in dollars per million lifecycles (issue 24): every line a platform team's AWS bill has,
for leasefence's profiles and for each alternative doing the same job, at a stated volume and
DynamoDB capacity mode.

Pure arithmetic over what :mod:`leasefence_tools.bench.profiles` measured and
:mod:`leasefence_tools.bench.prices` lists (nothing here measures). What each line counts:

* **requests**: API Gateway requests, Lambda invocations, S3 PUT/GET (deletes are free),
  EventBridge entries, the schedules' invocations;
* **DynamoDB request units**: the lifecycle's writes on the table, its index writes, the history
  the publisher writes, and reads; with provisioned capacity the same units as capacity-hours at
  a stated target utilization (and the minimum of one unit per table and index);
* **storage and backup**: the operation's items and index entries while the payload is kept,
  then what stays for the rest of the identity retention; point-in-time recovery on the table's
  size (not the global indexes'); the payload object in S3 for its retention;
* **logs**: CloudWatch Logs ingestion and storage of the bytes the handlers really wrote
  (captured by level, so any log level can be applied), their EMF metric lines, Lambda's
  ``platform.start``/``platform.report`` lines when the system log level keeps them, and the
  HTTP API's access log line per request; 26 bytes per log event added (CloudWatch's per-event
  size); storage on raw size for the log retention (an upper bound: storage is billed
  compressed);
* **traces**: X-Ray recorded traces, with Lambda's default sampling (the first invocation each
  second, 5% of the rest), per function, at the volume's rate; none when tracing is off;
* **Lambda duration** from figures that do not depend on the machine's load: the handlers' CPU
  time (``time.thread_time`` of the invoking thread) scaled to the vCPU share of each function's
  memory (one vCPU at 1,769 MB; one Lambda vCPU taken to do the work of one core of the bench
  machine), plus each AWS request the handler made at a stated in-region latency, plus half a
  millisecond per invocation (billing rounds up to the ms);
* **around the lifecycle**: heartbeats for a stated job length (one renewal every third of the
  lease while the job makes progress), the payload purge, the end-of-retention deletion, and
  per month: the sweeper's runs, the worker function's schedule ticks, the alarms, dashboard,
  custom metrics, secret and key the construct ships, and (HTTP workers) a stated number of
  idle worker-months of polling.

The alternatives are modeled with the same kinds of lines: their requests, their functions'
invocations, duration (a stated handler time: no leasefence code runs there), platform log lines
at the same system log level and traces at the same sampling, their state storage, and the
producer's API when leasefence is charged for one (an HTTP API with a direct service
integration: one request, one access log line). Each says what it does not guarantee.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

from leasefence.limits import SPREAD_FULL_PROBE_MS
from leasefence.metrics import Metric
from leasefence.observability_defaults import (
    DEFAULT_LOG_LEVEL,
    DEFAULT_TRACING,
    application_log_level,
    powertools_log_level,
    system_log_level,
)
from leasefence.schema import DEFAULT_DUE_SHARDS
from leasefence.settings import DEFAULT_IDENTITY_RETENTION_DAYS, DEFAULT_PAYLOAD_RETENTION_DAYS
from leasefence.worker.http_backend import IDLE_MAX_SLEEP_MS
from leasefence_tools.bench import prices
from leasefence_tools.bench.cost_per_million import LABELS
from leasefence_tools.bench.prices import DAYS_PER_MONTH, GB, usd

MILLION = 1_000_000
VOLUMES = (1_000_000, 10_000_000, 100_000_000)
CAPACITY_MODES = ("on_demand", "provisioned")
SECONDS_PER_MONTH = 730 * 3600
MINUTES_PER_MONTH = 730 * 60
#: Lambda gives a function one vCPU at 1,769 MB, proportionally less below.
MB_PER_VCPU = 1769
#: Bytes CloudWatch Logs counts per log event besides its message.
LOG_EVENT_OVERHEAD = 26
#: The levels in order (a level keeps itself and those after it).
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: What a deployment creates that is billed by the month, each option on (the construct's
#: resources: tests/infra/snapshots/default.json, the dashboard from full.json; a test keeps these
#: equal).
DEPLOYMENT = {"alarms": 29, "dashboards": 1, "secrets": 1, "kms_keys": 1}
#: The construct's optional parts and their defaults (``LeaseFenceServiceProps``: ``events``,
#: ``alarms``, ``dashboard``; a test keeps these equal), and what a deployer loses without each.
OPTIONS: dict[str, bool] = {"events": False, "alarms": True, "dashboard": False}
WITHOUT: dict[str, str] = {
    "events": "no outcome event on EventBridge: a service that waits for an outcome reads the "
    "operation (GET) or is told by the job itself",
    "alarms": "no alarm and no alarm topic: nobody is told of an operation left unknown, due work "
    "nobody claims, a stream that falls behind or a failing function; the go/no-go report names "
    "the missing alert route",
    "dashboard": "no dashboard: the same metrics and alarms, read in CloudWatch's own pages",
}
#: One table and its four global secondary indexes (provisioned: each has its own capacity).
TABLE_AND_INDEXES = 5
#: A measured function ``<name>+events``: its invocations that only outcome events cause (a
#: stream batch that the mapping of a deployment without events would not deliver:
#: :func:`leasefence.streams.filters.publisher_filters`); billed only with ``events`` on.
EVENTS_ONLY = "+events"

#: Representative JSON lines as Lambda writes them (its documented ``platform.start`` and
#: ``platform.report`` records; the ``tracing`` part only with active tracing) and as the HTTP
#: API's access log writes one (the construct's format, :mod:`leasefence_infra.api`, filled in).
_TRACE = {
    "spanId": "54565fb41ac79632",
    "type": "X-Amzn-Trace-Id",
    "value": "Root=1-62e900b2-710d76f009d6e7785905449a;Parent=0efbd19962d95b05;Sampled=1",
}
PLATFORM_START = {
    "time": "2026-12-01T12:00:00.000Z",
    "type": "platform.start",
    "record": {"requestId": "6d68ca91-49c9-448d-89b8-7ca3e6dc66aa", "version": "$LATEST"},
}
PLATFORM_REPORT = {
    "time": "2026-12-01T12:00:00.021Z",
    "type": "platform.report",
    "record": {
        "requestId": "6d68ca91-49c9-448d-89b8-7ca3e6dc66aa",
        "metrics": {
            "durationMs": 20.51,
            "billedDurationMs": 21,
            "memorySizeMB": 1024,
            "maxMemoryUsedMB": 112,
        },
        "status": "success",
    },
}
ACCESS_LOG_LINE = {
    "requestId": "cbF9wjvZIAMEbXw=",
    "requestTime": "01/Dec/2026:12:00:00 +0000",
    "routeKey": "POST /v1/operations",
    "status": "201",
    "protocol": "HTTP/1.1",
    "responseLength": "412",
    "responseLatencyMs": "38",
    "integrationLatencyMs": "35",
    "integrationStatus": "200",
    "integrationError": "-",
    "authorizerError": "-",
    "sourceIp": "203.0.113.17",
    "userAgent": "leasefence-python/1.0 python-httpx/0.28",
}


def _json_len(value: dict[str, Any]) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode()) + 1


def platform_bytes_per_invocation(tracing: bool) -> int:
    """``platform.start`` and ``platform.report`` of one invocation (JSON log format)."""
    start, report = json.loads(json.dumps(PLATFORM_START)), json.loads(json.dumps(PLATFORM_REPORT))
    if tracing:
        start["record"]["tracing"] = _TRACE
        report["record"]["tracing"] = _TRACE
    return _json_len(start) + _json_len(report) + 2 * LOG_EVENT_OVERHEAD


@dataclass(frozen=True)
class Assumptions:
    """What the model assumes besides what was measured. The defaults are the construct's."""

    volume: int = 10_000_000
    """Lifecycles a month."""
    capacity: str = "on_demand"
    """``on_demand`` or ``provisioned`` (DynamoDB)."""
    log_level: str = DEFAULT_LOG_LEVEL
    system_log_level: str | None = None
    """Lambda's system log level; None: as :func:`leasefence.observability_defaults.system_log_level`."""
    tracing: bool = DEFAULT_TRACING
    log_retention_days: int = 30
    identity_retention_days: int = DEFAULT_IDENTITY_RETENTION_DAYS
    payload_retention_days: int = DEFAULT_PAYLOAD_RETENTION_DAYS
    job_seconds: float = 30.0
    """How long a job runs (it reports progress, so the runtime renews its lease)."""
    lease_seconds: float = 60.0
    """The workers' lease (the SDK's and the worker function's default); renewal every third."""
    latency_ms: dict[str, float] = field(
        default_factory=lambda: {
            "dynamodb": 5.0,
            "s3": 15.0,
            "events": 15.0,
            "sqs": 10.0,
            "checkpoint": 10.0,
        }
    )
    """In-region request latency from a function, per service (stated, not measured here)."""
    cpu_factor: float = 1.0
    """A Lambda vCPU's time for one CPU-ms of the bench machine."""
    provisioned_utilization: float = 0.7
    """Provisioned capacity: the average rate over this share of it (auto scaling's default
    target; steady arrivals, no peaks: a 2x daily peak doubles the capacity lines)."""
    idle_worker_months: float = 1.0
    """HTTP workers: idle worker-months a month (a fleet's spare capacity: one worker always
    idle). Each polls as the worker runtime does (:attr:`idle_poll_mean_s`)."""
    idle_poll_mean_s: float = 0.75 * IDLE_MAX_SLEEP_MS / 1000
    """Mean time between an idle HTTP worker's polls once backed off (the worker runtime draws
    each wait between half the cap and the cap: :meth:`leasefence.worker.Worker.idle_wait_ms`)."""
    schedule_runs_per_month: float = MINUTES_PER_MONTH
    """The sweeper's and the worker function's schedules: rate(1 minute)."""
    sqs_batch: int = 1
    """Records per invocation for SQS (one operation at a time at these rates; a busy queue
    shares a batch of up to 10). leasefence's stream invocations are not assumed but measured,
    one operation at a time: a record per batch, or several of one operation's records sharing
    one."""
    alternative_handler_cpu_ms: float = 1.0
    """An alternative's function doing the job's plumbing (no leasefence code): CPU per
    invocation (stated)."""
    step_functions_transitions: int = 1
    """A state machine with one Task state invoking a function, no retry."""
    durable_operations: int = 2
    """A durable execution with one step: starting it is an operation, the step another."""
    durable_retention_days: int = 14
    """Lambda durable functions' default history retention."""
    temporal_retention_days: int = 30
    events: bool = OPTIONS["events"]
    """leasefence publishes an outcome event per lifecycle (the construct's ``events``)."""
    alarms: bool = OPTIONS["alarms"]
    """The construct's alarms (``alarms``)."""
    dashboard: bool = OPTIONS["dashboard"]
    """The construct's dashboard (``dashboard``)."""
    same_job: bool = False
    """Price each alternative for leasefence's job (issue 32): its identity record kept for
    :attr:`identity_retention_days` where it can be (else its longest), a visibility extension
    or heartbeat per :meth:`heartbeats`, an outcome event and :attr:`alternative_alarms` alarms."""
    alternative_alarms: int = 5
    """Alarms an alternative's deployer keeps (stated: the queue's age and its dead letters, the
    function's errors and throttles, the state table's throttles)."""
    temporal_event_bytes: int = 250
    """Bytes per event of a Temporal workflow history besides the payloads (stated)."""

    def heartbeats(self) -> int:
        """Lease renewals during one job: every third of the lease while it runs."""
        interval = self.lease_seconds / 3
        return max(0, math.ceil(self.job_seconds / interval) - 1)

    def observability(self) -> dict[str, Any]:
        return {
            "log_level": powertools_log_level(self.log_level),
            "lambda_application_log_level": application_log_level(self.log_level),
            "lambda_system_log_level": system_log_level(self.log_level, self.system_log_level),
            "tracing": self.tracing,
        }


# ------------------------------------------------------------------------------ pricing


class Bill:
    """Dollars per lifecycle by line, built from usage windows; ``fixed`` holds monthly amounts."""

    def __init__(self, a: Assumptions, measured: dict[str, Any]) -> None:
        self.a = a
        self.measured = measured
        self.memory = measured["memory_mb"]
        self.lines: dict[str, float] = {}
        self.by_component: dict[str, float] = {}
        self.units = {"wru": 0.0, "rru": 0.0}
        obs = a.observability()
        self.app_levels = LEVELS[LEVELS.index(obs["log_level"]) :]
        self.emf_kept = obs["lambda_application_log_level"] in ("DEBUG", "INFO")
        self.platform_kept = obs["lambda_system_log_level"] in ("DEBUG", "INFO")
        self.traced_share: dict[str, float] = {}

    def functions(self, w: dict[str, Any]) -> dict[str, Any]:
        """The functions of window ``w`` that this deployment invokes (without events, not the
        invocations only they cause)."""
        return {
            f: n for f, n in w["functions"].items() if self.a.events or not f.endswith(EVENTS_ONLY)
        }

    def add(self, component: str, line: str, dollars: float) -> None:
        self.lines[line] = self.lines.get(line, 0.0) + dollars
        self.by_component[component] = self.by_component.get(component, 0.0) + dollars

    # ---------------------------------------------------------------- pieces

    def log_bytes(self, node: dict[str, Any]) -> float:
        app = sum(node.get("log_bytes", {}).get(level, 0) for level in self.app_levels)
        lines = sum(node.get("log_lines", {}).get(level, 0) for level in self.app_levels)
        emf = node.get("emf_bytes", 0) + LOG_EVENT_OVERHEAD * node.get("emf_lines", 0)
        total = app + LOG_EVENT_OVERHEAD * lines + (emf if self.emf_kept else 0)
        if self.platform_kept:
            total += node.get("invocations", 0) * platform_bytes_per_invocation(self.a.tracing)
        return total

    def gb_seconds(self, function: str, node: dict[str, Any]) -> float:
        mb = self.memory.get(function.removesuffix(EVENTS_ONLY), 1024)
        share = min(1.0, mb / MB_PER_VCPU)
        ms = node.get("cpu_ms", 0) * self.a.cpu_factor / share
        ms += sum(
            count * self.a.latency_ms.get(service, 10.0)
            for service, count in node.get("requests", {}).items()
            if service != "events" or self.a.events  # no PutEvents with events off
        )
        ms += 0.5 * node.get("invocations", 0)
        return ms / 1000 * mb / 1024

    def logs(self, component: str, total_bytes: float, times: float = 1.0) -> None:
        gb = total_bytes * times / GB
        self.add(component, "logs_ingestion", gb * usd("cloudwatch_logs_ingestion_gb"))
        months = self.a.log_retention_days / DAYS_PER_MONTH
        self.add(component, "logs_storage", gb * months * usd("cloudwatch_logs_storage_gb_month"))

    def dynamodb(self, component: str, line: str, units: float, write: bool) -> None:
        """``units`` request units per lifecycle: on demand, or as capacity (linear part)."""
        self.units["wru" if write else "rru"] += units
        if self.a.capacity == "on_demand":
            price = usd("dynamodb_write_request_unit" if write else "dynamodb_read_request_unit")
        else:
            hour = usd(
                "dynamodb_provisioned_wcu_hour" if write else "dynamodb_provisioned_rcu_hour"
            )
            # One unit-second each (a read unit serves two eventually consistent reads: the
            # units counted are already halves), at the target utilization.
            price = hour / 3600 / self.a.provisioned_utilization
        self.add(component, line, units * price)

    def window(self, component: str, w: dict[str, Any], times: float = 1.0) -> None:
        """A measured usage window (per lifecycle or per event), ``times`` per lifecycle."""
        if not times:
            return
        functions = self.functions(w)
        unbilled = [n for f, n in w["functions"].items() if f not in functions]
        wcu, wcu_index, rcu = (
            w[key] - sum(n.get(key, 0) for n in unbilled) for key in ("wcu", "wcu_index", "rcu")
        )
        publisher_wcu = sum(
            n.get("wcu", 0) for f, n in functions.items() if f.startswith("publisher")
        )
        self.dynamodb(
            component, "dynamodb_writes_table", (wcu - wcu_index - publisher_wcu) * times, True
        )
        self.dynamodb(component, "dynamodb_writes_index", wcu_index * times, True)
        self.dynamodb(component, "dynamodb_writes_history", publisher_wcu * times, True)
        self.dynamodb(component, "dynamodb_reads", rcu * times, False)
        self.add(
            component,
            "api_gateway_requests",
            w["api_requests"] * times * usd("api_gateway_http_request"),
        )
        invocations = sum(n.get("invocations", 0) for n in functions.values())
        self.add(component, "lambda_requests", invocations * times * usd("lambda_request"))
        gb_s = sum(self.gb_seconds(f, n) for f, n in functions.items())
        self.add(component, "lambda_duration", gb_s * times * usd("lambda_gb_second_arm64"))
        self.add(
            component,
            "s3_requests",
            (w["s3_put"] * usd("s3_put_request") + w["s3_get"] * usd("s3_get_request")) * times,
        )
        published = w["events"] if self.a.events else 0
        self.add(
            component, "eventbridge_events", published * times * usd("eventbridge_custom_event")
        )
        log = sum(self.log_bytes(n) for n in functions.values())
        log += (
            w["api_requests"] * _json_len(ACCESS_LOG_LINE) + w["api_requests"] * LOG_EVENT_OVERHEAD
        )
        self.logs(component, log, times)
        traces = sum(
            n.get("invocations", 0) * self.traced_share.get(f.removesuffix(EVENTS_ONLY), 0.0)
            for f, n in functions.items()
        )
        self.add(component, "xray_traces", traces * times * usd("xray_trace_recorded"))

    def storage(self, component: str, stored: dict[str, Any], payload_bytes: float) -> None:
        a = self.a
        keep = a.payload_retention_days / DAYS_PER_MONTH
        rest = max(0.0, a.identity_retention_days - a.payload_retention_days) / DAYS_PER_MONTH
        ended, purged = stored["ended"], stored["after_purge"]
        table_gb_months = (ended["table_bytes"] * keep + purged["table_bytes"] * rest) / GB
        index_gb_months = (ended["index_bytes"] * keep + purged["index_bytes"] * rest) / GB
        self.add(
            component,
            "dynamodb_storage",
            (table_gb_months + index_gb_months) * usd("dynamodb_storage_gb_month"),
        )
        self.add(component, "dynamodb_backup_pitr", table_gb_months * usd("dynamodb_pitr_gb_month"))
        self.add(component, "s3_storage", payload_bytes / GB * keep * usd("s3_storage_gb_month"))

    def monthly(self, component: str, line: str, dollars_a_month: float) -> None:
        self.add(component, line, dollars_a_month / self.a.volume)

    def result(self) -> dict[str, Any]:
        total = sum(self.lines.values())
        return {
            "total": round(total * MILLION, 2),
            "lines": {k: round(v * MILLION, 4) for k, v in sorted(self.lines.items())},
            "by_component": {k: round(v * MILLION, 4) for k, v in self.by_component.items()},
            "wru_per_lifecycle": round(self.units["wru"], 3),
            "rru_per_lifecycle": round(self.units["rru"], 3),
        }


def traced_share(invocations_per_month: float, tracing: bool) -> float:
    """The share of a function's invocations that Lambda's default sampling records: the first
    each second, 5% of the rest (arrivals spread evenly over the month)."""
    if not tracing or invocations_per_month <= 0:
        return 0.0
    rate = invocations_per_month / SECONDS_PER_MONTH
    traced = min(rate, 1.0) + 0.05 * max(0.0, rate - 1.0)
    return traced / rate


# ------------------------------------------------------------------------------ leasefence


#: The heartbeat each profile's worker makes (over HTTP, or in-process in the worker function).
_HEARTBEAT = {
    "http_workers": "heartbeat_http",
    "http_workers_batched": "heartbeat_http_batched",
    "worker_function": "heartbeat_in_process",
    "worker_function_polled": "heartbeat_in_process",
    "class_a": "heartbeat_in_process",
}


#: The idle poll each HTTP profile's idle worker makes.
_IDLE_POLL = {"http_workers": "idle_poll_http", "http_workers_batched": "idle_poll_http_batched"}


def with_requests(window: dict[str, Any], requests: float) -> dict[str, Any]:
    """``window`` with ``requests`` API requests (each an API function invocation) instead of
    its own: what is billed per request (API Gateway, Lambda requests, the access log and
    platform lines, traces, half a ms of duration) follows; units, CPU time and the
    application's log and EMF lines stay as measured."""
    out = copy.deepcopy(window)
    out["api_requests"] = requests
    out["functions"].setdefault("api", {})["invocations"] = requests
    return out


def mixed(a: Any, b: Any, share: float) -> Any:
    """Two measured windows weighed: ``b``'s numbers ``share`` of the time, ``a``'s the rest (a
    number one of them lacks counts 0; anything else is ``a``'s)."""
    if isinstance(a, dict) or isinstance(b, dict):
        a, b = a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}
        return {k: mixed(a.get(k, 0), b.get(k, 0), share) for k in {**a, **b}}
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a * (1 - share) + b * share
    return a


def lifecycle_of(profile: str, measured: dict[str, Any]) -> dict[str, Any]:
    """The profile's lifecycle window; the batched HTTP workers' weighs the round that closes
    and claims in one (``measured["paired"]``: each claim's marker rides with its worker's close,
    ``after``) by the share of the busy fleet's claims that did (``claims_after_close``)."""
    lifecycle: dict[str, Any] = measured["profiles"][profile]
    paired = measured.get("paired", {}).get(profile)
    share = (measured.get("batched_fleet") or {}).get("claims_after_close", 0.0)
    if profile == "http_workers_batched" and paired is not None and share:
        return cast("dict[str, Any]", mixed(lifecycle, paired, share))
    return lifecycle


def _components(
    profile: str, measured: dict[str, Any], a: Assumptions
) -> list[tuple[str, dict[str, Any], float]]:
    """(component, window, times per lifecycle) of one profile. The batched HTTP profile takes
    its requests from the busy fleet (``measured["batched_fleet"]``:
    :func:`leasefence_tools.bench.batched_http.fleet_figures`) when it was measured: the
    lifecycle's enqueue, claim and finish requests per lifecycle, and one renewal request per
    ``leases_per_renewal`` leases; else the profile's own full batches."""
    events = measured["events"]
    lifecycle = lifecycle_of(profile, measured)
    heartbeat = events[_HEARTBEAT[profile]]
    fleet = measured.get("batched_fleet")
    if profile == "http_workers_batched" and fleet:
        lifecycle = with_requests(lifecycle, fleet["lifecycle_requests"])
        heartbeat = with_requests(heartbeat, 1 / fleet["leases_per_renewal"])
    return [
        ("lifecycle", lifecycle, 1.0),
        ("heartbeats", heartbeat, float(a.heartbeats())),
        ("payload_purge", events["purge"], 1.0),
        ("end_of_retention", events["end_of_retention"], 1.0),
    ]


def _monthly_windows(
    profile: str, measured: dict[str, Any], a: Assumptions
) -> list[tuple[str, dict[str, Any], float]]:
    """(component, window, times a month) that a deployment runs whatever its volume."""
    events = measured["events"]
    out = [("sweeper_schedule", events["idle_sweeper_run"], a.schedule_runs_per_month)]
    if profile in _IDLE_POLL:
        polls = a.idle_worker_months * SECONDS_PER_MONTH / a.idle_poll_mean_s
        out.append(("idle_http_workers", events[_IDLE_POLL[profile]], polls))
    else:
        out.append(("worker_schedule", events["idle_worker_tick"], a.schedule_runs_per_month))
    return out


def leasefence_profile(profile: str, measured: dict[str, Any], a: Assumptions) -> dict[str, Any]:
    bill = Bill(a, measured)
    per_lifecycle = _components(profile, measured, a)
    monthly = _monthly_windows(profile, measured, a)
    # Invocations a month, per function, for the trace sampling.
    per_month: dict[str, float] = {}
    # (one function's invocations tallied apart, ``<name>+events``, are still one function's)
    for _, w, times in per_lifecycle:
        for name, n in bill.functions(w).items():
            f = name.removesuffix(EVENTS_ONLY)
            per_month[f] = per_month.get(f, 0.0) + n.get("invocations", 0) * times * a.volume
    for _, w, times in monthly:
        for name, n in bill.functions(w).items():
            f = name.removesuffix(EVENTS_ONLY)
            per_month[f] = per_month.get(f, 0.0) + n.get("invocations", 0) * times
    bill.traced_share = {f: traced_share(n, a.tracing) for f, n in per_month.items()}

    for component, w, times in per_lifecycle:
        bill.window(component, w, times)
    prof = lifecycle_of(profile, measured)
    bill.storage("storage", prof["stored"], prof["payload_object_bytes"])
    for component, w, times in monthly:
        bill.window(component, w, times / a.volume)
        if component.endswith("_schedule"):
            bill.add(
                component, "schedules", times / a.volume * usd("eventbridge_scheduler_invocation")
            )
    # Billed once a deployment emits one: the publisher counts its events only with events on.
    metrics = len(
        [m for m in measured.get("custom_metrics", ()) if a.events or not _events_only(m)]
    )
    bill.monthly(
        "monitoring", "cloudwatch_metrics", metrics * usd("cloudwatch_custom_metric_month")
    )
    bill.monthly(
        "monitoring",
        "cloudwatch_alarms",
        DEPLOYMENT["alarms"] * usd("cloudwatch_alarm_month") * a.alarms,
    )
    bill.monthly(
        "monitoring",
        "cloudwatch_dashboard",
        DEPLOYMENT["dashboards"] * usd("cloudwatch_dashboard_month") * a.dashboard,
    )
    bill.monthly(
        "deployment",
        "secrets_and_keys",
        DEPLOYMENT["secrets"] * usd("secretsmanager_secret_month")
        + DEPLOYMENT["kms_keys"] * usd("kms_key_month"),
    )
    if a.capacity == "provisioned":
        _provisioned_floor(bill)
    out = bill.result()
    life = lifecycle_of(profile, measured)
    out["wru_per_lifecycle_all"] = round(life["wcu"], 3)
    out["wru_per_lifecycle_all_in"] = round(sum(w["wcu"] * t for _, w, t in per_lifecycle), 3)
    out["heartbeats_per_lifecycle"] = a.heartbeats()
    out["traced_share"] = {f: round(s, 4) for f, s in bill.traced_share.items() if s}
    return out


def _events_only(metric: str) -> bool:
    """Whether ``metric`` (``Name[dimensions]``) is emitted only with outcome events on."""
    return metric.partition("[")[0] == Metric.EVENTS_PUBLISHED.value


def _provisioned_floor(bill: Bill) -> None:
    """Provisioned capacity cannot go below one unit per table and index: what that minimum
    costs beyond the capacity the lines already pay for."""
    a = bill.a
    hours = SECONDS_PER_MONTH / 3600
    floor = (
        TABLE_AND_INDEXES
        * hours
        * (usd("dynamodb_provisioned_wcu_hour") + usd("dynamodb_provisioned_rcu_hour"))
    )
    paid = (
        sum(
            v
            for k, v in bill.lines.items()
            if k.startswith("dynamodb_") and "storage" not in k and "pitr" not in k
        )
        * a.volume
    )
    if floor > paid:
        bill.monthly("deployment", "dynamodb_minimum_capacity", floor - paid)


def idle_worker_month_usd(
    measured: dict[str, Any], a: Assumptions, profile: str = "http_workers"
) -> dict[str, Any]:
    """One HTTP worker polling an idle tenant for a month (every :attr:`Assumptions.idle_poll_mean_s`
    on average), with the sampling a fleet of one such worker would get; ``profile``
    ``http_workers_batched``: its polls through the round route (a claim alone)."""
    polls = SECONDS_PER_MONTH / a.idle_poll_mean_s
    one = replace(a, volume=1)
    bill = Bill(one, measured)
    w = measured["events"][_IDLE_POLL[profile]]
    bill.traced_share = {
        f: traced_share(n.get("invocations", 0) * polls, a.tracing)
        for f, n in w["functions"].items()
    }
    bill.window("idle", w, polls)
    # The due spread: a poll reads the hint and shard 0 (measured); once per full-probe period
    # the engine reads every other due shard too (0.5 unit each), priced here.
    full_probes = SECONDS_PER_MONTH / (SPREAD_FULL_PROBE_MS / 1000)
    full_probe_rru = full_probes * (DEFAULT_DUE_SHARDS - 1) * 0.5
    bill.dynamodb("idle", "dynamodb_reads", full_probe_rru, False)
    result = bill.result()
    return {
        "usd": round(result["total"] / MILLION, 4),
        "polls": round(polls),
        "full_probes": round(full_probes),
        "full_probe_rru": round(full_probe_rru),
        "poll_mean_s": a.idle_poll_mean_s,
        "lines": {k: round(v / MILLION, 4) for k, v in result["lines"].items()},
    }


# ------------------------------------------------------------------------------ alternatives

ALTERNATIVES: dict[str, dict[str, str]] = {
    "sqs_lambda_powertools": {
        "what": "SQS standard queue (the producer sends through an HTTP API with a direct SQS "
        "integration), a Lambda event source mapping, Powertools idempotency on DynamoDB",
        "does_not_guarantee": "no lease or fence: a message whose visibility timeout lapses "
        "while its consumer still works is delivered again and runs concurrently, and nothing "
        "stops the stale consumer's writes; idempotency only while its record lives (an hour "
        "here), and a crash between the side effect and the record's completion runs it again "
        "once the in-progress record expires; no retry or unknown state, no history, no "
        "operator actions",
    },
    "step_functions_standard": {
        "what": "Step Functions Standard, one Task state invoking a function (the producer "
        "starts executions through an HTTP API with a direct StartExecution integration)",
        "does_not_guarantee": "exactly-once per execution name, but the task's function is "
        "invoked at least once: a retry (or a timeout while it still runs) calls it again with "
        "no fence for the downstream to refuse the older call; no unknown state (a failed "
        "execution is failed)",
    },
    "lambda_durable_functions": {
        "what": "a Lambda durable function with one step (invoked through an HTTP API)",
        "does_not_guarantee": "a step's result is checkpointed after it ran: a crash in between "
        "runs the step again, with no fence for the downstream; no operator unknown state; an "
        "execution's history is kept for its retention (14 days by default) only",
    },
    "temporal_cloud": {
        "what": "Temporal Cloud, a workflow with one activity that heartbeats as leasefence's "
        "worker does (the producer calls Temporal's gRPC API directly), Essentials plan, "
        "workers on your own compute (not counted: neither are leasefence's HTTP workers)",
        "does_not_guarantee": "an activity runs at least once: a retry after a timeout runs it "
        "again while the first attempt may still act, with no fence for the downstream; "
        "history kept for the namespace's retention only",
    },
}


class AltBill(Bill):
    """An alternative's bill: the same lines, built from stated usage."""

    def function(
        self,
        component: str,
        invocations: float,
        cpu_ms: float,
        requests: dict[str, float],
        memory_mb: int,
    ) -> None:
        node = {"invocations": invocations, "cpu_ms": cpu_ms * invocations, "requests": requests}
        self.memory = {"fn": memory_mb}
        self.add(component, "lambda_requests", invocations * usd("lambda_request"))
        self.add(
            component,
            "lambda_duration",
            self.gb_seconds("fn", node) * usd("lambda_gb_second_arm64"),
        )
        self.logs(component, self.log_bytes(node))
        share = traced_share(invocations * self.a.volume, self.a.tracing)
        self.add(component, "xray_traces", invocations * share * usd("xray_trace_recorded"))

    def producer_api(self, component: str) -> None:
        self.add(component, "api_gateway_requests", usd("api_gateway_http_request"))
        self.logs(component, _json_len(ACCESS_LOG_LINE) + LOG_EVENT_OVERHEAD)


def alternative(
    name: str, measured: dict[str, Any], powertools_wcu: float, a: Assumptions
) -> dict[str, Any]:
    bill = AltBill(a, measured)
    payload = measured["payload_bytes"]
    hb = a.heartbeats()
    cpu = a.alternative_handler_cpu_ms
    if name == "sqs_lambda_powertools":
        batch = max(1, a.sqs_batch)
        bill.producer_api("lifecycle")
        # send; receive and delete (DeleteMessageBatch) per batch
        bill.add("lifecycle", "sqs_requests", (1 + 2 / batch) * usd("sqs_standard_request"))
        bill.function("lifecycle", 1 / batch, cpu, {"dynamodb": 2 / batch}, 512)
        bill.dynamodb("lifecycle", "dynamodb_writes_table", powertools_wcu, True)
        record_bytes = 300 + 100  # the idempotency record and DynamoDB's overhead, for an hour
        bill.add(
            "storage",
            "dynamodb_storage",
            record_bytes / GB / (DAYS_PER_MONTH * 24) * usd("dynamodb_storage_gb_month"),
        )
        # The event source mapping's long polls while idle: 5 pollers, one 20 s poll each.
        bill.monthly(
            "deployment", "sqs_requests", 5 * 3 * MINUTES_PER_MONTH * usd("sqs_standard_request")
        )
    elif name == "step_functions_standard":
        bill.producer_api("lifecycle")
        bill.add(
            "lifecycle",
            "step_functions_transitions",
            a.step_functions_transitions * usd("step_functions_standard_transition"),
        )
        bill.function("lifecycle", 1, cpu, {}, 512)
    elif name == "lambda_durable_functions":
        bill.producer_api("lifecycle")
        bill.add(
            "lifecycle",
            "durable_operations",
            a.durable_operations * usd("lambda_durable_operation"),
        )
        written = payload + 200  # the input and the step's result, checkpointed
        bill.add("lifecycle", "durable_data", written / GB * usd("lambda_durable_data_written_gb"))
        bill.add(
            "storage",
            "durable_data",
            written
            / GB
            * a.durable_retention_days
            / DAYS_PER_MONTH
            * usd("lambda_durable_data_retained_gb_month"),
        )
        bill.function("lifecycle", 1, cpu, {"checkpoint": 2}, 512)
    elif name == "temporal_cloud":
        actions_per_job = 2 + hb  # workflow started, activity started, heartbeats
        events = 11 + hb
        history = 2 * payload + events * a.temporal_event_bytes
        actions = actions_per_job * a.volume
        active_gbh = history * a.volume / GB * a.job_seconds / 3600
        retention = (
            min(a.identity_retention_days, IDENTITY_LIMIT_DAYS[name])
            if a.same_job
            else a.temporal_retention_days
        )
        retained_gbh = history * a.volume / GB * retention * 24
        inc = prices.TEMPORAL_ESSENTIALS
        action_usd = _tiered(max(0.0, actions - inc["actions"]), prices.TEMPORAL_ACTION_TIERS)
        active_usd = max(0.0, active_gbh - inc["active_gb"] * 744) * usd(
            "temporal_cloud_active_storage_gb_hour"
        )
        retained_usd = max(0.0, retained_gbh - inc["retained_gb"] * 744) * usd(
            "temporal_cloud_retained_storage_gb_hour"
        )
        usage = action_usd + active_usd + retained_usd
        plan = max(usd("temporal_cloud_essentials_plan_month"), inc["share"] * usage)
        bill.monthly("lifecycle", "temporal_actions", action_usd)
        bill.monthly("storage", "temporal_storage", active_usd + retained_usd)
        bill.monthly("deployment", "temporal_plan", plan)
    else:  # pragma: no cover - the names above are all there is
        raise ValueError(name)
    job = _same_job(bill, name, payload) if a.same_job else None
    out = bill.result()
    out.update(ALTERNATIVES[name])
    if job is not None:
        out["same_job"] = job
    return out


#: The longest an alternative keeps what identifies a job (days), where it cannot be kept longer.
IDENTITY_LIMIT_DAYS = {
    "step_functions_standard": 90,  # a closed Standard execution's history, then its name is free
    "lambda_durable_functions": 90,  # the longest retention of a durable execution
    "temporal_cloud": 90,  # the longest retention of a Temporal Cloud namespace
}


def _same_job(bill: AltBill, name: str, payload_bytes: int) -> dict[str, Any]:
    """Issue 32: the lines that make an alternative do leasefence's job (identity kept for the
    identity window where it can be, a heartbeat, an outcome event, alarms); what it says of each."""
    a = bill.a
    hb = a.heartbeats()
    days = min(a.identity_retention_days, IDENTITY_LIMIT_DAYS.get(name, a.identity_retention_days))
    months = days / DAYS_PER_MONTH
    heartbeat = f"{hb} per job"
    notification = "one EventBridge custom event (PutEvents from the function)"
    if name == "sqs_lambda_powertools":
        # The idempotency record kept for the identity window (TTL deletes it free of charge),
        # under point-in-time recovery as leasefence's table is; the record's first hour is
        # already counted above.
        record = 300 + 100
        kept = max(0.0, months - 1 / (DAYS_PER_MONTH * 24))
        bill.add(
            "storage", "dynamodb_storage", record / GB * kept * usd("dynamodb_storage_gb_month")
        )
        bill.add(
            "storage", "dynamodb_backup_pitr", record / GB * months * usd("dynamodb_pitr_gb_month")
        )
        # A visibility extension per heartbeat: ChangeMessageVisibility from the running function.
        bill.add("heartbeats", "sqs_requests", hb * usd("sqs_standard_request"))
        bill.add(
            "heartbeats",
            "lambda_duration",
            hb * a.latency_ms["sqs"] / 1000 * 512 / 1024 * usd("lambda_gb_second_arm64"),
        )
        heartbeat += " (ChangeMessageVisibility)"
    elif name == "step_functions_standard":
        heartbeat = "none: a Lambda task has no heartbeat (its timeout bounds it)"
        notification = "the execution's status-change event on the default bus (free)"
    elif name == "lambda_durable_functions":
        written = payload_bytes + 200
        extra = max(0.0, days - a.durable_retention_days) / DAYS_PER_MONTH
        bill.add(
            "storage",
            "durable_data",
            written / GB * extra * usd("lambda_durable_data_retained_gb_month"),
        )
        heartbeat = "none needed: a step is checkpointed when it ends"
    elif name == "temporal_cloud":
        heartbeat += " (activity heartbeats, counted as actions above)"
    if name != "step_functions_standard":
        bill.add("outcome_event", "eventbridge_events", usd("eventbridge_custom_event"))
        bill.add(
            "outcome_event",
            "lambda_duration",
            a.latency_ms["events"] / 1000 * 512 / 1024 * usd("lambda_gb_second_arm64"),
        )
    bill.monthly(
        "monitoring", "cloudwatch_alarms", a.alternative_alarms * usd("cloudwatch_alarm_month")
    )
    return {
        "identity_days": days,
        "identity_window_kept": days >= a.identity_retention_days,
        "heartbeat": heartbeat,
        "outcome_notification": notification,
        "alarms": a.alternative_alarms,
    }


def _tiered(actions: float, tiers: tuple[tuple[float, float], ...]) -> float:
    """Dollars for ``actions`` a month at tiered prices per million."""
    dollars, floor = 0.0, 0.0
    for ceiling, per_million in tiers:
        if actions <= floor:
            break
        dollars += (min(actions, ceiling) - floor) / MILLION * per_million
        floor = ceiling
    return dollars


# ------------------------------------------------------------------------------ the report

#: The profiles the all-in figure is reported for first (issue 24's two).
MAIN_PROFILES = ("http_workers", "worker_function")


def compute(
    measured: dict[str, Any], powertools_wcu: float, assumptions: Assumptions | None = None
) -> dict[str, Any]:
    """The report's ``cost_per_million_all_in``: at the assumed volume and capacity mode, every
    profile and alternative by line; and the totals at every volume and capacity mode."""
    a = assumptions or Assumptions()
    profiles = {name: leasefence_profile(name, measured, a) for name in measured["profiles"]}
    alternatives = {name: alternative(name, measured, powertools_wcu, a) for name in ALTERNATIVES}
    grid: dict[str, dict[str, dict[str, float]]] = {}
    for volume in VOLUMES:
        for capacity in CAPACITY_MODES:
            b = replace(a, volume=volume, capacity=capacity)
            label = f"{volume // MILLION}M"
            for name in measured["profiles"]:
                total = leasefence_profile(name, measured, b)["total"]
                grid.setdefault(f"leasefence_{name}", {}).setdefault(label, {})[capacity] = total
            for name in ALTERNATIVES:
                total = alternative(name, measured, powertools_wcu, b)["total"]
                grid.setdefault(name, {}).setdefault(label, {})[capacity] = total
    assumed = asdict(a)
    assumed.update(
        {
            "observability": a.observability(),
            "heartbeats_per_job": a.heartbeats(),
            "memory_mb": measured["memory_mb"],
            "payload_bytes": measured["payload_bytes"],
            "custom_metrics": measured.get("custom_metrics", []),
            "deployment": DEPLOYMENT,
            "region": prices.REGION,
            "prices_read_on": sorted({p.read_on for p in prices.PRICES.values()}),
            "excluded": "the job's own work (and its time in the worker), free tiers, data "
            "transfer, Secrets Manager and KMS requests (one read per cold start), X-Ray "
            "retrievals, Logs Insights queries, cold starts (their init lines, and their init "
            "duration, billed since August 2025: AWS puts cold starts under 1% of invocations)",
        }
    )
    # Issue 32: what each option costs, and every alternative priced for leasefence's job.
    optional = options(measured, a)
    compared = comparison(measured, powertools_wcu, a)
    # What the same measurements cost with the defaults shipped before issue 24 (INFO logs and
    # platform lines, tracing on, an idle HTTP worker polling every second).
    before = replace(a, log_level="INFO", system_log_level=None, tracing=True, idle_poll_mean_s=1.0)
    return {
        "assumes": assumed,
        "profiles": profiles,
        "alternatives": alternatives,
        "grid": grid,
        "idle_worker_month": idle_worker_month_usd(measured, a),
        "idle_worker_month_batched": (
            idle_worker_month_usd(measured, a, "http_workers_batched")
            if "idle_poll_http_batched" in measured["events"]
            else None
        ),
        "batched_fleet": measured.get("batched_fleet"),
        "options": optional,
        "comparison": compared,
        "with_previous_defaults": {
            "assumes": before.observability() | {"idle_poll_mean_s": before.idle_poll_mean_s},
            "profiles": {
                name: leasefence_profile(name, measured, before)["total"]
                for name in measured["profiles"]
            },
            "idle_worker_month_usd": idle_worker_month_usd(measured, before)["usd"],
        },
    }


def _with(a: Assumptions, option: str, value: bool) -> Assumptions:
    """``a`` with one of :data:`OPTIONS` set to ``value``."""
    chosen = {name: value if name == option else getattr(a, name) for name in OPTIONS}
    return replace(
        a, events=chosen["events"], alarms=chosen["alarms"], dashboard=chosen["dashboard"]
    )


def options(measured: dict[str, Any], a: Assumptions) -> dict[str, Any]:
    """Issue 32: each optional part of the construct, its default, what it costs per million
    lifecycles (all in, the main profiles, at the assumed volume: on minus off, the other options
    at their defaults) and what a deployer loses without it."""
    out: dict[str, Any] = {}
    for option, default in OPTIONS.items():
        on, off = _with(a, option, True), _with(a, option, False)
        out[option] = {
            "default": default,
            "usd_per_million": {
                p: round(
                    leasefence_profile(p, measured, on)["total"]
                    - leasefence_profile(p, measured, off)["total"],
                    2,
                )
                for p in MAIN_PROFILES
            },
            "without_it": WITHOUT[option],
        }
    return out


def comparison(measured: dict[str, Any], powertools_wcu: float, a: Assumptions) -> dict[str, Any]:
    """Issue 32: every alternative priced for leasefence's job (:attr:`Assumptions.same_job`),
    beside leasefence doing it (outcome events and alarms on), at its defaults, and with every
    option a deployer can turn off turned off."""
    job = replace(a, same_job=True, events=True, alarms=True)
    off = replace(a, events=False, alarms=False, dashboard=False)
    return {
        "assumes": {
            "volume_per_month": a.volume,
            "capacity": a.capacity,
            "payload_bytes": measured["payload_bytes"],
            "payload": measured.get("payload", {}),
            "ids": measured.get("ids", {}),
            "identity_retention_days": a.identity_retention_days,
            "job_seconds": a.job_seconds,
            "heartbeats_per_job": a.heartbeats(),
            "alternative_alarms": a.alternative_alarms,
            "leasefence_alarms": DEPLOYMENT["alarms"],
        },
        "leasefence": {
            p: {
                "same_job": leasefence_profile(p, measured, job)["total"],
                "defaults": leasefence_profile(p, measured, a)["total"],
                "options_off": leasefence_profile(p, measured, off)["total"],
            }
            for p in MAIN_PROFILES
        },
        "alternatives": {
            name: {
                k: v
                for k, v in alternative(name, measured, powertools_wcu, job).items()
                if k in ("total", "lines", "same_job", "does_not_guarantee")
            }
            for name in ALTERNATIVES
        },
    }


def summary(computed: dict[str, Any]) -> dict[str, Any]:
    """The report's ``cost_per_million_all_in``: what it assumes, and per profile and
    alternative the total and its lines."""
    a = computed["assumes"]
    keep = ("total", "lines", "by_component", "wru_per_lifecycle_all", "wru_per_lifecycle_all_in")
    return {
        "assumes": {
            "volume_per_month": a["volume"],
            "capacity": a["capacity"],
            **a["observability"],
            "job_seconds": a["job_seconds"],
            "heartbeats_per_job": a["heartbeats_per_job"],
            "idle_worker_months": a["idle_worker_months"],
            "prices_read_on": a["prices_read_on"],
        },
        "profiles": {
            name: {k: v for k, v in p.items() if k in keep}
            for name, p in computed["profiles"].items()
        },
        "alternatives": {
            name: {
                "total": p["total"],
                "lines": p["lines"],
                "does_not_guarantee": p["does_not_guarantee"],
            }
            for name, p in computed["alternatives"].items()
        },
        "options": computed["options"],
        "comparison": computed["comparison"],
    }


#: The names of :data:`cost_per_million.LABELS`; the all-in model prices Temporal's Essentials plan.
_LABELS = {**LABELS, "temporal_cloud": "Temporal Cloud (Essentials)"}
#: The table's columns: line groups.
COLUMNS: dict[str, tuple[str, ...]] = {
    "DynamoDB writes (table/index/history)": (
        "dynamodb_writes_table",
        "dynamodb_writes_index",
        "dynamodb_writes_history",
    ),
    "DynamoDB reads": ("dynamodb_reads",),
    "storage + backup": (
        "dynamodb_storage",
        "dynamodb_backup_pitr",
        "s3_storage",
        "temporal_storage",
    ),
    "API Gateway": ("api_gateway_requests",),
    "Lambda": ("lambda_requests", "lambda_duration"),
    "S3 requests": ("s3_requests",),
    "EventBridge": ("eventbridge_events", "schedules"),
    "logs": ("logs_ingestion", "logs_storage"),
    "X-Ray": ("xray_traces",),
    "monitoring + fixed": (
        "cloudwatch_metrics",
        "cloudwatch_alarms",
        "cloudwatch_dashboard",
        "secrets_and_keys",
        "dynamodb_minimum_capacity",
    ),
    "service": (
        "sqs_requests",
        "step_functions_transitions",
        "durable_operations",
        "durable_data",
        "temporal_actions",
        "temporal_plan",
    ),
}


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def render_options(options: dict[str, Any]) -> list[str]:
    """What each optional part costs (per million, all in, at the assumed volume) and what a
    deployer loses without it (markdown rows)."""
    rows = [
        "| option (construct prop) | default | stream worker | HTTP workers | without it |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for name, o in options.items():
        cost = o["usd_per_million"]
        rows.append(
            f"| `{name}` | {'on' if o['default'] else 'off'} | {_usd(cost['worker_function'])} | "
            f"{_usd(cost['http_workers'])} | {o['without_it']} |"
        )
    return rows


def render(computed: dict[str, Any]) -> str:
    """The all-in table (markdown): every line group for leasefence and each alternative at the
    assumed volume and capacity, then the totals at every volume and mode, then the
    assumptions."""
    a = computed["assumes"]
    obs = a["observability"]
    rows = [
        "| $ per million, all in | " + " | ".join(COLUMNS) + " | total |",
        "| --- |" + " ---: |" * (len(COLUMNS) + 1),
    ]
    entries = [(n, p) for n, p in computed["profiles"].items()] + list(
        computed["alternatives"].items()
    )
    for name, result in entries:
        lines = result["lines"]
        cells = [_usd(sum(lines.get(k, 0) for k in keys)) for keys in COLUMNS.values()]
        rows.append(
            f"| {_LABELS.get(name, name)} | "
            + " | ".join(cells)
            + f" | **{_usd(result['total'])}** |"
        )
    rows += [
        "",
        "| total $ per million | "
        + " | ".join(
            f"{v // MILLION}M {m.replace('_', '-')}" for v in VOLUMES for m in CAPACITY_MODES
        )
        + " |",
        "| --- |" + " ---: |" * (len(VOLUMES) * len(CAPACITY_MODES)),
    ]
    for name, by_volume in computed["grid"].items():
        label = _LABELS.get(name.removeprefix("leasefence_"), name)
        cells = [_usd(by_volume[f"{v // MILLION}M"][m]) for v in VOLUMES for m in CAPACITY_MODES]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    rows += ["", *render_options(computed["options"])]
    idle = computed["idle_worker_month"]
    rows += [
        "",
        f"{a['region']}, list prices read {', '.join(a['prices_read_on'])} "
        "(leasefence_tools.bench.prices: each with its page and how it was checked). "
        f"{a['volume']:,} lifecycles a month, DynamoDB {a['capacity'].replace('_', '-')}; "
        f"log level {obs['log_level']} (Lambda application {obs['lambda_application_log_level']}, "
        f"system {obs['lambda_system_log_level']}), tracing {'on' if obs['tracing'] else 'off'}; "
        f"a {a['job_seconds']:g} s job on a {a['lease_seconds']:g} s lease "
        f"({a['heartbeats_per_job']} heartbeat); a {a['payload_bytes']:,}-byte payload kept "
        f"{a['payload_retention_days']} days, the identity {a['identity_retention_days']}; logs "
        f"kept {a['log_retention_days']} days; functions on arm64 at "
        + ", ".join(f"{k} {v} MB" for k, v in a["memory_mb"].items())
        + f"; HTTP workers: {a['idle_worker_months']:g} idle worker-month a month "
        f"(one idle worker: {_usd(idle['usd'])} a month, {idle['polls']:,} polls). "
        f"Excluded: {a['excluded']}.",
    ]
    fleet = computed.get("batched_fleet")
    if fleet:
        rows[-1] += (
            f" HTTP workers, batched: the batch routes' units, time and logs per lifecycle, with "
            f"the {fleet['lifecycle_requests']:g} enqueue, claim and finish requests per "
            f"lifecycle a busy fleet of {fleet['workers']} sent (leasefence_tools.bench."
            f"batched_http) and one renewal request per {fleet['leases_per_renewal']:g} leases."
        )
    return "\n".join(rows)
