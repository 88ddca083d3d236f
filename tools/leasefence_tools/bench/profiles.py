"""What one lifecycle uses, all in, for each way of running the work (issues 16 and 24): measured
on the local stack (the real handlers, the HTTP API, the table's stream and its two functions).

Profiles (each enqueues over the HTTP API with an inline payload of :data:`PAYLOAD`):

* ``http_workers``: a worker outside AWS claims over the API (``Worker`` + ``HttpBackend``):
  enqueue, claim (its answer carries the payload), complete: three API requests in all;
* ``http_workers_batched``: the same through the batch routes, :data:`BATCH` operations at a
  time (what a fleet of that many batched workers sends: one ``POST /v1/batch/enqueue``, and
  ``POST /v1/batch/work`` rounds, one claiming and one closing them all); per lifecycle. The
  requests a busy fleet really sends per lifecycle are
  :mod:`~leasefence_tools.bench.batched_http`'s (the all-in model takes them from there);
* ``worker_function``: the worker function claims from the stream record and runs the job;
* ``worker_function_polled``: the worker function's schedule instead (its stream mapping off):
  all the profile's operations are queued, then one drain takes them (a schedule tick that finds
  that many jobs waiting);
* ``class_a``: as ``worker_function``, the job completing with a business write in the same
  transaction (``Job.complete_with``).

Besides the lifecycles, the same measurement of what a lifecycle causes later or around it
(``events``): one heartbeat (over HTTP, one lease of :data:`BATCH` renewed in one batch request,
and in-process as the worker function makes it), the
payload purge (the sweeper, the payload retention later), the end of the identity retention (the
TTL deletion and what the stream does with it), an idle HTTP worker's poll (one at a time, and
through the round route), an idle sweeper run
and an idle schedule tick of the worker function.

Each measurement runs twice, and each figure comes from the pass that does not disturb it:

* **units and logs**: DynamoDB request units computed by :class:`~leasefence_tools.bench.meter.Meter`
  from the real requests and items (it reads every written item before and after the write, on
  the handlers' time), attributed to the function whose invocation sent them; and every log
  record the functions write at any level (captured at DEBUG and sized as Powertools formats it,
  by level, so the cost model can apply any log level);
* **counts and times**: the plain client, the functions at the shipped log level
  (:mod:`leasefence.observability_defaults`); per function: invocations, the CPU time of the
  invoking thread (``time.thread_time``: what the handler and its AWS clients computed, less what
  the embedded endpoint did on that thread serving its requests in process
  (:func:`~leasefence_tools.local.in_process.served_cpu_s`: on AWS, DynamoDB's own servers' work),
  and much less dependent on the machine's load than wall time), the
  wall time (billed per ms: this machine, for reference only), the AWS requests it made by
  service, and the bytes of its EMF metric lines; S3 requests and EventBridge entries.

Operations run one at a time, each followed until its history is written and the stream
functions are quiet, so the figures are per lifecycle and the meter's item images are exact.
Invocation counts are upper bounds for a busy stream: one operation at a time gets a stream
batch per record (or one for several of its records when they arrive together), where a busy
stream shares a batch (up to 10 records) between operations.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import logging
import math
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from leasefence.engine._spread import Hint, hint_item
from leasefence.history import ITEM_HISTORY_EXPIRED
from leasefence.store import from_item
from leasefence.worker import FunctionHandler, Job
from leasefence_tools.bench import units as U
from leasefence_tools.bench.allin import EVENTS_ONLY
from leasefence_tools.bench.meter import Meter
from leasefence_tools.bench.payload import PAYLOAD  # the job's input: 979 incompressible bytes
from leasefence_tools.bench.payload import describe as describe_payload

HTTP_TENANT, STREAM_TENANT, POLL_TENANT, CLASS_A_TENANT, IDLE_TENANT, BATCH_TENANT = (
    "profile-http",
    "profile-stream",
    "profile-poll",
    "profile-class-a",
    "profile-idle",
    "profile-batch",
)
JOB_B, JOB_A = "profile-refund", "profile-refund-a"
LEDGER = "bench-profiles-ledger"
#: Memory of each function: the construct's defaults (infra/leasefence_infra/props.py
#: ``api_memory_mb`` and ``sweeper_memory_mb``, worker_props.py ``memory_mb``, publisher.py
#: ``PUBLISHER_MEMORY_MB``).
MEMORY_MB = {"api": 1024, "worker": 512, "publisher": 256, "sweeper": 512}
#: The stream functions' invocations that only outcome events cause, tallied apart as
#: ``<function>+events`` (:data:`~leasefence_tools.bench.allin.EVENTS_ONLY`): the stack runs with
#: events on, and a deployment without them (the construct's default) never makes these (its
#: mapping's filter drops every record of their batch: :func:`_events_off_filters`).
EVENTS_ONLY_FUNCTIONS = tuple(f + EVENTS_ONLY for f in ("worker", "publisher"))
#: DynamoDB's storage overhead per item and per index entry (bytes).
ITEM_OVERHEAD = 100
PROFILES = (
    "http_workers",
    "http_workers_batched",
    "worker_function",
    "worker_function_polled",
    "class_a",
)
#: ``http_workers_batched`` in a busy fleet's steady state (``out["paired"]``): each claim
#: names its worker's close in the same round (``after``), as the HTTP backend's rounds do.
PAIRED = "http_workers_batched_paired"

#: Operations per batch request in ``http_workers_batched`` and ``heartbeat_http_batched``: a
#: fleet of 8 workers sharing one backend (the batched HTTP bench's default fleet).
BATCH = 8
#: What a lifecycle causes besides its own requests, measured the same way (see the docstring).
EVENTS = (
    "heartbeat_http",
    "heartbeat_http_batched",
    "heartbeat_in_process",
    "purge",
    "end_of_retention",
    "idle_poll_http",
    "idle_poll_http_batched",
    "idle_sweeper_run",
    "idle_worker_tick",
)
#: Client methods that are not AWS requests.
_NOT_REQUESTS = frozenset(
    {"get_paginator", "get_waiter", "can_paginate", "close", "generate_presigned_url"}
)
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _refund(job: Job) -> str:
    if not job.payload:  # the job reads its input (the claim's, or an S3 GET past 1 KiB)
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


# ------------------------------------------------------------------------------ the tallies


def _add(a: dict[str, Any], b: dict[str, Any], sign: float = 1.0) -> dict[str, Any]:
    """``a + sign * b`` for nested dicts of numbers (missing keys are 0)."""
    out = copy.deepcopy(a)
    for key, value in b.items():
        if isinstance(value, dict):
            out[key] = _add(out.get(key, {}), value, sign)
        else:
            out[key] = out.get(key, 0) + sign * value
    return out


def _scaled(a: dict[str, Any], factor: float, digits: int = 3) -> dict[str, Any]:
    return {
        k: _scaled(v, factor, digits) if isinstance(v, dict) else round(v * factor, digits)
        for k, v in a.items()
    }


class _Invocations:
    """Every invocation of the functions' ``lambda_handler``: counted, timed (CPU time of the
    invoking thread, and wall time rounded up to the ms as Lambda bills it), and everything done
    on that thread meanwhile attributed to the function: AWS requests, log records, EMF lines,
    and (with :attr:`meter`) DynamoDB units, under a meter phase named after the function."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.meter: Meter | None = None
        self.running = 0
        self._local = threading.local()
        self._lock = threading.Lock()
        self._tally: dict[str, Any] = {}
        self.metric_names: set[tuple[str, tuple[str, ...]]] = set()
        #: Raw ids and payload text that no log line may carry (and the lines that did).
        self.secrets: set[str] = set()
        self.lines_checked = 0
        self.leaks: Counter[str] = Counter()
        #: Per stream function, the filters its mapping has without outcome events: an
        #: invocation none of whose records passes them is tallied as ``<function>+events``.
        self.events_off: dict[str, list[dict[str, Any]]] = {}

    def check(self, function: str, text: str) -> None:
        """Count ``text`` as a log line that must carry no raw id and no payload."""
        with self._lock:
            self.lines_checked += 1
            secrets = list(self.secrets)
        for secret in secrets:
            if secret in text:
                with self._lock:
                    self.leaks[function] += 1
                return

    # ---------------------------------------------------------------- attribution

    def current(self) -> str | None:
        return getattr(self._local, "function", None)

    def count(self, function: str, *path: str, value: float = 1) -> None:
        with self._lock:
            node = self._tally.setdefault(function, {})
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = node.get(path[-1], 0) + value

    def tally(self) -> dict[str, Any]:
        """A copy of everything counted so far (subtract two to get a window)."""
        with self._lock:
            return copy.deepcopy(self._tally)

    @contextlib.contextmanager
    def within(self, function: str, invocation: bool = False) -> Iterator[None]:
        """Attribute what this thread does meanwhile to ``function`` (``invocation``: and count
        one invocation of it)."""
        previous = self.current()
        self._local.function = function
        phase = self.meter.phase(function) if self.meter is not None else contextlib.nullcontext()
        with self._lock:
            self.running += 1
        cpu, wall = _own_cpu_s(), time.perf_counter()
        try:
            with phase:
                yield
        finally:
            cpu_ms = (_own_cpu_s() - cpu) * 1000
            wall_ms = (time.perf_counter() - wall) * 1000
            self._local.function = previous
            with self._lock:
                self.running -= 1
            self.count(function, "cpu_ms", value=cpu_ms)
            if invocation:
                self.count(function, "invocations")
                self.count(function, "billed_ms", value=math.ceil(wall_ms))

    # ---------------------------------------------------------------- installation

    def label(self, name: str, event: Any) -> str:
        """The name an invocation of ``name`` with ``event`` is tallied under: ``name``, or
        ``name+events`` for a stream batch that a mapping without outcome events would not
        have delivered (no record in it passes :attr:`events_off`)."""
        from leasefence.streams import filters

        wanted = self.events_off.get(name)
        records = event.get("Records") if isinstance(event, dict) else None
        if wanted is None or not records:
            return name
        if any(filters.passes(wanted, record) for record in records):
            return name
        return name + EVENTS_ONLY

    def _timing(self, name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def timed(event: Any, context: Any) -> Any:
            with self.within(self.label(name, event), invocation=True):
                return handler(event, context)

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


def _own_cpu_s() -> float:
    """This thread's CPU time (s) but the embedded endpoint's, serving its requests in process."""
    from leasefence_tools.local.in_process import served_cpu_s

    return time.thread_time() - served_cpu_s()


class _Counting:
    """A boto3 client that counts its requests: per function (the invocation on this thread)
    by service, and in ``counts`` by method (``s3.put_object``...) and EventBridge entries."""

    def __init__(
        self, inner: Any, service: str, counts: Counter[str], invocations: _Invocations
    ) -> None:
        self._inner, self._service, self._counts = inner, service, counts
        self._invocations = invocations

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name.startswith("_") or name in _NOT_REQUESTS:
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counts[f"{self._service}.{name}"] += 1
            if name == "put_events":
                self._counts["events.entries"] += len(kwargs.get("Entries", ()))
            function = self._invocations.current()
            if function is not None:
                self._invocations.count(function, "requests", self._service)
            return target(*args, **kwargs)

        return call


class _Switch:
    """A client whose target can change between passes (the engine keeps the client it got)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self.target, name)


class _LogTap(logging.Handler):
    """Sizes every record the functions log, as Powertools formats it, by function and level."""

    def __init__(self, invocations: _Invocations, formatter: logging.Formatter) -> None:
        super().__init__(level=logging.DEBUG)
        self.invocations = invocations
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        function = self.invocations.current()
        if function is None:
            return
        try:
            text = self.format(record)
        except Exception:  # noqa: BLE001 - a record the formatter cannot render: count nothing
            return
        size = len(text.encode()) + 1  # the newline
        self.invocations.check(function, text)
        level = record.levelname if record.levelname in LEVELS else "INFO"
        self.invocations.count(function, "log_bytes", level, value=size)
        self.invocations.count(function, "log_lines", level)


class _StdoutTap(io.TextIOBase):
    """``sys.stdout`` while measuring: what an invocation prints (the metrics' EMF lines) is
    sized and attributed to its function; anything else goes to stderr (``--json`` prints the
    report on stdout)."""

    def __init__(self, invocations: _Invocations) -> None:
        self.invocations = invocations

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        function = self.invocations.current()
        if function is None:
            return sys.stderr.write(text)
        self.invocations.count(function, "emf_bytes", value=len(text.encode()))
        if text.startswith('{"_aws"'):
            self.invocations.check(function, text)
            self.invocations.count(function, "emf_lines")
            with contextlib.suppress(ValueError, KeyError, TypeError):
                blob = json.loads(text)
                for directive in blob["_aws"]["CloudWatchMetrics"]:
                    for dims in directive["Dimensions"] or [[]]:
                        for metric in directive["Metrics"]:
                            self.invocations.metric_names.add((metric["Name"], tuple(dims)))
        return len(text)


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


# ------------------------------------------------------------------------------ measuring


def measure(runs: int = 10) -> dict[str, Any]:
    """Every profile and event, ``runs`` times each (figures per lifecycle or per event), with
    the functions' logs and metrics sized and kept off stdout (``leasefence bench --json``
    prints its report there)."""
    from leasefence.observability import logger

    level = logger.log_level
    try:
        return _measure(runs)
    finally:
        logger.setLevel(level)


def _measure(runs: int) -> dict[str, Any]:
    from leasefence.observability import SERVICE, logger
    from leasefence.observability_defaults import DEFAULT_LOG_LEVEL, powertools_log_level
    from leasefence.payloads import canonicalize
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.server import LocalStack

    shipped_level = powertools_log_level(DEFAULT_LOG_LEVEL)
    counts: Counter[str] = Counter()
    out: dict[str, Any] = {
        "runs": runs,
        "payload_bytes": len(canonicalize(PAYLOAD).body),
        "payload": describe_payload(),
        #: The ids every figure assumes (ASCII: one byte a character).
        "ids": {
            "tenants": f"{HTTP_TENANT!r}, {STREAM_TENANT!r} (12 to 15 characters)",
            "job_type": JOB_B,
            "operations": "'<profile>-' and 12 hex digits (about 17 characters)",
        },
        #: The claim answer carries the payload: the HTTP worker sends no GET .../payload.
        "claim_carries_payload": True,
        "memory_mb": MEMORY_MB,
        #: Operations per batch request in the batched profile and heartbeat.
        "batch": BATCH,
        "log_level_for_times": shipped_level,
        "profiles": {},
        "events": {},
    }
    invocations = _Invocations(tuple(MEMORY_MB))
    tap_handler = logger.registered_handler
    assert isinstance(tap_handler, logging.StreamHandler)
    service_logger = logging.getLogger(SERVICE)
    log_tap = _LogTap(invocations, logger.registered_formatter)
    sink = io.StringIO()
    with (
        EmbeddedAws() as aws,
        invocations.installed(),
        contextlib.redirect_stdout(_StdoutTap(invocations)),
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
        invocations.events_off = _events_off_filters(stack)
        original_stream = tap_handler.setStream(sink)
        service_logger.addHandler(log_tap)
        try:
            _run_all(stack, aws, out, counts, invocations, shipped_level, sink)
        finally:
            service_logger.removeHandler(log_tap)
            if original_stream is not None:
                tap_handler.setStream(original_stream)
    out["log_privacy"] = {
        "lines_checked": invocations.lines_checked,
        "lines_with_a_raw_id_or_payload": dict(invocations.leaks),
    }
    out["custom_metrics"] = sorted(
        f"{name}[{','.join(dims)}]" for name, dims in invocations.metric_names
    )
    return out


def _events_off_filters(stack: Any) -> dict[str, list[dict[str, Any]]]:
    """What each stream function's mapping would pass in this stack without outcome events
    (:func:`leasefence.streams.mappings.shared` and :func:`~leasefence.streams.mappings.publisher`
    with ``events=False``)."""
    from leasefence.streams import mappings

    out = {"publisher": mappings.publisher(events=False).filters}
    if stack.worker_handlers and stack.stream_readers == 1:
        out["worker"] = mappings.shared(events=False, tenants=stack.worker_tenants).filters
    return out


def _run_all(
    stack: Any,
    aws: Any,
    out: dict[str, Any],
    counts: Counter[str],
    invocations: _Invocations,
    shipped_level: str,
    sink: io.StringIO,
) -> None:
    from leasefence import history, keys
    from leasefence.client import LeaseFenceClient
    from leasefence.observability import logger
    from leasefence.schema import TTL_ATTRIBUTE
    from leasefence.settings import runtime
    from leasefence.worker import Worker
    from leasefence.worker.http_backend import HttpBackend
    from leasefence_tools.local.server import Invoker, scheduled_event

    runs = out["runs"]

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
    rt.install_client("dynamodb", _Counting(dynamodb, "dynamodb", counts, invocations))
    rt.install_client("s3", _Counting(rt.client("s3"), "s3", counts, invocations))
    rt.install_client("events", _Counting(rt.client("events"), "events", counts, invocations))
    model = meter.model(table)
    invoker = Invoker()

    def item(tenant: str, sort_key: str, op: str | None = None) -> dict[str, Any] | None:
        """An item of operation ``op`` (``sort_key`` itself when None), in its write shard."""
        partition = U.operation_partition(raw, table, tenant, op or sort_key)
        return raw.get_item(
            TableName=table,
            Key={"tenant_id": {"S": partition}, "operation_id": {"S": sort_key}},
            ConsistentRead=True,
        ).get("Item")

    def ended(tenant: str, op: str) -> bool:
        found = item(tenant, op)
        return found is not None and found["state"]["S"] == "succeeded"

    def history_done(tenant: str, op: str) -> bool:
        op_item = item(tenant, op)
        if op_item is not None and history.ITEM_HISTORY_MARK in op_item:
            return True  # the history is in the item, written with each transition
        hist = item(tenant, keys.history_id(op), op)
        return (
            op_item is not None
            and hist is not None
            and hist.get("last_seq", {}).get("N") == op_item.get("seq", {}).get("N")
        )

    def quiet() -> None:
        """Until the functions are quiet: nothing running and no new stream record for three
        poll cycles."""
        deadline, calm = time.monotonic() + 30, 0
        while calm < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("the stream functions never went quiet")
            seen = sum(m.stats.records_read for m in stack.mappings.values())
            time.sleep(stack.stream_poll_interval)
            now = sum(m.stats.records_read for m in stack.mappings.values())
            calm = calm + 1 if invocations.running == 0 and now == seen else 0

    def settle(tenant: str, op: str) -> None:
        _wait(partial(history_done, tenant, op), f"the history of {op}")
        quiet()

    def stored(tenant: str, op: str, at_ms: int | None = None) -> dict[str, int]:
        """Bytes the operation leaves stored: its items (table: the operation, its history, and
        its payload item unless that is past its expiry at ``at_ms``, as DynamoDB's TTL deletes
        it) and their index entries, each with DynamoDB's 100 bytes of overhead;
        ``history_expired`` 1 when the purge slimmed the operation (the slim ended record: its
        history gone, ``hx`` set)."""
        table_bytes = index_bytes = 0
        sizes = []
        operation = item(tenant, op)
        kept = None
        if operation is not None and "payload_hash" in operation:
            text = (from_item(operation) or {})["payload_hash"]  # as text, in either form
            kept = item(tenant, keys.payload_id(op, text), op)
            expiry = (kept or {}).get(TTL_ATTRIBUTE, {}).get("N")
            if kept is not None and at_ms is not None and expiry and int(expiry) * 1000 <= at_ms:
                kept = None  # past its expiry: gone for the bill
        for found in (operation, item(tenant, keys.history_id(op), op), kept):
            sizes.append(U.item_size(found))
            if not found:
                continue
            table_bytes += U.item_size(found) + ITEM_OVERHEAD
            for index in model.indexes:
                entry = model.index_entry(index, found)
                if entry is not None:
                    index_bytes += U.item_size(entry) + ITEM_OVERHEAD
        return {
            "table_bytes": table_bytes,
            "index_bytes": index_bytes,
            "item_bytes": sizes[0],
            "history_bytes": sizes[1],
            "payload_item_bytes": sizes[2],
            "history_expired": int(ITEM_HISTORY_EXPIRED in (operation or {})),
        }

    def client(tenant: str) -> Any:
        return LeaseFenceClient(stack.base_url, stack.token(tenant), retries=1)

    # ---------------------------------------------------------------- the two passes

    def tally() -> dict[str, Any]:
        now = invocations.tally()
        for function in (*MEMORY_MB, *EVENTS_ONLY_FUNCTIONS, "other"):
            usage = meter.usage(function)
            node = now.setdefault(function, {})
            node["wcu"] = usage.wcu
            node["wcu_index"] = usage.wcu_index
            node["rcu"] = usage.rcu
            node["dynamodb_requests"] = usage.total_requests
        now["counts"] = dict(counts)
        return now

    def units_pass() -> None:
        dynamodb.target = metered
        invocations.meter = meter
        logger.setLevel("DEBUG")  # every record, sized by level (the model applies a level)

    def counts_pass() -> None:
        dynamodb.target = plain
        invocations.meter = None
        logger.setLevel(shipped_level)

    def plain_setup() -> None:
        dynamodb.target = plain
        invocations.meter = None
        logger.setLevel(shipped_level)

    def window(
        action: Callable[[Any], Any],
        setup: Callable[[], Any] = lambda: None,
        teardown: Callable[[Any], Any] = lambda _ctx: None,
        n: int = runs,
    ) -> dict[str, Any]:
        """``action`` ``n`` times in each pass, ``setup`` and ``teardown`` around each outside
        the figures; the units pass's units and logs, the counts pass's counts and times, per
        action."""
        passes: dict[str, dict[str, Any]] = {}
        for name, configure in (("units", units_pass), ("counts", counts_pass)):
            total: dict[str, Any] = {}
            for _ in range(n):
                plain_setup()
                ctx = setup()
                quiet()
                configure()
                before = tally()
                action(ctx)
                total = _add(total, _add(tally(), before, -1))
                plain_setup()
                teardown(ctx)
                quiet()
            passes[name] = total
            sink.seek(0)
            sink.truncate()
        return _finish(_combine(passes["units"], passes["counts"], n))

    http = client(HTTP_TENANT)
    http_backend = HttpBackend(http, HTTP_TENANT)
    http_worker = Worker(http_backend, {JOB_B: HANDLERS[JOB_B]}, lease_ms=30_000)
    invocations.secrets.update({http_worker.worker_id, "hb-worker", "idle-worker"})
    ops: dict[str, list[tuple[str, str]]] = {name: [] for name in (*PROFILES, PAIRED)}

    def new_op(name: str) -> str:
        op = f"{name}-{uuid.uuid4().hex[:12]}"
        invocations.secrets.add(op)
        return op

    invocations.secrets.update(
        {HTTP_TENANT, STREAM_TENANT, POLL_TENANT, CLASS_A_TENANT, IDLE_TENANT, BATCH_TENANT}
        | {str(PAYLOAD["order_id"]), str(PAYLOAD["note"])[:64]}
        | {f"batch-worker-{i}" for i in range(BATCH)}
    )
    batch_api = client(BATCH_TENANT)

    def claimed_in_batch(count: int) -> list[Any]:
        """``count`` operations enqueued in one request and claimed in one, as ``count`` batched
        workers sharing a backend claim them (each its own worker id and claim token)."""
        batch = [new_op("batch") for _ in range(count)]
        enqueued = batch_api.enqueue_batch(
            [{"operation_id": op, "job_type": JOB_B, "payload": PAYLOAD} for op in batch]
        )
        claims = batch_api.work_batch(
            claim=[
                {"worker_id": f"batch-worker-{i}", "lease_seconds": 30, "job_types": [JOB_B]}
                for i in range(count)
            ]
        ).claim
        made = [r.result() for r in claims if r.ok and r.value is not None]
        if not all(r.ok for r in enqueued) or {c.operation_id for c in made} != set(batch):
            raise RuntimeError("the batch was not enqueued and claimed whole")
        if not all(c.payload for c in made):  # the job reads its input from the claim
            raise RuntimeError("a batch claim came without its payload")
        return made

    def completions(claims: list[Any]) -> list[dict[str, Any]]:
        """The round's finish items completing ``claims``."""
        return [
            {
                "action": "complete",
                "operation_id": c.operation_id,
                "fence": c.fence,
                "outcome_code": "refunded",
            }
            for c in claims
        ]

    def settled(claims: list[Any]) -> None:
        """Each ended and its history written, then the functions quiet once."""
        for c in claims:
            _wait(partial(ended, BATCH_TENANT, c.operation_id), f"{c.operation_id} to end")
            _wait(partial(history_done, BATCH_TENANT, c.operation_id), "its history")
        quiet()

    def finished_in_batch(claims: list[Any]) -> None:
        results = batch_api.work_batch(finish=completions(claims)).finish
        if not all(r.ok for r in results):
            raise RuntimeError("a batched completion was refused")
        settled(claims)

    def via_http_batch(_ctx: Any) -> None:
        """:data:`BATCH` lifecycles through the batch routes: one enqueue, one claim round and
        one closing round for all of them."""
        claims = claimed_in_batch(BATCH)
        finished_in_batch(claims)
        ops["http_workers_batched"].extend((BATCH_TENANT, c.operation_id) for c in claims)

    #: The claims the paired rounds close next (a busy fleet's jobs in flight).
    held: list[Any] = []

    def via_http_batch_paired(_ctx: Any) -> None:
        """:data:`BATCH` lifecycles as a busy fleet's rounds make them: one enqueue request, and
        one round closing the jobs the round before claimed while claiming as many more, each
        claim naming its worker's close (``after``: its marker rides with that close's payload
        expiry). Per round: BATCH enqueues, claims and closes."""
        batch = [new_op("batch") for _ in range(BATCH)]
        enqueued = batch_api.enqueue_batch(
            [{"operation_id": op, "job_type": JOB_B, "payload": PAYLOAD} for op in batch]
        )
        previous = list(held)
        answer = batch_api.work_batch(
            finish=completions(previous),
            claim=[
                {
                    "worker_id": f"batch-worker-{i}",
                    "lease_seconds": 30,
                    "job_types": [JOB_B],
                    "claim_token": uuid.uuid4().hex,
                    "after": c.operation_id,
                }
                for i, c in enumerate(previous)
            ],
        )
        made = [r.result() for r in answer.claim if r.ok and r.value is not None]
        if not all(r.ok for r in (*enqueued, *answer.finish)) or {
            c.operation_id for c in made
        } != set(batch):
            raise RuntimeError("the paired round did not close and claim its batch whole")
        held[:] = made
        settled(previous)
        ops[PAIRED].extend((BATCH_TENANT, c.operation_id) for c in previous)

    def via_http(_ctx: Any) -> None:
        op = new_op("http")
        http.enqueue(op, JOB_B, PAYLOAD)
        if not http_worker.run_once():
            raise RuntimeError(f"the HTTP worker found nothing to claim for {op}")
        _wait(partial(ended, HTTP_TENANT, op), f"{op} to end")
        settle(HTTP_TENANT, op)
        ops["http_workers"].append((HTTP_TENANT, op))

    def via_stream(profile: str, tenant: str, job_type: str, target_class: str | None) -> Any:
        api = client(tenant)

        def run(_ctx: Any) -> None:
            op = new_op(profile)
            api.enqueue(op, job_type, PAYLOAD, target_class=target_class)
            _wait(partial(ended, tenant, op), f"{op} to end")
            settle(tenant, op)
            ops[profile].append((tenant, op))

        return run

    poll_api = client(POLL_TENANT)

    def via_schedule(_ctx: Any, count: int = runs) -> None:
        """``count`` operations queued, then one schedule tick of the worker drains them."""
        batch = [new_op("poll") for _ in range(count)]
        for op in batch:
            poll_api.enqueue(op, JOB_B, PAYLOAD)
        invoker.invoke("worker", scheduled_event(), timeout_ms=300_000)
        for op in batch:
            if not ended(POLL_TENANT, op):
                raise RuntimeError(f"the drain left {op} unfinished")
            settle(POLL_TENANT, op)
            ops["worker_function_polled"].append((POLL_TENANT, op))

    # One operation per profile first, outside the figures: a tenant's first enqueue of a job
    # type also files it in the tenant's directory (once), and the code paths warm up.
    plain_setup()
    via_http(None)
    via_stream("worker_function", STREAM_TENANT, JOB_B, None)(None)
    via_stream("class_a", CLASS_A_TENANT, JOB_A, "A")(None)
    for lst in ops.values():
        lst.clear()

    out["profiles"]["http_workers"] = window(via_http)
    out["profiles"]["worker_function"] = window(
        via_stream("worker_function", STREAM_TENANT, JOB_B, None)
    )
    out["profiles"]["class_a"] = window(via_stream("class_a", CLASS_A_TENANT, JOB_A, "A"))
    # The batch routes after the others (their figures as before), warmed just before; per
    # lifecycle: at least ``runs`` lifecycles, BATCH to an action.
    plain_setup()
    via_http_batch(None)
    ops["http_workers_batched"].clear()
    batched = window(via_http_batch, n=max(1, math.ceil(runs / BATCH)))
    out["profiles"]["http_workers_batched"] = _scaled(batched, 1 / BATCH, 4)
    # The same in a busy fleet's steady state: each claim rides with its worker's close.
    held[:] = claimed_in_batch(BATCH)
    via_http_batch_paired(None)  # warm (the code path)
    ops[PAIRED].clear()
    paired = window(via_http_batch_paired, n=max(1, math.ceil(runs / BATCH)))
    finished_in_batch(held)
    out["paired"] = {"http_workers_batched": _scaled(paired, 1 / BATCH, 4)}
    # The schedule alone: the worker's stream mapping goes (the publisher keeps running). Each
    # tick drains ``runs`` queued operations; the window is per operation.
    if "worker" in stack.mappings:
        stack.mappings.pop("worker").stop()
    plain_setup()
    via_schedule(None, 1)  # warm (the code path)
    ops["worker_function_polled"].clear()
    polled = window(via_schedule, n=1)
    out["profiles"]["worker_function_polled"] = _scaled(polled, 1 / runs, 4)

    # ---------------------------------------------------------------- around the lifecycle

    def claimed_over_http() -> Any:
        op = new_op("hb")
        http.enqueue(op, JOB_B, PAYLOAD)
        claim = http_backend.claim_next("hb-worker", 60_000, [JOB_B])
        if claim is None or claim.operation_id != op:
            raise RuntimeError("the heartbeat's operation was not claimed")
        return claim

    def heartbeat_http(claim: Any) -> None:
        http_backend.heartbeat(claim)
        quiet()

    def complete_http(claim: Any) -> None:
        http_backend.complete(claim, "refunded")
        settle(HTTP_TENANT, claim.operation_id)

    out["events"]["heartbeat_http"] = window(
        heartbeat_http, setup=claimed_over_http, teardown=complete_http
    )

    def heartbeat_http_batched(claims: list[Any]) -> None:
        renewed = batch_api.work_batch(
            heartbeat=[
                {"operation_id": c.operation_id, "fence": c.fence, "worker_id": f"batch-worker-{i}"}
                for i, c in enumerate(claims)
            ]
        ).heartbeat
        if not all(r.ok for r in renewed):
            raise RuntimeError("a batched renewal was refused")
        quiet()

    # Per lease renewed: BATCH leases renewed in one request.
    renewals = window(
        heartbeat_http_batched,
        setup=lambda: claimed_in_batch(BATCH),
        teardown=finished_in_batch,
        n=max(1, math.ceil(runs / BATCH)),
    )
    out["events"]["heartbeat_http_batched"] = _scaled(renewals, 1 / BATCH, 4)

    def claimed_in_process() -> Any:
        op = new_op("hb")
        http.enqueue(op, JOB_B, PAYLOAD)
        claim = rt.engine.claim(HTTP_TENANT, op, "hb-worker", 60_000)
        if claim is None:
            raise RuntimeError("the heartbeat's operation was not claimed")
        return claim

    def heartbeat_in_process(claim: Any) -> None:
        # What the worker function's renewal thread does: the engine's heartbeat, no invocation.
        with invocations.within("worker"):
            rt.engine.heartbeat(HTTP_TENANT, claim.operation_id, claim.fence, "hb-worker")
        quiet()

    def complete_in_process(claim: Any) -> None:
        rt.engine.complete(HTTP_TENANT, claim.operation_id, claim.fence, "refunded")
        settle(HTTP_TENANT, claim.operation_id)

    out["events"]["heartbeat_in_process"] = window(
        heartbeat_in_process, setup=claimed_in_process, teardown=complete_in_process
    )

    # The idle tenant as it stands after its first idle minutes: its job type's due spread fell
    # to 1, so a poll reads the hint and shard 0 (a pair never seen idle probes every shard; the
    # full probe every few minutes is priced by the idle worker's month: allin).
    rt.engine.store.put_plain(hint_item(IDLE_TENANT, JOB_B, Hint(1, 1, 0, 1)))
    idle_backend = HttpBackend(client(IDLE_TENANT), IDLE_TENANT)

    def idle_poll(_ctx: Any) -> None:
        if idle_backend.claim_next("idle-worker", 60_000, [JOB_B]) is not None:
            raise RuntimeError("the idle tenant had work")

    out["events"]["idle_poll_http"] = window(idle_poll)
    # The same poll through the round route (a batched worker alone: a round of one claim).
    idle_batched = HttpBackend(client(IDLE_TENANT), IDLE_TENANT, batched=True)

    def idle_poll_batched(_ctx: Any) -> None:
        if idle_batched.claim_next("idle-worker", 60_000, [JOB_B]) is not None:
            raise RuntimeError("the idle tenant had work")

    out["events"]["idle_poll_http_batched"] = window(idle_poll_batched)

    def sweeper_run(_ctx: Any) -> None:
        invoker.invoke("sweeper", scheduled_event())
        quiet()

    out["events"]["idle_sweeper_run"] = window(sweeper_run, n=max(2, runs // 4))

    def worker_tick(_ctx: Any) -> None:
        invoker.invoke("worker", scheduled_event(), timeout_ms=300_000)

    out["events"]["idle_worker_tick"] = window(worker_tick, n=max(2, runs // 4))

    # Bytes each operation leaves stored once it ended (the counts pass's operations).
    ended_bytes = {name: [stored(t, op) for t, op in lst] for name, lst in ops.items()}

    # The payload purge, the payload retention later: the sweeper's run with the engine's clock
    # moved past it purges every payload due (all the operations above), each a write of the
    # item (and its purge index entry) and an S3 delete, and the publisher sees the write. Per
    # purged payload, the idle run's share taken off. Units in one run, times in another, each
    # over operations ended since the run before.
    engine = rt.engine
    real_clock = engine.clock
    days_ms = (rt.settings.payload_retention_days + 1) * 86_400_000
    purges: dict[str, dict[str, Any]] = {}
    for name, configure in (("units", units_pass), ("counts", counts_pass)):
        if name == "counts":  # operations whose payloads are due at the second purge
            plain_setup()
            for _ in range(runs):
                via_http(None)
        due = _purge_candidates(raw, table)
        quiet()
        configure()
        shift = days_ms * (1 if name == "units" else 2)
        engine.clock = partial(_shifted, real_clock, shift)
        try:
            before = tally()
            invoker.invoke("sweeper", scheduled_event())
            quiet()
            purges[name] = {"tally": _add(tally(), before, -1), "purged": due}
        finally:
            engine.clock = real_clock
    idle = out["events"]["idle_sweeper_run"]
    out["events"]["purge"] = _per_purge(purges, idle)

    # As of the second purge's clock: each payload item's expiry (its end + the payload
    # retention) has passed, so TTL has taken it.
    purged_at = real_clock() + days_ms * 2
    after_purge = {
        name: [stored(t, op, purged_at) for t, op in lst[:runs]] for name, lst in ops.items() if lst
    }

    # The end of the identity retention: TTL deletes the operation item (free: not metered,
    # done here with the raw client as DynamoDB's TTL would) and the stream hands the deletion
    # to the publisher, which deletes the history. Per deleted operation.
    doomed = iter([(t, op) for lst in ops.values() for t, op in lst])

    def ttl_delete(target: tuple[str, str]) -> None:
        tenant, op = target
        raw.delete_item(
            TableName=table,
            Key={
                "tenant_id": {"S": U.operation_partition(raw, table, tenant, op)},
                "operation_id": {"S": op},
            },
        )
        _wait(lambda: item(tenant, keys.history_id(op), op) is None, f"the history of {op} to go")
        quiet()  # (a history in the item went with it: the publisher is not invoked)

    out["events"]["end_of_retention"] = window(ttl_delete, setup=lambda: next(doomed))

    out["paired"]["http_workers_batched"]["stored"] = {
        "ended": _mean_bytes(ended_bytes.get(PAIRED, [])),
        "after_purge": _mean_bytes(after_purge.get(PAIRED, [])),
    }
    out["paired"]["http_workers_batched"]["payload_object_bytes"] = 0
    for name in PROFILES:
        profile = out["profiles"][name]
        profile["stored"] = {
            "ended": _mean_bytes(ended_bytes.get(name, [])),
            "after_purge": _mean_bytes(after_purge.get(name, [])),
        }
        # An S3 object only where the lifecycle stored one (a payload past
        # MAX_ITEM_PAYLOAD_BYTES); a payload kept in the item is in the table's bytes above.
        profile["payload_object_bytes"] = out["payload_bytes"] if profile.get("s3_put") else 0
        _legacy_fields(profile)


def _shifted(clock: Callable[[], int], shift: int) -> int:
    return clock() + shift


def _purge_candidates(raw: Any, table: str) -> int:
    """Operations whose payload a purge will delete: items in the sparse purge index."""
    from leasefence.schema import PURGE_PK

    total, start = 0, None
    while True:
        kwargs: dict[str, Any] = {
            "TableName": table,
            "FilterExpression": "attribute_exists(#p)",
            "ExpressionAttributeNames": {"#p": PURGE_PK},
            "Select": "COUNT",
        }
        if start:
            kwargs["ExclusiveStartKey"] = start
        page = raw.scan(**kwargs)
        total += page["Count"]
        start = page.get("LastEvaluatedKey")
        if not start:
            return total


#: Figures of a function taken from the units pass, and from the counts pass.
UNIT_KEYS = ("wcu", "wcu_index", "rcu", "dynamodb_requests", "log_bytes", "log_lines")
COUNT_KEYS = ("invocations", "cpu_ms", "billed_ms", "requests", "emf_bytes", "emf_lines")


def _per_purge(purges: dict[str, dict[str, Any]], idle: dict[str, Any]) -> dict[str, Any]:
    """One purged payload's share of a purging sweeper run, the idle run's own cost taken off
    (the run itself is the schedule's: counted with the idle runs)."""
    u_run, c_run = purges["units"], purges["counts"]
    if not u_run["purged"] and not c_run["purged"]:
        # Nothing filed for a purge: the payloads are in payload items (layout 2), which
        # DynamoDB's TTL deletes for free; the sweeper's run is the idle one.
        out = _finish({"functions": {}, "aws": {}})
        out["purged_per_run"] = [0, 0]
        return out
    if not u_run["purged"] or not c_run["purged"]:
        raise RuntimeError("the purge found no payload due")
    units_side = _combine(u_run["tally"], {}, 1)
    counts_side = _combine({}, c_run["tally"], 1)
    idle_sweeper = idle["functions"].get("sweeper", {})
    functions: dict[str, Any] = {}
    for function in set(units_side["functions"]) | set(counts_side["functions"]):
        u = units_side["functions"].get(function, {})
        c = counts_side["functions"].get(function, {})
        base = idle_sweeper if function == "sweeper" else {}
        node: dict[str, Any] = {}
        for key in UNIT_KEYS:
            node[key] = _scale_any(_sub_any(u.get(key, 0), base.get(key, 0)), 1 / u_run["purged"])
        for key in COUNT_KEYS:
            node[key] = _scale_any(_sub_any(c.get(key, 0), base.get(key, 0)), 1 / c_run["purged"])
        if function == "sweeper":
            node["invocations"] = 0
            node["billed_ms"] = 0
        functions[function] = node
    aws = {k: v / c_run["purged"] for k, v in counts_side["aws"].items()}
    out = _finish({"functions": functions, "aws": aws})
    out["purged_per_run"] = [u_run["purged"], c_run["purged"]]
    return out


def _sub_any(a: Any, b: Any) -> Any:
    """``a - b``, never below 0 (numbers, or dicts of numbers)."""
    if isinstance(a, dict) or isinstance(b, dict):
        diff = _add(a if isinstance(a, dict) else {}, b if isinstance(b, dict) else {}, -1)
        return {k: max(0.0, v) for k, v in diff.items()}
    return max(0.0, a - b)


def _scale_any(a: Any, factor: float) -> Any:
    if isinstance(a, dict):
        return {k: v * factor for k, v in a.items()}
    return a * factor


def _combine(units: dict[str, Any], counts: dict[str, Any], n: int) -> dict[str, Any]:
    """Per action: units and logs from the units pass, counts and times from the counts pass."""
    functions: dict[str, Any] = {}
    for function in (*MEMORY_MB, *EVENTS_ONLY_FUNCTIONS, "other"):
        u, c = units.get(function, {}), counts.get(function, {})
        node: dict[str, Any] = {}
        for key in UNIT_KEYS:
            node[key] = _scale_any(u.get(key, {} if key.startswith("log") else 0), 1 / n)
        for key in COUNT_KEYS:
            node[key] = _scale_any(c.get(key, {} if key == "requests" else 0), 1 / n)
        if any(v for v in node.values()):
            functions[function] = node
    aws = {k: v / n for k, v in counts.get("counts", {}).items()}
    return {"functions": functions, "aws": aws}


def _finish(raw: dict[str, Any]) -> dict[str, Any]:
    """Rounded, with the totals the cost model reads."""
    functions: dict[str, dict[str, Any]] = {
        name: {k: _scaled(v, 1, 4) if isinstance(v, dict) else round(v, 4) for k, v in node.items()}
        for name, node in raw["functions"].items()
    }
    aws = {k: round(v, 4) for k, v in raw["aws"].items()}
    total = {
        key: round(sum(node.get(key, 0) for node in functions.values()), 4)
        for key in ("wcu", "wcu_index", "rcu", "dynamodb_requests")
    }
    return {
        "functions": functions,
        **total,
        "wcu_history": round(
            sum(n.get("wcu", 0) for f, n in functions.items() if f.startswith("publisher")), 4
        ),
        "api_requests": round(functions.get("api", {}).get("invocations", 0), 4),
        "s3_put": aws.get("s3.put_object", 0),
        "s3_get": aws.get("s3.get_object", 0),
        "s3_delete": round(aws.get("s3.delete_object", 0) + aws.get("s3.delete_objects", 0), 4),
        "events": aws.get("events.entries", 0),
    }


def _mean_bytes(rows: list[dict[str, int]]) -> dict[str, float]:
    if not rows:
        return {
            "table_bytes": 0,
            "index_bytes": 0,
            "item_bytes": 0,
            "history_bytes": 0,
            "payload_item_bytes": 0,
        }
    return {k: round(sum(r[k] for r in rows) / len(rows), 1) for k in rows[0]}


def _legacy_fields(profile: dict[str, Any]) -> None:
    """The fields issue 16's model (:mod:`leasefence_tools.bench.cost_per_million`) reads."""
    functions = profile["functions"]

    def whole(f: str, key: str) -> float:
        """``f``'s figure with its invocations that only events cause (this model has events)."""
        return sum(functions.get(name, {}).get(key, 0) for name in (f, f + EVENTS_ONLY))

    profile["invocations"] = {f: whole(f, "invocations") for f in MEMORY_MB}
    profile["billed_ms"] = {f: whole(f, "billed_ms") for f in MEMORY_MB}
    profile["stored_item_bytes"] = profile["stored"]["ended"]["table_bytes"]
