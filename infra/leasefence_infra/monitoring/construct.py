"""The :class:`Monitoring` construct: the alarm topic, the alarms (:mod:`.alarms`) and the
dashboard (:mod:`.dashboard`) of one service, reading its namespace (:mod:`.metrics`)."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from ..alarm_topic import alarm_topic
from ..api import Api
from ..dispatch import StreamDispatch
from ..publisher import Publisher
from ..sweeper import SWEEPER_SCHEDULE, Sweeper
from ..worker import Worker
from .alarms import (
    SWEEPER_ALARMS,
    WORKER_ALARMS,
    AlarmFactory,
    app_alarms,
    function_alarms,
    stream_alarms,
    takeover_rate_alarm,
    throttle_alarms,
)
from .dashboard import build_dashboard
from .metrics import FIVE_MINUTES, SERVICE, WORKER, AppMetrics

__all__ = ["SWEEPER_SCHEDULE", "Monitoring"]


class Monitoring(Construct):
    """Alarms (all to :attr:`topic`, alarm and OK) and, with ``dashboard``, one dashboard, in
    ``metrics_namespace``."""

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
        dashboard: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        metrics = AppMetrics(metrics_namespace)
        #: Every alarm publishes here (see :mod:`leasefence_infra.alarm_topic`).
        self.topic = alarm_topic(self, topic=topic, service_key=service_key)
        factory = AlarmFactory(self, self.topic)
        self.alarms: dict[str, cw.Alarm] = factory.alarms

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
        app_alarms(factory, metrics, thresholds, emitters)
        takeover_rate_alarm(factory, metrics, takeover_alarm_percent)

        # ------------------------------------------------------------------ platform alarms
        function_alarms(
            factory,
            SWEEPER_ALARMS,
            function=sweeper.function.function,
            schedule_expression=SWEEPER_SCHEDULE.expression_string,
            schedule_dlq=sweeper.schedule.dlq,
            failure_queue=sweeper.failure_queue,
        )
        factory.alarm(
            "Api5xxAlarm",
            api.http_api.metric_server_error(period=FIVE_MINUTES, statistic="Sum"),
            api_5xx_alarm_threshold,
            f"{api_5xx_alarm_threshold}+ API 5xx answers in 5 minutes",
        )
        if worker is not None:
            function_alarms(
                factory,
                WORKER_ALARMS,
                function=worker.function.function,
                schedule_expression=worker.props.schedule_or_default.expression_string,
                schedule_dlq=worker.schedule.dlq,
                failure_queue=worker.failure_queue,
            )
        stream_alarms(
            factory,
            publisher_failed_batches=publisher.metric_failed_batches(FIVE_MINUTES),
            publisher_function=publisher.function.function,
            dispatch_failure_queue=dispatch.failure_queue if dispatch is not None else None,
            # A shared mapping's function is the publisher's: its iterator age is alarmed above.
            dispatch_function=(
                dispatch.function if dispatch is not None and not dispatch.shared else None
            ),
            iterator_age_alarm_age=stream_iterator_age_alarm_age,
        )
        throttle_pairs = metrics.table_throttles(table)
        throttle_alarms(factory, throttle_pairs)

        # ------------------------------------------------------------------ dashboard
        # The dashboard's sum over every throttle metric (a graph may read many more metrics
        # than an alarm).
        throttle_metrics = {k: m for _, pair in throttle_pairs for k, m in pair.items()}
        throttles = cw.MathExpression(
            expression=" + ".join(f"FILL({k}, 0)" for k in throttle_metrics),
            using_metrics=throttle_metrics,
            period=FIVE_MINUTES,
            label="DynamoDB throttle events (table + indexes)",
        )
        #: The dashboard (``dashboard``), else None.
        self.dashboard: cw.Dashboard | None = None
        if not dashboard:
            return
        self.dashboard = build_dashboard(
            self,
            metrics=metrics,
            alarms=self.alarms,
            table=table,
            throttles=throttles,
            api=api,
            sweeper=sweeper,
            worker=worker,
            dispatch=dispatch,
            publisher=publisher,
        )
