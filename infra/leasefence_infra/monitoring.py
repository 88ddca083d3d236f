"""Dashboard, alarms and the alarm topic of a ``LeaseFenceService``.

The functions emit Powertools EMF metrics in the service's namespace (``metrics_namespace``,
default ``LeaseFence/<stack name>``, set as ``POWERTOOLS_METRICS_NAMESPACE`` on every function)
with the single dimension ``service=leasefence`` (:data:`APP_METRICS`; the worker function also
:data:`WORKER_METRICS`). Alarms and dashboard read that same namespace.
Everything else comes from AWS/Lambda, AWS/ApiGateway, AWS/DynamoDB and AWS/SQS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from ._core import schema

if TYPE_CHECKING:  # pragma: no cover
    from .service import LeaseFenceService

#: The namespace prefix; a service's own namespace is ``LeaseFenceService.metrics_namespace``.
NAMESPACE = "LeaseFence"
DIMENSIONS = {"service": "leasefence"}

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
}

#: Emitted by the worker runtime (``leasefence.worker``) when the worker function is deployed.
WORKER_METRICS: dict[str, tuple[cw.Unit, str]] = {
    "LostOwnership": (cw.Unit.COUNT, "Sum"),
    "AbandonedAfterLostOwnership": (cw.Unit.COUNT, "Sum"),
    "Heartbeats": (cw.Unit.COUNT, "Sum"),
    "HeartbeatsSkippedNoProgress": (cw.Unit.COUNT, "Sum"),
    "Reconciles": (cw.Unit.COUNT, "Sum"),
}

FIVE_MINUTES = Duration.minutes(5)


def app_metric(name: str, statistic: str | None = None, period: Duration = FIVE_MINUTES, *,
               namespace: str = NAMESPACE) -> cw.Metric:
    unit, default_statistic = APP_METRICS[name] if name in APP_METRICS else WORKER_METRICS[name]
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
    """Alarms (all to :attr:`topic`) and one dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        service: LeaseFenceService,
        encryption_key: kms.IKey | None,
        metrics_namespace: str,
        oldest_unknown_alarm_age: Duration,
        oldest_due_alarm_age: Duration,
        quarantine_alarm_threshold: int,
        takeover_alarm_percent: float,
        stale_fence_alarm_threshold: int,
        api_5xx_alarm_threshold: int,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)

        def app_metric(name: str, statistic: str | None = None, period: Duration = FIVE_MINUTES) -> cw.Metric:
            return _app_metric(name, statistic, period, namespace=metrics_namespace)

        # ------------------------------------------------------------------ topic
        # CloudWatch cannot publish to a topic under the AWS-managed aws/sns key, so the topic
        # gets a customer-managed key whose policy lets CloudWatch use it.
        topic_key = encryption_key
        if topic_key is None:
            topic_key = kms.Key(
                self,
                "AlarmTopicKey",
                description="leasefence alarm topic",
                enable_key_rotation=True,
            )
        if isinstance(topic_key, kms.Key):
            topic_key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="CloudWatchAlarmsPublish",
                    principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],  # in a key policy "*" means this key
                    conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
                )
            )
        self.topic = sns.Topic(self, "AlarmTopic", display_name="leasefence alarms",
                               master_key=topic_key, enforce_ssl=True)
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {"aws:SourceArn": f"arn:{stack.partition}:cloudwatch:{stack.region}:{stack.account}:alarm:*"},
                },
            )
        )
        action = cw_actions.SnsAction(self.topic)
        self.alarms: dict[str, cw.Alarm] = {}

        def alarm(key: str, metric: cw.IMetric, threshold: float, description: str, *,
                  evaluation_periods: int = 1, datapoints: int | None = None,
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
                using_metrics={"parked": app_metric("UnknownParked"), "swept": app_metric("SweptToUnknown")},
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
            "StaleFenceRejectionsAlarm",
            app_metric("StaleFenceRejections"),
            stale_fence_alarm_threshold,
            f"{stale_fence_alarm_threshold}+ stale-fence rejections in 5 minutes "
            "(zombie workers, leases too short)",
        )

        # ------------------------------------------------------------------ platform alarms
        sweeper = service.sweeper_function
        api_fn = service.api_function
        alarm(
            "SweeperErrorsAlarm",
            sweeper.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
            1,
            "the sweeper failed in two consecutive 5-minute windows",
            evaluation_periods=2,
        )
        alarm(
            "SweeperNotRunningAlarm",
            sweeper.metric_invocations(period=Duration.minutes(10), statistic="Sum"),
            1,
            "the sweeper was not invoked for 10 minutes (schedule disabled or failing)",
            comparison=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cw.TreatMissingData.BREACHING,
        )
        alarm(
            "SweepScheduleDlqAlarm",
            service.schedule_dlq.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            1,
            "sweeper invocations the scheduler could not deliver are in the dead-letter queue",
        )
        alarm(
            "SweeperFailuresAlarm",
            service.sweeper_failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum"
            ),
            1,
            "a sweeper invocation failed and was not retried: its event is in the sweeper's "
            "on-failure queue (read the sweeper's log group)",
        )
        alarm(
            "Api5xxAlarm",
            service.http_api.metric_server_error(period=FIVE_MINUTES, statistic="Sum"),
            api_5xx_alarm_threshold,
            f"{api_5xx_alarm_threshold}+ API 5xx answers in 5 minutes",
        )
        worker_fn = service.worker_function
        if worker_fn is not None and service.worker is not None:
            threshold = service.worker.lost_ownership_alarm_threshold
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
            assert service.worker_schedule_dlq is not None
            alarm(
                "WorkerScheduleDlqAlarm",
                service.worker_schedule_dlq.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                1,
                "worker invocations the scheduler could not deliver are in the dead-letter queue",
            )
            assert service.worker_failure_queue is not None
            alarm(
                "WorkerFailuresAlarm",
                service.worker_failure_queue.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum"
                ),
                1,
                "a worker invocation failed and was not retried: its event is in the worker's "
                "on-failure queue (read the worker's log group)",
            )
        table = service.table
        throttle_metrics: dict[str, cw.IMetric] = {
            "tr": table.metric("ReadThrottleEvents", period=FIVE_MINUTES, statistic="Sum"),
            "tw": table.metric("WriteThrottleEvents", period=FIVE_MINUTES, statistic="Sum"),
        }
        for i, gsi in enumerate(schema.global_secondary_indexes()):
            for kind in ("Read", "Write"):
                throttle_metrics[f"g{i}{kind[0].lower()}"] = cw.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=f"{kind}ThrottleEvents",
                    dimensions_map={"TableName": table.table_name,
                                    "GlobalSecondaryIndexName": gsi["IndexName"]},
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
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=24, height=4)
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Claims, takeovers, stale fences",
                left=[app_metric(n) for n in ("Claims", "Takeovers", "StaleFenceRejections")],
                width=width,
            ),
            cw.GraphWidget(
                title="Enqueue replays, payload conflicts, payloads purged",
                left=[app_metric(n) for n in ("Replays", "PayloadConflicts", "PayloadsPurged")],
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
                left=[service.http_api.metric_count(period=FIVE_MINUTES)],
                right=[
                    service.http_api.metric_client_error(period=FIVE_MINUTES),
                    service.http_api.metric_server_error(period=FIVE_MINUTES),
                ],
                width=width,
            ),
            cw.GraphWidget(
                title="API latency (ms)",
                left=[service.http_api.metric_latency(period=FIVE_MINUTES, statistic=s)
                      for s in ("p50", "p99")],
                width=width,
            ),
            cw.GraphWidget(
                title="Functions: errors and throttles",
                left=[api_fn.metric_errors(period=FIVE_MINUTES, label="API errors"),
                      sweeper.metric_errors(period=FIVE_MINUTES, label="Sweeper errors")],
                right=[api_fn.metric_throttles(period=FIVE_MINUTES, label="API throttles"),
                       sweeper.metric_throttles(period=FIVE_MINUTES, label="Sweeper throttles")],
                width=width,
            ),
        )
        failure_queues = [
            service.sweeper_failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum", label="Sweeper failed invocations")
        ]
        if service.worker_failure_queue is not None:
            failure_queues.append(service.worker_failure_queue.metric_approximate_number_of_messages_visible(
                period=FIVE_MINUTES, statistic="Maximum", label="Worker failed invocations"))
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Function duration p99 (ms)",
                left=[api_fn.metric_duration(period=FIVE_MINUTES, statistic="p99", label="API"),
                      sweeper.metric_duration(period=FIVE_MINUTES, statistic="p99", label="Sweeper")],
                width=width,
            ),
            cw.GraphWidget(
                title="DynamoDB consumed capacity",
                left=[table.metric_consumed_read_capacity_units(period=FIVE_MINUTES),
                      table.metric_consumed_write_capacity_units(period=FIVE_MINUTES)],
                width=width,
            ),
            cw.GraphWidget(
                title="DynamoDB throttles, schedule DLQ, failed invocations",
                left=[throttles],
                right=[service.schedule_dlq.metric_approximate_number_of_messages_visible(
                    period=FIVE_MINUTES, statistic="Maximum", label="Sweep schedule DLQ"),
                       *failure_queues],
                width=width,
            ),
        )
        if worker_fn is not None:
            assert service.worker_schedule_dlq is not None
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
                    left=[worker_fn.metric_invocations(period=FIVE_MINUTES, label="Invocations"),
                          worker_fn.metric_errors(period=FIVE_MINUTES, label="Errors"),
                          worker_fn.metric_throttles(period=FIVE_MINUTES, label="Throttles"),
                          service.worker_schedule_dlq.metric_approximate_number_of_messages_visible(
                              period=FIVE_MINUTES, statistic="Maximum", label="Schedule DLQ")],
                    right=[worker_fn.metric_duration(period=FIVE_MINUTES, statistic="p99",
                                                     label="Duration p99 (ms)")],
                    width=width,
                ),
            )
        self.dashboard = dashboard
