"""examples/sqs_migration: the Powertools consumer after its move to ``fenced``, run by its own
``lambda_handler`` over the local stack's HTTP API; the handler's signature is the one ``before``
gives BatchProcessor."""

from __future__ import annotations

import importlib
import inspect
import uuid
from types import ModuleType, SimpleNamespace

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from leasefence_tools.local.tokens import ALL_SCOPES
from tests.support.api import new_tenant
from tests.support.examples import example_on_path, point_boto3_at
from tests.support.sqs import failures, sqs_record

example_on_path("sqs_migration")


@pytest.fixture(scope="module")
def after(stack) -> ModuleType:
    """``sqs_migration.after`` imported as Lambda would, with its environment set."""
    tenant = new_tenant()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LEASEFENCE_API_URL", stack.base_url)
        env.setenv("LEASEFENCE_TOKEN", stack.token(tenant, ALL_SCOPES))
        env.setenv("LEASEFENCE_TENANT", tenant)
        yield importlib.import_module("sqs_migration.after")


def test_a_batch_answers_as_powertools_reports_it(after):
    payments = after.payments
    calls = payments.calls
    refund = {"refund_id": "refund-1", "cents": 1250}
    first, resent = sqs_record(refund), sqs_record(refund)  # the producer sent it twice
    poison = sqs_record({"refund_id": "refund-1", "cents": 99_999})
    other = sqs_record({"refund_id": "refund-2", "cents": 300})
    response = after.lambda_handler({"Records": [first, resent, poison, other]}, None)
    assert failures(response) == [poison["messageId"]]  # to the DLQ after maxReceiveCount
    assert payments.calls - calls == 2  # refund-1 once, refund-2 once
    client = after.leasefence.client
    assert client.get("refund-1").outcome_code.startswith("refunded:effect-")
    # The poison message again, alone in its batch: Powertools fails the whole invocation (its
    # raise_on_entire_batch_failure), so SQS keeps it; still not run.
    with pytest.raises(BatchProcessingError, match="All records failed"):
        after.lambda_handler({"Records": [poison]}, None)
    assert payments.calls - calls == 2


@pytest.fixture(scope="module")
def before(aws) -> ModuleType:
    """``sqs_migration.before`` with its idempotency table on the embedded DynamoDB."""
    table = f"idempotency-{uuid.uuid4().hex[:8]}"
    aws.client().create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("IDEMPOTENCY_TABLE", table)
        point_boto3_at(aws, env)
        yield importlib.import_module("sqs_migration.before")


def test_a_resent_refund_runs_twice_before_and_once_after(before, after):
    calls = after.payments.calls  # one provider stand-in for both
    refund = {"refund_id": "refund-resent", "cents": 500}
    first, resent = sqs_record(refund), sqs_record(refund)  # two message ids, one refund
    context = SimpleNamespace(get_remaining_time_in_millis=lambda: 30_000)  # Lambda's context
    assert failures(before.lambda_handler({"Records": [first, resent]}, context)) == []
    assert after.payments.calls - calls == 2  # keyed by messageId: both ran
    refund = {"refund_id": "refund-resent-2", "cents": 500}
    first, resent = sqs_record(refund), sqs_record(refund)
    assert failures(after.lambda_handler({"Records": [first, resent]}, None)) == []
    assert after.payments.calls - calls == 3  # keyed by the refund: once


def test_the_handler_keeps_the_signature_batch_processor_inspects(after, before):
    assert after.record_handler.__name__ == before.record_handler.__name__
    assert list(inspect.signature(after.record_handler).parameters) == ["record"]
    assert list(inspect.signature(before.record_handler).parameters) == ["record"]
