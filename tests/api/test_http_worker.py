"""The worker runtime over the HTTP API: the same handlers as in-process, the same safety."""

from __future__ import annotations

import threading
import time

from leasefence.demo.kits import Hooks, IdempotentApiKit
from leasefence.worker import Worker
from leasefence.worker.http_backend import HttpBackend


def http_worker(sdk, tenant, kit, name, lease_ms=1_000):
    return Worker(HttpBackend(sdk, tenant), {kit.job_type: kit.handler()}, worker_id=name,
                  lease_ms=lease_ms, heartbeat_interval_ms=10_000, idle_sleep_ms=20)


def test_http_worker_runs_a_job_and_a_stalled_one_is_refused(sdk, tenant):
    hooks = Hooks()
    kit = IdempotentApiKit(hooks=hooks)
    for op in ("plain", "zombie"):
        sdk.enqueue(op, kit.job_type, {"to": op}, target_class="C")
    rescued = threading.Event()

    def stall(job):
        time.sleep(1.2)  # past the 1 s lease, while another worker takes over
        assert rescued.wait(10)

    first = http_worker(sdk, tenant, kit, "w1")
    hooks.on_before(tenant, "zombie", 1, stall)
    zombie_job = {}

    claim = first.backend.client.claim("w1", lease_seconds=1, job_types=[kit.job_type], operation_id="zombie")
    assert claim is not None and claim.fence == 1

    def run_zombie():
        zombie_job["job"] = first.process(first.backend._claim(claim, "w1", 1_000))

    thread = threading.Thread(target=run_zombie)
    thread.start()
    second = http_worker(sdk, tenant, kit, "w2")
    deadline = time.monotonic() + 10
    done = 0
    while done < 2 and time.monotonic() < deadline:
        if second.run_once():
            done += 1
        else:
            time.sleep(0.05)
    rescued.set()
    thread.join(10)
    assert done == 2  # "plain", then "zombie" taken over after its lease lapsed
    assert zombie_job["job"].cancelled.is_set()  # the zombie's completion was refused: 409 stale_fence
    for op in ("plain", "zombie"):
        assert sdk.get(op).state == "succeeded"
        assert kit.effects(tenant, op) == 1
    assert sdk.get("zombie").fence == 2 and kit.attempts_at_target(tenant, "zombie") == 2
