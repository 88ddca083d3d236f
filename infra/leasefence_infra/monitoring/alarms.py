"""The alarms of a ``LeaseFenceService``, all to one topic (alarm and OK).

The alarms on the service's own metrics are one table, :data:`APP_ALARMS` (a row per alarm: the
metrics it sums, its threshold, its window, and which function emits them, so an alarm exists
only where its metric can be emitted); every metric the code emits is either alarmed there or
listed in :data:`UNALARMED_METRICS` with the reason (a test reads the emitting code). No alarm
reads more than :data:`MAX_ALARM_METRICS` metrics (CloudWatch's hard limit for metric math:
one more fails the deploy). A scheduled function (the sweeper, the worker) gets one set of four
alarms (:func:`function_alarms`); its ``...NotRunning`` alarm waits for twice the schedule's
interval (:func:`not_running_window`), so a slow schedule is not "not running" between its ticks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Annotations, Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from .metrics import FIVE_MINUTES, SERVICE, WORKER, AppMetrics

#: CloudWatch: an alarm on metric math reads at most 10 metrics (a hard limit; one more and the
#: deploy fails), checked for every alarm at synth.
MAX_ALARM_METRICS = 10


@dataclass(frozen=True)
class AlarmSpec:
    """One alarm on the service's own EMF metrics: ``metrics`` summed (missing data is 0) over
    ``minutes``, at or above ``threshold``: a number, or the name of a threshold setting of
    :class:`~leasefence_infra.monitoring.Monitoring` (a prop). ``description`` may use
    ``{threshold}`` and ``{minutes}``. ``key`` is the construct id, so the alarm's logical id:
    never rename one."""

    key: str
    metrics: tuple[str, ...]
    threshold: float | str
    description: str
    minutes: int = 5
    emitted_by: str = SERVICE


#: The alarms on the service's own metrics (the platform's, on AWS metrics, are built below).
APP_ALARMS: tuple[AlarmSpec, ...] = (
    AlarmSpec(
        "StalledClaimsAlarm",
        ("StalledClaims",),
        1,
        # One event per stalled claim: the first one in a window raises the alarm.
        "a claimed job's lease ran out while its handler made no progress (handler hung or "
        "blocked; the claim will be taken over or parked)",
        emitted_by=WORKER,
    ),
    AlarmSpec(
        "OldestUnknownAlarm",
        ("OldestUnknownAgeSeconds",),
        "oldest_unknown_alarm_age",
        "an operation has waited in state unknown longer than {threshold:g} s: an operator must "
        "reconcile and resolve it",
    ),
    AlarmSpec(
        "OldestDueAlarm",
        ("OldestDueAgeSeconds",),
        "oldest_due_alarm_age",
        "due work has waited to be claimed longer than {threshold:g} s: no worker serves its job "
        "type (a typo, a retired type) or the fleet is down or too small",
    ),
    AlarmSpec(
        "UnknownEnteredAlarm",
        ("UnknownParked", "SweptToUnknown"),
        1,
        "operations entered state unknown (reported by a worker or parked by the sweeper): an "
        "operator must reconcile them and POST .../resolve",
    ),
    AlarmSpec(
        "QuarantineRateAlarm",
        ("Quarantined",),
        "quarantine_alarm_threshold",
        "{threshold:g}+ operations quarantined in {minutes} minutes",
        minutes=15,
    ),
    AlarmSpec(
        "StaleFenceRejectionsAlarm",
        ("StaleFenceRejections",),
        "stale_fence_alarm_threshold",
        "{threshold:g}+ stale-fence rejections in {minutes} minutes (zombie workers, leases too "
        "short)",
    ),
    AlarmSpec(
        "PayloadAccessDeniedAlarm",
        ("PayloadAccessDenied",),
        # One refusal fires it: no healthy deployment is ever refused.
        1,
        "the payload store refused access to payload objects (S3 AccessDenied, a KMS key disabled "
        "or not granted, an archived object): fix the bucket policy, the function roles or the "
        "key; the jobs are not quarantined, they are retried once it is fixed",
    ),
    AlarmSpec(
        "ApprovalsExpiredAlarm",
        ("ApprovalsExpired",),
        1,
        "operations awaiting approval ended approval_expired: nobody approved or rejected them "
        "within their window (the approvers did not see them, or the window is too short)",
    ),
    AlarmSpec(
        "ApprovalMismatchesAlarm",
        ("ApprovalMismatches",),
        1,
        "an approval named other content than the operation's payload and was refused (an "
        "approval tool showing stale content, or an attempt to approve something else)",
    ),
    AlarmSpec(
        "WorkerLostOwnershipAlarm",
        ("LostOwnership",),
        "lost_ownership_alarm_threshold",
        "{threshold:g}+ jobs of the worker function lost ownership in {minutes} minutes (a "
        "heartbeat or write was refused: lease too short for the job, or the handler reports no "
        "progress; the fence kept the stale writes out)",
        minutes=15,
        emitted_by=WORKER,
    ),
    AlarmSpec(
        "WorkerPayloadMissingAlarm",
        ("PayloadMissing",),
        1,
        "the worker quarantined operations whose payload is gone (purged after "
        "payload_retention_days, erased, or unreadable): read the worker's log group, then "
        "resolve or re-enqueue them",
        emitted_by=WORKER,
    ),
)

#: Metrics the code emits that no alarm reads, and why (the dashboard shows them).
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
    "HistoryCompactions": "bounded histories kept bounded: normal for operations that loop",
    "EventsPublished": "the publisher's throughput; its failures are alarmed",
    "StreamDispatched": "stream dispatch's throughput; its failures are alarmed",
    "StreamDispatchTaken": "a record whose work was already taken: normal",
    "StreamDispatchDeferred": "left to the drain, which the WorkerNotRunning alarm covers",
    "StreamDispatchFailed": "a claim from the shared stream batch failed: left to the drain "
    "(WorkerNotRunning); its cause, the table throttled, is alarmed (DynamoDbThrottles)",
    "StreamHandedOff": "the invoke dispatch mode's throughput",
    "StreamHandoffFailed": "a claim not handed over lapses and the drain takes it over; "
    "the worker function's throttles and errors are alarmed",
    "PublishFailuresKept": "alarmed as the on-failure bucket's writes (PublisherFailuresAlarm)",
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


# ----------------------------------------------------------------------------- schedules


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


# ----------------------------------------------------------------------------- the factory


class AlarmFactory:
    """Creates the alarms in ``scope`` (the construct id is the alarm's key: never rename one),
    each to ``topic`` on alarm and OK, and keeps them by key in :attr:`alarms`."""

    def __init__(self, scope: Construct, topic: sns.ITopic) -> None:
        self._scope = scope
        self._action = cw_actions.SnsAction(topic)
        self.alarms: dict[str, cw.Alarm] = {}

    def alarm(
        self,
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
            self._scope,
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
        a.add_alarm_action(self._action)
        a.add_ok_action(self._action)
        self.alarms[key] = a
        return a

    def not_running(
        self, key: str, what: str, function: lambda_.IFunction, expression: str
    ) -> cw.Alarm | None:
        """No invocation for twice the schedule's interval (missing data breaches)."""
        window = not_running_window(expression)
        if window is None:
            Annotations.of(self._scope).add_warning_v2(
                f"leasefence:no-{key}",
                f"No {key}: the {what}'s schedule {expression} has no regular interval "
                "shorter than a day that an alarm could wait for. Alarm on its Invocations "
                "yourself.",
            )
            return None
        interval, period = window
        return self.alarm(
            key,
            function.metric_invocations(period=period, statistic="Sum"),
            1,
            f"the {what} was not invoked for {_human(period)} (its schedule {expression} "
            f"runs every {_human(interval)}: disabled or failing)",
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
        )


# ----------------------------------------------------------------------------- alarm sets


def app_alarms(
    factory: AlarmFactory,
    metrics: AppMetrics,
    thresholds: Mapping[str, float],
    emitters: set[str],
) -> None:
    """One alarm per row of :data:`APP_ALARMS` whose emitter is deployed (``emitters``); a
    string threshold is read from ``thresholds``."""
    for spec in APP_ALARMS:
        if spec.emitted_by not in emitters:
            continue  # nothing deployed emits its metrics: it could never fire
        period = Duration.minutes(spec.minutes)
        threshold = (
            thresholds[spec.threshold] if isinstance(spec.threshold, str) else spec.threshold
        )
        metric: cw.IMetric = metrics.metric(spec.metrics[0], period=period)
        if len(spec.metrics) > 1:
            metric = cw.MathExpression(
                expression=" + ".join(f"FILL(m{i}, 0)" for i in range(len(spec.metrics))),
                using_metrics={
                    f"m{i}": metrics.metric(name, period=period)
                    for i, name in enumerate(spec.metrics)
                },
                period=period,
                label=" + ".join(spec.metrics),
            )
        factory.alarm(
            spec.key,
            metric,
            threshold,
            spec.description.format(threshold=threshold, minutes=spec.minutes),
        )


def takeover_rate_alarm(factory: AlarmFactory, metrics: AppMetrics, percent: float) -> cw.Alarm:
    """Takeovers of expired leases as a share of claims over 15 minutes."""
    claims = metrics.metric("Claims", period=Duration.minutes(15))
    takeovers = metrics.metric("Takeovers", period=Duration.minutes(15))
    return factory.alarm(
        "TakeoverRateAlarm",
        cw.MathExpression(
            # Percent of claims that were takeovers, once there are at least 20 claims.
            expression="IF(FILL(claims, 0) >= 20, 100 * FILL(takeovers, 0) / FILL(claims, 0), 0)",
            using_metrics={"claims": claims, "takeovers": takeovers},
            period=Duration.minutes(15),
            label="Takeover % of claims",
        ),
        percent,
        f"{percent}%+ of claims in 15 minutes were takeovers of expired leases "
        "(workers dying or leases too short)",
    )


@dataclass(frozen=True)
class FunctionAlarmNames:
    """The keys (construct ids: never rename one) and wording of a scheduled function's four
    alarms. ``noun`` names its invocations and queues, ``what`` the function itself."""

    errors: str
    not_running: str
    schedule_dlq: str
    failures: str
    noun: str
    what: str
    errors_description: str


SWEEPER_ALARMS = FunctionAlarmNames(
    errors="SweeperErrorsAlarm",
    not_running="SweeperNotRunningAlarm",
    schedule_dlq="SweepScheduleDlqAlarm",
    failures="SweeperFailuresAlarm",
    noun="sweeper",
    what="sweeper",
    errors_description="the sweeper failed in two consecutive 5-minute windows",
)
WORKER_ALARMS = FunctionAlarmNames(
    errors="WorkerErrorsAlarm",
    not_running="WorkerNotRunningAlarm",
    schedule_dlq="WorkerScheduleDlqAlarm",
    failures="WorkerFailuresAlarm",
    noun="worker",
    what="worker function",
    errors_description="the worker function failed (or timed out) in two consecutive 5-minute "
    "windows (handler module not importable, secret unreadable, jobs outliving the timeout)",
)


def function_alarms(
    factory: AlarmFactory,
    names: FunctionAlarmNames,
    *,
    function: lambda_.IFunction,
    schedule_expression: str,
    schedule_dlq: sqs.IQueue,
    failure_queue: sqs.IQueue,
) -> None:
    """A scheduled function's four alarms: errors in two consecutive windows, not invoked for
    twice its schedule's interval, undeliverable invocations in its schedule's dead-letter queue,
    and failed asynchronous invocations in its on-failure queue."""
    factory.alarm(
        names.errors,
        function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
        1,
        names.errors_description,
        evaluation_periods=2,
    )
    factory.not_running(names.not_running, names.what, function, schedule_expression)
    factory.alarm(
        names.schedule_dlq,
        schedule_dlq.metric_approximate_number_of_messages_visible(
            period=FIVE_MINUTES, statistic="Maximum"
        ),
        1,
        f"{names.noun} invocations the scheduler could not deliver are in the dead-letter queue",
    )
    factory.alarm(
        names.failures,
        failure_queue.metric_approximate_number_of_messages_visible(
            period=FIVE_MINUTES, statistic="Maximum"
        ),
        1,
        f"a {names.noun} invocation failed and was not retried: its event is in the "
        f"{names.noun}'s on-failure queue (read the {names.noun}'s log group)",
    )


def stream_alarms(
    factory: AlarmFactory,
    *,
    publisher_failed_batches: cw.IMetric,
    publisher_function: lambda_.IFunction,
    dispatch_failure_queue: sqs.IQueue | None,
    dispatch_function: lambda_.IFunction | None,
    iterator_age_alarm_age: Duration,
) -> None:
    """The stream consumers: records given up on after their retries, and records received late
    (the publisher always; the worker's stream queue when there is a worker, and its iterator
    age when it has a mapping of its own: ``dispatch_function``, None when it is shared)."""
    iterator_age_s = int(iterator_age_alarm_age.to_seconds())
    factory.alarm(
        "PublisherFailuresAlarm",
        publisher_failed_batches,
        1,
        "stream records the publisher could not process after its retries were kept whole in "
        "its on-failure bucket: their history entries and outcome events are missing until "
        "`leasefence publisher redrive` replays them; read the publisher's log group",
    )
    factory.alarm(
        "PublisherIteratorAgeAlarm",
        AppMetrics.iterator_age(publisher_function),
        iterator_age_s * 1000,
        f"the publisher receives stream records {iterator_age_s}+ s old: history and outcome "
        "events are late (a batch failing and retried, or the function throttled)",
    )
    if dispatch_failure_queue is not None:
        factory.alarm(
            "WorkerStreamFailuresAlarm",
            dispatch_failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            1,
            "stream records the worker's own mapping could not claim after its retries are in its "
            "stream on-failure queue (with one stream reader: sent before the upgrade to it); the "
            "scheduled drain still finds their work (read the worker's log group, then purge)",
        )
    if dispatch_function is None:
        return
    factory.alarm(
        "WorkerIteratorAgeAlarm",
        AppMetrics.iterator_age(dispatch_function),
        iterator_age_s * 1000,
        f"the worker receives stream records {iterator_age_s}+ s old: stream dispatch is "
        "so far behind that the scheduled drain does its work (the worker throttled, "
        "failing, or too few concurrent batches)",
    )


def throttle_alarms(
    factory: AlarmFactory, pairs: list[tuple[str | None, dict[str, cw.IMetric]]]
) -> None:
    """One alarm per table and per index (read + write throttles: two metrics each): a single
    sum over all of them already reached CloudWatch's 10 metrics with four indexes."""
    for index_name, pair in pairs:
        what = "the table" if index_name is None else f"its {index_name} index"
        factory.alarm(
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
