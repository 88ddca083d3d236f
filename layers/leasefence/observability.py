"""Logger, Tracer and Metrics (Powertools), wired once for every function.

Privacy rule: no log line, trace annotation or metric dimension carries a raw tenant id,
operation id, worker id or payload. Where a record must be correlated, it carries
:func:`leasefence.privacy.keyed_hash` tags instead (see :func:`tag`).

* Logger: structured JSON, service ``leasefence``. The engine's stdlib loggers
  (``leasefence.engine`` ...) are children of this logger, so they share its handler and format.
* Tracer: X-Ray when :func:`tracing_enabled` (in Lambda, not turned off with
  ``POWERTOOLS_TRACE_DISABLED``, the X-Ray SDK installed), patching botocore only (every AWS call
  a subsegment; the functions make no other outbound calls). Otherwise a no-op provider
  (:mod:`leasefence.tracing`) and the X-Ray SDK is never imported. Responses are never captured.
* Metrics: CloudWatch EMF, namespace ``POWERTOOLS_METRICS_NAMESPACE`` (the infra sets one per
  deployment; ``LeaseFence`` when unset), one dimension (``service``), flushed at the end of each
  invocation by ``metrics.log_metrics``.
"""

from __future__ import annotations

import os
import warnings

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

from leasefence.metrics import Metric
from leasefence.privacy import keyed_hash
from leasefence.tracing import TRACED_MODULES, NoTracing, tracing_enabled

SERVICE = "leasefence"
#: An explicit ``namespace=`` would override the environment, so it is read here.
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "LeaseFence"

logger = Logger(service=SERVICE, utc=True)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = (
    Tracer(service=SERVICE, disabled=False, patch_modules=TRACED_MODULES)
    if tracing_enabled()
    # Powertools' own disabled mode still imports the X-Ray SDK (to switch it off); the no-op
    # provider needs nothing switched off, so the Tracer runs it as an enabled one.
    else Tracer(service=SERVICE, disabled=False, auto_patch=False, provider=NoTracing())
)

# An invocation that recorded nothing (a health check, a read) is normal, not worth a warning.
warnings.filterwarnings("ignore", message="No application metrics to publish")


def record_event(name: str, value: float) -> None:
    """The engine's event sink: one count metric per domain event (a
    :class:`~leasefence.metrics.Metric`)."""
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def record_claim_latency(milliseconds: float) -> None:
    metrics.add_metric(name=Metric.CLAIM_LATENCY, unit=MetricUnit.Milliseconds, value=milliseconds)


def tag(*parts: str) -> str:
    """A keyed, non-reversible tag for ids that logs may carry."""
    return keyed_hash(*parts)
