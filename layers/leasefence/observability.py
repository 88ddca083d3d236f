"""Logger, Tracer and Metrics (Powertools), wired once for every function.

Privacy rule: no log line, trace annotation or metric dimension carries a raw tenant id,
operation id, worker id or payload. Where a record must be correlated, it carries
:func:`leasefence.privacy.keyed_hash` tags instead (see :func:`tag`).

* Logger: structured JSON, service ``leasefence``. The engine's stdlib loggers
  (``leasefence.engine`` ...) are children of this logger, so they share its handler and format.
* Tracer: X-Ray when running in Lambda with the X-Ray SDK available; a no-op elsewhere (locally
  and in tests set ``POWERTOOLS_TRACE_DISABLED=true``). Responses are never captured.
* Metrics: CloudWatch EMF, namespace ``POWERTOOLS_METRICS_NAMESPACE`` (the infra sets one per
  deployment; ``LeaseFence`` when unset), one dimension (``service``), flushed at the end of each
  invocation by ``metrics.log_metrics``.
"""

from __future__ import annotations

import importlib.util
import os
import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from leasefence.privacy import keyed_hash

SERVICE = "leasefence"
#: An explicit ``namespace=`` would override the environment, so it is read here.
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "LeaseFence"

#: Engine event names (counts) published as metrics.
COUNT_METRICS = frozenset(
    {
        "Claims",
        "Takeovers",
        "StaleFenceRejections",
        "Replays",
        "PayloadConflicts",
        "UnknownParked",
        "Quarantined",
        "SweptToUnknown",
    }
)

logger = Logger(service=SERVICE, utc=True)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
# Without the X-Ray SDK (it is not a runtime dependency of the layer) tracing is off, not broken.
tracer = Tracer(
    service=SERVICE, disabled=True if importlib.util.find_spec("aws_xray_sdk") is None else None
)

# An invocation that recorded nothing (a health check, a read) is normal, not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")


def record_event(name: str, value: float) -> None:
    """The engine's event sink: one count metric per domain event."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def record_claim_latency(milliseconds: float) -> None:
    metrics.add_metric(name="ClaimLatency", unit=MetricUnit.Milliseconds, value=milliseconds)


def tag(*parts: str) -> str:
    """A keyed, non-reversible tag for ids that logs may carry."""
    return keyed_hash(*parts)
