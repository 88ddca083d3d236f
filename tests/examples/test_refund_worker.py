"""examples/refund_worker: its class-B handlers run by a worker over the local stack's HTTP API,
the refunds table on the embedded DynamoDB; a worker that stalls past its lease is refused by the
table after another took the refund over."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from leasefence.client import LeaseFenceClient
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import FunctionHandler, Job, Worker
from leasefence.worker.http_backend import HttpBackend
from leasefence_tools.local.tokens import ALL_SCOPES
from tests.support.api import new_tenant
from tests.support.examples import example_on_path, point_boto3_at

example_on_path("refund_worker")
from refund_worker import jobs  # noqa: E402

LEASE_MS = 1_000


@pytest.fixture
def refunds(aws, monkeypatch) -> Iterator[FencedTable]:
    """The example's refunds table (keyed by ``account``) on the embedded DynamoDB, as the example
    reaches it: named by ``REFUNDS_TABLE``, the client from the environment."""
    name = f"refunds-{uuid.uuid4().hex[:8]}"
    aws.client().create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "account", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "account", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    monkeypatch.setenv(jobs.TABLE_ENV, name)
    point_boto3_at(aws, monkeypatch)
    jobs.refunds.cache_clear()
    yield jobs.refunds()
    jobs.refunds.cache_clear()


@pytest.fixture
def producer_and_backend(stack) -> tuple[LeaseFenceClient, HttpBackend]:
    """A tenant of the test's own: the producer's client, and the workers' backend over it."""
    tenant = new_tenant()
    client = LeaseFenceClient(stack.base_url, stack.token(tenant, ALL_SCOPES), retries=2)
    return client, HttpBackend(client, tenant)


def test_the_worker_refunds_each_request_once(refunds, producer_and_backend):
    producer, backend = producer_and_backend
    producer.enqueue("refund-1", "refund", {"account": "acct-1", "cents": 1250}, target_class="B")
    producer.enqueue("refund-2", "refund", {"account": "acct-1", "cents": 300}, target_class="B")
    producer.enqueue("refund-1", "refund", {"account": "acct-1", "cents": 1250}, target_class="B")
    worker = Worker(backend, jobs.HANDLERS, lease_ms=60_000)
    while worker.run_once():
        pass
    item = refunds.read({"account": "acct-1"})
    assert sorted(entry["refund"] for entry in item["refunds"]) == ["refund-1", "refund-2"]
    assert producer.get("refund-1").outcome_code == "refunded"


def test_a_stalled_worker_is_refused_by_the_refunds_table(refunds, producer_and_backend):
    producer, backend = producer_and_backend
    producer.enqueue("refund-9", "refund", {"account": "acct-9", "cents": 700}, target_class="B")
    stalled, wake = threading.Event(), threading.Event()

    def stall_then_refund(job: Job) -> str:
        if job.fence == 1:  # the first holder stalls past its lease before its write
            stalled.set()
            wake.wait(10)
        return jobs.refund(job)

    handlers = {"refund": FunctionHandler(stall_then_refund, jobs.reconcile, jobs.raise_fence)}
    zombie = Worker(backend, handlers, lease_ms=LEASE_MS)
    first = threading.Thread(target=zombie.run_once)
    first.start()
    assert stalled.wait(10)
    rescuer = Worker(backend, handlers, lease_ms=60_000)
    while not rescuer.run_once():  # claimable once the first lease lapsed (about a second)
        threading.Event().wait(0.1)
    wake.set()
    first.join(10)
    entries = refunds.read({"account": "acct-9"})["refunds"]
    assert [entry["refund"] for entry in entries] == ["refund-9"]  # one refund: fence 2's
    assert producer.get("refund-9").fence == 2
    assert producer.get("refund-9").state == "succeeded"
