"""Dashboard, alarms and the alarm topic of a ``LeaseFenceService``.

The functions emit Powertools EMF metrics in the service's namespace (``metrics_namespace``,
default ``LeaseFence/<stack name>``, set as ``POWERTOOLS_METRICS_NAMESPACE`` on every function)
with the single dimension ``service=leasefence`` (:data:`APP_METRICS`; the publisher also
:data:`PUBLISHER_METRICS`, the worker function :data:`WORKER_METRICS`). Alarms and dashboard read
that same namespace.
Everything else comes from AWS/Lambda, AWS/ApiGateway, AWS/DynamoDB and AWS/SQS.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
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
    # Emitted once per stalled claim (worker runtime): counted, never "held" over periods.
    "StalledClaims": (cw.Unit.COUNT, "Sum"),
    # The payload store refused a read, write or deletion (S3 AccessDenied, a KMS key fault, an
    # archived object): API, worker and sweeper alike (leasefence.payloads).
    "PayloadAccessDenied": (cw.Unit.COUNT, "Sum"),
}

#: Emitted by the worker runtime (``leasefence.worker``) when the worker function is deployed.
WORKER_METRICS: dict[str, tuple[cw.Unit, str]] = {
    "LostOwnership": (cw.Unit.COUNT, "Sum"),
    "AbandonedAfterLostOwnership": (cw.Unit.COUNT, "Sum"),
    "Heartbeats": (cw.Unit.COUNT, "Sum"),
    "HeartbeatsSkippedNoProgress": (cw.Unit.COUNT, "Sum"),
    "Reconciles": (cw.Unit.COUNT, "Sum"),
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
            a.add_alarm_action(action)
            a.add_ok_action(action)
            self.alarms[key] = a
            return a

        # ------------------------------------------------------------------ leasefence alarms
        alarm(
            "StalledClaimsAlarm",
            # One event per stalled claim: the first one in a 5-minute window raises the alarm.
            app_metric("StalledClaims", "Sum"),
            1,
            "a claimed job's lease ran out while its handler made no progress (handler hung or "
            "blocked; the claim will be taken over or parked)",
        )
        alarm(
            "OldestUnknownAlarm",
            app_metric("OldestUnknownAgeSeconds"),
            oldest_unknown_alarm_age.to_seconds(),
            "an operation has waited in state unknown longer than "
            f"{int(oldest_unknown_alarm_age.to_seconds())} s: an operator must reconcile and resolve it",
        )
        alarm(
            "OldestDueAlarm",
            app_metric("OldestDueAgeSeconds"),
            oldest_due_alarm_age.to_seconds(),
            "due work has waited to be claimed longer than "
            f"{int(oldest_due_alarm_age.to_seconds())} s: no worker serves its job type (a typo, a "
            "retired type) or the fleet is down or too small",
        )
        alarm(
            "UnknownEnteredAlarm",
            cw.MathExpression(
                expression="FILL(parked, 0) + FILL(swept, 0)",
                using_metrics={
                    "parked": app_metric("UnknownParked"),
                    "swept": app_metric("SweptToUnknown"),
                },
                period=FIVE_MINUTES,
                label="Operations entering unknown",
            ),
            1,
            "operations entered state unknown (reported by a worker or parked by the sweeper): "
            "an operator must reconcile them and POST .../resolve",
        )
        alarm(
            "QuarantineRateAlarm",
            app_metric("Quarantined", period=Duration.minutes(15)),
            quarantine_alarm_threshold,
            f"{quarantine_alarm_threshold}+ operations quarantined in 15 minutes",
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
        alarm(
            "PayloadAccessDeniedAlarm",
            # Its own alarm: the throttles alarm's expression already uses CloudWatch's limit of
            # 10 metrics. One refusal fires it: no healthy deployment is ever refused.
            app_metric("PayloadAccessDenied", "Sum"),
            1,
            "the payload store refused access to payload objects (S3 AccessDenied, a KMS key "
            "disabled or not granted, an archived object): fix the bucket policy, the function "
            "roles or the key; the jobs are not quarantined, they are retried once it is fixed",
        )
        alarm(
            "StaleFenceRejectionsAlarm",
            app_metric("StaleFenceRejections"),
            stale_fence_alarm_threshold,
            f"{stale_fence_alarm_threshold}+ stale-fence rejections in 5 minutes "
            "(zombie workers, leases too short)",
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
        alarm(
            "SweeperNotRunningAlarm",
            sweeper_fn.metric_invocations(period=Duration.minutes(10), statistic="Sum"),
            1,
            "the sweeper was not invoked for 10 minutes (schedule disabled or failing)",
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
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
            threshold = worker.props.lost_ownership_alarm_threshold
            alarm(
                "WorkerLostOwnershipAlarm",
                app_metric("LostOwnership", period=Duration.minutes(15)),
                threshold,
                f"{threshold}+ jobs of the worker function lost ownership in 15 minutes (a heartbeat "
                "or write was refused: lease too short for the job, or the handler reports no "
                "progress; the fence kept the stale writes out)",
            )
            alarm(
                "WorkerErrorsAlarm",
                worker_fn.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
                1,
                "the worker function failed (or timed out) in two consecutive 5-minute windows "
                "(handler module not importable, secret unreadable, jobs outliving the timeout)",
                evaluation_periods=2,
            )
            alarm(
                "WorkerNotRunningAlarm",
                worker_fn.metric_invocations(period=Duration.minutes(10), statistic="Sum"),
                1,
                "the worker function was not invoked for 10 minutes (schedule disabled or failing)",
                comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING,
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

        throttle_metrics: dict[str, cw.IMetric] = {
            "tr": table.metric("ReadThrottleEvents", period=FIVE_MINUTES, statistic="Sum"),
            "tw": table.metric("WriteThrottleEvents", period=FIVE_MINUTES, statistic="Sum"),
        }
        for i, gsi in enumerate(schema.global_secondary_indexes()):
            for kind in ("Read", "Write"):
                throttle_metrics[f"g{i}{kind[0].lower()}"] = cw.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=f"{kind}ThrottleEvents",
                    dimensions_map={
                        "TableName": table.table_name,
                        "GlobalSecondaryIndexName": gsi["IndexName"],
                    },
                    period=FIVE_MINUTES,
                    statistic="Sum",
                )
        throttles = cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in throttle_metrics),
            using_metrics=throttle_metrics,
            period=FIVE_MINUTES,
            label="DynamoDB throttle events (table + indexes)",
        )
        alarm(
            "DynamoDbThrottlesAlarm",
            throttles,
            10,
            "10+ DynamoDB throttle events in 5 minutes on the table or its indexes "
            "(hot partition: raise due_shards)",
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
                title="Oldest unknown and oldest due (s), stalled claims",
                left=[app_metric("OldestUnknownAgeSeconds"), app_metric("OldestDueAgeSeconds")],
                right=[app_metric("StalledClaims")],
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
                    title="Worker: lost ownership",
                    left=[app_metric(n) for n in ("LostOwnership", "AbandonedAfterLostOwnership")],
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
