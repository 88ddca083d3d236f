"""The dashboard of a ``LeaseFenceService``: the alarms' states, then graphs of the service's own
metrics (:mod:`.metrics`) and of the AWS metrics of its API, functions, table, queues and
stream consumers. A graph of a metric only the worker emits exists only with the worker."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from ..api import Api
from ..dispatch import StreamDispatch
from ..publisher import Publisher
from ..sweeper import Sweeper
from ..worker import Worker
from .metrics import FIVE_MINUTES, PUBLISHER_METRICS, AppMetrics

#: A graph's width (three a row).
WIDTH = 8


def _queue_depth(queue: sqs.IQueue, label: str) -> cw.Metric:
    return queue.metric_approximate_number_of_messages_visible(
        period=FIVE_MINUTES, statistic="Maximum", label=label
    )


def build_dashboard(
    scope: Construct,
    *,
    metrics: AppMetrics,
    alarms: Mapping[str, cw.Alarm],
    table: dynamodb.ITable,
    throttles: cw.IMetric,
    api: Api,
    sweeper: Sweeper,
    worker: Worker | None,
    dispatch: StreamDispatch | None,
    publisher: Publisher,
) -> cw.Dashboard:
    """``Dashboard`` in ``scope``: every alarm's state, then the graphs."""
    dashboard = cw.Dashboard(scope, "Dashboard", default_interval=Duration.hours(3))
    dashboard.add_widgets(
        cw.AlarmStatusWidget(title="Alarms", alarms=list(alarms.values()), width=24, height=4)
    )
    _service_rows(dashboard, metrics, alarms)
    _platform_rows(dashboard, table, throttles, api, sweeper, worker, publisher)
    _stream_rows(dashboard, metrics, publisher, dispatch)
    if dispatch is not None:
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Worker: stream dispatch (claimed, already taken, left to the drain)",
                left=metrics.metrics(
                    "StreamDispatched", "StreamDispatchTaken", "StreamDispatchDeferred"
                ),
                width=WIDTH,
            ),
            cw.GraphWidget(
                title="Worker: stream batches (claims failed, handed off, publishing kept)",
                left=metrics.metrics(
                    "StreamDispatchFailed",
                    "StreamHandedOff",
                    "StreamHandoffFailed",
                    "PublishFailuresKept",
                ),
                width=WIDTH,
            ),
        )
    if worker is not None:
        _worker_rows(dashboard, metrics, worker)
    return dashboard


def _service_rows(
    dashboard: cw.Dashboard, metrics: AppMetrics, alarms: Mapping[str, cw.Alarm]
) -> None:
    """The engine's own metrics (API, sweeper, and the worker's engine calls)."""
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Claims, takeovers, stale fences",
            left=metrics.metrics("Claims", "Takeovers", "StaleFenceRejections"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Enqueue replays, payload conflicts, payloads purged, payload access denied",
            left=metrics.metrics(
                "Replays", "PayloadConflicts", "PayloadsPurged", "PayloadAccessDenied"
            ),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Unknown and quarantined",
            left=metrics.metrics("UnknownParked", "SweptToUnknown", "Quarantined"),
            width=WIDTH,
        ),
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Claim latency (ms)",
            left=[metrics.metric("ClaimLatency", s) for s in ("p50", "p90", "p99")],
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Oldest unknown and oldest due (s)",
            left=metrics.metrics("OldestUnknownAgeSeconds", "OldestDueAgeSeconds"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Takeover % of claims",
            left=[alarms["TakeoverRateAlarm"].metric],
            width=WIDTH,
        ),
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Approvals: decisions, mismatches, expired",
            left=metrics.metrics("Approvals", "Rejections"),
            right=metrics.metrics("ApprovalMismatches", "ApprovalsExpired"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Cancellations, erasures, tenant erasure steps",
            left=metrics.metrics("Cancellations", "Erasures"),
            right=metrics.metrics("TenantErasureSteps"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Claim replays, TTLs cleared",
            left=metrics.metrics("ClaimReplays"),
            right=metrics.metrics("TtlsCleared"),
            width=WIDTH,
        ),
    )


def _platform_rows(
    dashboard: cw.Dashboard,
    table: dynamodb.ITable,
    throttles: cw.IMetric,
    api: Api,
    sweeper: Sweeper,
    worker: Worker | None,
    publisher: Publisher,
) -> None:
    """The API, the functions, the table and the queues (AWS metrics)."""
    http_api = api.http_api
    api_fn = api.function.function
    sweeper_fn = sweeper.function.function
    publisher_fn = publisher.function.function
    dashboard.add_widgets(
        cw.GraphWidget(
            title="API requests and errors",
            left=[http_api.metric_count(period=FIVE_MINUTES)],
            right=[
                http_api.metric_client_error(period=FIVE_MINUTES),
                http_api.metric_server_error(period=FIVE_MINUTES),
            ],
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="API latency (ms)",
            left=[
                http_api.metric_latency(period=FIVE_MINUTES, statistic=s) for s in ("p50", "p99")
            ],
            width=WIDTH,
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
            width=WIDTH,
        ),
    )
    failure_queues = [_queue_depth(sweeper.failure_queue, "Sweeper failed invocations")]
    if worker is not None:
        failure_queues.append(_queue_depth(worker.failure_queue, "Worker failed invocations"))
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Function duration p99 (ms)",
            left=[
                api_fn.metric_duration(period=FIVE_MINUTES, statistic="p99", label="API"),
                sweeper_fn.metric_duration(period=FIVE_MINUTES, statistic="p99", label="Sweeper"),
            ],
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="DynamoDB consumed capacity",
            left=[
                table.metric_consumed_read_capacity_units(period=FIVE_MINUTES),
                table.metric_consumed_write_capacity_units(period=FIVE_MINUTES),
            ],
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="DynamoDB throttles, schedule DLQ, failed invocations",
            left=[throttles],
            right=[_queue_depth(sweeper.schedule.dlq, "Sweep schedule DLQ"), *failure_queues],
            width=WIDTH,
        ),
    )


def _stream_rows(
    dashboard: cw.Dashboard,
    metrics: AppMetrics,
    publisher: Publisher,
    dispatch: StreamDispatch | None,
) -> None:
    """The table's stream consumers: the publisher, and the worker's stream dispatch."""
    publisher_fn = publisher.function.function
    stream_failures: list[cw.IMetric] = [
        publisher.metric_failed_batches(FIVE_MINUTES, label="Publisher")
    ]
    iterator_ages = [metrics.iterator_age(publisher_fn, "Publisher")]
    if dispatch is not None:  # its queue (kept, unused, when the mapping is shared)
        stream_failures.append(_queue_depth(dispatch.failure_queue, "Worker"))
        if not dispatch.shared:  # the worker's own mapping
            iterator_ages.append(metrics.iterator_age(dispatch.function, "Worker"))
    dashboard.add_widgets(
        cw.GraphWidget(title="Stream: iterator age (ms)", left=iterator_ages, width=WIDTH),
        cw.GraphWidget(
            title="Stream: records failed after every retry", left=stream_failures, width=WIDTH
        ),
        cw.GraphWidget(
            title="Publisher: history entries, events published",
            left=metrics.metrics(*PUBLISHER_METRICS),
            right=[publisher_fn.metric_invocations(period=FIVE_MINUTES, label="Invocations")],
            width=WIDTH,
        ),
    )


def _worker_rows(dashboard: cw.Dashboard, metrics: AppMetrics, worker: Worker) -> None:
    """The worker runtime's metrics and the worker function's (only with the worker)."""
    worker_fn = worker.function.function
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Worker: lost ownership, stalled claims, payloads missing",
            left=metrics.metrics("LostOwnership", "AbandonedAfterLostOwnership"),
            right=metrics.metrics("StalledClaims", "PayloadMissing"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Worker: heartbeats, reconciles",
            left=metrics.metrics("Heartbeats", "HeartbeatsSkippedNoProgress"),
            right=metrics.metrics("Reconciles"),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Worker function: invocations, errors, duration",
            left=[
                worker_fn.metric_invocations(period=FIVE_MINUTES, label="Invocations"),
                worker_fn.metric_errors(period=FIVE_MINUTES, label="Errors"),
                worker_fn.metric_throttles(period=FIVE_MINUTES, label="Throttles"),
                _queue_depth(worker.schedule.dlq, "Schedule DLQ"),
            ],
            right=[
                worker_fn.metric_duration(
                    period=FIVE_MINUTES, statistic="p99", label="Duration p99 (ms)"
                )
            ],
            width=WIDTH,
        ),
    )
    dashboard.add_widgets(
        cw.GraphWidget(
            title="Worker: heartbeat errors, abandoned (table unavailable), store retries",
            left=metrics.metrics("HeartbeatErrors", "AbandonedStoreUnavailable"),
            right=metrics.metrics("StoreRetries"),
            width=WIDTH,
        ),
        # Class B targets run in the worker's handlers (leasefence.targets.fenced_table).
        cw.GraphWidget(
            title="Class B targets: stale writes, horizon refusals, inconsistent claims refused",
            left=metrics.metrics(
                "StaleTargetWritesRejected", "TargetHorizonRefusals", "InconsistentClaimsRefused"
            ),
            width=WIDTH,
        ),
        cw.GraphWidget(
            title="Class B targets: prunes (refused, failed), entries pruned",
            left=metrics.metrics("TargetPrunes", "TargetPrunesRefused", "TargetPrunesFailed"),
            right=metrics.metrics("TargetEntriesPruned"),
            width=WIDTH,
        ),
    )
