"""Dashboard, alarms and the alarm topic of a ``LeaseFenceService``.

The functions emit Powertools EMF metrics in the service's namespace (``metrics_namespace``,
default ``LeaseFence/<stack name>/<path below the stack>``, set as ``POWERTOOLS_METRICS_NAMESPACE``
on every function) with the single dimension ``service=leasefence`` (:data:`APP_METRICS`; the publisher also
:data:`PUBLISHER_METRICS`, the worker function :data:`WORKER_METRICS`). Alarms and dashboard read
that same namespace.
Everything else comes from AWS/Lambda, AWS/ApiGateway, AWS/DynamoDB and AWS/SQS.

The alarms on the service's own metrics are one table, :data:`APP_ALARMS` (a row per alarm: the
metrics it sums, its threshold, its window, and which function emits them, so an alarm exists
only where its metric can be emitted); every metric the code emits is either alarmed there or
listed in :data:`UNALARMED_METRICS` with the reason (a test reads the emitting code). No alarm
reads more than :data:`MAX_ALARM_METRICS` metrics (CloudWatch's hard limit for metric math:
one more fails the deploy). The ``...NotRunning`` alarms wait for twice the schedule's interval
(:func:`not_running_window`), so a slow schedule is not "not running" between its ticks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from aws_cdk import Annotations, Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from constructs import Construct

from leasefence import schema

from .alarm_topic import alarm_topic
from .api import Api
from .dispatch import StreamDispatch
from .environment import SERVICE_NAME
from .publisher import Publisher
from .sweeper import Sweeper
from .worker import Worker

#: The namespace prefix; a service's own namespace is ``LeaseFenceService.metrics_namespace``.
NAMESPACE = "LeaseFence"
_NAMESPACE_UNSAFE = re.compile(r"[^0-9A-Za-z._/#: -]")
_NAMESPACE_MAX = 255


def default_metrics_namespace(service: Construct) -> str:
    """``LeaseFence/<stack name>/<the service's path below its stack>``: one namespace per
    service, so two services in one stack (or one account) never share alarms or dashboards.
    Characters CloudWatch does not allow become ``-``; a namespace over 255 characters is cut
    and ends with a hash of the whole."""
    stack = Stack.of(service)
    path = service.node.path
    if stack.node.path and path.startswith(stack.node.path + "/"):
        path = path[len(stack.node.path) + 1 :]
    stack_name = stack.node.path if Token.is_unresolved(stack.stack_name) else stack.stack_name
    namespace = _NAMESPACE_UNSAFE.sub("-", f"{NAMESPACE}/{stack_name}/{path}")
    if len(namespace) > _NAMESPACE_MAX:
        digest = hashlib.sha256(namespace.encode()).hexdigest()[:16]
        namespace = f"{namespace[: _NAMESPACE_MAX - 17]}-{digest}"
    return namespace


DIMENSIONS = {"service": SERVICE_NAME}

#: EMF metric name -> (unit, statistic used on the dashboard and in alarms).
APP_METRICS: dict[str, tuple[cw.Unit, str]] = {
    "Claims": (cw.Unit.COUNT, "Sum"),
    "Takeovers": (cw.Unit.COUNT, "Sum"),
    "StaleFenceRejections": (cw.Unit.COUNT, "Sum"),
    "Replays": (cw.Unit.COUNT, "Sum"),
    "PayloadConflicts": (cw.Unit.COUNT, "Sum"),
    "UnknownParked": (cw.Unit.COUNT, "Sum"),
    "Quarantined": (cw.Unit.COUNT, "Sum"),
    "SweptToUnknown": (cw.Unit.COUNT, "Sum"),
    "ClaimLatency": (cw.Unit.MILLISECONDS, "p99"),
    "OldestUnknownAgeSeconds": (cw.Unit.SECONDS, "Maximum"),
    "OldestDueAgeSeconds": (cw.Unit.SECONDS, "Maximum"),
    "PayloadsPurged": (cw.Unit.COUNT, "Sum"),
    # The approval gate: decisions (API), approvals that named other content (API), operations
    # whose approval window closed without a decision (sweeper).
    "Approvals": (cw.Unit.COUNT, "Sum"),
    "Rejections": (cw.Unit.COUNT, "Sum"),
    "ApprovalMismatches": (cw.Unit.COUNT, "Sum"),
    "ApprovalsExpired": (cw.Unit.COUNT, "Sum"),
    # The payload store refused a read, write or deletion (S3 AccessDenied, a KMS key fault, an
    # archived object): API, worker and sweeper alike (leasefence.payloads).
    "PayloadAccessDenied": (cw.Unit.COUNT, "Sum"),
}

#: Emitted by the worker runtime (``leasefence.worker``) when the worker function is deployed.
WORKER_METRICS: dict[str, tuple[cw.Unit, str]] = {
    # Emitted once per stalled claim: counted, never "held" over periods.
    "StalledClaims": (cw.Unit.COUNT, "Sum"),
    "LostOwnership": (cw.Unit.COUNT, "Sum"),
    "AbandonedAfterLostOwnership": (cw.Unit.COUNT, "Sum"),
    "Heartbeats": (cw.Unit.COUNT, "Sum"),
    "HeartbeatsSkippedNoProgress": (cw.Unit.COUNT, "Sum"),
    "Reconciles": (cw.Unit.COUNT, "Sum"),
    # Operations quarantined because their payload is gone (purged, erased, unreadable).
    "PayloadMissing": (cw.Unit.COUNT, "Sum"),
    # Stream dispatch (leasefence.worker.dispatch): records claimed, already taken, deferred to
    # the drain (too little of the invocation left for a lease).
    "StreamDispatched": (cw.Unit.COUNT, "Sum"),
    "StreamDispatchTaken": (cw.Unit.COUNT, "Sum"),
    "StreamDispatchDeferred": (cw.Unit.COUNT, "Sum"),
}

#: Emitted by the publisher function (``leasefence.streams.publisher``).
PUBLISHER_METRICS: dict[str, tuple[cw.Unit, str]] = {
    "HistoryEntries": (cw.Unit.COUNT, "Sum"),
    "EventsPublished": (cw.Unit.COUNT, "Sum"),
}
_METRICS = {**APP_METRICS, **PUBLISHER_METRICS, **WORKER_METRICS}

FIVE_MINUTES = Duration.minutes(5)
#: CloudWatch: an alarm on metric math reads at most 10 metrics (a hard limit; one more and the
#: deploy fails), checked for every alarm at synth.
MAX_ALARM_METRICS = 10

#: Who emits a metric, so its alarm exists only where it can fire.
SERVICE = "service"  # the API, sweeper and publisher functions: always deployed
WORKER = "worker"  # the worker runtime, in process: only with the worker function


@dataclass(frozen=True)
class MetricAlarm:
    """One alarm on the service's own EMF metrics: ``metrics`` summed (missing data is 0) over
    ``minutes``, at or above ``threshold``: a number, or the name of a threshold setting of
    :class:`Monitoring` (a prop). ``description`` may use ``{threshold}`` and ``{minutes}``.
    ``key`` is the construct id, so the alarm's logical id: never rename one."""

    key: str
    metrics: tuple[str, ...]
    threshold: float | str
    description: str
    minutes: int = 5
    emitted_by: str = SERVICE


#: The alarms on the service's own metrics (the platform's, on AWS metrics, are in Monitoring).
APP_ALARMS: tuple[MetricAlarm, ...] = (
    MetricAlarm(
        "StalledClaimsAlarm",
        ("StalledClaims",),
        1,
        # One event per stalled claim: the first one in a window raises the alarm.
        "a claimed job's lease ran out while its handler made no progress (handler hung or "
        "blocked; the claim will be taken over or parked)",
        emitted_by=WORKER,
    ),
    MetricAlarm(
        "OldestUnknownAlarm",
        ("OldestUnknownAgeSeconds",),
        "oldest_unknown_alarm_age",
        "an operation has waited in state unknown longer than {threshold:g} s: an operator must "
        "reconcile and resolve it",
    ),
    MetricAlarm(
        "OldestDueAlarm",
        ("OldestDueAgeSeconds",),
        "oldest_due_alarm_age",
        "due work has waited to be claimed longer than {threshold:g} s: no worker serves its job "
        "type (a typo, a retired type) or the fleet is down or too small",
    ),
    MetricAlarm(
        "UnknownEnteredAlarm",
        ("UnknownParked", "SweptToUnknown"),
        1,
        "operations entered state unknown (reported by a worker or parked by the sweeper): an "
        "operator must reconcile them and POST .../resolve",
    ),
    MetricAlarm(
        "QuarantineRateAlarm",
        ("Quarantined",),
        "quarantine_alarm_threshold",
        "{threshold:g}+ operations quarantined in {minutes} minutes",
        minutes=15,
    ),
    MetricAlarm(
        "StaleFenceRejectionsAlarm",
        ("StaleFenceRejections",),
        "stale_fence_alarm_threshold",
        "{threshold:g}+ stale-fence rejections in {minutes} minutes (zombie workers, leases too "
        "short)",
    ),
    MetricAlarm(
        "PayloadAccessDeniedAlarm",
        ("PayloadAccessDenied",),
        # One refusal fires it: no healthy deployment is ever refused.
        1,
        "the payload store refused access to payload objects (S3 AccessDenied, a KMS key disabled "
        "or not granted, an archived object): fix the bucket policy, the function roles or the "
        "key; the jobs are not quarantined, they are retried once it is fixed",
    ),
    MetricAlarm(
        "ApprovalsExpiredAlarm",
        ("ApprovalsExpired",),
        1,
        "operations awaiting approval ended approval_expired: nobody approved or rejected them "
        "within their window (the approvers did not see them, or the window is too short)",
    ),
    MetricAlarm(
        "ApprovalMismatchesAlarm",
        ("ApprovalMismatches",),
        1,
        "an approval named other content than the operation's payload and was refused (an "
        "approval tool showing stale content, or an attempt to approve something else)",
    ),
    MetricAlarm(
        "WorkerLostOwnershipAlarm",
        ("LostOwnership",),
        "lost_ownership_alarm_threshold",
        "{threshold:g}+ jobs of the worker function lost ownership in {minutes} minutes (a "
        "heartbeat or write was refused: lease too short for the job, or the handler reports no "
        "progress; the fence kept the stale writes out)",
        minutes=15,
        emitted_by=WORKER,
    ),
    MetricAlarm(
        "WorkerPayloadMissingAlarm",
        ("PayloadMissing",),
        1,
        "the worker quarantined operations whose payload is gone (purged after "
        "payload_retention_days, erased, or unreadable): read the worker's log group, then "
        "resolve or re-enqueue them",
        emitted_by=WORKER,
    ),
)

#: Metrics the code emits that no alarm reads, and why (the dashboard shows most of them).
UNALARMED_METRICS: dict[str, str] = {
    "Claims": "traffic; the denominator of TakeoverRate",
    "Takeovers": "alarmed as a share of claims (TakeoverRate)",
    "Replays": "an idempotent enqueue retried: normal",
    "PayloadConflicts": "a caller's bug answered 409 to that caller",
    "ClaimLatency": "latency, on the dashboard; the API's own alarms cover failures",
    "PayloadsPurged": "retention working as configured",
    "Approvals": "decisions: normal activity",
    "Rejections": "decisions: normal activity",
    "Cancellations": "a producer's decision: normal activity",
    "Erasures": "an operator's decision: normal activity",
    "TenantErasureSteps": "an operator's command, watched by that operator",
    "HistoryEntries": "the publisher's throughput; its failures are alarmed (queue, iterator age)",
    "EventsPublished": "the publisher's throughput; its failures are alarmed",
    "StreamDispatched": "stream dispatch's throughput; its failures are alarmed",
    "StreamDispatchTaken": "a record whose work was already taken: normal",
    "StreamDispatchDeferred": "left to the drain, which the WorkerNotRunning alarm covers",
    "Heartbeats": "lease renewals: normal activity",
    "HeartbeatsSkippedNoProgress": "alarmed when the lease runs out (StalledClaims)",
    "HeartbeatErrors": "the job stops acting and loses its claim (WorkerLostOwnership)",
    "Reconciles": "a handler's reconcile step: normal",
    "AbandonedAfterLostOwnership": "counted with LostOwnership, which is alarmed",
    "AbandonedStoreUnavailable": "the table unavailable: DynamoDbThrottles and the function "
    "errors alarm on the cause",
    "StoreRetries": "a busy table retried: normal; throttles are alarmed",
    "StaleTargetWritesRejected": "a class B target refused a stale write: the fence working",
    "TargetHorizonRefusals": "a class B target refused a write below its horizon: the fence "
    "working",
    "TargetPrunes": "class B target housekeeping",
    "TargetEntriesPruned": "class B target housekeeping",
    "TargetPrunesRefused": "class B target housekeeping refused while a claim may still write",
    "TargetPrunesFailed": "class B target housekeeping, retried on the next prune",
    "InconsistentClaimsRefused": "a class B target refused a claim stating an impossible claim "
    "time: the job loses ownership (WorkerLostOwnership)",
    "ClaimReplays": "a resent claim answered with the claim it made: a lost answer, normal",
    "TtlsCleared": "housekeeping after the identity retention became forever",
}


def not_running_window(expression: str) -> tuple[Duration, Duration] | None:
    """(the schedule's interval, how long without an invocation means "not running") for a
    schedule expression: twice the interval, at least 10 minutes, at most one day (CloudWatch's
    longest alarm period). None when the interval cannot be read (an ``at(...)`` or an irregular
    ``cron(...)``) or the window would not exceed it (daily or slower schedules)."""
    interval_s = schedule_interval_seconds(expression)
    if interval_s is None:
        return None
    window_s = min(max(2 * interval_s, 600), 86_400)
    if window_s <= interval_s:
        return None
    return Duration.seconds(interval_s), Duration.seconds(window_s)


_RATE_RE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_STEP_RE = re.compile(r"^(?:\*|0)/(\d+)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86_400}


def schedule_interval_seconds(expression: str) -> int | None:
    """The interval of ``rate(...)`` and of regular ``cron(...)`` expressions (every N minutes,
    hourly, every N hours, daily); None for anything else."""
    text = expression.strip()
    rate = _RATE_RE.match(text)
    if rate:
        return int(rate.group(1)) * _UNIT_S[rate.group(2).rstrip("s")]
    if not (text.startswith("cron(") and text.endswith(")")):
        return None
    fields = text[5:-1].split()
    if len(fields) != 6:
        return None
    minute, hour, day_of_month, month, day_of_week, year = fields

    def every(field: str) -> bool:
        return field in ("*", "?")

    if not all(every(f) for f in (day_of_month, month, day_of_week, year)):
        return None
    minute_step = _STEP_RE.match(minute)
    hour_step = _STEP_RE.match(hour)
    if every(hour):
        if minute == "*":
            return 60
        if minute_step and 60 % int(minute_step.group(1)) == 0:
            return int(minute_step.group(1)) * 60
        return 3600 if minute.isdigit() else None
    if not minute.isdigit():
        return None
    if hour_step and 24 % int(hour_step.group(1)) == 0:
        return int(hour_step.group(1)) * 3600
    return 86_400 if hour.isdigit() else None


def app_metric(
    name: str,
    statistic: str | None = None,
    period: Duration = FIVE_MINUTES,
    *,
    namespace: str = NAMESPACE,
) -> cw.Metric:
    unit, default_statistic = _METRICS[name]
    return cw.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map=dict(DIMENSIONS),
        statistic=statistic or default_statistic,
        period=period,
        # No unit filter: EMF units are informational and a mismatch would hide the data.
        label=f"{name} ({unit.value})" if unit is not cw.Unit.COUNT else name,
    )


_app_metric = app_metric  # the module-level one, under a name Monitoring does not shadow

#: The sweeper's schedule (``sweeper.py``): one sweep a minute.
SWEEPER_SCHEDULE = scheduler.ScheduleExpression.rate(Duration.minutes(1))


def _metric_count(expression: cw.MathExpression) -> int:
    """How many metrics (not expressions) a math expression reads, nested ones included."""
    count = 0
    for used in expression.using_metrics.values():
        count += _metric_count(used) if isinstance(used, cw.MathExpression) else 1
    return count


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", name))


def _human(duration: Duration) -> str:
    seconds = int(duration.to_seconds())
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} s"


class Monitoring(Construct):
    """Alarms (all to :attr:`topic`, alarm and OK) and one dashboard, in ``metrics_namespace``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        metrics_namespace: str,
        topic: sns.ITopic | None,
        service_key: kms.IKey | None,
        table: dynamodb.ITable,
        api: Api,
        sweeper: Sweeper,
        worker: Worker | None,
        dispatch: StreamDispatch | None,
        publisher: Publisher,
        oldest_unknown_alarm_age: Duration,
        oldest_due_alarm_age: Duration,
        quarantine_alarm_threshold: int,
        takeover_alarm_percent: float,
        stale_fence_alarm_threshold: int,
        api_5xx_alarm_threshold: int,
        stream_iterator_age_alarm_age: Duration,
    ) -> None:
        super().__init__(scope, construct_id)

        def app_metric(
            name: str, statistic: str | None = None, period: Duration = FIVE_MINUTES
        ) -> cw.Metric:
            return _app_metric(name, statistic, period, namespace=metrics_namespace)

        #: Every alarm publishes here (see :mod:`leasefence_infra.alarm_topic`).
        self.topic = alarm_topic(self, topic=topic, service_key=service_key)
        action = cw_actions.SnsAction(self.topic)
        self.alarms: dict[str, cw.Alarm] = {}

        def alarm(
            key: str,
            metric: cw.IMetric,
            threshold: float,
            description: str,
            *,
            evaluation_periods: int = 1,
            datapoints: int | None = None,
            missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
            comparison: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        ) -> cw.Alarm:
            a = cw.Alarm(
                self,
                key,
                metric=metric,
                threshold=threshold,
                evaluation_periods=evaluation_periods,
                datapoints_to_alarm=datapoints,
                comparison_operator=comparison,
                treat_missing_data=missing,
                alarm_description=f"leasefence: {description}",
            )
            if isinstance(metric, cw.MathExpression):
                count = _metric_count(metric)
                if count > MAX_ALARM_METRICS:
                    raise ValueError(
                        f"alarm {key} reads {count} metrics; CloudWatch allows "
                        f"{MAX_ALARM_METRICS} per alarm (the deploy would fail): split it"
                    )
            a.add_alarm_action(action)
            a.add_ok_action(action)
            self.alarms[key] = a
            return a

        def not_running(
            key: str, what: str, function: lambda_.IFunction, expression: str
        ) -> cw.Alarm | None:
            """No invocation for twice the schedule's interval (missing data breaches)."""
            window = not_running_window(expression)
            if window is None:
                Annotations.of(self).add_warning_v2(
                    f"leasefence:no-{key}",
                    f"No {key}: the {what}'s schedule {expression} has no regular interval "
                    "shorter than a day that an alarm could wait for. Alarm on its Invocations "
                    "yourself.",
                )
                return None
            interval, period = window
            return alarm(
                key,
                function.metric_invocations(period=period, statistic="Sum"),
                1,
                f"the {what} was not invoked for {_human(period)} (its schedule {expression} "
                f"runs every {_human(interval)}: disabled or failing)",
                comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING,
            )

        # ------------------------------------------------------------------ leasefence alarms
        thresholds: dict[str, float] = {
            "oldest_unknown_alarm_age": oldest_unknown_alarm_age.to_seconds(),
            "oldest_due_alarm_age": oldest_due_alarm_age.to_seconds(),
            "quarantine_alarm_threshold": quarantine_alarm_threshold,
            "stale_fence_alarm_threshold": stale_fence_alarm_threshold,
        }
        if worker is not None:
            thresholds["lost_ownership_alarm_threshold"] = (
                worker.props.lost_ownership_alarm_threshold
            )
        emitters = {SERVICE} | ({WORKER} if worker is not None else set())
        for spec in APP_ALARMS:
            if spec.emitted_by not in emitters:
                continue  # nothing deployed emits its metrics: it could never fire
            period = Duration.minutes(spec.minutes)
            threshold = (
                thresholds[spec.threshold] if isinstance(spec.threshold, str) else spec.threshold
            )
            metric: cw.IMetric = app_metric(spec.metrics[0], period=period)
            if len(spec.metrics) > 1:
                metric = cw.MathExpression(
                    expression=" + ".join(f"FILL(m{i}, 0)" for i in range(len(spec.metrics))),
                    using_metrics={
                        f"m{i}": app_metric(name, period=period)
                        for i, name in enumerate(spec.metrics)
                    },
                    period=period,
                    label=" + ".join(spec.metrics),
                )
            alarm(
                spec.key,
                metric,
                threshold,
                spec.description.format(threshold=threshold, minutes=spec.minutes),
            )
        claims = app_metric("Claims", period=Duration.minutes(15))
        takeovers = app_metric("Takeovers", period=Duration.minutes(15))
        alarm(
            "TakeoverRateAlarm",
            cw.MathExpression(
                # Percent of claims that were takeovers, once there are at least 20 claims.
                expression="IF(FILL(claims, 0) >= 20, 100 * FILL(takeovers, 0) / FILL(claims, 0), 0)",
                using_metrics={"claims": claims, "takeovers": takeovers},
                period=Duration.minutes(15),
                label="Takeover % of claims",
            ),
            takeover_alarm_percent,
            f"{takeover_alarm_percent}%+ of claims in 15 minutes were takeovers of expired leases "
            "(workers dying or leases too short)",
        )

        # ------------------------------------------------------------------ platform alarms
        sweeper_fn = sweeper.function.function
        api_fn = api.function.function
        http_api = api.http_api
        alarm(
            "SweeperErrorsAlarm",
            sweeper_fn.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
            1,
            "the sweeper failed in two consecutive 5-minute windows",
            evaluation_periods=2,
        )
        not_running(
            "SweeperNotRunningAlarm", "sweeper", sweeper_fn, SWEEPER_SCHEDULE.expression_string
        )
        alarm(
            "SweepScheduleDlqAlarm",
            sweeper.schedule.dlq.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            1,
            "sweeper invocations the scheduler could not deliver are in the dead-letter queue",
        )
        alarm(
            "SweeperFailuresAlarm",
            sweeper.failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            1,
            "a sweeper invocation failed and was not retried: its event is in the sweeper's "
            "on-failure queue (read the sweeper's log group)",
        )
        alarm(
            "Api5xxAlarm",
            http_api.metric_server_error(period=FIVE_MINUTES, statistic="Sum"),
            api_5xx_alarm_threshold,
            f"{api_5xx_alarm_threshold}+ API 5xx answers in 5 minutes",
        )
        if worker is not None:
            worker_fn = worker.function.function
            alarm(
                "WorkerErrorsAlarm",
                worker_fn.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                1,
                "the worker function failed (or timed out) in two consecutive 5-minute windows "
                "(handler module not importable, secret unreadable, jobs outliving the timeout)",
                evaluation_periods=2,
            )
            not_running(
                "WorkerNotRunningAlarm",
                "worker function",
                worker_fn,
                worker.props.schedule_or_default.expression_string,
            )
            alarm(
                "WorkerScheduleDlqAlarm",
                worker.schedule.dlq.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                1,
                "worker invocations the scheduler could not deliver are in the dead-letter queue",
            )
            alarm(
                "WorkerFailuresAlarm",
                worker.failure_queue.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                1,
                "a worker invocation failed and was not retried: its event is in the worker's "
                "on-failure queue (read the worker's log group)",
            )

        # ------------------------------------------------------------------ stream consumers
        publisher_fn = publisher.function.function
        iterator_age_s = int(stream_iterator_age_alarm_age.to_seconds())

        def iterator_age(function: lambda_.IFunction, label: str | None = None) -> cw.Metric:
            # Milliseconds: the age of the newest record of the batches a function received.
            return function.metric(
                "IteratorAge", period=FIVE_MINUTES, statistic="Maximum", label=label
            )

        alarm(
            "PublisherFailuresAlarm",
            publisher.metric_failed_batches(FIVE_MINUTES),
            1,
            "stream records the publisher could not process after its retries were kept whole in "
            "its on-failure bucket: their history entries and outcome events are missing until "
            "`leasefence publisher redrive` replays them; read the publisher's log group",
        )
        alarm(
            "PublisherIteratorAgeAlarm",
            iterator_age(publisher_fn),
            iterator_age_s * 1000,
            f"the publisher receives stream records {iterator_age_s}+ s old: history and outcome "
            "events are late (a batch failing and retried, or the function throttled)",
        )
        if dispatch is not None:
            alarm(
                "WorkerStreamFailuresAlarm",
                dispatch.failure_queue.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                1,
                "stream records the worker could not claim after its retries are in its stream "
                "on-failure queue; the scheduled drain still finds their work (read the worker's "
                "log group)",
            )
            alarm(
                "WorkerIteratorAgeAlarm",
                iterator_age(dispatch.function),
                iterator_age_s * 1000,
                f"the worker receives stream records {iterator_age_s}+ s old: stream dispatch is "
                "so far behind that the scheduled drain does its work (the worker throttled, "
                "failing, or too few concurrent batches)",
            )

        # One alarm per table and per index (read + write throttles: two metrics each): a single
        # sum over all of them already reached CloudWatch's 10 metrics with four indexes.
        throttle_metrics: dict[str, cw.IMetric] = {}
        indexes = [g["IndexName"] for g in schema.global_secondary_indexes()]
        for prefix, index_name in [("t", None), *((f"g{i}", n) for i, n in enumerate(indexes))]:
            dimensions = {"TableName": table.table_name}
            if index_name is not None:
                dimensions["GlobalSecondaryIndexName"] = index_name
            pair = {
                f"{prefix}{kind[0].lower()}": cw.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=f"{kind}ThrottleEvents",
                    dimensions_map=dimensions,
                    period=FIVE_MINUTES,
                    statistic="Sum",
                )
                for kind in ("Read", "Write")
            }
            throttle_metrics.update(pair)
            what = "the table" if index_name is None else f"its {index_name} index"
            alarm(
                "DynamoDbThrottlesAlarm"
                if index_name is None
                else f"DynamoDbThrottles{_camel(index_name)}IndexAlarm",
                cw.MathExpression(
                    expression=" + ".join(f"FILL({k}, 0)" for k in pair),
                    using_metrics=pair,
                    period=FIVE_MINUTES,
                    label=f"DynamoDB throttle events ({what})",
                ),
                10,
                f"10+ DynamoDB throttle events in 5 minutes on {what} "
                "(hot partition: raise due_shards)",
            )
        # The dashboard's sum over all of them (a graph may read many more metrics).
        throttles = cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in throttle_metrics),
            using_metrics=throttle_metrics,
            period=FIVE_MINUTES,
            label="DynamoDB throttle events (table + indexes)",
        )

        # ------------------------------------------------------------------ dashboard
        dashboard = cw.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        width = 8
        dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Alarms", alarms=list(self.alarms.values()), width=24, height=4
            )
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Claims, takeovers, stale fences",
                left=[app_metric(n) for n in ("Claims", "Takeovers", "StaleFenceRejections")],
                width=width,
            ),
            cw.GraphWidget(
                title="Enqueue replays, payload conflicts, payloads purged, payload access denied",
                left=[
                    app_metric(n)
                    for n in (
                        "Replays",
                        "PayloadConflicts",
                        "PayloadsPurged",
                        "PayloadAccessDenied",
                    )
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Unknown and quarantined",
                left=[app_metric(n) for n in ("UnknownParked", "SweptToUnknown", "Quarantined")],
                width=width,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Claim latency (ms)",
                left=[app_metric("ClaimLatency", s) for s in ("p50", "p90", "p99")],
                width=width,
            ),
            cw.GraphWidget(
                title="Oldest unknown and oldest due (s)",
                left=[app_metric("OldestUnknownAgeSeconds"), app_metric("OldestDueAgeSeconds")],
                width=width,
            ),
            cw.GraphWidget(
                title="Takeover % of claims",
                left=[self.alarms["TakeoverRateAlarm"].metric],
                width=width,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Approvals: decisions, mismatches, expired",
                left=[app_metric(n) for n in ("Approvals", "Rejections")],
                right=[app_metric(n) for n in ("ApprovalMismatches", "ApprovalsExpired")],
                width=width,
            ),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="API requests and errors",
                left=[http_api.metric_count(period=FIVE_MINUTES)],
                right=[
                    http_api.metric_client_error(period=FIVE_MINUTES),
                    http_api.metric_server_error(period=FIVE_MINUTES),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="API latency (ms)",
                left=[
                    http_api.metric_latency(period=FIVE_MINUTES, statistic=s)
                    for s in ("p50", "p99")
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="Functions: errors and throttles",
                left=[
                    api_fn.metric_errors(period=FIVE_MINUTES, label="API errors"),
                    sweeper_fn.metric_errors(period=FIVE_MINUTES, label="Sweeper errors"),
                    publisher_fn.metric_errors(period=FIVE_MINUTES, label="Publisher errors"),
                ],
                right=[
                    api_fn.metric_throttles(period=FIVE_MINUTES, label="API throttles"),
                    sweeper_fn.metric_throttles(period=FIVE_MINUTES, label="Sweeper throttles"),
                    publisher_fn.metric_throttles(period=FIVE_MINUTES, label="Publisher throttles"),
                ],
                width=width,
            ),
        )
        failure_queues = [
            sweeper.failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum", label="Sweeper failed invocations"
            )
        ]
        if worker is not None:
            failure_queues.append(
                worker.failure_queue.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum", label="Worker failed invocations"
                )
            )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Function duration p99 (ms)",
                left=[
                    api_fn.metric_duration(period=FIVE_MINUTES, statistic="p99", label="API"),
                    sweeper_fn.metric_duration(
                        period=FIVE_MINUTES, statistic="p99", label="Sweeper"
                    ),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="DynamoDB consumed capacity",
                left=[
                    table.metric_consumed_read_capacity_units(period=FIVE_MINUTES),
                    table.metric_consumed_write_capacity_units(period=FIVE_MINUTES),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="DynamoDB throttles, schedule DLQ, failed invocations",
                left=[throttles],
                right=[
                    sweeper.schedule.dlq.metric_approximate_number_of_messages_visible(
                        period=FIVE_MINUTES, statistic="Maximum", label="Sweep schedule DLQ"
                    ),
                    *failure_queues,
                ],
                width=width,
            ),
        )
        stream_failures = [publisher.metric_failed_batches(FIVE_MINUTES, label="Publisher")]
        iterator_ages = [iterator_age(publisher_fn, "Publisher")]
        if dispatch is not None:
            stream_failures.append(
                dispatch.failure_queue.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum", label="Worker"
                )
            )
            iterator_ages.append(iterator_age(dispatch.function, "Worker"))
        dashboard.add_widgets(
            cw.GraphWidget(title="Stream: iterator age (ms)", left=iterator_ages, width=width),
            cw.GraphWidget(
                title="Stream: records failed after every retry", left=stream_failures, width=width
            ),
            cw.GraphWidget(
                title="Publisher: history entries, events published",
                left=[app_metric(n) for n in PUBLISHER_METRICS],
                right=[publisher_fn.metric_invocations(period=FIVE_MINUTES, label="Invocations")],
                width=width,
            ),
        )
        if dispatch is not None:
            dashboard.add_widgets(
                cw.GraphWidget(
                    title="Worker: stream dispatch (claimed, already taken, left to the drain)",
                    left=[
                        app_metric(n)
                        for n in (
                            "StreamDispatched",
                            "StreamDispatchTaken",
                            "StreamDispatchDeferred",
                        )
                    ],
                    width=width,
                )
            )
        if worker is not None:
            worker_fn = worker.function.function
            dashboard.add_widgets(
                cw.GraphWidget(
                    title="Worker: lost ownership, stalled claims, payloads missing",
                    left=[app_metric(n) for n in ("LostOwnership", "AbandonedAfterLostOwnership")],
                    right=[app_metric(n) for n in ("StalledClaims", "PayloadMissing")],
                    width=width,
                ),
                cw.GraphWidget(
                    title="Worker: heartbeats, reconciles",
                    left=[app_metric(n) for n in ("Heartbeats", "HeartbeatsSkippedNoProgress")],
                    right=[app_metric("Reconciles")],
                    width=width,
                ),
                cw.GraphWidget(
                    title="Worker function: invocations, errors, duration",
                    left=[
                        worker_fn.metric_invocations(period=FIVE_MINUTES, label="Invocations"),
                        worker_fn.metric_errors(period=FIVE_MINUTES, label="Errors"),
                        worker_fn.metric_throttles(period=FIVE_MINUTES, label="Throttles"),
                        worker.schedule.dlq.metric_approximate_number_of_messages_visible(
                            period=FIVE_MINUTES, statistic="Maximum", label="Schedule DLQ"
                        ),
                    ],
                    right=[
                        worker_fn.metric_duration(
                            period=FIVE_MINUTES, statistic="p99", label="Duration p99 (ms)"
                        )
                    ],
                    width=width,
                ),
            )
        self.dashboard = dashboard
