"""The sweeper function (EventBridge schedule): parks expired final-attempt claims as ``unknown``
and ends operations whose approval was not given in time (``approval_expired``), then deletes the
stored payloads that are due (payload retention, erasure).

Each ``Engine.sweep`` call examines at most ``LEASEFENCE_SWEEP_BATCH`` due entries; the function
repeats it while a batch came back full, at most ``LEASEFENCE_SWEEP_MAX_BATCHES`` times, and stops
early when less than a safety margin of the invocation's time is left. Every park is a fenced
conditional write, so overlapping runs (a slow run and the next tick) cannot both act.
``Engine.purge_payloads`` then runs the same way (same batch size and limits, the time that is
left): each deletion is pinned to the purge time it acted on, so overlapping runs are harmless.
``Engine.clear_ttls`` then runs the same way: once the identity retention is forever, it removes
the TTLs that ended identities got while it was a window (bounded pages of a table scan, resumable
from the progress it keeps; one read per run when there is nothing to clear).

It publishes ``OldestUnknownAgeSeconds`` (one small query per shard of the sparse ``parked``
index: how long the oldest ``unknown`` operation has waited for an operator) and
``OldestDueAgeSeconds`` (how long the oldest due operation of any tenant and job type has waited
to be claimed: due work that no worker serves shows here; each run reads a bounded slice of the
tenants and resumes where the last one stopped, so every tenant is visited over successive runs:
:meth:`~leasefence.engine.Engine.oldest_due_age_ms`). Shadow tenants are in neither figure.
``SweptToUnknown`` and ``PayloadsPurged`` are counted by the engine; the answer reports this
run's counts.

:data:`FIRST_EVENT_IMPORTS`: what the first run imports (the engine and the payload store, boto3
with them); with SnapStart they are imported before the snapshot
(:func:`leasefence.snapstart.preload`), and the benchmark reports the import with and without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit

from leasefence.errors import Unavailable
from leasefence.metrics import Metric
from leasefence.observability import logger, metrics, tracer
from leasefence.settings import runtime
from leasefence.snapstart import preload

if TYPE_CHECKING:
    from leasefence.engine import Engine

FIRST_EVENT_IMPORTS = preload("leasefence.engine", "leasefence.payloads")
#: Stop starting new batches when less than this much of the invocation's time is left.
SAFETY_MARGIN_MS = 5_000


def sweep(
    engine: Engine, batch: int, max_batches: int, remaining_ms: Callable[[], int]
) -> dict[str, int | str]:
    """Run ``engine.sweep`` in bounded batches; ``remaining_ms()`` gives the time left."""
    totals = {"batches": 0, "examined": 0, "swept": 0, "repaired": 0, "approvals_expired": 0}
    stopped = "drained"
    while True:
        if totals["batches"] >= max_batches:
            stopped = "max_batches"
            break
        if remaining_ms() < SAFETY_MARGIN_MS:
            stopped = "time"
            break
        result = engine.sweep(limit=batch)
        totals["batches"] += 1
        totals["examined"] += result.examined
        totals["swept"] += result.swept
        totals["repaired"] += result.repaired
        totals["approvals_expired"] += result.approvals_expired
        if (
            result.examined < batch
            or result.swept + result.repaired + result.approvals_expired == 0
        ):
            break  # drained, or a full batch changed nothing (the next would read the same entries)
    return {**totals, "stopped": stopped}


def purge(
    engine: Engine, batch: int, max_batches: int, remaining_ms: Callable[[], int]
) -> dict[str, int | str]:
    """Run ``engine.purge_payloads`` in bounded batches, like :func:`sweep`. A payload store that
    is unreachable stops this run's purge (``stopped: unavailable``); the next run resumes it."""
    totals = {"purge_batches": 0, "payloads_purged": 0}
    stopped = "drained"
    while True:
        if totals["purge_batches"] >= max_batches:
            stopped = "max_batches"
            break
        if remaining_ms() < SAFETY_MARGIN_MS:
            stopped = "time"
            break
        try:
            result = engine.purge_payloads(limit=batch)
        except Unavailable:
            stopped = "unavailable"
            logger.warning("payload purge stopped: store unavailable; the next run resumes it")
            break
        totals["purge_batches"] += 1
        totals["payloads_purged"] += result.purged
        if result.examined < batch or result.purged == 0:
            break  # drained, or a full batch purged nothing (the next would read the same entries)
    return {**totals, "purge_stopped": stopped}


def clear_ttls(
    engine: Engine, batch: int, max_batches: int, remaining_ms: Callable[[], int]
) -> dict[str, int | str]:
    """Run ``engine.clear_ttls`` in bounded pages while a pass is under way, like :func:`purge`
    (nothing to do, and one read, when the identity retention is a window or the clearing is
    done). An unreachable store stops this run's clearing; the next run resumes it."""
    totals: dict[str, int | str] = {"ttl_pages": 0, "ttls_cleared": 0, "ttl_state": "window"}
    pages = cleared = 0
    while pages < max_batches and remaining_ms() >= SAFETY_MARGIN_MS:
        try:
            result = engine.clear_ttls(limit=batch)
        except Unavailable:
            logger.warning("TTL clearing stopped: store unavailable; the next run resumes it")
            break
        totals["ttl_state"] = result.state
        if not result.examined:
            break  # nothing to clear, or the pass is waiting, or done
        pages += 1
        cleared += result.cleared
        if result.state != "clearing":
            break
    totals.update(ttl_pages=pages, ttls_cleared=cleared)
    return totals


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    rt = runtime()
    rt.prepare()
    settings = rt.settings
    remaining = context.get_remaining_time_in_millis
    totals = sweep(
        rt.engine,
        batch=settings.sweep_batch,
        max_batches=settings.sweep_max_batches,
        remaining_ms=remaining,
    )
    totals.update(
        purge(
            rt.engine,
            batch=settings.sweep_batch,
            max_batches=settings.sweep_max_batches,
            remaining_ms=remaining,
        )
    )
    totals.update(
        clear_ttls(
            rt.engine,
            batch=settings.sweep_batch,
            max_batches=settings.sweep_max_batches,
            remaining_ms=remaining,
        )
    )
    oldest_s = rt.engine.oldest_parked_age_ms("unknown") // 1000
    metrics.add_metric(
        name=Metric.OLDEST_UNKNOWN_AGE_SECONDS, unit=MetricUnit.Seconds, value=oldest_s
    )
    totals["oldest_unknown_age_s"] = oldest_s
    oldest_due_s = rt.engine.oldest_due_age_ms() // 1000
    metrics.add_metric(
        name=Metric.OLDEST_DUE_AGE_SECONDS, unit=MetricUnit.Seconds, value=oldest_due_s
    )
    totals["oldest_due_age_s"] = oldest_due_s
    logger.info("sweep finished", extra=totals)
    return totals
