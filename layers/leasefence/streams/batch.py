"""One batch of stream records through Powertools' batch utility, for the worker and publisher
functions: each record is handled on its own, a record that fails is reported by its sequence
number (a partial batch response: the mapping retries from there, then sends it to its
on-failure destination), and the batch's outcomes are counted and logged. The batch utility is
imported on the first batch, not with the function (its first event pays for it, or the
SnapStart snapshot: see each handler's ``FIRST_EVENT_IMPORTS``).

``ordered`` (the publisher): the batch stops at the first record that fails, and that record and
every one after it are reported (:func:`ordered_stream_processor`), so the mapping delivers them
again from the failed one, in stream order. Powertools' ``BatchProcessor`` runs every record of a
stream batch whatever failed before it (only its SQS FIFO processor stops at the first failure),
so the records after a failed one would be handled before it: its history entry and event late,
after later ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasefence.observability import logger

_processor: Any = None  # built on the first batch; its state is reset per batch
_ordered_processor: Any = None


class EarlierRecordFailed(Exception):
    """Not handled: a record before it in the batch failed (it is delivered again after it)."""


def stream_processor() -> Any:
    """The batch processor of DynamoDB stream events (one per process)."""
    global _processor
    if _processor is None:
        from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

        _processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
    return _processor


def ordered_stream_processor() -> Any:
    """The batch processor of DynamoDB stream events that stops at the first failed record
    (one per process): the failed record and every later one are reported in
    ``batchItemFailures`` without being handled."""
    global _ordered_processor
    if _ordered_processor is None:
        from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType

        class OrderedBatchProcessor(BatchProcessor):
            skipped = (
                EarlierRecordFailed,
                EarlierRecordFailed("an earlier record of the batch failed"),
                None,
            )

            def _process_record(self, record: dict[str, Any]) -> Any:
                if self.fail_messages:  # a record before this one failed: stop here
                    return self.failure_handler(
                        record=self._to_batch_type(record, event_type=self.event_type),
                        exception=self.skipped,
                    )
                return super()._process_record(record)

        _ordered_processor = OrderedBatchProcessor(event_type=EventType.DynamoDBStreams)
    return _ordered_processor


def process_records(
    event: dict[str, Any],
    context: Any,
    handle: Callable[[dict[str, Any]], str],
    then: Callable[[], None] | None = None,
    ordered: bool = False,
) -> Any:
    """Run ``handle`` on each record's raw event (it returns the outcome's name, counted); then
    ``then`` (even when every record failed), and log the batch. Returns the partial batch
    response (``batchItemFailures``). ``ordered``: stop at the first record that fails (it and
    every later record are reported)."""
    from aws_lambda_powertools.utilities.batch import process_partial_response

    outcomes: dict[str, int] = {}

    def record_handler(record: Any) -> None:
        outcome = handle(record.raw_event)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    try:
        return process_partial_response(
            event=event,
            record_handler=record_handler,
            processor=ordered_stream_processor() if ordered else stream_processor(),
            context=context,
        )
    finally:
        if then is not None:
            then()
        logger.info(
            "stream batch finished", extra={"records": len(event.get("Records") or []), **outcomes}
        )
