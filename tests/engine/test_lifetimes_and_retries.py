"""Cases where main broke its own README on real DynamoDB over real time (issue 11), engine side.

Each test failed on the main this work started from (21866cf) and passes now:

1. identity forgotten after the TTL;      2. payloads expiring under live operations, payload keys
tied to the log-hash key;                 3. a job-type filter blocked by other types;
5. throttled transactions not transient;  8. a stale fence repeating a command got 200;
9. claim retries reusing the time computed before them.

TTL deletion is DynamoDB's: here a test deletes what DynamoDB would have deleted by then
(``reap``), with months passing on the manual clock.
"""

from __future__ import annotations

import json
import random

import pytest
from botocore.exceptions import ClientError

from leasefence import Engine, PayloadConflict, StaleFence, State, Unavailable
from leasefence.errors import InvalidInput, NotFound, PayloadMissing, StoreMisconfigured
from leasefence_tools.testing.faults import BEFORE, FaultyClient
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.schema import TTL_ATTRIBUTE
from leasefence.store import translate
from leasefence.targets import same_table

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64
T = "acme"
DAY = 86_400_000


def reap(ddb, spec, now_ms):
    """What DynamoDB's TTL would have deleted by ``now_ms``: every item whose TTL passed."""
    deleted = 0
    for page in ddb.get_paginator("scan").paginate(TableName=spec.table_name):
        for item in page["Items"]:
            ttl = item.get(TTL_ATTRIBUTE)
            if ttl is not None and int(ttl["N"]) * 1000 <= now_ms:
                ddb.delete_item(TableName=spec.table_name,
                                Key={"tenant_id": item["tenant_id"], "operation_id": item["operation_id"]})
                deleted += 1
    return deleted


def payload_engine(aws, spec, clock, bucket, secret=None, **options):
    store = PayloadStore(bucket, secret=secret, client=aws.client("s3"))
    return Engine(client=aws.client(), spec=spec, clock=clock, rng=random.Random(5), payloads=store, **options), store


def enqueue_inline(engine, store, operation_id, payload, **kwargs):
    canonical = canonicalize(payload)
    stored = store.put(T, operation_id, canonical)
    return engine.enqueue(T, operation_id, "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True, **kwargs)


# ---------------------------------------------------------------- case 1: identity outlives months


def test_a_late_replay_after_months_is_still_a_replay_and_no_fence_repeats(engine, ddb, spec, clock):
    engine.enqueue(T, "refund-1", "refund", H1, target_class="B")
    first = engine.claim_next(T, "w1")
    engine.complete(T, "refund-1", first.fence, "refunded")
    clock.advance(45 * DAY)  # past the old 30-day TTL, well inside the identity retention
    assert reap(ddb, spec, clock()) == 0
    replay = engine.enqueue(T, "refund-1", "refund", H1, target_class="B")
    assert not replay.created and replay.operation.state == State.SUCCEEDED
    assert engine.claim_next(T, "w2") is None  # nothing new scheduled: fence 1 is never handed out again
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "refund-1", "refund", H2)


def test_the_identity_window_is_stated_and_forever_is_possible(aws, spec, clock, ddb):
    windowed = Engine(client=ddb, spec=spec, clock=clock, identity_retention_ms=400 * DAY)
    windowed.enqueue(T, "a", "refund", H1)
    windowed.complete(T, "a", windowed.claim(T, "a", "w").fence, "ok")
    ttl = int(windowed.store.get({"tenant_id": T, "operation_id": "a"})[TTL_ATTRIBUTE])
    assert ttl == (clock() + 400 * DAY) // 1000  # the window runs from the end

    forever = Engine(client=ddb, spec=spec, clock=clock, identity_retention_ms=None)
    forever.enqueue(T, "b", "refund", H1)
    forever.complete(T, "b", forever.claim(T, "b", "w").fence, "ok")
    assert TTL_ATTRIBUTE not in forever.store.get({"tenant_id": T, "operation_id": "b"})
    clock.advance(3 * 365 * DAY)
    reap(ddb, spec, clock())
    assert not forever.enqueue(T, "b", "refund", H1).created  # three years on: still a replay
    with pytest.raises(ValueError):
        Engine(client=ddb, spec=spec, identity_retention_ms=10 * DAY, payload_retention_ms=30 * DAY)


def test_live_and_parked_operations_never_expire(engine, ddb, spec, clock):
    engine.enqueue(T, "queued", "refund", H1)
    engine.enqueue(T, "parked", "refund", H1, max_attempts=1)
    engine.claim(T, "parked", "w1", lease_ms=1_000)
    clock.advance(2_000)
    assert engine.sweep().swept == 1
    clock.advance(800 * DAY)
    assert reap(ddb, spec, clock()) == 0
    assert engine.get(T, "parked").state == State.UNKNOWN
    engine.resolve(T, "parked", "requeue")
    claim = engine.claim(T, "parked", "w2")
    assert claim.fence == 2 and claim.reconcile_required


# ---------------------------------------------------------------- case 2: payloads live as long as their operation


def test_a_payload_outlives_a_long_backlog_and_is_purged_only_after_its_operation_ends(aws, spec, clock, bucket):
    engine, store = payload_engine(aws, spec, clock, bucket, payload_retention_ms=30 * DAY)
    enqueue_inline(engine, store, "late", {"cents": 1250})
    clock.advance(90 * DAY)  # a backlog three times the payload retention
    assert engine.purge_payloads().purged == 0
    claim = engine.claim_next(T, "w1")
    assert json.loads(engine.payload(claim)) == {"cents": 1250}
    engine.complete(T, "late", claim.fence, "ok")
    clock.advance(29 * DAY)
    assert engine.purge_payloads().purged == 0
    clock.advance(2 * DAY)
    assert engine.purge_payloads().purged == 1
    assert engine.purge_payloads().purged == 0  # a second run finds nothing: safe to run twice
    assert aws.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    operation = engine.get(T, "late")
    assert operation.payload_state == "purged"
    with pytest.raises(PayloadMissing):
        engine.payload(operation)
    assert not enqueue_inline(engine, store, "late", {"cents": 1250}).created  # identity kept


def test_a_missing_payload_object_is_an_error_never_none(aws, spec, clock, bucket):
    engine, store = payload_engine(aws, spec, clock, bucket)
    enqueue_inline(engine, store, "gone", {"x": 1})
    claim = engine.claim_next(T, "w1")
    aws.client("s3").delete_object(Bucket=bucket, Key=store.key_of(claim.payload_ref))
    with pytest.raises(PayloadMissing):
        engine.payload(claim)
    engine.enqueue(T, "external", "refund", H1, payload_ref="s3://elsewhere/k")
    with pytest.raises(NotFound):
        engine.payload(engine.get(T, "external"))


def test_rotating_the_log_hash_key_orphans_no_payload(aws, spec, clock, bucket, monkeypatch):
    from leasefence import settings as settings_module

    def runtime(log_key):
        env = {"LEASEFENCE_TABLE": spec.table_name, "LEASEFENCE_PAYLOAD_BUCKET": bucket, "LEASEFENCE_LOG_HASH_KEY": log_key,
               "LEASEFENCE_DUE_SHARDS": str(spec.due_shards), "LEASEFENCE_SWEEP_SHARDS": str(spec.sweep_shards)}
        rt = settings_module.Runtime(settings_module.Settings.from_env(env))
        rt._clients = {"dynamodb": aws.client(), "s3": aws.client("s3")}
        return rt

    before = runtime("log-key-1")
    canonical = canonicalize({"order": "A-1"})
    stored = before.payloads.put(T, "rot", canonical)
    before.engine.enqueue(T, "rot", "refund", canonical.hash, payload_ref=stored.ref, payload_inline=True)
    after = runtime("log-key-2")  # the log-hash secret was rotated
    claim = after.engine.claim_next(T, "w1")
    assert json.loads(after.engine.payload(claim)) == {"order": "A-1"}
    assert after.payloads.key_for(T, "rot", canonical.hash) == stored.key  # names never used the log key


def test_erasure_keeps_the_identity_and_refuses_a_claimed_operation(aws, spec, clock, bucket):
    from leasefence import InvalidTransition

    engine, store = payload_engine(aws, spec, clock, bucket)
    enqueue_inline(engine, store, "pii", {"email": "a@example.com"})
    claim = engine.claim_next(T, "w1")
    with pytest.raises(InvalidTransition):
        engine.erase(T, "pii")
    engine.fail(T, "pii", claim.fence, retryable=False, reason="customer a@example.com refused")
    erased = engine.erase(T, "pii")
    assert erased.payload_state == "erased" and erased.reason is None and erased.fence == 1
    assert erased.state == State.FAILED_TERMINAL
    assert aws.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0
    assert not enqueue_inline(engine, store, "pii", {"email": "a@example.com"}).created
    with pytest.raises(PayloadConflict):
        engine.enqueue(T, "pii", "refund", H2)
    assert engine.erase(T, "pii").payload_state == "erased"  # erasing again is harmless
    with pytest.raises(NotFound):
        engine.erase(T, "never-made")


def test_tenant_erasure_is_bounded_resumable_and_leaves_claimed_operations(aws, spec, clock, bucket):
    engine, store = payload_engine(aws, spec, clock, bucket)
    for i in range(7):
        enqueue_inline(engine, store, f"op-{i}", {"i": i})
    engine.enqueue("other", "op-0", "refund", H1)
    held = engine.claim(T, "op-3", "w1")
    store.put(T, "orphan", canonicalize({"lost": True}))  # an enqueue that crashed after its upload
    totals = {"rows_deleted": 0, "payloads_deleted": 0, "held": 0}
    cursor, steps = None, 0
    while True:
        step = engine.erase_tenant(T, limit=3, cursor=cursor)
        steps += 1
        for name in totals:
            totals[name] += getattr(step, name)
        cursor = step.next_cursor
        if cursor is None:
            break
    assert steps >= 3  # bounded per call
    # 6 rows; the held operation's row and payload stay, and so does every object under the
    # tenant's prefix and the tenant's own items (its directory, its hold) while a row is left.
    assert totals == {"rows_deleted": 6, "payloads_deleted": 6, "held": 1} and not step.finished
    assert [op.operation_id for op in engine.list(T).operations] == ["op-3"]
    assert json.loads(engine.payload(held)) == {"i": 3}
    assert engine.get("other", "op-0").state == State.QUEUED  # another tenant is untouched
    engine.complete(T, "op-3", held.fence, "ok")
    again = engine.erase_tenant(T, limit=10)
    assert (again.rows_deleted, again.payloads_deleted, again.held) == (1, 1 + 1, 0)
    assert aws.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # the orphan too
    # The directory and the hold go last, once the settle time after the hold has passed.
    assert again.next_cursor is not None and again.wait_ms > 0 and not again.finished
    clock.advance(again.wait_ms)
    last = engine.erase_tenant(T, cursor=again.next_cursor)
    assert (last.rows_deleted, last.next_cursor, last.finished) == (2, None, True)  # directory, settings
    assert engine.store.query(KeyConditionExpression="tenant_id = :t", values={":t": T}).items == []


# ---------------------------------------------------------------- case 3: job types do not block each other


def test_due_work_of_an_unserved_type_never_hides_a_served_one(engine, clock):
    for i in range(600):
        engine.enqueue(T, f"typo-{i:04d}", "refnud", H1)  # a type nobody serves, due first
        clock.advance(1)
    engine.enqueue(T, "real", "refund", H1)
    claim = engine.claim_next(T, "w1", job_types=["refund"])
    assert claim is not None and claim.operation_id == "real"
    assert engine.claim_next(T, "w1", job_types=["refund"]) is None
    # Unfiltered claims still find every type (from the tenant's job-type directory) ...
    assert engine.job_types(T) == ["refnud", "refund"]
    assert engine.claim_next(T, "w2").job_type == "refnud"
    # ... and the operator sees how long the unserved work has waited.
    clock.advance(600_000)
    assert engine.oldest_due_age_ms() >= 600_000


def test_a_claim_reads_only_the_served_types_partitions(ddb, spec, clock):
    calls = []

    class Recording(FaultyClient):
        def __getattr__(self, name):
            call = super().__getattr__(name)
            if name == "query":
                def recorded(**kwargs):
                    calls.append(kwargs)
                    return call(**kwargs)
                return recorded
            return call

    engine = Engine(client=Recording(ddb), spec=spec, clock=clock, rng=random.Random(1))
    for i in range(200):
        engine.enqueue(T, f"other-{i}", "email", H1)
    calls.clear()
    assert engine.claim_next(T, "w1", job_types=["refund"]) is None
    assert len(calls) == spec.due_shards  # one small query per shard, whatever the other types hold
    assert all(c["ExpressionAttributeValues"][":pk"]["S"].endswith("#refund") for c in calls)


# ---------------------------------------------------------------- case 5: throttled transactions are transient


def test_a_throttled_transaction_is_unavailable_not_an_error():
    for reasons in ([{"Code": "ThrottlingError", "Message": "x"}, {"Code": "None"}],
                    [{"Code": "None"}, {"Code": "ProvisionedThroughputExceeded"}]):
        error = ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                             "CancellationReasons": reasons}, "TransactWriteItems")
        assert isinstance(translate(error), Unavailable)


def test_a_throttled_class_a_completion_changes_nothing_and_spends_no_attempt(ddb, spec, clock):
    throttled = ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
                             "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}]}, "TransactWriteItems")

    class Throttling(FaultyClient):
        def __getattr__(self, name):
            if name == "transact_write_items":
                def refuse(**kwargs):
                    raise throttled
                return refuse
            return super().__getattr__(name)

    engine = Engine(client=Throttling(ddb), spec=spec, clock=clock)
    engine.enqueue(T, "a", "refund", H1)
    claim = engine.claim(T, "a", "w1")
    write = {"ConditionCheck": {"TableName": spec.table_name, "Key": {"tenant_id": {"S": T}, "operation_id": {"S": "b"}},
                                "ConditionExpression": "attribute_exists(tenant_id)"}}
    with pytest.raises(Unavailable):
        engine.complete_with(T, "a", claim.fence, "ok", [write])
    operation = engine.get(T, "a")
    assert (operation.state, operation.attempts) == (State.CLAIMED, 1)


@pytest.mark.parametrize("case", ["shape", "syntax", "table", "own"])
def test_class_a_errors_no_retry_fixes_are_permanent_and_name_what_is_wrong(ddb, spec, clock, case):
    """A business write of the wrong shape, one the store refuses as malformed, one on a table
    that does not exist and one on the operation's own item: each is refused (never Unavailable,
    which a worker retries), says what is wrong (the business table by name, not the operations
    table), and changes nothing: the operation stays claimed by the same fence."""
    orders = f"{spec.table_name}-orders"
    ddb.create_table(TableName=orders, AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")
    engine = Engine(client=ddb, spec=spec, clock=clock)
    write, error, says = {
        "shape": ({"Put": {"TableName": orders, "Item": {"pk": "secret-o1"}}}, InvalidInput,
                  "TransactItems[1].Put.Item.pk"),
        "syntax": (same_table.update(orders, {"pk": "o1"}, "SET paid ="), InvalidInput, "UpdateExpression"),
        "table": (same_table.put(f"{orders}-gone", {"pk": "o1"}), StoreMisconfigured, f"{orders}-gone not found"),
        "own": (same_table.update(spec.table_name, {"tenant_id": T, "operation_id": "op"}, "SET x = :v",
                                  values={":v": 1}), InvalidInput, "own item"),
    }[case]
    engine.enqueue(T, "op", "refund", H1, target_class="A")
    claim = engine.claim(T, "op", "w1")
    with pytest.raises(error) as refused:
        engine.complete_with(T, "op", claim.fence, "ok", [write])
    assert says in refused.value.message and not refused.value.retryable, refused.value.message
    assert "secret-o1" not in refused.value.message  # the value the client quoted is left out
    operation = engine.get(T, "op")
    assert (operation.state, operation.fence, operation.attempts) == (State.CLAIMED, claim.fence, 1)


# ---------------------------------------------------------------- case 8: a stale fence repeating itself


def test_a_stale_fence_repeating_a_command_it_made_earlier_is_refused(engine, clock):
    engine.enqueue(T, "op", "refund", H1)
    first = engine.claim(T, "op", "w1")
    engine.fail(T, "op", first.fence, retryable=True, reason="timeout", retry_after_ms=0)
    second = engine.claim(T, "op", "w2")
    assert second.fence == 2
    with pytest.raises(StaleFence):
        engine.fail(T, "op", first.fence, retryable=True, reason="timeout", retry_after_ms=0)
    assert engine.get(T, "op").state == State.CLAIMED
    # The holder repeating its own command after a lost answer is still recognized.
    engine.complete(T, "op", second.fence, "ok")
    assert engine.complete(T, "op", second.fence, "ok").state == State.SUCCEEDED


# ---------------------------------------------------------------- case 9: claim retries use fresh time


def test_a_retried_claim_write_takes_its_time_from_the_retry(ddb, spec, clock):
    faulty = FaultyClient(ddb)
    engine = Engine(client=faulty, spec=spec, clock=clock)
    engine.enqueue(T, "op", "refund", H1)

    def slow_network(request):
        clock.advance(4_000)  # the lost request and the wait before the retry took four seconds
        return True

    faulty.fail_next("update_item", BEFORE, when=slow_network)
    claim = engine.claim(T, "op", "w1", lease_ms=10_000)
    assert claim.lease_expires_at == clock() + 10_000  # not the time before the retry


def test_a_claim_stops_retrying_past_its_budget(ddb, spec, clock):
    faulty = FaultyClient(ddb)
    engine = Engine(client=faulty, spec=spec, clock=clock)
    engine.enqueue(T, "op", "refund", H1)

    def very_slow(request):
        clock.advance(6_000)
        return True

    faulty.fail_next("update_item", BEFORE, when=very_slow, times=3)
    with pytest.raises(Unavailable):
        engine.claim(T, "op", "w1")
    assert faulty.injected[BEFORE] == 1  # gave up after one try: the budget (5 s) was spent
