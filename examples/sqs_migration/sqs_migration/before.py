"""Before: the consumer made idempotent with Powertools (the shape of Powertools' example
``integrate_idempotency_with_batch_processor``). The idempotency record is keyed by the message
id: a redelivery within the hour is skipped, but a producer's second send of the same refund has
a new message id and runs again, and a run that stalled past its in-progress expiry runs again
beside the stalled one, whose call is not fenced."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from sqs_migration.payments import payments

processor = BatchProcessor(event_type=EventType.SQS)
dynamodb = DynamoDBPersistenceLayer(table_name=os.environ["IDEMPOTENCY_TABLE"])
config = IdempotencyConfig(event_key_jmespath="messageId")


@idempotent_function(data_keyword_argument="record", config=config, persistence_store=dynamodb)
def record_handler(record: SQSRecord) -> str:
    refund = record.json_body
    request = {"refund": refund["refund_id"], "cents": refund["cents"]}
    result = payments.execute(refund["refund_id"], request)
    return f"refunded:{result['id']}"


def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    config.register_lambda_context(context)
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
