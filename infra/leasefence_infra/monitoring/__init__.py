"""Dashboard, alarms and the alarm topic of a ``LeaseFenceService``, split the way
cdk-monitoring-constructs is: :mod:`.metrics` (which metrics exist, the metric factory),
:mod:`.alarms` (the alarm table and the alarm sets), :mod:`.dashboard` (the graphs), and the
:class:`Monitoring` construct that wires them (:mod:`.construct`)."""

from .alarms import (
    APP_ALARMS,
    MAX_ALARM_METRICS,
    UNALARMED_METRICS,
    AlarmSpec,
    not_running_window,
    schedule_interval_seconds,
)
from .construct import SWEEPER_SCHEDULE, Monitoring
from .metrics import (
    APP_METRICS,
    DIMENSIONS,
    FIVE_MINUTES,
    METRICS,
    NAMESPACE,
    PUBLISHER,
    PUBLISHER_METRICS,
    SERVICE,
    WORKER,
    WORKER_METRICS,
    app_metric,
    default_metrics_namespace,
)

__all__ = [
    "APP_ALARMS",
    "APP_METRICS",
    "DIMENSIONS",
    "FIVE_MINUTES",
    "MAX_ALARM_METRICS",
    "METRICS",
    "NAMESPACE",
    "PUBLISHER",
    "PUBLISHER_METRICS",
    "SERVICE",
    "SWEEPER_SCHEDULE",
    "UNALARMED_METRICS",
    "WORKER",
    "WORKER_METRICS",
    "AlarmSpec",
    "Monitoring",
    "app_metric",
    "default_metrics_namespace",
    "not_running_window",
    "schedule_interval_seconds",
]
