"""The API function in more than one execution environment (processes of the local stack's, as
Lambda runs concurrent invocations): concurrent requests are served side by side, each answer and
each log line belongs to its own request, and an environment that dies is replaced."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter

import pytest

from leasefence.client import LeaseFenceClient
from leasefence.observability import tag
from leasefence_tools.local.lambda_log import FILE, LambdaLog
from leasefence_tools.local.server import LocalStack
from leasefence_tools.local.tokens import ALL_SCOPES

REQUESTS_PER_THREAD = 6


@pytest.fixture(scope="module")
def stack(aws):
    with LocalStack(
        port=0,
        aws=aws,
        table_name="environments-operations",
        bucket="environments-payloads",
        sweep_interval=None,
        api_environments=2,
    ) as running:
        assert running.environments is not None
        running.environments.warm(2)  # both started: which serves what is then up to the requests
        yield running


def _request_lines(path) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("message") == "request"]


def test_two_environments_serve_concurrent_requests_and_keep_each_requests_state_apart(
    stack, tmp_path
):
    tenants = [f"envs-{uuid.uuid4().hex[:8]}-{side}" for side in ("a", "b")]
    clients = {t: LeaseFenceClient(stack.base_url, stack.token(t, ALL_SCOPES)) for t in tenants}
    mismatches: list[str] = []
    errors: list[str] = []
    start = threading.Barrier(8)

    def run(tenant: str, number: int) -> None:
        client = LeaseFenceClient(stack.base_url, stack.token(tenant, ALL_SCOPES))
        start.wait()
        try:
            for i in range(REQUESTS_PER_THREAD):
                operation_id = f"{tenant}-{number}-{i}"
                created = client.enqueue(operation_id, "envs-job", {"tenant": tenant, "i": i})
                read = client.get(operation_id)
                # The operation ids are the tenant's own: another tenant's would be a 404.
                if not created.created or {created.operation.operation_id, read.operation_id} != {
                    operation_id
                }:
                    mismatches.append(f"{operation_id}: {created}, {read}")
        except Exception as error:  # noqa: BLE001 - collected, asserted below
            errors.append(repr(error))

    before, relayed = stack.environment_timings.snapshot(), stack.environments.relayed
    with LambdaLog(tmp_path / FILE) as log:
        threads = [threading.Thread(target=run, args=(tenants[n % 2], n)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    after = stack.environment_timings.snapshot()
    assert errors == [] and mismatches == []
    for tenant in tenants:  # each tenant sees its own operations, all of them, and no other's
        listed = {op.operation_id for op in clients[tenant].iter_operations()}
        assert len(listed) == 4 * REQUESTS_PER_THREAD
        assert all(op_id.startswith(tenant) for op_id in listed)
    served = {
        name: row["count"] - before.get(name, {}).get("count", 0) for name, row in after.items()
    }
    assert set(served) == {"api environment 1", "api environment 2"}
    assert all(count > 0 for count in served.values())  # side by side: both took requests
    assert sum(served.values()) == 8 * 2 * REQUESTS_PER_THREAD
    # Their store calls came to the stack's endpoint through their pipes (an enqueue writes, a
    # read reads: at least one call a request), not over HTTP.
    assert stack.environments.relayed - relayed >= 8 * 2 * REQUESTS_PER_THREAD
    # Each request's log line, written in its environment, came back with its own answer: one
    # line per request, a correlation id each, and the tenant tag (the stack's hash key, handed
    # to every environment) of the tenant that made it.
    lines = _request_lines(log.path)
    assert len(lines) == 8 * 2 * REQUESTS_PER_THREAD
    assert len({line["correlation_id"] for line in lines}) == len(lines)
    assert Counter(line["tenant"] for line in lines) == {
        tag(t): 4 * 2 * REQUESTS_PER_THREAD for t in tenants
    }


def test_an_environment_that_dies_is_replaced_and_requests_go_on(stack):
    environments = stack.environments
    started, pids = environments.started, environments.pids
    os.kill(pids[1], signal.SIGKILL)
    client = LeaseFenceClient(stack.base_url, stack.token(f"envs-{uuid.uuid4().hex[:8]}"))
    statuses = []
    for i in range(4):  # environments are taken in turn: the dead one is among them
        try:
            client.enqueue(f"after-{i}", "envs-job", {"i": i})
            statuses.append(200)
        except Exception as error:  # noqa: BLE001 - the invocation that found it dead
            statuses.append(getattr(error, "status", repr(error)))
    assert statuses.count(200) >= 3
    deadline = time.monotonic() + 120  # a bound on the replacement's cold start, not a speed
    while environments.started == started and time.monotonic() < deadline:
        time.sleep(0.1)
    assert environments.started == started + 1
    assert pids[1] not in environments.pids.values()
    assert environments.running == 2
    assert client.get("after-3").state == "queued"
