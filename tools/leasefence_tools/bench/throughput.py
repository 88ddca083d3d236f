"""Throughput ratio: lifecycle jobs per second against the same endpoint's raw request rate.

The endpoint is the stock embedded one (moto behind one lock per request, no accelerator) in its
own process. Measured in one run, for each worker count N (8 and 32), on one table:

* **raw rates**, N threads, before and after the engine run (the mean is used):
  - a plain conditional ``UpdateItem`` (condition on the fence, ``ALL_NEW`` back): the figure
    issue 7 divides by;
  - the engine's *own* four requests replayed without the engine (captured from one real
    lifecycle, sent again on other keys): the enqueue ``PutItem``, the claim's index ``Query``,
    the claim ``UpdateItem`` and the completion ``UpdateItem``.
* **lifecycle rate**, N workers in steady state: each worker enqueues one operation, claims one
  (``claim_next``) and completes it, over a standing backlog (so claimers never drain the queue).

Figures:

* ``throughput_ratio = lifecycle rate / (plain UpdateItem rate / 4)`` (4 = uncontended requests
  per lifecycle). The endpoint serves one request at a time, so this compares the engine with
  four plain updates. On moto the engine's requests are not plain: a Query scans the table and
  long update expressions take moto longer to parse, so ``request_mix_ceiling`` (the ratio the
  engine would reach if the workers added no cost at all: four plain updates' time over the
  four replayed requests' time) bounds it from above.
* ``orchestration_ratio = lifecycle rate x (sum of 1 / replayed-request rate)``: the share of
  the endpoint's capacity for the engine's own requests that became lifecycles. What is lost
  here is the engine's: refused claim writes, extra queries, client-side work.
* CPU per lifecycle of the endpoint process and of the benchmark process, against the same
  figure computed from the replayed requests (Linux ``/proc``; otherwise absent).
"""

from __future__ import annotations

import copy
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from leasefence import Engine, keys
from leasefence.schema import TableSpec, create_table
from leasefence_tools.bench import units as U
from leasefence_tools.bench.harness import ServerProcess
from leasefence_tools.bench.meter import Meter

HASH = "sha256:" + "7" * 64
NOMINAL_REQUESTS = 4  # enqueue put, claim query, claim update, complete update
TENANT = "tp"
SHAPE_TENANT = "shape"


def _cpu_seconds(pid: int | None = None) -> float | None:
    """User + system CPU seconds of this process (or of ``pid``, from /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _Cpu:
    """CPU seconds spent by the benchmark process and by the endpoint process over a block."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.client: float | None = None
        self.server: float | None = None

    def __enter__(self) -> _Cpu:
        self._c0, self._s0 = _cpu_seconds(), _cpu_seconds(self.server_pid)
        return self

    def __exit__(self, *exc: object) -> None:
        c1, s1 = _cpu_seconds(), _cpu_seconds(self.server_pid)
        self.client = None if c1 is None or self._c0 is None else c1 - self._c0
        self.server = None if s1 is None or self._s0 is None else s1 - self._s0


def _parallel(threads: int, work: Any) -> float:
    """Run ``work(i)`` on ``threads`` threads released together; return the elapsed seconds."""
    barrier = threading.Barrier(threads + 1)

    def run(i: int) -> None:
        barrier.wait()
        work(i)

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(run, i) for i in range(threads)]
        barrier.wait()
        start = time.perf_counter()
        for f in futures:
            f.result()
        return time.perf_counter() - start


class _Recorder:
    """Passes calls through and keeps the keyword arguments of each, in order."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if not callable(target) or name.startswith("_") or name in ("exceptions", "meta"):
            return target

        def call(**kwargs: Any) -> Any:
            self.calls.append((name, copy.deepcopy(kwargs)))
            return target(**kwargs)

        return call


def _capture_lifecycle(client: Any, spec: TableSpec) -> dict[str, dict[str, Any]]:
    """The engine's four requests of one uncontended lifecycle, as sent."""
    recorder = _Recorder(client)
    engine = Engine(client=recorder, spec=spec, rng=random.Random(1))
    engine.enqueue(SHAPE_TENANT, "shape-template", "refund", HASH)
    claim = engine.claim_next(SHAPE_TENANT, "shape-worker", lease_ms=120_000, job_types=["refund"])
    assert claim is not None
    engine.complete(SHAPE_TENANT, claim.operation_id, claim.fence, "done")
    # Without the tenant's own items: the one-time listing of the job type in its directory,
    # the reads of its catalogue entry and settings (cached by the engine: not per lifecycle),
    # and the one-time record of its write shard counts (a read, a query of its bare partition
    # and a conditional UpdateItem: leasefence.engine._layout).
    recorder.calls = [
        (name, kwargs)
        for name, kwargs in recorder.calls
        if not (kwargs.get("Key") or kwargs.get("Item") or {})
        .get("operation_id", {})
        .get("S", "")
        .startswith(keys.TENANT_ITEM_PREFIX)
        and not (name == "query" and "IndexName" not in kwargs)
    ]
    names = [name for name, _ in recorder.calls]
    assert (
        names[0] == "put_item" and names[-1] == "update_item" and names.count("update_item") == 2
    ), names
    updates = [kwargs for name, kwargs in recorder.calls if name == "update_item"]
    return {
        "put": recorder.calls[0][1],
        "query": next(kwargs for name, kwargs in recorder.calls if name == "query"),
        "claim": updates[0],
        "complete": updates[1],
    }


def _with_key(request: dict[str, Any], op: str) -> dict[str, Any]:
    out = copy.deepcopy(request)
    key = {"tenant_id": {"S": SHAPE_TENANT}, "operation_id": {"S": op}}
    if "Item" in out:
        out["Item"].update(key)
    else:
        out["Key"] = key
    return out


def replay_query(shapes: dict[str, dict[str, Any]], shard: int) -> dict[str, Any]:
    """The engine's claim query, replayed on the backlog's partition ``shard``: named as the
    engine names it (tenant, shard and job type: :func:`leasefence.keys.due_partition`), so the
    replay reads the full page the engine's claims read. (Before this was fixed the replay still
    named the partitions as they were before claims went by job type, read empty partitions and
    made the engine's own requests look cheaper than they are: the drop of
    ``throughput_orchestration_*`` from about 0.9 to 0.65.)"""
    request = copy.deepcopy(shapes["query"])
    _, _, job_type = keys.parse_due_partition(request["ExpressionAttributeValues"][":pk"]["S"])
    request["ExpressionAttributeValues"][":pk"] = {"S": keys.due_partition(TENANT, shard, job_type)}
    return request


def _raw_rates(
    clients: list[Any],
    table: str,
    spec: TableSpec,
    ops: list[str],
    shapes: dict[str, dict[str, Any]],
    per_thread: int,
    tag: str,
    server_pid: int | None,
) -> dict[str, float]:
    n = len(clients)
    total = n * per_thread

    def now() -> dict[str, str]:
        return {"N": str(int(time.time() * 1000))}

    count = U.write_count(clients[0], table, TENANT)

    def plain_update(i: int) -> None:
        for j in range(per_thread):
            op = ops[(i * per_thread + j) % len(ops)]
            clients[i].update_item(
                TableName=table,
                Key={
                    "tenant_id": {"S": keys.operation_partition(TENANT, op, count)},
                    "operation_id": {"S": op},
                },
                UpdateExpression="SET updated_at = :now",
                ConditionExpression="#f >= :zero",
                ExpressionAttributeNames={"#f": "fence"},
                ExpressionAttributeValues={":now": now(), ":zero": {"N": "0"}},
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )

    def replay(kind: str) -> Any:
        def work(i: int) -> None:
            for j in range(per_thread):
                request = _with_key(shapes[kind], f"replay-{tag}-{i}-{j}")
                if ":now" in request.get("ExpressionAttributeValues", {}):
                    request["ExpressionAttributeValues"][":now"] = now()
                getattr(clients[i], "put_item" if kind == "put" else "update_item")(**request)

        return work

    def query(i: int) -> None:
        for j in range(per_thread):
            request = replay_query(shapes, (i + j) % spec.due_shards)
            request["ExpressionAttributeValues"][":now"] = now()
            clients[i].query(**request)

    out: dict[str, float] = {}
    # Replays run in lifecycle order: each claim replay finds the item its put replay wrote.
    for name, work in (
        ("update", plain_update),
        ("put", replay("put")),
        ("query", query),
        ("claim", replay("claim")),
        ("complete", replay("complete")),
    ):
        with _Cpu(server_pid) as cpu:
            out[f"{name}_per_s"] = total / _parallel(n, work)
        if cpu.server is not None:
            out[f"{name}_server_cpu_ms"] = 1000 * cpu.server / total
        if cpu.client is not None:
            out[f"{name}_client_cpu_ms"] = 1000 * cpu.client / total
    return out


def _lifecycle_sum(raw: dict[str, float], key: str) -> float | None:
    try:
        return sum(raw[f"{kind}_{key}"] for kind in ("put", "query", "claim", "complete"))
    except KeyError:
        return None


def run_one(
    server: ServerProcess, workers: int, backlog: int, lifecycles: int, raw_per_thread: int
) -> dict[str, Any]:
    spec = TableSpec(table_name=f"bench-tp-{workers}")
    setup = server.client()
    create_table(setup, spec)
    seed = Engine(client=setup, spec=spec)
    ops = [f"backlog-{i:05d}" for i in range(backlog)]
    for op in ops:
        seed.enqueue(TENANT, op, "refund", HASH)
    shapes = _capture_lifecycle(setup, spec)
    clients = [server.client() for _ in range(workers)]
    pid = server.proc.pid if server.proc is not None else None
    raw_before = _raw_rates(clients, spec.table_name, spec, ops, shapes, raw_per_thread, "a", pid)

    meter = Meter(setup, units=False, keep_calls=False)
    engines = [
        Engine(client=meter.client(clients[i]), spec=spec, rng=random.Random(100 + i))
        for i in range(workers)
    ]
    per_worker = max(1, lifecycles // workers)
    done = [0] * workers

    def work(i: int) -> None:
        engine = engines[i]
        for j in range(per_worker):
            with meter.phase("run"):
                engine.enqueue(TENANT, f"w{i}-{j}", "refund", HASH)
                claim = engine.claim_next(
                    TENANT, f"worker-{i}", lease_ms=120_000, job_types=["refund"]
                )
                if claim is None:
                    continue
                engine.complete(TENANT, claim.operation_id, claim.fence, "done")
                done[i] += 1

    with _Cpu(pid) as cpu:
        elapsed = _parallel(workers, work)
    raw_after = _raw_rates(clients, spec.table_name, spec, ops, shapes, raw_per_thread, "b", pid)
    raw = {k: (raw_before[k] + raw_after[k]) / 2 for k in raw_before if k in raw_after}
    setup.delete_table(TableName=spec.table_name)

    usage = meter.usage("run")
    completed = sum(done)
    rate = completed / elapsed
    ideal_s = sum(1 / raw[f"{kind}_per_s"] for kind in ("put", "query", "claim", "complete"))
    server_ideal, client_ideal = (
        _lifecycle_sum(raw, "server_cpu_ms"),
        _lifecycle_sum(raw, "client_cpu_ms"),
    )
    return {
        "workers": workers,
        "lifecycles": completed,
        "elapsed_s": round(elapsed, 2),
        "lifecycles_per_s": round(rate, 2),
        "raw_update_per_s": round(raw["update_per_s"], 1),
        "raw_update_per_s_before_after": [
            round(raw_before["update_per_s"], 1),
            round(raw_after["update_per_s"], 1),
        ],
        "replayed_per_s": {
            kind: round(raw[f"{kind}_per_s"], 1) for kind in ("put", "query", "claim", "complete")
        },
        "requests_per_lifecycle_nominal": NOMINAL_REQUESTS,
        "requests_per_lifecycle_measured": round(usage.total_requests / max(completed, 1), 3),
        "queries_per_claim": round(usage.requests["query"] / max(completed, 1), 3),
        "refused_claim_writes_per_claim": round(
            usage.refused["update_item"] / max(completed, 1), 3
        ),
        "throughput_ratio": round(rate / (raw["update_per_s"] / NOMINAL_REQUESTS), 3),
        "request_mix_ceiling": round(NOMINAL_REQUESTS / raw["update_per_s"] / ideal_s, 3),
        "orchestration_ratio": round(rate * ideal_s, 3),
        "query_cost_in_updates": round(raw["update_per_s"] / raw["query_per_s"], 2),
        "cpu_ms_per_lifecycle": {
            "endpoint": None
            if cpu.server is None
            else round(1000 * cpu.server / max(completed, 1), 2),
            "endpoint_replayed": None if server_ideal is None else round(server_ideal, 2),
            "client": None
            if cpu.client is None
            else round(1000 * cpu.client / max(completed, 1), 2),
            "client_replayed": None if client_ideal is None else round(client_ideal, 2),
        },
    }


def measure(
    worker_counts: tuple[int, ...] = (8, 32),
    backlog: int = 256,
    lifecycles: int = 384,
    raw_per_thread: int | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with ServerProcess() as server:
        for n in worker_counts:
            per = raw_per_thread or max(4, 192 // n)
            out[str(n)] = run_one(server, n, backlog, lifecycles, per)
    return out
