"""The publisher function: the table's stream becomes each operation's history and outcome events.

Triggered by an event source mapping on the operations table's stream, filtered to transitions
and deletions (:func:`leasefence.streams.filters.publisher_filters`). Each record is written to
the operation's history (idempotent: a record delivered again changes nothing) and, for the
transitions an upstream service cares about, published to the EventBridge bus named in
``LEASEFENCE_EVENT_BUS`` (:mod:`leasefence.streams.events`; unset: history only). The batch is
processed in stream order and stops at the first record that fails: that record and every later
one are reported in the partial batch response (Powertools batch utility), so the mapping
delivers them again from the failed one and an operation's history and events never skip ahead
of it. What still fails after the mapping's retries goes whole to its on-failure destination (an
S3 bucket: ``leasefence publisher redrive`` replays it). See :mod:`leasefence.streams.publisher`.

:data:`FIRST_EVENT_IMPORTS`: what the first batch imports (the engine's store, boto3 with it, the
publisher and Powertools' batch utility); with SnapStart they are imported before the snapshot
(:func:`leasefence.snapstart.preload`), and the benchmark reports the import with and without them.
"""

from __future__ import annotations

from leasefence.observability import logger, metrics, record_event, tracer
from leasefence.settings import runtime
from leasefence.snapstart import preload
from leasefence.streams.batch import process_records

FIRST_EVENT_IMPORTS = preload(
    "leasefence.engine",
    "leasefence.payloads",
    "leasefence.streams.publisher",
    "aws_lambda_powertools.utilities.batch",
)

_built: tuple[object, object] | None = None  # (runtime, publisher)


def _publisher():
    global _built
    rt = runtime()
    if _built is None or _built[0] is not rt:
        from leasefence.streams.publisher import Publisher

        rt.prepare()
        _built = (
            rt,
            Publisher(
                rt.engine.store,
                lambda: rt.client("events"),
                rt.settings.event_bus,
                count=record_event,
            ),
        )
    return _built[1]


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    return process_records(event, context, _publisher().handle, ordered=True)
