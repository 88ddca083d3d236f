"""The sweeper function (EventBridge schedule): parks expired final-attempt claims as ``unknown``.

Each ``Engine.sweep`` call examines at most ``LEASEFENCE_SWEEP_BATCH`` due entries; the function
repeats it while a batch came back full, at most ``LEASEFENCE_SWEEP_MAX_BATCHES`` times, and stops
early when less than a safety margin of the invocation's time is left. Every park is a fenced
conditional write, so overlapping runs (a slow run and the next tick) cannot both act.

After sweeping it publishes ``OldestUnknownAgeSeconds``: one ``Limit=1`` query per shard of the
sparse ``parked`` index finds how long the oldest ``unknown`` operation has waited for an
operator. ``SweptToUnknown`` is counted by the engine; the answer reports this run's counts.
"""

from aws_lambda_powertools.metrics import MetricUnit

from leasefence.observability import logger, metrics, tracer
from leasefence.settings import runtime

#: Stop starting new batches when less than this much of the invocation's time is left.
SAFETY_MARGIN_MS = 5_000


def sweep(engine, batch, max_batches, remaining_ms):
    """Run ``engine.sweep`` in bounded batches; ``remaining_ms()`` gives the time left."""
    totals = {"batches": 0, "examined": 0, "swept": 0, "repaired": 0, "stopped": "drained"}
    while True:
        if totals["batches"] >= max_batches:
            totals["stopped"] = "max_batches"
            break
        if remaining_ms() < SAFETY_MARGIN_MS:
            totals["stopped"] = "time"
            break
        result = engine.sweep(limit=batch)
        totals["batches"] += 1
        totals["examined"] += result.examined
        totals["swept"] += result.swept
        totals["repaired"] += result.repaired
        if result.examined < batch or result.swept + result.repaired == 0:
            break  # drained, or a full batch changed nothing (the next would read the same entries)
    return totals


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    rt = runtime()
    rt.prepare()
    totals = sweep(
        rt.engine,
        batch=rt.settings.sweep_batch,
        max_batches=rt.settings.sweep_max_batches,
        remaining_ms=context.get_remaining_time_in_millis,
    )
    oldest_s = rt.engine.oldest_parked_age_ms("unknown") // 1000
    metrics.add_metric(name="OldestUnknownAgeSeconds", unit=MetricUnit.Seconds, value=oldest_s)
    totals["oldest_unknown_age_s"] = oldest_s
    logger.info("sweep finished", extra=totals)
    return totals
