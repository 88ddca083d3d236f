"""HTTP requests per lifecycle for a busy fleet of HTTP workers: one request per call against
the batch routes (issue 33's target for a busy batched worker: at most 1.5).

``python -m leasefence_tools.bench.batched_http [--operations N] [--workers N] [--json]`` starts a
local stack in this process (embedded endpoint, free ports, no sweeper), and for each mode, on a
tenant of its own:

* ``one_at_a_time``: ``enqueue`` per operation, workers over ``HttpBackend(client, tenant)``;
* ``batched``: ``enqueue_batch`` (25 a request), workers over ``HttpBackend(..., batched=True)``
  (claims, renewals and closing writes shared across the fleet).

``workers`` threads, each a :class:`~leasefence.worker.Worker` sharing one backend, run jobs
whose handler reports progress every 50 ms for half to one and a half times ``job_ms`` (drawn
from a seeded generator, so that the workers fall out of step as a real fleet's do; the leases
are renewed: the lease is ``lease_ms``, renewed every third of it), until every operation has
ended. Every HTTP request the
SDK sends is counted by its route; a lifecycle is one operation from enqueue to its closing
write. The queue holds ``2 x workers`` operations more than the run ends, so the fleet is busy
to the end (a busy fleet's figure: no idle polls); ``requests_per_lifecycle`` is the enqueue
requests per operation enqueued plus every other request per lifecycle ended. Each try is a
request (a resend after a lost or late answer counts again: ``unanswered_requests`` says how
many tries went unanswered in time or were answered 5xx); ``items_per_request`` is what a request
of each route carried on average.

``leasefence bench`` runs it (the section ``batched_http``; 160 lifecycles a mode, 24 with
``--quick``), and prices the batched fleet's requests all in (:func:`fleet_figures`,
:mod:`~leasefence_tools.bench.allin`).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import Counter
from typing import Any

from leasefence.api.security import match_route
from leasefence.client import LeaseFenceClient
from leasefence.client_batch import ROUND_LISTS
from leasefence.worker import FunctionHandler, Worker
from leasefence.worker.http_backend import HttpBackend
from leasefence_tools.bench.quiet import functions_off_stdout

JOB_TYPE = "bench-batched"
ENQUEUE_ROUTES = ("POST /v1/operations", "POST /v1/batch/enqueue")
#: Issue 33's target: HTTP requests per lifecycle for a busy batched worker.
TARGET_REQUESTS = 1.5


HEARTBEAT_ROUTES = ("POST /v1/operations/{id}/heartbeat", "POST /v1/batch/heartbeat")
#: The fleet's round route, and the name its rounds that carried nothing but renewals are
#: counted under (a renewal that rides with a claim or a close costs no request of its own).
ROUND_ROUTE = "POST /v1/batch/work"
RENEWAL_ROUNDS = "POST /v1/batch/work (renewals only)"
#: A round's claims granted (answered 200), and those of them that named a close of the same
#: round (``after``): their markers rode with its payload expiry.
GRANTED = "claims granted"
AFTER = "claims granted after a close"


class CountingClient(LeaseFenceClient):
    """The SDK, counting each request it sends by its route (``POST /v1/batch/claim``), and the
    items it carried (one for a route that is not a batch)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        #: Requests whose answer never came in time (resent: counted again) or was a 5xx.
        self.unanswered: Counter[str] = Counter()
        #: Rounds' claims granted, and those of them that named a close of their round.
        self.granted: Counter[str] = Counter()
        self._count_lock = threading.Lock()

    def _once(self, method: str, path: str, body: Any, timeout: float) -> Any:
        matched = match_route(method, path.split("?", 1)[0])
        route = matched[0].key if matched else f"{method} {path}"
        kinds = {"items": 1}
        if route == ROUND_ROUTE:  # a round: counted apart when it carried renewals only
            kinds = {kind: len(body.get(kind) or []) for kind in ROUND_LISTS}
            if kinds["finish"] == kinds["claim"] == 0:
                route = RENEWAL_ROUNDS
        elif isinstance(body, dict) and isinstance(body.get("items"), list):
            kinds = {"items": len(body["items"])}
        with self._count_lock:
            self.sent[route] += 1
            self.items[route] += sum(kinds.values())
            for kind, n in kinds.items():
                if kind != "items":
                    self.items[f"{route}: {kind}"] += n
        try:
            answer = super()._once(method, path, body, timeout)
        except Exception:
            with self._count_lock:
                self.unanswered[route] += 1
            raise
        if answer[0] >= 500:
            with self._count_lock:
                self.unanswered[route] += 1
        elif route == ROUND_ROUTE and answer[0] == 200:
            # The claims granted, and those of them whose marker rode with a close (``after``).
            granted = [
                sent.get("after")
                for sent, result in zip(body["claim"], json.loads(answer[2])["claim"], strict=True)
                if result["status"] == 200
            ]
            with self._count_lock:
                self.granted[GRANTED] += len(granted)
                self.granted[AFTER] += sum(1 for after in granted if after)
        return answer


def _run_mode(
    stack: Any,
    tenant: str,
    batched: bool,
    operations: int,
    workers: int,
    job_ms: int,
    lease_ms: int,
) -> dict[str, Any]:
    from leasefence_tools.local.tokens import ALL_SCOPES

    client = CountingClient(stack.base_url, stack.token(tenant, ALL_SCOPES))
    # A backlog past the run's end: the fleet stays busy (no idle polls) to the last lifecycle.
    items: list[dict[str, Any]] = [
        {"operation_id": f"op-{i}", "job_type": JOB_TYPE, "payload": {"n": i}}
        for i in range(operations + 2 * workers)
    ]
    if batched:
        refused = [r for r in client.enqueue_batch(items) if not r.ok]
        if refused:
            raise RuntimeError(f"{len(refused)} enqueues refused")
    else:
        for item in items:
            client.enqueue(item["operation_id"], JOB_TYPE, item["payload"])
    done = threading.Semaphore(0)
    finished = [0]
    lock = threading.Lock()

    durations = random.Random(7)  # the same jobs in both modes

    def job(running: Any) -> str:
        with lock:
            seconds = job_ms / 1000 * durations.uniform(0.5, 1.5)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            running.progress()
            time.sleep(0.05)
        with lock:
            finished[0] += 1
        done.release()
        return "ok"

    backend = HttpBackend(client, tenant, batched=batched)
    fleet = [
        Worker(
            backend,
            {JOB_TYPE: FunctionHandler(job)},
            worker_id=f"w{i}",
            lease_ms=lease_ms,
            idle_sleep_ms=50,
            idle_max_sleep_ms=50,
        )
        for i in range(workers)
    ]
    started = time.monotonic()
    threads = [
        threading.Thread(target=w.run, kwargs={"until": lambda: finished[0] >= operations})
        for w in fleet
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    elapsed = time.monotonic() - started
    # Enqueues per operation enqueued, every other request per lifecycle ended.
    by_route = {
        route: n / (len(items) if route in ENQUEUE_ROUTES else finished[0])
        for route, n in sorted(client.sent.items())
    }
    return {
        "operations": finished[0],
        "workers": workers,
        "requests": sum(client.sent.values()),
        "requests_per_lifecycle": round(sum(by_route.values()), 3),
        "by_route": {route: round(n, 3) for route, n in by_route.items()},
        # Items a request carried on average, by route (claims, leases, closing writes; a
        # round's by kind too).
        "items_per_request": {
            route: round(client.items[route] / client.sent[route.split(": ")[0]], 2)
            for route in sorted(client.items)
        },
        # The share of the rounds' claims granted whose marker rode with a close (``after``).
        "claims_after_close": round(client.granted[AFTER] / max(1, client.granted[GRANTED]), 3),
        # Of those requests, the ones unanswered in time or answered 5xx (each try counted):
        # a loaded machine's, which AWS's latency would not see.
        "unanswered_requests": sum(client.unanswered.values()),
        "seconds": round(elapsed, 2),
    }


def fleet_figures(result: dict[str, Any]) -> dict[str, float]:
    """What the all-in model (:mod:`leasefence_tools.bench.allin`) takes from the batched fleet:
    its requests per lifecycle besides renewals (enqueue, claim, finish; every claim request,
    empty ones included; a round that carried a claim or a close), and the leases renewed per
    request of renewals alone (every lease renewed, over the requests that carried nothing
    else: a renewal that rides with a claim or a close adds none; 1 when the run renewed
    none: one request a lease, the most)."""
    batched = result["batched"]
    by_route, per_request = batched["by_route"], batched["items_per_request"]
    renewals = [r for r in (*HEARTBEAT_ROUTES, RENEWAL_ROUNDS) if r in by_route]
    renewal_requests = sum(by_route[r] for r in renewals)
    # Leases renewed per lifecycle: alone or in rounds of every kind.
    renewed = sum(by_route[r] * per_request[r] for r in HEARTBEAT_ROUTES if r in by_route) + sum(
        by_route[r] * per_request.get(f"{r}: heartbeat", 0.0)
        for r in (ROUND_ROUTE, RENEWAL_ROUNDS)
        if r in by_route
    )
    return {
        "lifecycle_requests": round(sum(n for r, n in by_route.items() if r not in renewals), 4),
        # The share of the fleet's claims whose marker rode with a close (the all-in model
        # weighs the profile's paired and unpaired windows by it).
        "claims_after_close": batched.get("claims_after_close", 0.0),
        "renewal_requests": round(renewal_requests, 4),
        "leases_per_renewal": round(renewed / renewal_requests, 2) if renewal_requests else 1.0,
        "requests_per_lifecycle": batched["requests_per_lifecycle"],
        "workers": batched["workers"],
        "job_ms": result["job_ms"],
        "lease_ms": result["lease_ms"],
    }


def measure(
    operations: int = 200, workers: int = 8, job_ms: int = 600, lease_ms: int = 1500
) -> dict[str, Any]:
    """Both modes on one local stack (see the module's docstring)."""
    from leasefence_tools.local.server import LocalStack

    with (
        functions_off_stdout(),
        LocalStack(port=0, dynamodb_port=0, sweep_interval=None) as stack,
    ):
        result: dict[str, Any] = {
            mode: _run_mode(
                stack, f"bench-{mode}", mode == "batched", operations, workers, job_ms, lease_ms
            )
            for mode in ("one_at_a_time", "batched")
        }
    result["target_requests_per_lifecycle"] = TARGET_REQUESTS
    result["job_ms"], result["lease_ms"] = job_ms, lease_ms
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        f"HTTP requests per lifecycle, {result['batched']['workers']} workers, jobs of "
        f"{result['job_ms']} ms +-50%, leases of {result['lease_ms']} ms "
        f"(target for a busy batched worker: <= {result['target_requests_per_lifecycle']})"
    ]
    for mode in ("one_at_a_time", "batched"):
        figures = result[mode]
        routes = ", ".join(f"{route} {n:g}" for route, n in figures["by_route"].items())
        lines.append(
            f"  {mode}: {figures['requests_per_lifecycle']:g} ({routes}; "
            f"{figures['unanswered_requests']} unanswered in time or 5xx)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasefence_tools.bench.batched_http")
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--job-ms", type=int, default=600)
    parser.add_argument("--lease-ms", type=int, default=1500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.operations, args.workers, args.job_ms, args.lease_ms)
    print("\n" + (json.dumps(result) if args.json else render(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
