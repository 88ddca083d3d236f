"""HTTP workers against the real local stack: lifecycles per second, and where their time goes.

``leasefence bench --only local-stack`` starts ``leasefence local --samples`` (what ``make run``
starts: stream worker, publisher, sweeper and the sample data, default fidelity options) as its
own process on free ports with a state folder of its own, enqueues ``operations`` operations of
one job type, then lets ``workers`` threads, each an HTTP worker with its own SDK client, claim
(naming the job type, as :class:`~leasefence.worker.Worker` does), heartbeat and complete until
none is left. A lifecycle is those three calls. It reports:

* ``lifecycles_per_s`` (the workers' phase only) and the client-side p50 of each call;
* ``handler``: time in the API function's handler per route (and in the stream functions), as
  the stack measures it (``GET /__leasefence/timings`` on the API);
* ``endpoint``: per DynamoDB (Streams, S3, EventBridge) operation, the time the request held the
  embedded endpoint (one request at a time) and the time it waited for its turn
  (``GET /__leasefence/timings`` on the endpoint);
* ``environments``: how many invocations each execution environment of the API function served
  (``leasefence local`` runs it in processes of its own, as Lambda runs concurrent invocations);
* the CPU seconds per lifecycle of the stack's process and the processes under it (Linux
  ``/proc``), and the load average before and after: the machine is shared, so a rate means
  little without it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from leasefence_tools.local.timings import RESET_PATH, TIMINGS_PATH

JOB_TYPE = "bench-local-stack"
ROUTES = ("claim", "heartbeat", "complete")
#: The target of issue 31, for the table.
TARGET_PER_S = 25.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in children.read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def _own_cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _cpu_seconds(pid: int) -> tuple[float, float] | None:
    """CPU seconds of ``pid`` itself and of every process under it (the API function's execution
    environments are processes of the stack's), or None where ``/proc`` cannot tell."""
    own = _own_cpu_seconds(pid)
    if own is None:
        return None
    under = 0.0
    pending = _children(pid)
    while pending:
        child = pending.pop()
        under += _own_cpu_seconds(child) or 0.0
        pending += _children(child)
    return own, under


def _timings(base_url: str, reset: bool = False) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - the stack's own http:// URL
        base_url + (RESET_PATH if reset else TIMINGS_PATH),
        data=b"" if reset else None,
        method="POST" if reset else "GET",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - as above
        return dict(json.loads(answer.read()))


class _Stack:
    """``leasefence local --samples`` in its own process, on free ports, in a temporary state
    folder; its terminal output goes to a file there."""

    def __init__(self, folder: Path, extra_args: tuple[str, ...] = ()) -> None:
        self.folder = folder
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {}

    def __enter__(self) -> _Stack:
        log = (self.folder / "stack.log").open("wb")
        leasefence = Path(sys.executable).with_name("leasefence")
        command = [str(leasefence)] if leasefence.exists() else [sys.executable, "-c", _ENTRY]
        self.process = subprocess.Popen(
            [
                *command,
                "local",
                "--samples",
                "--port",
                str(_free_port()),
                "--dynamodb-port",
                str(_free_port()),
                "--state-dir",
                str(self.folder / "state"),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.folder,
        )
        log.close()
        deadline = time.monotonic() + 180
        state_file = self.folder / "state" / "local.json"
        while "Press Ctrl-C to stop." not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"leasefence local did not start:\n{self.output()[-3000:]}")
            time.sleep(0.2)
        self.state = json.loads(state_file.read_text())
        return self

    def output(self) -> str:
        path = self.folder / "stack.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


_ENTRY = "import sys; from leasefence_tools.cli import main; sys.argv[0] = 'leasefence'; main()"


def measure(
    operations: int = 400, workers: int = 16, api_environments: int | None = None
) -> dict[str, Any]:
    """One run (see the module docstring); ``api_environments``: the stack's
    ``--api-environments`` (None: its default, as ``make run`` starts it)."""
    from leasefence.client import LeaseFenceClient

    load_before = os.getloadavg()
    args = () if api_environments is None else ("--api-environments", str(api_environments))
    with (
        tempfile.TemporaryDirectory(prefix="leasefence-bench-") as tmp,
        _Stack(Path(tmp), args) as stack,
    ):
        base_url, endpoint = stack.state["base_url"], stack.state["dynamodb_endpoint"]
        token, pid = stack.state["token"], int(stack.state["pid"])
        producer = LeaseFenceClient(base_url, token)
        run = uuid.uuid4().hex[:8]
        started = time.perf_counter()
        for i in range(operations):
            producer.enqueue(f"bench-{run}-{i}", JOB_TYPE, {"n": i})
        enqueue_s = time.perf_counter() - started

        calls: dict[str, list[float]] = {route: [] for route in ROUTES}
        done: list[int] = []
        errors: list[str] = []
        lock = threading.Lock()

        def work(number: int) -> None:
            client = LeaseFenceClient(base_url, token)
            worker_id = f"bench-worker-{number}"
            try:
                while True:
                    t0 = time.perf_counter()
                    claim = client.claim(worker_id, 60, [JOB_TYPE])
                    t1 = time.perf_counter()
                    if claim is None:
                        return
                    client.heartbeat(claim.operation_id, claim.fence, worker_id)
                    t2 = time.perf_counter()
                    client.complete(claim.operation_id, claim.fence, "done")
                    t3 = time.perf_counter()
                    with lock:
                        for route, seconds in zip(ROUTES, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                            calls[route].append(seconds)
                        done.append(1)
            except Exception as error:  # noqa: BLE001 - reported, never a silent short run
                with lock:
                    errors.append(f"{type(error).__name__}: {error}"[:200])

        for url in (base_url, endpoint):
            _timings(url, reset=True)
        cpu_before = _cpu_seconds(pid)
        threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        cpu_after = _cpu_seconds(pid)
        api_timings = _timings(base_url)
        handler = api_timings["handler"]
        environments = api_timings.get("environments", {})
        endpoint_times = _timings(endpoint)
    lifecycles = len(done)
    own = under = cpu = None
    if cpu_before is not None and cpu_after is not None:
        own, under = (after - before for after, before in zip(cpu_after, cpu_before, strict=True))
        cpu = own + under
    return {
        "stack": "leasefence local --samples (its own process, "
        + ("default options)" if not args else " ".join(args) + ")"),
        "operations": operations,
        "workers": workers,
        "lifecycle": "claim (naming the job type), heartbeat, complete: three HTTP calls",
        "lifecycles": lifecycles,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "lifecycles_per_s": round(lifecycles / elapsed, 1) if elapsed else None,
        "target_per_s": TARGET_PER_S,
        "enqueue_per_s": round(operations / enqueue_s, 1) if enqueue_s else None,
        "client_p50_ms": {
            route: round(statistics.median(values) * 1000, 1) if values else None
            for route, values in calls.items()
        },
        "stack_cpu_ms_per_lifecycle": _per(cpu, lifecycles),
        # Of which the stack's own process (HTTP API, embedded endpoint, stream functions,
        # sweeper) and the processes under it (the API function's execution environments).
        "stack_process_cpu_ms_per_lifecycle": _per(own, lifecycles),
        "environments_cpu_ms_per_lifecycle": _per(under, lifecycles),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "handler": handler,
        "environments": {name: int(row["count"]) for name, row in environments.items()},
        "endpoint": endpoint_times,
    }


def _per(seconds: float | None, lifecycles: int) -> float | None:
    return round(seconds * 1000 / lifecycles, 1) if seconds is not None and lifecycles else None


def render(result: dict[str, Any]) -> str:
    """The section as text: the rate, then per route and per endpoint operation."""
    p50 = result["client_p50_ms"]
    lines = [
        f"local stack, {result['workers']} HTTP workers, {result['lifecycles']} lifecycles "
        f"({result['lifecycle']}): {result['lifecycles_per_s']} lifecycles/s "
        f"(target {result['target_per_s']:g}); client p50 "
        + ", ".join(f"{route} {p50[route]} ms" for route in ROUTES),
        f"  stack CPU {result['stack_cpu_ms_per_lifecycle']} ms per lifecycle (its process "
        f"{result['stack_process_cpu_ms_per_lifecycle']}, the API function's environments "
        f"{result['environments_cpu_ms_per_lifecycle']}); load average "
        f"{result['load_average_before'][0]} before, {result['load_average_after'][0]} after "
        f"({result['cpu_count']} CPUs); enqueue {result['enqueue_per_s']}/s from one client",
        "  in the handler (p50 / mean ms, count):",
    ]
    if result.get("environments"):
        lines.insert(
            2,
            "  API function's execution environments (invocations each): "
            + ", ".join(f"{n}" for n in result["environments"].values()),
        )
    for name, row in result["handler"].items():
        lines.append(
            f"    {name:45s} {row['p50_ms']:7.2f} / {row['mean_ms']:7.2f}  {row['count']:6d}"
        )
    lines.append("  in the embedded endpoint, held (waited for its turn), p50 / mean ms, count:")
    held, waited = result["endpoint"]["held"], result["endpoint"]["waited"]
    for name, row in held.items():
        wait = waited.get(name, {})
        lines.append(
            f"    {name:45s} {row['p50_ms']:7.2f} / {row['mean_ms']:7.2f}  {row['count']:6d}"
            f"  ({wait.get('p50_ms', 0):.2f} / {wait.get('mean_ms', 0):.2f})"
        )
    if result["errors"]:
        lines.append(f"  errors: {len(result['errors'])}, first: {result['errors'][0]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m leasefence_tools.bench.local_stack [--operations N] [--workers N] [--json]``"""
    import argparse

    parser = argparse.ArgumentParser(prog="leasefence bench --only local-stack")
    parser.add_argument("--operations", type=int, default=400)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument(
        "--api-environments", type=int, default=None, help="the stack's (default: its own)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.operations, args.workers, args.api_environments)
    print(json.dumps(result) if args.json else render(result))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
