"""The worker runtime over the HTTP API: the same handlers as in-process, the same safety."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime

import pytest
from tests.support.proxy import FaultyProxy

from leasefence.client import LeaseFenceClient
from leasefence_tools.testing.kits import Hooks, IdempotentApiKit
from leasefence.errors import Unavailable
from leasefence.targets import fenced_table
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import FunctionHandler, Job, LostOwnership, Worker
from leasefence.worker import http_backend
from leasefence.worker.http_backend import CLAIM_TOKEN_PATIENCE_S, HttpBackend


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


# ---------------------------------------------------------------- the lease as granted


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


def _ledger(ddb):
    name = f"ledger-http-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def test_the_http_backend_claims_with_the_granted_lease_and_the_servers_claim_time(sdk, tenant):
    sdk.put_job_type("short", {"target_class": "B", "lease_seconds": 1, "max_lease_seconds": 2})
    sdk.enqueue("op", "short", {"n": 1})
    claim = HttpBackend(sdk, tenant).claim_next("w1", 60_000, ["short"])  # asks for 60 s
    assert claim is not None and claim.lease_ms == 2_000  # granted: the job type's maximum
    assert claim.claimed_at is not None
    assert claim.claimed_at + claim.lease_ms == claim.lease_expires_at
    assert sdk.get("op").lease_expires_at == datetime.fromtimestamp(claim.lease_expires_at / 1000, UTC)


def test_a_cut_lease_never_lets_a_stalled_predecessors_write_through_a_pruned_fence_entry(sdk, tenant, ddb):
    """The issue's scenario. The job type allows 1 s. The predecessor asks for 1 s, claims,
    raises the target's fence and stalls. A worker asking for 60 s takes over (granted 1 s) and
    raises the fence; another operation's write prunes the victim's entry. The horizon is the
    successor's claim time: with the requested lease it came out 59 s early, before the
    predecessor's claim, and the predecessor's stale write passed. With the server's claim time
    it is refused."""
    sdk.put_job_type("ledger", {"target_class": "B", "lease_seconds": 1, "max_lease_seconds": 1})
    events = Events()
    table = FencedTable(ddb, _ledger(ddb), events=events, max_entries=2)
    account = {"pk": "acct-1"}
    backend = HttpBackend(sdk, tenant)
    sdk.enqueue("victim", "ledger", {"cents": 100})
    predecessor = Job(backend.claim_next("w1", 1_000, ["ledger"]), backend, events)
    table.raise_fence(predecessor, account)  # ... and stalls past its lease
    time.sleep(1.1)
    successor = Job(backend.claim_next("w2", 60_000, ["ledger"]), backend, events)
    assert (successor.operation_id, successor.fence) == ("victim", 2)
    table.raise_fence(successor, account)
    table.write(successor, account, {"balance": 100})
    sdk.enqueue("other", "ledger", {"cents": 5})
    other = Job(backend.claim_next("w3", 1_000, ["ledger"]), backend, events)
    assert other.operation_id == "other"
    table.write(other, account, {"balance": 105})
    state = table.fence_state(account)
    victim_entry = fenced_table.fence_attribute(tenant, "victim")
    assert victim_entry not in state.entries and state.horizon is not None  # pruned
    with pytest.raises(LostOwnership):
        table.write(predecessor, account, {"balance": -1})  # the stalled predecessor wakes up
    assert state.horizon == successor.claim.claimed_at >= predecessor.claim.claimed_at + 1_000
    assert table.read(account)["balance"] == 105 and events["TargetHorizonRefusals"] == 1


def test_an_http_worker_renews_within_the_lease_the_catalogue_granted(sdk, tenant):
    """The worker asks for 60 s (renewing every 20 s); the catalogue grants 2 s. Its healthy job
    renews within those 2 s and keeps its claim; a job that stops making progress is reported
    stalled once the granted 2 s have run out."""
    sdk.put_job_type("short", {"target_class": "C", "lease_seconds": 2, "max_lease_seconds": 2})
    sdk.enqueue("healthy", "short", {"n": 1})
    events = Events()
    stolen = []

    def healthy(job):
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline:
            job.progress()
            grab = sdk.claim("w2", job_types=["short"])  # a competitor, all along
            if grab is not None:
                stolen.append(grab)
            time.sleep(0.05)
        return "done"

    worker = Worker(HttpBackend(sdk, tenant), {"short": FunctionHandler(healthy)}, worker_id="w1",
                    lease_ms=60_000, idle_sleep_ms=20, events=events)
    assert worker.run_once()
    assert stolen == [] and events.get("Heartbeats", 0) >= 3
    op = sdk.get("healthy")
    assert (op.state, op.fence, op.attempts) == ("succeeded", 1, 1)

    sdk.enqueue("stuck", "short", {"n": 2})
    quiet = Events()

    def stuck(job):  # no progress, until the stall was reported
        deadline = time.monotonic() + 10
        while "StalledClaims" not in quiet and time.monotonic() < deadline:
            time.sleep(0.02)
        return "done"

    started = time.monotonic()
    Worker(HttpBackend(sdk, tenant), {"short": FunctionHandler(stuck)}, worker_id="w3",
           lease_ms=60_000, idle_sleep_ms=20, events=quiet).run_once()
    assert quiet.get("StalledClaims") == 1 and time.monotonic() - started < 8


def test_the_http_backend_resends_an_unanswered_claim_with_its_token(stack, token, sdk, tenant):
    """Every answer to the worker's claim request is lost (the SDK's resends too): the claim was
    made but the worker saw only Unavailable. Its next claim sends the same token and gets that
    claim (same fence, no attempt spent) instead of nothing while the first lapses."""
    sdk.enqueue("only", "job", {"n": 1}, max_attempts=1, target_class="D")
    proxy = FaultyProxy(stack.base_url, lambda method, path, n: "drop" if path == "/v1/claims" and n < 3 else None)
    try:
        backend = HttpBackend(LeaseFenceClient(proxy.url, token, retries=2, backoff=0.001), tenant)
        with pytest.raises(Unavailable):
            backend.claim_next("w1", 30_000, ["job"])
        assert sdk.get("only").state == "claimed"  # it was made, the worker never heard
        claim = backend.claim_next("w1", 30_000, ["job"])
        assert claim is not None and (claim.operation_id, claim.fence, claim.attempts) == ("only", 1, 1)
        assert proxy.count("POST", "/v1/claims") == 4
        assert backend.claim_next("w1", 30_000, ["job"]) is None  # a new request: a new token
    finally:
        proxy.close()
    op = sdk.get("only")
    assert (op.state, op.fence, op.attempts, op.lease_owner) == ("claimed", 1, 1, "w1")


def test_the_http_backend_gives_up_a_claim_token_once_no_request_with_it_can_still_run(monkeypatch):
    """A resend answered 503 "in progress" (the first request's claim undecided) keeps its token;
    once no request with it can still be running (twice API Gateway's 30 s limit from the first
    send) the token is given up, so a first request that died never stalls the worker."""
    sent, now = [], [1_000.0]

    class InProgress:
        def claim(self, worker_id, **request):
            sent.append(request["claim_token"])
            raise Unavailable("a claim-next with this claim token is in progress: send it again")

    monkeypatch.setattr(http_backend.time, "monotonic", lambda: now[0])
    backend = HttpBackend(InProgress(), "acme")
    for step in (0.0, 10.0, CLAIM_TOKEN_PATIENCE_S - 10.0, 1.0):
        now[0] += step
        with pytest.raises(Unavailable):
            backend.claim_next("w1", 30_000)
    assert sent[0] == sent[1] == sent[2] != sent[3]


# ---------------------------------------------------------------- the payload in the claim answer


def test_an_http_worker_takes_the_payload_from_the_claim_answer_and_sends_no_payload_request(stack, token, sdk, tenant):
    """The claim answer carries the stored payload: the worker's handler gets it and the worker
    sends no GET .../payload (counted at a proxy in front of the API). A claim without it (a server
    older than the field, here the same claim with the field taken off) falls back to the GET."""
    import dataclasses

    payload = {"to": "pii-value-xyz", "items": [1, 2.5, "ü"]}
    sdk.enqueue("carried-1", "carry", payload)
    proxy = FaultyProxy(stack.base_url, lambda method, path, n: None)
    seen = []
    try:
        backend = HttpBackend(LeaseFenceClient(proxy.url, token, retries=2, backoff=0.001), tenant)
        worker = Worker(backend, {"carry": FunctionHandler(lambda job: seen.append(job.payload) or "done")},
                        worker_id="w1", lease_ms=30_000, heartbeat_interval_ms=10_000, idle_sleep_ms=20)
        assert worker.run_once()
        assert seen == [payload]
        assert sdk.get("carried-1").state == "succeeded"
        assert [p for m, p, _ in proxy.seen if m == "GET"] == []
        assert proxy.count("POST", "/v1/claims") == 1

        sdk.enqueue("carried-2", "carry", payload)
        grant = backend.claim_next("w2", 30_000, ["carry"])
        assert grant is not None and grant.payload == payload
        assert "pii-value-xyz" not in repr(grant)  # a claim may be logged; its payload never is
        sdk.enqueue("carried-3", "carry", payload)
        raw = backend.client.claim("w3", operation_id="carried-3")
        assert raw is not None and raw.payload == payload and "pii-value-xyz" not in repr(raw)
        older = dataclasses.replace(grant, payload=None)
        assert backend.load_payload(older) == payload
        assert proxy.count("GET", "/v1/operations/carried-2/payload") == 1
    finally:
        proxy.close()


# ---------------------------------------------------------------- lost answers within the lease


def _held(path_end: str):
    """A proxy plan: the first request whose path ends so is forwarded, its answer held back."""
    return lambda method, path, n: "hold" if path.endswith(path_end) and n == 0 else None


def test_one_lost_heartbeat_answer_does_not_cost_an_http_worker_its_lease(stack, token, sdk, tenant):
    """Issue 34, finding 1. The first heartbeat's answer never comes (the proxy holds it). The
    SDK's defaults would wait 10 s for it, far past the 3 s lease; bounded by the lease, the
    renewer's call gives up on that try after a third of it and tries again in time: a
    competitor claiming all along never gets the operation, which succeeds under fence 1."""
    sdk.enqueue("held-hb", "hb", {"n": 1}, target_class="C")
    stolen = []

    def busy(job):
        deadline = time.monotonic() + 4.5
        while time.monotonic() < deadline:
            job.progress()
            grab = sdk.claim("w2", operation_id="held-hb")
            if grab is not None:
                stolen.append(grab)
            time.sleep(0.05)
        return "done"

    proxy = FaultyProxy(stack.base_url, _held("/heartbeat"))
    try:
        backend = HttpBackend(LeaseFenceClient(proxy.url, token), tenant)  # the SDK's defaults
        worker = Worker(backend, {"hb": FunctionHandler(busy)}, worker_id="w1", lease_ms=3_000, idle_sleep_ms=20)
        assert worker.run_once()
        assert stolen == []
        assert [a for _, p, a in proxy.seen if p.endswith("/heartbeat")][0] == "hold"
        assert proxy.count("POST", "/v1/operations/held-hb/heartbeat") >= 3
    finally:
        proxy.close()
    op = sdk.get("held-hb")
    assert (op.state, op.fence, op.attempts) == ("succeeded", 1, 1)


def test_a_lost_claim_answer_is_asked_again_within_the_lease(stack, token, sdk, tenant):
    """The claim's answer never comes: the SDK tries again with the same claim token after a
    third of the lease asked for (not its 10 s default) and gets that claim, still live."""
    sdk.enqueue("held-claim", "hc", {"n": 1}, target_class="C")
    proxy = FaultyProxy(stack.base_url, _held("/v1/claims"))
    try:
        backend = HttpBackend(LeaseFenceClient(proxy.url, token), tenant)
        claim = backend.claim_next("w1", 3_000, ["hc"])
        answered_at = time.time_ns() // 1_000_000
    finally:
        proxy.close()
    assert claim is not None and (claim.operation_id, claim.fence, claim.attempts) == ("held-claim", 1, 1)
    assert answered_at < claim.lease_expires_at  # answered while its lease still held
    assert proxy.count("POST", "/v1/claims") == 2
    assert sdk.get("held-claim").lease_owner == "w1"
