"""The worker function: drains claims for the remaining invocation time.

Runs the handlers of the module named in ``LEASEFENCE_WORKER_HANDLERS`` (``package.module:NAME``,
a mapping of job type to handler) for the tenants in ``LEASEFENCE_WORKER_TENANTS`` (comma
separated; the fleet takes them in turn, so no tenant starves another). It stops claiming when
less than one lease plus a margin of the invocation is left, so a job never outlives its
function; one that is cut short anyway is safe (its fence still guards the targets, and the next
claim reconciles).
"""

from __future__ import annotations

import importlib
import os

from leasefence.observability import logger, metrics, record_event, tracer
from leasefence.settings import runtime

#: Stop claiming when less than one lease plus this margin of the invocation is left.
MARGIN_MS = 5_000

_worker = None


def load_handlers(spec: str):
    module_name, _, attribute = spec.partition(":")
    handlers = getattr(importlib.import_module(module_name), attribute or "HANDLERS")
    if not handlers:
        raise ValueError(f"{spec} defines no handlers")
    return handlers


def build_worker():
    from leasefence.worker import EngineBackend, Worker

    rt = runtime()
    rt.prepare()
    tenants = [t for t in os.environ.get("LEASEFENCE_WORKER_TENANTS", "").split(",") if t]
    if not tenants:
        raise ValueError("LEASEFENCE_WORKER_TENANTS must name at least one tenant")
    # The backend loads payloads with Engine.payload: PayloadMissing (purged, erased, unreadable)
    # is raised, never None, and the runtime quarantines the operation instead of running the
    # handler without its input.
    return Worker(
        EngineBackend(rt.engine, tenants),
        load_handlers(os.environ["LEASEFENCE_WORKER_HANDLERS"]),
        lease_ms=int(os.environ.get("LEASEFENCE_WORKER_LEASE_SECONDS", "60")) * 1000,
        idle_sleep_ms=int(os.environ.get("LEASEFENCE_WORKER_IDLE_MS", "1000")),
        events=record_event,
    )


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    global _worker
    if _worker is None:
        _worker = build_worker()
    processed = {"jobs": 0}
    worker = _worker
    # Claim only while a whole lease still fits in the invocation; idle polls end the drain.
    while context.get_remaining_time_in_millis() > worker.lease_ms + MARGIN_MS:
        if not worker.run_once():
            break
        processed["jobs"] += 1
    logger.info("drain finished", extra=processed)
    return processed
