"""SQS events as Lambda delivers them, and Powertools' partial batch response over them: for the
``fenced`` decorator's tests and the examples'."""

from __future__ import annotations

import json
import uuid
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.batch import process_partial_response as powertools_response


def sqs_record(body: Any, message_id: str | None = None, receive_count: int = 1) -> dict[str, Any]:
    """One SQS record whose body is ``body`` as JSON."""
    return {
        "messageId": message_id or str(uuid.uuid4()),
        "receiptHandle": "handle",
        "body": json.dumps(body),
        "attributes": {"ApproximateReceiveCount": str(receive_count)},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:refunds",
        "awsRegion": "eu-west-1",
    }


def failures(response: dict[str, Any]) -> list[str]:
    """The message ids a partial batch response reports as failed (SQS keeps those)."""
    return [failure["itemIdentifier"] for failure in response["batchItemFailures"]]


def process(records: list[dict[str, Any]], handler: Any, context: Any = None) -> list[str]:
    """The message ids Powertools' ``BatchProcessor`` reports as batch item failures."""
    response = powertools_response(
        event={"Records": records},
        record_handler=handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=context,
    )
    return failures(response)
