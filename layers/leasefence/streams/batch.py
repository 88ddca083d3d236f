"""One batch of stream records through Powertools' batch utility, for the worker and publisher
functions: each record is handled on its own, a record that fails is reported by its sequence
number (a partial batch response: the mapping retries from there, then sends it to its
on-failure destination), and the batch's outcomes are counted and logged. The batch utility is
imported on the first batch, not with the function (its first event pays for it, or the
SnapStart snapshot: see each handler's ``FIRST_EVENT_IMPORTS``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasefence.observability import logger

_processor: Any = None  # built on the first batch; its state is reset per batch


def stream_processor() -> Any:
    """The batch processor of DynamoDB stream events (one per process)."""
    global _processor
    if _processor is None:
        from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

        _processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
    return _processor


def process_records(
    event: dict[str, Any],
    context: Any,
    handle: Callable[[dict[str, Any]], str],
    then: Callable[[], None] | None = None,
) -> Any:
    """Run ``handle`` on each record's raw event (it returns the outcome's name, counted); then
    ``then`` (even when every record failed), and log the batch. Returns the partial batch
    response (``batchItemFailures``)."""
    from aws_lambda_powertools.utilities.batch import process_partial_response

    outcomes: dict[str, int] = {}

    def record_handler(record: Any) -> None:
        outcome = handle(record.raw_event)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        return process_partial_response(
            event=event,
            record_handler=record_handler,
            processor=stream_processor(),
            context=context,
        )
    finally:
        if then is not None:
            then()
        logger.info(
            "stream batch finished", extra={"records": len(event.get("Records") or []), **outcomes}
        )
