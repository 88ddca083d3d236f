"""The metric factory of a ``LeaseFenceService``: which EMF metrics the service's own code emits
(one table, :data:`METRICS`), in which namespace, and the ``cw.Metric`` objects the alarms and
the dashboard read (:class:`AppMetrics`, :func:`app_metric`).

The functions emit Powertools EMF metrics in the service's namespace (``metrics_namespace``,
default ``LeaseFence/<stack name>/<path below the stack>``, set as ``POWERTOOLS_METRICS_NAMESPACE``
on every function) with the single dimension ``service=leasefence``. Everything else comes from
AWS/Lambda, AWS/ApiGateway, AWS/DynamoDB and AWS/SQS.

Every name the shipped code emits has one row in :data:`METRICS`: its unit, the statistic the
dashboard and the alarms use, and who emits it (:data:`SERVICE`, :data:`WORKER`,
:data:`PUBLISHER`), so a widget or an alarm exists only where its metric can be emitted. A test
reads the emitting code and compares it with the table.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from leasefence import schema

from ..environment import SERVICE_NAME

#: The namespace prefix; a service's own namespace is ``LeaseFenceService.metrics_namespace``.
NAMESPACE = "LeaseFence"
_NAMESPACE_UNSAFE = re.compile(r"[^0-9A-Za-z._/#: -]")
_NAMESPACE_MAX = 255

DIMENSIONS = {"service": SERVICE_NAME}
FIVE_MINUTES = Duration.minutes(5)

#: Who emits a metric, so its alarm or widget exists only where it can be emitted.
SERVICE = "service"  # the engine in the API and sweeper functions: always deployed
WORKER = "worker"  # the worker runtime in process, and the targets its handlers use
PUBLISHER = "publisher"  # the stream publisher function: always deployed


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


@dataclass(frozen=True)
class MetricSpec:
    """One EMF metric: its unit, the statistic the dashboard and the alarms read, its emitter."""

    unit: cw.Unit
    statistic: str
    emitted_by: str


def _count(emitted_by: str) -> MetricSpec:
    return MetricSpec(cw.Unit.COUNT, "Sum", emitted_by)


#: Every metric the shipped code emits (one shared list of names), in the order the dashboard's
#: graphs were first laid out.
METRICS: dict[str, MetricSpec] = {
    # The engine (API, sweeper, worker) and the sweeper's gauges.
    "Claims": _count(SERVICE),
    "Takeovers": _count(SERVICE),
    "StaleFenceRejections": _count(SERVICE),
    "Replays": _count(SERVICE),
    "PayloadConflicts": _count(SERVICE),
    "UnknownParked": _count(SERVICE),
    "Quarantined": _count(SERVICE),
    "SweptToUnknown": _count(SERVICE),
    "ClaimLatency": MetricSpec(cw.Unit.MILLISECONDS, "p99", SERVICE),
    "OldestUnknownAgeSeconds": MetricSpec(cw.Unit.SECONDS, "Maximum", SERVICE),
    "OldestDueAgeSeconds": MetricSpec(cw.Unit.SECONDS, "Maximum", SERVICE),
    "PayloadsPurged": _count(SERVICE),
    # The approval gate: decisions (API), approvals that named other content (API), operations
    # whose approval window closed without a decision (sweeper).
    "Approvals": _count(SERVICE),
    "Rejections": _count(SERVICE),
    "ApprovalMismatches": _count(SERVICE),
    "ApprovalsExpired": _count(SERVICE),
    # The payload store refused a read, write or deletion (S3 AccessDenied, a KMS key fault, an
    # archived object): API, worker and sweeper alike (leasefence.payloads).
    "PayloadAccessDenied": _count(SERVICE),
    # A resent claim answered with the claim it made; producers' and operators' decisions;
    # housekeeping after the identity retention became forever.
    "ClaimReplays": _count(SERVICE),
    "Cancellations": _count(SERVICE),
    "Erasures": _count(SERVICE),
    "TenantErasureSteps": _count(SERVICE),
    "TtlsCleared": _count(SERVICE),
    # The worker runtime (leasefence.worker), with the worker function. Emitted once per stalled
    # claim: counted, never "held" over periods.
    "StalledClaims": _count(WORKER),
    "LostOwnership": _count(WORKER),
    "AbandonedAfterLostOwnership": _count(WORKER),
    "Heartbeats": _count(WORKER),
    "HeartbeatsSkippedNoProgress": _count(WORKER),
    "Reconciles": _count(WORKER),
    # Operations quarantined because their payload is gone (purged, erased, unreadable).
    "PayloadMissing": _count(WORKER),
    # Stream dispatch (leasefence.worker.dispatch): records claimed, already taken, deferred to
    # the drain (too little of the invocation left for a lease).
    "StreamDispatched": _count(WORKER),
    "StreamDispatchTaken": _count(WORKER),
    "StreamDispatchDeferred": _count(WORKER),
    # The one-reader stream batch (leasefence.worker.stream_router, leasefence.worker.handoff):
    # claims that failed (left to the drain), records it could not publish and kept in the
    # publisher's bucket, claims handed to asynchronous invocations and hand-offs that failed.
    "StreamDispatchFailed": _count(WORKER),
    "PublishFailuresKept": _count(WORKER),
    "StreamHandedOff": _count(WORKER),
    "StreamHandoffFailed": _count(WORKER),
    # The runtime's store faults: a renewal that failed, a job abandoned while the table was
    # unavailable, a busy table's write retried.
    "HeartbeatErrors": _count(WORKER),
    "AbandonedStoreUnavailable": _count(WORKER),
    "StoreRetries": _count(WORKER),
    # Class B targets (leasefence.targets.fenced_table), in the worker's handlers.
    "StaleTargetWritesRejected": _count(WORKER),
    "TargetHorizonRefusals": _count(WORKER),
    "InconsistentClaimsRefused": _count(WORKER),
    "TargetPrunes": _count(WORKER),
    "TargetEntriesPruned": _count(WORKER),
    "TargetPrunesRefused": _count(WORKER),
    "TargetPrunesFailed": _count(WORKER),
    # The publisher function (leasefence.streams.publisher).
    "HistoryEntries": _count(PUBLISHER),
    "HistoryCompactions": _count(PUBLISHER),
    "EventsPublished": _count(PUBLISHER),
}


def _emitted_by(emitter: str) -> dict[str, tuple[cw.Unit, str]]:
    return {n: (s.unit, s.statistic) for n, s in METRICS.items() if s.emitted_by == emitter}


#: EMF metric name -> (unit, statistic used on the dashboard and in alarms), by emitter.
APP_METRICS = _emitted_by(SERVICE)
#: Emitted by the worker runtime (``leasefence.worker``) when the worker function is deployed.
WORKER_METRICS = _emitted_by(WORKER)
#: Emitted by the publisher function (``leasefence.streams.publisher``).
PUBLISHER_METRICS = _emitted_by(PUBLISHER)


def app_metric(
    name: str,
    statistic: str | None = None,
    period: Duration = FIVE_MINUTES,
    *,
    namespace: str = NAMESPACE,
) -> cw.Metric:
    """One of :data:`METRICS` in ``namespace``, with the service's dimension."""
    spec = METRICS[name]
    return cw.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map=dict(DIMENSIONS),
        statistic=statistic or spec.statistic,
        period=period,
        # No unit filter: EMF units are informational and a mismatch would hide the data.
        label=f"{name} ({spec.unit.value})" if spec.unit is not cw.Unit.COUNT else name,
    )


class AppMetrics:
    """The metric factory of one service: its own metrics in its namespace, and the AWS metrics
    the alarms and the dashboard share."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def metric(
        self, name: str, statistic: str | None = None, period: Duration = FIVE_MINUTES
    ) -> cw.Metric:
        return app_metric(name, statistic, period, namespace=self.namespace)

    def metrics(self, *names: str) -> list[cw.Metric]:
        return [self.metric(n) for n in names]

    @staticmethod
    def iterator_age(function: lambda_.IFunction, label: str | None = None) -> cw.Metric:
        """Milliseconds: the age of the newest record of the batches a function received."""
        return function.metric("IteratorAge", period=FIVE_MINUTES, statistic="Maximum", label=label)

    @staticmethod
    def table_throttles(
        table: dynamodb.ITable,
    ) -> list[tuple[str | None, dict[str, cw.IMetric]]]:
        """(index name or None for the table, its read and write throttle events keyed for
        metric math): one pair for the table and one per index of the schema."""
        out: list[tuple[str | None, dict[str, cw.IMetric]]] = []
        indexes = [g["IndexName"] for g in schema.global_secondary_indexes()]
        for prefix, index_name in [("t", None), *((f"g{i}", n) for i, n in enumerate(indexes))]:
            dimensions = {"TableName": table.table_name}
            if index_name is not None:
                dimensions["GlobalSecondaryIndexName"] = index_name
            pair: dict[str, cw.IMetric] = {
                f"{prefix}{kind[0].lower()}": cw.Metric(
                    namespace="AWS/DynamoDB",
                    metric_name=f"{kind}ThrottleEvents",
                    dimensions_map=dimensions,
                    period=FIVE_MINUTES,
                    statistic="Sum",
                )
                for kind in ("Read", "Write")
            }
            out.append((index_name, pair))
        return out
