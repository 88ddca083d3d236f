"""The local stack reads the table's stream once, as the construct does by default (issue 33):
one mapping, the worker function's, which dispatches and publishes; and the ``invoke`` dispatch
mode, whose claims run in asynchronous invocations of the worker function."""

from __future__ import annotations

import time
import uuid

from tests.support import stream_jobs

from leasefence.client import LeaseFenceClient
from leasefence_tools.local.events import Subscription
from leasefence_tools.local.server import LocalStack
from leasefence.streams.events import subscription_pattern

TENANT = "handoff"


def test_one_reader_and_the_invoke_mode_run_a_job_and_publish_its_outcome(aws):
    with LocalStack(
        host="127.0.0.1",
        port=0,
        aws=aws,
        table_name="handoff-ops",
        bucket="handoff-payloads",
        sweep_interval=None,  # no drain: what runs was dispatched by the stream
        quiet=True,
        streams=True,
        worker_handlers="tests.support.stream_jobs:HANDLERS",
        worker_tenants=(TENANT,),
        worker_lease_seconds=5,
        worker_dispatch="invoke",
        stream_starting_position="LATEST",
    ) as stack:
        assert list(stack.mappings) == ["worker"]  # one reader: the worker also publishes
        assert stack.mappings["worker"].config.failure_destination == "s3"
        assert stack.failure_queues == {} and "publisher" in stack.failure_buckets
        client = LeaseFenceClient(stack.base_url, stack.token(TENANT))
        op = f"handed-{uuid.uuid4().hex[:8]}"
        with Subscription(
            stack.aws.client, subscription_pattern(TENANT), bus=stack.event_bus
        ) as events:
            client.enqueue(op, "stream-quick", {})
            deadline = time.monotonic() + 15
            while client.get(op).state != "succeeded":
                assert time.monotonic() < deadline, "the handed-off job never finished"
                time.sleep(0.05)
            received = []
            while not received and time.monotonic() < deadline:
                received = events.receive(wait_s=0.5)
        assert [e["detail-type"] for e in received] == ["Operation Succeeded"]
        assert received[0]["detail"]["operation_id"] == op
        # Run by an asynchronous invocation, not inside the stream batch.
        assert stack.async_lambda.accepted == 1 and stack.async_lambda.errors == []
        assert len(stream_jobs.STARTED[(TENANT, op)]) == 1
        assert stack.mappings["worker"].stats.records_to_destination == 0
