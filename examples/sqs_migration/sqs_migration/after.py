"""After: the same consumer, fenced by leasefence. Against ``before`` the diff is the backend in
place of the persistence store, the config line, the decorator (with the lookup that reconciles
a takeover), and the ``job`` the handler passes to the class-C helper; ``register_lambda_context``
goes. Each refund request is one operation (its id, not the message's), claimed under a lease
with a fence; see ``leasefence.worker.fenced`` for what SQS is told."""

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
from aws_lambda_powertools.utilities.typing import LambdaContext

from leasefence.client import LeaseFenceClient
from leasefence.targets import idempotent_api
from leasefence.worker import Job, Reconciled
from leasefence.worker.fenced import FenceConfig, fenced
from leasefence.worker.http_backend import HttpBackend
from sqs_migration.payments import payments

processor = BatchProcessor(event_type=EventType.SQS)
# A token with the produce and work scopes, for the tenant it names (in AWS: from a secret).
leasefence = HttpBackend(
    LeaseFenceClient(os.environ["LEASEFENCE_API_URL"], os.environ["LEASEFENCE_TOKEN"]),
    tenant_id=os.environ["LEASEFENCE_TENANT"],
)
config = FenceConfig(job_type="refund", operation_id="powertools_json(body).refund_id")


def refunded(job: Job) -> Reconciled:  # a previous holder may have called: look the key up
    return idempotent_api.reconcile(job, payments, lambda result: f"refunded:{result['id']}")


@fenced(leasefence, config, reconcile=refunded)
def record_handler(record: SQSRecord, job: Job) -> str:
    refund = record.json_body
    request = {"refund": refund["refund_id"], "cents": refund["cents"]}
    result = idempotent_api.call(job, payments, request)  # the key: tenant + operation id
    return f"refunded:{result['id']}"


def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
