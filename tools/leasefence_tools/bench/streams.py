"""Push, not poll (issue 13): enqueue-to-handler-start latency through the table's stream next to
the polling path, and what the stream path costs per lifecycle.

* **Latency**: the local stack as ``leasefence local`` runs it (its event source mappings read
  the embedded table's stream; the worker function claims and runs each job). Each operation is
  enqueued over HTTP; the time from just before the request to the handler's first line is
  measured, one operation at a time with a random gap. The polling path is a worker polling the
  same stack (``Worker.run`` with the worker function's idle wait, 1 s): what a polling fleet
  gets. On AWS the function's schedule (``rate(1 minute)``) is the polling path: up to a minute
  (computed, not measured).
* **Cost per lifecycle** (enqueue, claim, complete; request units computed by the meter from the
  real requests, as in :mod:`leasefence_tools.bench.cost`): the lifecycle's own writes with the
  transition's name, actor and sequence number on the item; the history writes the publisher
  makes from its stream records; what the same history would cost inside each transition's write
  instead (a ``TransactWriteItems`` of the transition and a put of its entry: every write doubles,
  computed from the same items); events and invocations counted; dollars at AWS list prices.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from typing import Any

from leasefence.clock import ManualClock
from leasefence.worker import FunctionHandler, Job
from leasefence_tools.bench import prices
from leasefence_tools.bench import units as U
from leasefence_tools.bench.meter import Meter
from leasefence_tools.bench.quiet import functions_off_stdout

BENCH_TENANT, POLL_TENANT = "bench-stream", "bench-poll"
JOB_TYPE = "bench-job"
#: operation id -> when its handler started (time.time()).
_STARTED: dict[str, float] = {}
_started = threading.Condition()


def _record_start(job: Job) -> str:
    with _started:
        _STARTED[job.operation_id] = time.time()
        _started.notify_all()
    return "ok"


#: What the bench's stream worker runs (``worker_handlers="leasefence_tools.bench.streams:HANDLERS"``).
HANDLERS = {JOB_TYPE: FunctionHandler(_record_start)}


def _wait_started(op: str, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    with _started:
        while op not in _STARTED:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            _started.wait(left)
        return _STARTED[op]


def _percentiles(samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return {
        "runs": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(pick(0.99), 1),
        "max_ms": round(ordered[-1], 1),
        "mean_ms": round(statistics.fmean(ordered), 1),
    }


def _latencies(
    client: Any, runs: int, rng: random.Random, cycle_s: float, answered: list[float] | None = None
) -> list[float]:
    """Enqueue-to-handler-start of ``runs`` operations, one at a time (ms), each enqueued after a
    random pause of up to one poll cycle (``cycle_s``), so arrivals fall anywhere in the cycle;
    ``answered`` collects how long each enqueue request itself took."""
    samples = []
    for _ in range(runs):
        op = f"lat-{uuid.uuid4().hex[:12]}"
        time.sleep(rng.uniform(0.01, cycle_s))
        sent = time.time()
        client.enqueue(op, JOB_TYPE, {"n": 1})
        if answered is not None:
            answered.append((time.time() - sent) * 1000)
        started = _wait_started(op, timeout_s=30)
        if started is None:
            raise RuntimeError(f"the handler of {op} never started")
        samples.append((started - sent) * 1000)
    return samples


def latency(runs: int) -> dict[str, Any]:
    from leasefence.client import LeaseFenceClient
    from leasefence.settings import runtime
    from leasefence.worker import EngineBackend, Worker
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.server import LocalStack

    rng = random.Random(13)
    with (
        EmbeddedAws() as aws,
        LocalStack(
            port=0,
            aws=aws,
            sweep_interval=None,
            secret="bench-" + "s" * 32,
            streams=True,
            # Fresh lifecycles only: not the records the other sections left in the shared table.
            stream_starting_position="LATEST",
            worker_handlers="leasefence_tools.bench.streams:HANDLERS",
            worker_tenants=[BENCH_TENANT],
        ) as stack,
    ):
        stream_client = LeaseFenceClient(stack.base_url, stack.token(BENCH_TENANT), retries=1)
        cycle = stack.stream_poll_interval
        _latencies(stream_client, 2, rng, cycle)  # warm: the first invocations load the functions
        answered: list[float] = []
        stream = _latencies(stream_client, runs, rng, cycle, answered)

        poller = Worker(
            EngineBackend(runtime().engine, [POLL_TENANT]),
            HANDLERS,
            lease_ms=30_000,
            idle_sleep_ms=runtime().settings.worker_idle_ms,
        )
        thread = threading.Thread(target=poller.run, name="bench-poller", daemon=True)
        thread.start()
        try:
            poll_client = LeaseFenceClient(stack.base_url, stack.token(POLL_TENANT), retries=1)
            cycle = poller.idle_sleep_ms / 1000
            _latencies(poll_client, 1, rng, cycle)
            polled = _latencies(poll_client, runs, rng, cycle)
        finally:
            poller.stop()
            thread.join(timeout=10)
        worker_stats = stack.mappings["worker"].stats
        return {
            "stream": _percentiles(stream),
            "enqueue_request": _percentiles(answered),
            "polling_1s": _percentiles(polled),
            "schedule_rate_1_minute_computed": {"p50_ms": 30_000, "max_ms": 60_000},
            "stream_poll_interval_ms": round(stack.stream_poll_interval * 1000),
            "worker_mapping": {
                "records_read": worker_stats.records_read,
                "records_filtered_out": worker_stats.records_filtered_out,
                "invocations": worker_stats.invocations,
            },
        }


def cost(runs: int) -> dict[str, Any]:
    """Units per lifecycle of the lifecycle itself and of its history from the stream, and what
    the same history would cost inside each transition's write; events, stream records and
    invocations per lifecycle; dollars at :mod:`leasefence_tools.bench.prices`."""
    from leasefence import Engine
    from leasefence.schema import TableSpec, create_table
    from leasefence.store import from_item
    from leasefence.streams import events, filters
    from leasefence.streams.publisher import Publisher
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.streams import lambda_record

    published: list[dict[str, Any]] = []

    class Bus:  # stands in for EventBridge: counts what the publisher sends
        def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
            published.extend(Entries)
            return {"FailedEntryCount": 0, "Entries": [{"EventId": "x"} for _ in Entries]}

    with EmbeddedAws() as aws:
        raw = aws.client()
        spec = TableSpec(table_name="bench-streams")
        create_table(raw, spec, stream=True)
        meter = Meter(raw, units=True)
        clock = ManualClock()
        engine = Engine(
            client=meter.client(aws.client()), spec=spec, clock=clock, rng=random.Random(5)
        )
        engine.enqueue(
            "acme-corp", "warm", "refund", "sha256:" + "5" * 64
        )  # the directory entry, once
        streams = aws.client("dynamodbstreams")
        arn = raw.describe_table(TableName=spec.table_name)["Table"]["LatestStreamArn"]
        shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST"
        )["ShardIterator"]
        publisher = Publisher(engine.store, Bus, "bench-bus")
        to_worker, to_publisher = filters.dispatch_filters(), filters.publisher_filters()
        counts = {"records": 0, "worker": 0, "publisher": 0}

        def read() -> list[dict[str, Any]]:
            nonlocal iterator
            answer = streams.get_records(ShardIterator=iterator)
            iterator = answer["NextShardIterator"]
            # The publisher's own history writes are in the stream too; no function gets them.
            return [
                r
                for r in (lambda_record(r, arn) for r in answer["Records"])
                if r["dynamodb"]["Keys"]["operation_id"]["S"] == op
            ]

        for _ in range(runs):
            op = str(uuid.uuid4())
            with meter.phase("lifecycle"):
                engine.enqueue(
                    "acme-corp",
                    op,
                    "refund",
                    "sha256:" + "5" * 64,
                    payload_ref="s3://leasefence-payloads/payloads/" + "ab" * 16,
                    target_class="B",
                    actor="client-7",
                )
            got = read()
            (enqueued,) = [r for r in got if filters.passes(to_worker, r)]
            with meter.phase("lifecycle"):  # as stream dispatch does it: no read, one claim write
                item = from_item(enqueued["dynamodb"]["NewImage"])
                assert item is not None
                claim = engine.claim_seen(item, "worker-7f3a9c21", 30_000)
                assert claim is not None
                engine.complete("acme-corp", op, claim.fence, "refunded")
            clock.advance(1)
            for record in got + read():
                counts["records"] += 1
                counts["worker"] += filters.passes(to_worker, record)
                if filters.passes(to_publisher, record):
                    counts["publisher"] += 1
                    with meter.phase("history"):
                        publisher.handle(record)
    life, hist = meter.usage("lifecycle"), meter.usage("history")
    item_writes = life.wcu - life.wcu_index
    per = {
        "lifecycle_wcu": round(life.wcu / runs, 3),
        "lifecycle_rcu": round(life.rcu / runs, 3),
        "history_wcu": round(hist.wcu / runs, 3),
        "history_requests": round(hist.total_requests / runs, 3),
        "stream_path_wcu": round((life.wcu + hist.wcu) / runs, 3),
        # The same history written inside each transition: a TransactWriteItems of the transition
        # and its history write, every item write twice, the index writes twice (upper bound).
        "same_write_wcu": round(
            (2 * item_writes + U.TX_INDEX_MULTIPLIER * life.wcu_index + 2 * hist.wcu) / runs, 3
        ),
        "events": round(len(published) / runs, 3),
        "stream_records": round(counts["records"] / runs, 3),
        "worker_records": round(counts["worker"] / runs, 3),
        "publisher_records": round(counts["publisher"] / runs, 3),
    }
    assert {e["DetailType"] for e in published} <= events.ALL_DETAIL_TYPES
    usd = {
        "lifecycle": per["lifecycle_wcu"] * prices.usd("dynamodb_write_request_unit")
        + per["lifecycle_rcu"] * prices.usd("dynamodb_read_request_unit"),
        "history": per["history_wcu"] * prices.usd("dynamodb_write_request_unit"),
        "history_in_the_same_write": (per["same_write_wcu"] - per["lifecycle_wcu"])
        * prices.usd("dynamodb_write_request_unit"),
        "events": per["events"] * prices.usd("eventbridge_custom_event"),
        "stream_reads": per["stream_records"] * prices.usd("dynamodb_streams_read_by_lambda"),
        # An upper bound: one invocation per record that passes a filter (batches share one).
        "invocations_at_most": (per["worker_records"] + per["publisher_records"])
        * prices.usd("lambda_request"),
    }
    return {
        "runs": runs,
        "per_lifecycle": per,
        "usd_per_million_lifecycles": {k: round(v * 1e6, 3) for k, v in usd.items()},
        "prices_read_on": prices.READ_ON,
    }


def measure(runs: int = 40, cost_runs: int = 5) -> dict[str, Any]:
    """Both, with the functions' logs and metrics kept off stdout (``leasefence bench --json``
    prints its report there)."""
    with functions_off_stdout():
        return {"latency": latency(runs), "cost": cost(cost_runs)}
