"""Where a lifecycle's CPU goes (issue 24): cProfile over every thread, attributed by component.

``python -m leasefence_tools.bench.cpu_profile [--lifecycles N] [--json]`` profiles two short
runs in one process, each thread with its own ``cProfile.Profile`` (merged at the end), and sums
each function's own time (``tottime``) by the component its file belongs to:

* ``engine``: the throughput benchmark's loop without its threads: one engine over the
  embedded endpoint (in this process, so the endpoint's CPU is profiled too), enqueue,
  ``claim_next`` and complete over a standing backlog; next to it, the same engine's four
  requests replayed with a plain client (what ``throughput_orchestration_*`` divides by);
* ``local_stack``: lifecycles through the local stack as ``leasefence local`` runs it: enqueue
  over the HTTP API, the table's stream emulation, the worker function claiming from the
  stream record, the publisher writing history and events.

Components: ``leasefence engine`` (``leasefence/engine``, ``store``, ``keys``...), ``worker
runtime``, ``API`` (``leasefence/api``), ``publisher`` (``leasefence/streams``),
``local stream emulation`` (``leasefence_tools/local/streams.py``, moto's stream records),
``local server`` (the rest of ``leasefence_tools/local``), ``moto DynamoDB``, ``moto/HTTP
server`` (moto's core, werkzeug, waitress), ``botocore client`` (botocore, urllib3,
http.client), ``Powertools``, ``other``. Figures are CPU ms per lifecycle under a profiler
(which roughly doubles them): read them as shares, not as times.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

#: (substring of a file path, component), first match wins.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("leasefence_tools/local/streams", "local stream emulation"),
    ("moto/dynamodbstreams", "local stream emulation"),
    ("leasefence_tools/local", "local server"),
    ("leasefence_tools/bench", "bench harness"),
    ("leasefence/streams", "publisher"),
    ("leasefence/history", "publisher"),
    ("leasefence/worker", "worker runtime"),
    ("leasefence/api", "API"),
    ("functions/", "function handlers"),
    ("leasefence/", "leasefence engine"),
    ("moto/dynamodb", "moto DynamoDB"),
    ("moto/s3", "moto S3"),
    ("moto/events", "moto EventBridge"),
    ("moto/", "moto core (request dispatch)"),
    ("werkzeug", "HTTP server (werkzeug, waitress)"),
    ("waitress", "HTTP server (werkzeug, waitress)"),
    ("aws_lambda_powertools", "Powertools"),
    ("pydantic", "API"),
    ("botocore", "botocore client"),
    ("boto3", "botocore client"),
    ("urllib3", "botocore client"),
    ("http/client", "botocore client"),
    ("httpx", "SDK client"),
    ("httpcore", "SDK client"),
)


def component(path: str) -> str:
    path = path.replace("\\", "/")
    for needle, name in COMPONENTS:
        if needle in path:
            return name
    return "other"


#: Built-ins whose own time is a thread waiting (with a CPU-time timer they should cost nothing;
#: left out so that a wait can never pass for work).
WAITS = ("acquire", "select", "sleep", "wait", "poll", "recv_into", "accept", "join")


@contextlib.contextmanager
def every_thread() -> Iterator[list[cProfile.Profile]]:
    """A ``cProfile.Profile`` (timing each thread's own CPU time) in this thread and in every
    thread started meanwhile; read them after the block, when those threads are done."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start(*_args: Any) -> None:
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()

    mine = cProfile.Profile(time.thread_time)
    profiles.append(mine)
    threading.setprofile(start)
    mine.enable()
    try:
        yield profiles
    finally:
        mine.disable()
        threading.setprofile(None)


def by_component(profiles: list[cProfile.Profile]) -> dict[str, float]:
    """CPU seconds by component (each function's own time), waits left out."""
    totals: dict[str, float] = {}
    for profile in profiles:
        try:
            stats = pstats.Stats(profile)
        except TypeError:  # a thread that never ran a profiled call
            continue
        for (path, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
            if path == "~" and any(wait in name for wait in WAITS):
                continue
            key = component(path) if path != "~" else "Python built-ins"
            totals[key] = totals.get(key, 0.0) + row[2]
    return totals


def profiled(workload: Callable[[], None]) -> dict[str, float]:
    with every_thread() as profiles:
        workload()
    return by_component(profiles)


def per_lifecycle(
    run: dict[str, float], base: dict[str, float], lifecycles: int
) -> dict[str, float]:
    """(``run`` - ``base``) / ``lifecycles`` in ms, by component, largest first."""
    keys = set(run) | set(base)
    diff = {k: (run.get(k, 0.0) - base.get(k, 0.0)) * 1000 / lifecycles for k in keys}
    out = {
        k: round(v, 3) for k, v in sorted(diff.items(), key=lambda kv: -kv[1]) if abs(v) >= 0.005
    }
    out["total"] = round(sum(diff.values()), 3)
    return out


def engine_run(lifecycles: int, backlog: int = 96) -> dict[str, Any]:
    """One engine, sequential lifecycles over a backlog, the endpoint in this process; and the
    same four requests replayed (see :mod:`leasefence_tools.bench.throughput`). Each run is a
    fresh endpoint profiled from its start; a run with the same setup and no lifecycles is taken
    off."""
    from leasefence import Engine
    from leasefence.schema import TableSpec, create_table
    from leasefence_tools.bench import throughput as T
    from leasefence_tools.local.embedded import EmbeddedAws

    requests = {"n": 0}

    def scenario(n: int, replay: bool) -> Callable[[], None]:
        def work() -> None:
            with EmbeddedAws() as aws:
                client = aws.client()
                # moto's backend outlives an endpoint in this process: a table of its own.
                spec = TableSpec(table_name=f"profile-tp-{uuid.uuid4().hex[:8]}")
                create_table(client, spec)
                seed = Engine(client=client, spec=spec)
                for i in range(backlog):
                    seed.enqueue(T.TENANT, f"backlog-{i:05d}", "refund", T.HASH)
                shapes = T._capture_lifecycle(client, spec)
                engine = Engine(
                    client=_Counting(aws.client(), requests), spec=spec, rng=random.Random(7)
                )
                plain = aws.client()
                for i in range(5):  # warm both paths
                    _lifecycle(engine, f"warm-{i}")
                    _replay(plain, shapes, f"warm-replay-{i}")
                requests["n"] = 0
                for i in range(n):
                    if replay:
                        _replay(plain, shapes, f"replay-{i}")
                    else:
                        _lifecycle(engine, f"run-{i}")

        return work

    base = profiled(scenario(0, False))
    life = profiled(scenario(lifecycles, False))
    requests_per = requests["n"] / lifecycles
    replayed = profiled(scenario(lifecycles, True))
    out = {
        "lifecycle": per_lifecycle(life, base, lifecycles),
        "replayed": per_lifecycle(replayed, base, lifecycles),
    }
    out["lifecycle"]["requests_per_lifecycle"] = round(requests_per, 3)
    return out


class _Counting:
    def __init__(self, inner: Any, counts: dict[str, int]) -> None:
        self._inner, self._counts = inner, counts

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name.startswith("_") or name in ("get_paginator", "close"):
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counts["n"] += 1
            return target(*args, **kwargs)

        return call


def _lifecycle(engine: Any, op: str) -> None:
    from leasefence_tools.bench import throughput as T

    engine.enqueue(T.TENANT, op, "refund", T.HASH)
    claim = engine.claim_next(T.TENANT, "profiler", lease_ms=120_000, job_types=["refund"])
    if claim is not None:
        engine.complete(T.TENANT, claim.operation_id, claim.fence, "done")


def _replay(client: Any, shapes: dict[str, Any], op: str) -> None:
    from leasefence_tools.bench import throughput as T

    for kind in ("put", "query", "claim", "complete"):
        if kind == "query":
            request = T.replay_query(shapes, 0)
            request["ExpressionAttributeValues"][":now"] = {"N": str(int(time.time() * 1000))}
            client.query(**request)
            continue
        request = T._with_key(shapes[kind], op)
        if ":now" in request.get("ExpressionAttributeValues", {}):
            request["ExpressionAttributeValues"][":now"] = {"N": str(int(time.time() * 1000))}
        getattr(client, "put_item" if kind == "put" else "update_item")(**request)


def local_stack_run(lifecycles: int) -> dict[str, Any]:
    """Stream lifecycles through the local stack (enqueue over HTTP, stream, worker, publisher),
    a run of the same length with nothing to do taken off (the stream pollers' idle reads)."""
    from leasefence.client import LeaseFenceClient
    from leasefence_tools.bench import profiles as P
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.server import LocalStack

    elapsed = {"s": 0.0}

    def scenario(n: int, idle_s: float) -> Callable[[], None]:
        def work() -> None:
            with (
                EmbeddedAws() as aws,
                contextlib.redirect_stdout(sys.stderr),
                LocalStack(
                    port=0,
                    aws=aws,
                    sweep_interval=None,
                    secret="profile-" + "c" * 32,
                    streams=True,
                    stream_starting_position="LATEST",
                    worker_handlers="leasefence_tools.bench.profiles:HANDLERS",
                    worker_tenants=[P.STREAM_TENANT],
                ) as stack,
            ):
                api = LeaseFenceClient(stack.base_url, stack.token(P.STREAM_TENANT), retries=1)
                raw = aws.client("dynamodb")
                table = str(stack.table_name)

                def run(op: str) -> None:
                    api.enqueue(op, P.JOB_B, P.PAYLOAD)
                    _until(lambda: _history_written(raw, table, op))

                for i in range(3):
                    run(f"warm-{i}-{uuid.uuid4().hex[:6]}")
                started = time.monotonic()
                for _ in range(n):
                    run(f"life-{uuid.uuid4().hex[:10]}")
                time.sleep(idle_s)
                elapsed["s"] = time.monotonic() - started

        return work

    full = profiled(scenario(lifecycles, 0.5))
    base = profiled(scenario(0, elapsed["s"]))
    return {"lifecycle": per_lifecycle(full, base, lifecycles)}


def _history_written(raw: Any, table: str, op: str) -> bool:
    from leasefence import keys
    from leasefence_tools.bench import units as U

    partition = U.operation_partition(raw, table, "profile-stream", op)

    def get(sort_key: str) -> dict[str, Any] | None:
        return raw.get_item(
            TableName=table,
            Key={"tenant_id": {"S": partition}, "operation_id": {"S": sort_key}},
            ConsistentRead=True,
        ).get("Item")

    item = get(op)
    if item is None or item["state"]["S"] != "succeeded":
        return False
    if "hv" in item:
        return True  # the history is in the item, written with each transition
    hist = get(keys.history_id(op))
    return hist is not None and hist.get("last_seq", {}).get("N") == item.get("seq", {}).get("N")


def _until(check: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasefence_tools.bench.cpu_profile")
    parser.add_argument("--lifecycles", type=int, default=60)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = {
        "engine": engine_run(args.lifecycles),
        "local_stack": local_stack_run(max(10, args.lifecycles // 3)),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for run, parts in result.items():
            for name, figures in parts.items():
                print(f"{run}/{name}: {figures}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
