"""The runtime's part of "correct on real DynamoDB over real time": a missing payload is
quarantined (case 2), a busy store spends no attempt (case 5), the heartbeat thread never dies
silently (case 6), and the class-D intent survives checkpoints, lapses and requeues (case 7)."""

from __future__ import annotations

import itertools
import random
import time

import pytest
from botocore.exceptions import ClientError

from leasefence import Engine, State
from leasefence_tools.testing.kits import SameTableKit
from leasefence_tools.testing.faults import THROTTLE, FaultyClient
from leasefence.targets import single_shot
from leasefence.worker import EngineBackend, FunctionHandler, LostOwnership, Reconciled, Worker

H = "sha256:" + "9" * 64
T = "acme"
LEASE = 1_000
_names = itertools.count()


class Events(dict):
    def __call__(self, name, value):
        self[name] = self.get(name, 0) + value


class Crash(BaseException):
    """The worker process dies: no handler, no runtime code runs after this."""


class ThrottledTransactions(FaultyClient):
    """A FaultyClient whose next ``transact_write_items`` calls are cancelled as DynamoDB cancels
    a throttled transaction: ``TransactionCanceledException`` with per-action reasons (which
    botocore does not retry). Nothing is written."""

    def __init__(self, client, times=0):
        super().__init__(client)
        self.throttles_left = times
        self.transactions = 0

    def transact_write_items(self, **kwargs):
        self.transactions += 1
        if self.throttles_left > 0:
            self.throttles_left -= 1
            raise ClientError(
                {
                    "Error": {"Code": "TransactionCanceledException", "Message": "injected: throttled"},
                    "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}],
                },
                "TransactWriteItems",
            )
        return self._client.transact_write_items(**kwargs)


@pytest.fixture
def faulty(ddb):
    return ThrottledTransactions(ddb)


@pytest.fixture
def engine(faulty, spec, clock, events):
    return Engine(client=faulty, spec=spec, clock=clock, rng=random.Random(5), events=events)


def make_worker(engine, handlers, events=None, name="w1", interval_ms=50):
    return Worker(EngineBackend(engine, [T]), handlers, worker_id=name, lease_ms=LEASE,
                  heartbeat_interval_ms=interval_ms, idle_sleep_ms=20, events=events)


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ---------------------------------------------------------------------------------- case 2


@pytest.fixture
def payload_engine(aws, ddb, spec, clock, events):
    """An engine with a payload store on the embedded S3 (what the worker function runs)."""
    from leasefence.payloads import PayloadStore

    bucket = f"runtime-payloads-{next(_names)}"
    s3 = aws.client("s3")
    s3.create_bucket(Bucket=bucket)
    store = PayloadStore(bucket, secret="runtime-tests", client=s3)
    return Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(5), events=events, payloads=store)


def _enqueue_inline(engine, operation_id, payload):
    from leasefence.payloads import canonicalize

    canonical = canonicalize(payload)
    stored = engine.payloads.put(T, operation_id, canonical)
    engine.enqueue(T, operation_id, "job", canonical.hash, stored.ref, payload_inline=True)
    return stored


def test_the_payload_is_loaded_from_the_engine_by_default(payload_engine):
    _enqueue_inline(payload_engine, "op", {"to": "x@example.com"})
    seen = []
    worker = make_worker(payload_engine, {"job": FunctionHandler(lambda job: seen.append(job.payload) or "sent")})
    assert worker.run_once()
    assert seen == [{"to": "x@example.com"}]
    assert payload_engine.get(T, "op").state == State.SUCCEEDED


def _enqueue_kept(engine, operation_id, payload):
    from leasefence.payloads import canonicalize

    canonical = canonicalize(payload)
    engine.enqueue(T, operation_id, "job", canonical.hash, payload_json=canonical.body)


class _NoS3:
    def __getattr__(self, name):
        raise AssertionError(f"an S3 call ({name}) for a payload kept in the item")


def test_a_payload_kept_in_the_item_is_loaded_from_the_claim_with_no_s3_call(payload_engine, monkeypatch):
    """The worker function's path: the claim's own item carries the payload (no GET, no read)."""
    _enqueue_kept(payload_engine, "op", {"to": "x@example.com"})
    monkeypatch.setattr(payload_engine.payloads, "_client", _NoS3())
    seen = []
    worker = make_worker(payload_engine, {"job": FunctionHandler(lambda job: seen.append(job.payload) or "sent")})
    assert worker.run_once()
    assert seen == [{"to": "x@example.com"}]
    assert payload_engine.get(T, "op").state == State.SUCCEEDED


def test_an_erased_payload_kept_in_the_item_is_quarantined_never_none(payload_engine):
    _enqueue_kept(payload_engine, "op", {"amount": 1200})
    payload_engine.erase(T, "op")
    acted, events = [], Events()
    worker = make_worker(payload_engine, {"job": FunctionHandler(lambda job: acted.append(job.payload))},
                         events=events)
    assert worker.run_once()
    op = payload_engine.get(T, "op")
    assert op.state == State.QUARANTINED and op.reason.startswith("payload missing: ")
    assert acted == [] and events["PayloadMissing"] == 1


@pytest.mark.parametrize("how", ["erased", "object-deleted"])
def test_a_missing_payload_is_quarantined_never_none(payload_engine, how):
    """Case 2: job.payload raises PayloadMissing (never None); the runtime quarantines the
    operation with a clear reason and counts PayloadMissing; the handler never acts."""
    stored = _enqueue_inline(payload_engine, "op", {"amount": 1200})
    if how == "erased":
        payload_engine.erase(T, "op")
    else:  # gone under the engine's feet (a bucket lifecycle rule, a manual deletion)
        payload_engine.payloads.client.delete_object(Bucket=payload_engine.payloads.bucket, Key=stored.key)
    acted = []
    events = Events()

    def handler(job):
        payload = job.payload
        acted.append(payload)
        return "charged"

    worker = make_worker(payload_engine, {"job": FunctionHandler(handler)}, events=events)
    assert worker.run_once()
    op = payload_engine.get(T, "op")
    assert op.state == State.QUARANTINED, op
    assert op.reason.startswith("payload missing: ")
    assert acted == [] and events["PayloadMissing"] == 1
    assert op.attempts == 1 and op.fence == 1


class _DeniedReads:
    """The embedded S3 client, except that reads are refused (a bucket policy, role or KMS key
    misconfiguration) while ``code`` is set."""

    def __init__(self, client, code):
        self._client, self.code = client, code

    def get_object(self, **kwargs):
        if self.code:
            raise ClientError({"Error": {"Code": self.code, "Message": "injected"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject")
        return self._client.get_object(**kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.mark.parametrize("code", ["AccessDenied", "KMS.DisabledException"])
def test_a_payload_the_store_refuses_to_read_is_neither_quarantined_nor_failed(payload_engine, clock, code):
    """A permission or KMS fault reading the payload is not a missing payload: the runtime makes
    no quarantine and no fail write (the claim lapses as with a busy store), the refusal is
    counted as PayloadAccessDenied, and once the fault is fixed the next claim runs the job."""
    store = payload_engine.payloads
    _enqueue_inline(payload_engine, "op", {"amount": 1200})
    refusing = _DeniedReads(store.client, code)
    store._client = refusing
    counted = Events()
    store.events = counted
    acted = []
    events = Events()

    def handler(job):
        acted.append(job.payload)
        return "charged"

    # The next claim reconciles (as after any lapse): nothing was done, so the job runs.
    reconciled = []

    def reconcile(job):
        reconciled.append(job.claim.fence)
        return Reconciled.not_done()

    worker = make_worker(payload_engine, {"job": FunctionHandler(handler, reconcile)}, events=events)
    assert worker.run_once()
    op = payload_engine.get(T, "op")
    assert (op.state, op.attempts, op.reason) == (State.CLAIMED, 1, None), op
    assert acted == [] and "PayloadMissing" not in events
    assert events["AbandonedStoreUnavailable"] == 1 and counted["PayloadAccessDenied"] == 1

    refusing.code = None  # the operator fixes the policy or the key
    clock.advance(LEASE + 1)
    assert worker.run_once()
    op = payload_engine.get(T, "op")
    assert (op.state, op.attempts, op.outcome_code) == (State.SUCCEEDED, 2, "charged")
    assert acted == [{"amount": 1200}] and reconciled == [2]


# ---------------------------------------------------------------------------------- case 5


def test_a_throttled_class_a_transaction_spends_no_attempt(engine, faulty, ddb):
    """Case 5: TransactionCanceledException [ThrottlingError, None] twice: complete_with retries
    with backoff and the operation ends succeeded on its first attempt."""
    events = Events()
    kit = SameTableKit(ddb, f"orders-{next(_names)}")
    kit.setup(T, "refund-1")
    engine.enqueue(T, "refund-1", kit.job_type, H, target_class="A", max_attempts=2)
    faulty.throttles_left = 2
    worker = make_worker(engine, {kit.job_type: kit.handler()}, events=events)
    assert worker.run_once()
    op = engine.get(T, "refund-1")
    assert (op.state, op.attempts, op.fence) == (State.SUCCEEDED, 1, 1), op
    assert faulty.throttles_left == 0 and faulty.transactions == 3
    assert kit.order(T, "refund-1")["status"]["S"] == "refunded"
    assert events["StoreRetries"] == 2


def test_a_throttled_closing_write_is_retried_not_failed(engine, faulty):
    """Case 5: the closing write (complete) throttled twice: retried, not turned into fail()."""
    engine.enqueue(T, "op", "job", H, max_attempts=1)
    faulty.fail_next("update_item", THROTTLE, when=lambda kw: kw.get("ExpressionAttributeValues", {}).get(":cmd")
                     == {"S": "complete"}, times=2)
    worker = make_worker(engine, {"job": FunctionHandler(lambda job: "done")})
    assert worker.run_once()
    op = engine.get(T, "op")
    assert (op.state, op.attempts, op.outcome_code) == (State.SUCCEEDED, 1, "done"), op
    assert faulty.injected[THROTTLE] == 2


def test_a_store_that_stays_unavailable_leaves_the_claim_to_lapse(engine, faulty, clock):
    """Case 5: an Unavailable that survives the retries (here from the handler's own store
    call, on the last attempt) makes no fail write: the lease lapses and the sweeper parks the
    operation unknown for an operator, never failed_terminal."""
    from leasefence.errors import Unavailable

    events = Events()
    engine.enqueue(T, "op", "job", H, max_attempts=1)

    def handler(job):
        raise Unavailable("the business table is throttling")

    worker = make_worker(engine, {"job": FunctionHandler(handler)}, events=events)
    assert worker.run_once()
    op = engine.get(T, "op")
    assert (op.state, op.attempts, op.fence) == (State.CLAIMED, 1, 1), op  # no write at all
    assert events["AbandonedStoreUnavailable"] == 1
    clock.advance(LEASE)
    assert engine.sweep().swept == 1
    assert engine.get(T, "op").state == State.UNKNOWN


# ---------------------------------------------------------------------------------- case 6


def test_a_heartbeat_error_puts_the_job_in_lost_ownership_mode(engine, faulty):
    """Case 6: a checkpoint over 4 KiB makes the renewal raise InvalidInput: the job loses
    ownership (guard raises), HeartbeatErrors is counted, the thread ends, and no further write
    is made for that claim."""
    events = Events()
    engine.enqueue(T, "op", "job", H)
    guarded = []

    def handler(job):
        job.progress(checkpoint="x" * 5000)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                job.guard()
            except LostOwnership:
                guarded.append("stopped")
                raise
            time.sleep(0.01)
        return "finished anyway"

    worker = make_worker(engine, {"job": FunctionHandler(handler)}, events=events)
    claim = engine.claim_next(T, "w1", lease_ms=LEASE)
    calls = []
    faulty._chaos = lambda method, kwargs: calls.append(method)  # records every store call, injects nothing
    job = worker.process(claim)
    assert guarded == ["stopped"] and job.cancelled.is_set()
    assert [c for c in calls if c in ("update_item", "put_item", "transact_write_items", "delete_item")] == []
    assert job.lost_reason == "heartbeat failed: InvalidInput"
    assert events["HeartbeatErrors"] == 1 and events["AbandonedAfterLostOwnership"] == 1
    op = engine.get(T, "op")
    assert (op.state, op.fence, op.lease_owner, op.checkpoint) == (State.CLAIMED, 1, "w1", None), op
    with pytest.raises(LostOwnership):
        job.guard()


# ---------------------------------------------------------------------------------- case 7


def test_the_intent_survives_a_checkpoint_a_lapse_and_a_requeue(engine, clock):
    """Case 7: record_intent, then a checkpoint, then the worker dies and the lease lapses; the
    sweeper parks the operation unknown and an operator requeues it. The next claim sees the
    intent (not the checkpoint's), and reconcile parks it unknown instead of calling again."""
    engine.enqueue(T, "sms-1", "sms", H, target_class="D")
    calls = []

    def send(job):
        def call():
            calls.append(job.fence)
            job.progress(checkpoint={"sent_at_step": 3})  # a later checkpoint: overwrote the intent before
            _wait_for(lambda: engine.get(T, "sms-1").checkpoint == {"sent_at_step": 3})
            raise Crash()  # the worker process dies here: no closing write

        return single_shot.call_once(job, call, what="sms")

    first = make_worker(engine, {"sms": FunctionHandler(send, single_shot.reconcile)})
    with pytest.raises(Crash):
        first.run_once()
    assert calls == [1]
    assert engine.get(T, "sms-1").checkpoint == {"sent_at_step": 3}
    clock.advance(LEASE)
    assert engine.sweep().swept == 1  # class D has one attempt: parked unknown
    engine.resolve(T, "sms-1", "requeue", note="operator: check the provider, then retry")

    second = make_worker(engine, {"sms": FunctionHandler(send, single_shot.reconcile)}, name="w2")
    assert second.run_once()
    op = engine.get(T, "sms-1")
    assert calls == [1]  # not called again
    assert op.state == State.UNKNOWN and op.fence == 2
    assert op.reason == "intent recorded by fence 1; no lookup exists"
    assert op.intent == {"fence": 1, "what": "sms"}  # its own attribute: no checkpoint overwrote it


def test_reconcile_still_honours_an_intent_kept_in_the_checkpoint(engine, clock):
    """Operations recorded before the intent attribute existed kept it in the checkpoint."""
    engine.enqueue(T, "old-1", "sms", H, target_class="D")
    held = engine.claim_next(T, "w0", lease_ms=LEASE)
    engine.heartbeat(T, "old-1", held.fence, "w0", checkpoint={"intent_fence": 1, "intent": "call"})
    clock.advance(LEASE)
    engine.sweep()
    engine.resolve(T, "old-1", "requeue")
    calls = []
    worker = make_worker(engine, {"sms": FunctionHandler(lambda job: calls.append(1) or "sent", single_shot.reconcile)})
    assert worker.run_once()
    assert calls == [] and engine.get(T, "old-1").state == State.UNKNOWN


def test_a_worker_claiming_any_type_quarantines_what_it_cannot_run(engine):
    """Issue 11, case 3: with the filter, the "no handler" branch was unreachable and work of an
    unserved type waited forever. A worker that claims any type sends it to an operator."""
    engine.enqueue("acme", "typo", "refnud", "sha256:" + "1" * 64)
    engine.enqueue("acme", "real", "refund", "sha256:" + "1" * 64)
    ran = []
    handlers = {"refund": FunctionHandler(lambda job: ran.append(job.operation_id) or "ok")}
    filtered = Worker(EngineBackend(engine, ["acme"]), handlers, lease_ms=5_000)
    assert filtered.job_types == ["refund"]
    assert filtered.run_once() and ran == ["real"]
    assert not filtered.run_once()  # the typo is never claimed by a filtered worker
    any_type = Worker(EngineBackend(engine, ["acme"]), handlers, lease_ms=5_000, claim_any_type=True)
    assert any_type.job_types is None
    assert any_type.run_once()
    typo = engine.get("acme", "typo")
    assert typo.state == State.QUARANTINED and "no handler" in typo.reason
