"""What one lifecycle uses, all in, for each way of running the work (issue 16): measured on the
local stack (the real handlers, the HTTP API, the table's stream and its two functions).

Profiles (each enqueues over the HTTP API with an inline payload of :data:`PAYLOAD`):

* ``http_workers``: a worker outside AWS claims over the API (``Worker`` + ``HttpBackend``):
  claim, payload, complete: four API requests in all;
* ``worker_function``: the worker function claims from the stream record and runs the job;
* ``worker_function_polled``: the worker function's schedule instead (its stream mapping off):
  all the profile's operations are queued, then one drain takes them (a schedule tick that finds
  that many jobs waiting);
* ``class_a``: as ``worker_function``, the job completing with a business write in the same
  transaction (``Job.complete_with``).

For each: DynamoDB request units (computed by :class:`~leasefence_tools.bench.meter.Meter` from the
real requests and items, as in :mod:`~leasefence_tools.bench.cost`), API requests, invocations and
handler wall time of every function (the API, worker and publisher functions: ``lambda_handler``
timed in-process with ``time.perf_counter``, rounded up to the millisecond per invocation as
Lambda bills), S3 requests and EventBridge entries counted on the clients the handlers use, and
the bytes each operation leaves stored (its item and its history item, each with DynamoDB's 100
bytes of overhead; the payload object). Operations run one at a time, each followed to the end
of its history, so the figures are per lifecycle and the meter's item images are exact. Each
profile runs twice: once for the request units (the meter reads every written item before and
after the write, on the handlers' time), once with the plain client for times and counts.

Handler times are warm invocations against the embedded endpoint in this process (no network,
moto's own CPU time included; cold starts are measured in :mod:`~leasefence_tools.bench.coldstart`).
Invocation counts are upper bounds: one operation at a time gets one stream batch per record,
where a busy stream shares a batch (up to 10 records) between operations.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from leasefence.worker import FunctionHandler, Job
from leasefence_tools.bench import units as U
from leasefence_tools.bench.meter import Meter

HTTP_TENANT, STREAM_TENANT, POLL_TENANT, CLASS_A_TENANT = (
    "profile-http",
    "profile-stream",
    "profile-poll",
    "profile-class-a",
)
JOB_B, JOB_A = "profile-refund", "profile-refund-a"
LEDGER = "bench-profiles-ledger"
#: The job's input: about 1 KB of canonical JSON.
PAYLOAD = {
    "order_id": "ord-" + "7" * 12,
    "amount_cents": 12999,
    "currency": "EUR",
    "note": "n" * 900,
}
#: Memory of each function: the construct's defaults (infra/leasefence_infra/props.py
#: ``api_memory_mb``, worker_props.py ``memory_mb``, publisher.py ``PUBLISHER_MEMORY_MB``).
MEMORY_MB = {"api": 1024, "worker": 512, "publisher": 256}
#: DynamoDB's storage overhead per item (bytes).
ITEM_OVERHEAD = 100
PROFILES = ("http_workers", "worker_function", "worker_function_polled", "class_a")


def _refund(job: Job) -> str:
    if not job.payload:  # the job reads its input (through the backend: an S3 GET)
        raise ValueError("no payload")
    return "refunded"


def _refund_class_a(job: Job) -> None:
    if not job.payload:
        raise ValueError("no payload")
    job.complete_with(
        "refunded",
        [
            {
                "Put": {
                    "TableName": LEDGER,
                    "Item": {
                        "pk": {"S": f"refund#{job.tenant_id}#{job.operation_id}"},
                        "amount_cents": {"N": "12999"},
                        "fence": {"N": str(job.fence)},
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        ],
    )


#: What the profiles' worker function runs (``leasefence_tools.bench.profiles:HANDLERS``).
HANDLERS = {JOB_B: FunctionHandler(_refund), JOB_A: FunctionHandler(_refund_class_a)}


class _Switch:
    """A client whose target can change between passes (the engine keeps the client it got)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class _Counting:
    """A boto3 client that counts its calls (``s3.put_object``...) and EventBridge entries."""

    def __init__(self, inner: Any, service: str, counts: Counter[str]) -> None:
        self._inner, self._service, self._counts = inner, service, counts

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counts[f"{self._service}.{name}"] += 1
            if name == "put_events":
                self._counts["events.entries"] += len(kwargs.get("Entries", ()))
            return target(*args, **kwargs)

        return call


class _Invocations:
    """Times every invocation of the functions' ``lambda_handler`` (billed: whole ms, rounded
    up) and knows how many are running."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.billed_ms: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.running = 0
        self._lock = threading.Lock()
        self._originals: dict[str, Callable[..., Any]] = {}

    def clear(self) -> None:
        with self._lock:
            self.billed_ms.clear()
            self.calls.clear()

    def _timing(self, name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def timed(event: Any, context: Any) -> Any:
            with self._lock:
                self.running += 1
            started = time.perf_counter()
            try:
                return handler(event, context)
            finally:
                ms = math.ceil((time.perf_counter() - started) * 1000)
                with self._lock:
                    self.billed_ms[name] += ms
                    self.calls[name] += 1
                    self.running -= 1

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Invocations]:
        from leasefence_tools.local.server import load_function

        modules: dict[str, Any] = {name: load_function(name) for name in self.names}
        originals = {name: module.lambda_handler for name, module in modules.items()}
        for name, handler in originals.items():
            modules[name].lambda_handler = self._timing(name, handler)
        try:
            yield self
        finally:
            for name, handler in originals.items():
                modules[name].lambda_handler = handler


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def measure(runs: int = 10) -> dict[str, Any]:
    """Every profile, ``runs`` lifecycles each (figures per lifecycle), with the functions' logs
    and metrics kept off stdout (``leasefence bench --json`` prints its report there)."""
    import sys

    from leasefence.observability import logger

    level = logger.log_level
    logger.setLevel("WARNING")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the metrics' EMF lines
            return _measure(runs)
    finally:
        logger.setLevel(level)


def _measure(runs: int) -> dict[str, Any]:
    from leasefence import keys
    from leasefence.client import LeaseFenceClient
    from leasefence.payloads import canonicalize
    from leasefence.settings import runtime
    from leasefence.worker import Worker
    from leasefence.worker.http_backend import HttpBackend
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.server import Invoker, LocalStack, scheduled_event

    counts: Counter[str] = Counter()
    out: dict[str, Any] = {
        "runs": runs,
        "payload_bytes": len(canonicalize(PAYLOAD).body),
        "memory_mb": MEMORY_MB,
        "profiles": {},
    }
    invocations = _Invocations(tuple(MEMORY_MB))
    with (
        EmbeddedAws() as aws,
        invocations.installed(),
        LocalStack(
            port=0,
            aws=aws,
            sweep_interval=None,
            secret="bench-" + "p" * 32,
            streams=True,
            # Fresh lifecycles only: not the records the other sections left in the shared table.
            stream_starting_position="LATEST",
            worker_handlers="leasefence_tools.bench.profiles:HANDLERS",
            worker_tenants=[STREAM_TENANT, CLASS_A_TENANT, POLL_TENANT],
        ) as stack,
    ):
        raw = aws.client("dynamodb")
        raw.create_table(
            TableName=LEDGER,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        table = stack.table_name
        rt = runtime()
        meter = Meter(raw, units=True, keep_calls=False)
        plain = rt.client("dynamodb")
        metered = meter.client(plain)
        dynamodb = _Switch(metered)
        rt.install_client("dynamodb", dynamodb)
        rt.install_client("s3", _Counting(rt.client("s3"), "s3", counts))
        rt.install_client("events", _Counting(rt.client("events"), "events", counts))

        def item(tenant: str, sort_key: str) -> dict[str, Any] | None:
            return raw.get_item(
                TableName=table,
                Key={"tenant_id": {"S": tenant}, "operation_id": {"S": sort_key}},
                ConsistentRead=True,
            ).get("Item")

        def ended(tenant: str, op: str) -> bool:
            found = item(tenant, op)
            return found is not None and found["state"]["S"] == "succeeded"

        def history_done(tenant: str, op: str) -> bool:
            op_item, hist = item(tenant, op), item(tenant, keys.history_id(op))
            return (
                op_item is not None
                and hist is not None
                and hist.get("last_seq", {}).get("N") == op_item.get("seq", {}).get("N")
                and "expires_at_epoch_s" in hist
            )

        def settle(tenant: str, op: str) -> None:
            """Until the operation's history is written and the functions are quiet: nothing
            running and no new stream record for three poll cycles."""
            _wait(partial(history_done, tenant, op), f"the history of {op}")
            deadline, quiet = time.monotonic() + 30, 0
            while quiet < 3:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the stream functions never went quiet after {op}")
                seen = sum(m.stats.records_read for m in stack.mappings.values())
                time.sleep(stack.stream_poll_interval)
                now = sum(m.stats.records_read for m in stack.mappings.values())
                quiet = quiet + 1 if invocations.running == 0 and now == seen else 0

        def stored_bytes(tenant: str, op: str) -> int:
            return sum(
                U.item_size(found) + ITEM_OVERHEAD
                for found in (item(tenant, op), item(tenant, keys.history_id(op)))
                if found
            )

        def client(tenant: str) -> LeaseFenceClient:
            return LeaseFenceClient(stack.base_url, stack.token(tenant), retries=1)

        def profile(name: str, tenant: str, lifecycles: Callable[[list[str]], None]) -> None:
            # One operation first, outside the figures: a tenant's first enqueue of a job type
            # also files it in the tenant's directory (once), and the code paths warm up. Then
            # two passes: units (the meter reads each written item before and after, on the
            # handlers' time), then times and counts with the plain client.
            dynamodb.target = plain
            lifecycles([f"{name}-warm-{uuid.uuid4().hex[:8]}"])
            meter.reset()
            dynamodb.target = metered
            lifecycles([f"{name}-{uuid.uuid4().hex[:12]}" for _ in range(runs)])
            usage = meter.usage("other")
            dynamodb.target = plain
            ops = [f"{name}-{uuid.uuid4().hex[:12]}" for _ in range(runs)]
            counts.clear()
            invocations.clear()
            lifecycles(ops)
            calls, billed_ms = invocations.calls, invocations.billed_ms
            out["profiles"][name] = {
                "wcu": round(usage.wcu / runs, 3),
                "rcu": round(usage.rcu / runs, 3),
                "dynamodb_requests": round(usage.total_requests / runs, 3),
                "api_requests": round(calls["api"] / runs, 3),
                "invocations": {f: round(calls[f] / runs, 3) for f in MEMORY_MB},
                "billed_ms": {f: round(billed_ms[f] / runs, 1) for f in MEMORY_MB},
                "s3_put": round(counts["s3.put_object"] / runs, 3),
                "s3_get": round(counts["s3.get_object"] / runs, 3),
                "events": round(counts["events.entries"] / runs, 3),
                "stored_item_bytes": max(stored_bytes(tenant, op) for op in ops),
                "payload_object_bytes": out["payload_bytes"],
            }

        http = client(HTTP_TENANT)
        http_worker = Worker(
            HttpBackend(http, HTTP_TENANT), {JOB_B: HANDLERS[JOB_B]}, lease_ms=30_000
        )

        def via_http(ops: list[str]) -> None:
            for op in ops:
                http.enqueue(op, JOB_B, PAYLOAD)
                if not http_worker.run_once():
                    raise RuntimeError(f"the HTTP worker found nothing to claim for {op}")
                _wait(partial(ended, HTTP_TENANT, op), f"{op} to end")
                settle(HTTP_TENANT, op)

        def via_stream(tenant: str, job_type: str, target_class: str | None) -> Any:
            def run(ops: list[str]) -> None:
                api = client(tenant)
                for op in ops:
                    api.enqueue(op, job_type, PAYLOAD, target_class=target_class)
                    _wait(partial(ended, tenant, op), f"{op} to end")
                    settle(tenant, op)

            return run

        def via_schedule(ops: list[str]) -> None:
            if "worker" in stack.mappings:  # the schedule alone (the publisher keeps running)
                stack.mappings.pop("worker").stop()
            api = client(POLL_TENANT)
            for op in ops:
                api.enqueue(op, JOB_B, PAYLOAD)
            Invoker().invoke("worker", scheduled_event(), timeout_ms=300_000)
            for op in ops:
                if not ended(POLL_TENANT, op):
                    raise RuntimeError(f"the drain left {op} unfinished")
                settle(POLL_TENANT, op)

        profile("http_workers", HTTP_TENANT, via_http)
        profile("worker_function", STREAM_TENANT, via_stream(STREAM_TENANT, JOB_B, None))
        profile("class_a", CLASS_A_TENANT, via_stream(CLASS_A_TENANT, JOB_A, "A"))
        profile("worker_function_polled", POLL_TENANT, via_schedule)
    return out
