"""Request units per job lifecycle, computed by the meter from the real requests and items.

Every figure here comes from requests the engine really sent to the embedded endpoint; the
units are *computed* from those requests and the item images (moto's consumed-capacity figures
are placeholders), with the rules in :mod:`leasefence_tools.bench.units`. Runs are sequential (a manual
clock, one client at a time) so the before/after images the meter reads are exact.
"""

from __future__ import annotations

import random
import uuid
import warnings
from dataclasses import asdict
from typing import Any

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.engine._spread import Hint, hint_item
from leasefence.schema import TableSpec
from leasefence_tools.bench import scale_sim
from leasefence_tools.bench import units as U
from leasefence_tools.bench.harness import ServerProcess
from leasefence_tools.bench.meter import Meter, Usage

TENANT = "acme-corp"
LONG_TENANT = "longjob-corp"
WORKER = "worker-7f3a9c21"
JOB_TYPE = "refund"
HASH = "sha256:" + "5" * 64
#: What an inline payload's reference looks like (see leasefence.payloads): bucket, prefix, two MACs.
PAYLOAD_REF = "s3://leasefence-payloads/payloads/" + "ab" * 16 + "/" + "cd" * 32 + ".json"
LEASE_MS = 30_000


def _ids(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _summary(usage: Usage, runs: int) -> dict[str, Any]:
    return {
        "wcu": round(usage.wcu / runs, 3),
        "wcu_index": round(usage.wcu_index / runs, 3),
        "rcu": round(usage.rcu / runs, 3),
        "requests": round(usage.total_requests / runs, 3),
        "refused": round(usage.total_refused / runs, 3),
    }


def _steps(usage: Usage, runs: int) -> list[str]:
    """The calls of one run, described (units per call)."""
    per_run = len(usage.calls) // max(runs, 1)
    return [call.describe() for call in usage.calls[:per_run]]


def _plain_table(client: Any, name: str, keys: tuple[str, ...]) -> None:
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
        KeySchema=[
            {"AttributeName": k, "KeyType": t}
            for k, t in zip(keys, ("HASH", "RANGE"), strict=False)
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def measure(bench: ServerProcess, runs: int = 5, long_job_heartbeats: int = 30) -> dict[str, Any]:
    raw = bench.client()
    meter = Meter(raw, units=True)
    clock = ManualClock()
    rng = random.Random(11)
    spec = bench.create_tables(TableSpec(table_name="bench-cost"))
    client = meter.client(bench.client())
    engine = Engine(client=client, spec=spec, clock=clock, rng=random.Random(1))
    out: dict[str, Any] = {}

    # 1. Lifecycle without heartbeat: enqueue, claim, complete, over a standing backlog (every
    #    shard holds more than a page, as in any queue with work waiting), so each claim reads one
    #    full page. The claimed operation is the oldest due one, not necessarily the new one.
    backlog = spec.due_shards * 2 * engine.candidate_page
    bench.populate(spec, TENANT, backlog, now_ms=clock(), prefix="backlog")
    clock.advance(1)
    # The engine lists a job type in the tenant's directory once (its first enqueue of the type):
    # outside every metered phase, since it is not part of any lifecycle.
    for tenant in (TENANT, "lonely-corp", LONG_TENANT):
        engine._register_job_type(tenant, JOB_TYPE)
    sizes = []
    for _ in range(runs):
        with meter.phase("enqueue"):
            engine.enqueue(
                TENANT, _ids(rng), JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B"
            )
        with meter.phase("claim"):
            claim = engine.claim_next(TENANT, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
        assert claim is not None
        with meter.phase("complete"):
            engine.complete(TENANT, claim.operation_id, claim.fence, "refunded")
        clock.advance(1)
    phases = {p: _summary(meter.usage(p), runs) for p in ("enqueue", "claim", "complete")}
    out["lifecycle"] = _summary(meter.usage("enqueue", "claim", "complete"), runs)
    out["lifecycle_phases"] = phases
    out["lifecycle_steps"] = (
        _steps(meter.usage("enqueue"), runs)
        + _steps(meter.usage("claim"), runs)
        + _steps(meter.usage("complete"), runs)
    )
    out["lifecycle_backlog"] = backlog
    # Issue 33: where a lifecycle's units land (table or index partition), for the scale
    #    simulation: the same lifecycles again, now that the engine's cached reads (the job
    #    type's catalogue entry, once per engine per cache period) are warm, as at a steady rate.
    #    With a client claim token (the SDK's and the HTTP worker's claims): its marker, a
    #    tenant item, is read and written by every claim.
    for phase, token in (("landed", False), ("landed-token", True)):
        for _ in range(runs):
            with meter.phase(phase):
                engine.enqueue(
                    TENANT, _ids(rng), JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B"
                )
                claim = engine.claim_next(
                    TENANT,
                    WORKER,
                    lease_ms=LEASE_MS,
                    job_types=[JOB_TYPE],
                    claim_token=_ids(rng) if token else None,
                )
                assert claim is not None
                engine.complete(TENANT, claim.operation_id, claim.fence, "refunded")
            clock.advance(1)
        landed = (p for c in meter.usage(phase).calls for p in c.partitions)
        section = "lifecycle_partition_units" + ("_claim_token" if token else "")
        out[section] = asdict(scale_sim.LifecycleLoad.from_partitions(landed, runs))

    # 1b. The same on a fresh tenant with nothing else queued (queue depth 1): a claim probes
    #     shards in random order until it meets the one holding the operation.
    meter.reset()
    lonely = "lonely-corp"  # its job type listed above
    shallow_runs = 8 * runs
    for _ in range(shallow_runs):
        op = _ids(rng)
        with meter.phase("shallow"):
            engine.enqueue(lonely, op, JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B")
            claim = engine.claim_next(lonely, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
        assert claim is not None and claim.operation_id == op
        sizes.append(
            U.item_size(
                raw.get_item(
                    TableName=spec.table_name,
                    Key={
                        "tenant_id": {"S": U.operation_partition(raw, spec.table_name, lonely, op)},
                        "operation_id": {"S": op},
                    },
                )["Item"]
            )
        )
        with meter.phase("shallow"):
            engine.complete(lonely, op, claim.fence, "refunded")
        clock.advance(1)
    out["lifecycle_queue_depth_1"] = _summary(meter.usage("shallow"), shallow_runs)
    out["lifecycle_queue_depth_1"]["runs"] = shallow_runs
    out["lifecycle_queue_depth_1_expected_rcu"] = 0.5 * (spec.due_shards + 1) / 2
    out["claimed_item_bytes"] = max(sizes)

    # 2. The same lifecycle with one heartbeat (over the same backlog, nobody else polling).
    meter.reset()
    for _ in range(runs):
        with meter.phase("life"):
            engine.enqueue(
                TENANT, _ids(rng), JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B"
            )
            claim = engine.claim_next(TENANT, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
        assert claim is not None
        clock.advance(LEASE_MS // 3)
        with meter.phase("heartbeat"):
            engine.heartbeat(TENANT, claim.operation_id, claim.fence, WORKER)
        with meter.phase("life"):
            engine.complete(TENANT, claim.operation_id, claim.fence, "refunded")
    out["lifecycle_with_heartbeat"] = _summary(meter.usage("life", "heartbeat"), runs)
    out["heartbeat_write"] = _summary(meter.usage("heartbeat"), runs)

    # 3. A long job in a tenant whose idle workers keep polling: heartbeats every lease/3, a
    #    poller every lease/6. Whatever the poller writes (refused claims of the live entry, or
    #    re-filings of it) is caused by the heartbeats; so are its reads of the item.
    meter.reset()
    poller = Engine(client=client, spec=spec, clock=clock, rng=random.Random(2))
    op = _ids(rng)
    engine.enqueue(LONG_TENANT, op, JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B")
    claim = engine.claim_next(LONG_TENANT, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
    assert claim is not None
    step = LEASE_MS // 6
    for tick in range(1, 2 * long_job_heartbeats + 1):
        clock.advance(step)
        if tick % 2 == 0:
            with meter.phase("hb"):
                engine.heartbeat(LONG_TENANT, op, claim.fence, WORKER)
        with meter.phase("poll"):
            assert (
                poller.claim_next(
                    LONG_TENANT, "idle-worker", lease_ms=LEASE_MS, job_types=[JOB_TYPE]
                )
                is None
            )
    engine.complete(LONG_TENANT, op, claim.fence, "refunded")
    hb, poll = meter.usage("hb"), meter.usage("poll")
    beats = hb.requests["update_item"]
    polls = 2 * long_job_heartbeats
    out["long_job"] = {
        "lease_ms": LEASE_MS,
        "heartbeat_every_ms": 2 * step,
        "poll_every_ms": step,
        "heartbeats": beats,
        "heartbeat_wcu": hb.wcu,
        "poller_refused_claims": poll.refused["update_item"],
        "poller_repairs": poll.requests["update_item"] - poll.refused["update_item"],
        "poller_item_reads": poll.requests["get_item"],
        "poller_wcu": poll.wcu,
        "poller_rcu": poll.rcu,
        "poller_rcu_per_poll": round(poll.rcu / polls, 3),
        "wcu_per_heartbeat_amortized": round((hb.wcu + poll.wcu) / beats, 3),
        # Before issue 16 the poller wrote a refused claim (1) and a re-filing (1 + 2 index) per
        # lease period: (3 + 4) / 3 heartbeats (main at 1f2d249, this same scenario).
        "wcu_per_heartbeat_amortized_before": 2.333,
        "takeover": _takeover_latency(engine, poller, meter, clock, rng, step),
    }

    # 3b. An idle poll: a tenant with nothing due, settled (its job type's due spread fell to 1:
    # the hint and shard 0's empty page; before the spread, one empty page per shard).
    engine.store.put_plain(hint_item("idle-corp", JOB_TYPE, Hint(1, 1, 0, 1)))
    meter.reset()
    with meter.phase("idle"):
        assert (
            engine.claim_next("idle-corp", WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE]) is None
        )
    out["idle_poll"] = _summary(meter.usage("idle"), 1)

    # 4. Class A: the completion and a business write in one transaction (Engine.complete_with).
    ledger = "bench-ledger"
    _plain_table(raw, ledger, ("pk",))

    def refund(op: str, fence: int) -> list[dict[str, Any]]:
        return [
            {
                "Put": {
                    "TableName": ledger,
                    "Item": {
                        "pk": {"S": f"refund#{TENANT}#{op}"},
                        "amount_cents": {"N": "12999"},
                        "currency": {"S": "EUR"},
                        "fence": {"N": str(fence)},
                        "status": {"S": "refunded"},
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        ]

    def class_a(phase: str) -> None:
        with meter.phase(phase):
            engine.enqueue(
                TENANT, _ids(rng), JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="A"
            )
            claim = engine.claim_next(TENANT, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
            assert claim is not None
            engine.complete_with(
                TENANT,
                claim.operation_id,
                claim.fence,
                "refunded",
                refund(claim.operation_id, claim.fence),
            )
        clock.advance(1)

    meter.reset()
    for _ in range(runs):
        class_a("a")
    usage_a = meter.usage("a")
    out["lifecycle_class_a"] = _summary(usage_a, runs)
    per_run = len(usage_a.calls) // runs
    out["class_a_completion_steps"] = [
        c.describe()
        for c in usage_a.calls[:per_run]
        if c.op in ("transact_write_items", "get_item")
    ]
    # The same with the transaction's index writes counted once (if AWS bills them as standard).
    meter.tx_index_multiplier = 1
    meter.reset()
    class_a("a1")
    out["lifecycle_class_a_index_writes_standard"] = _summary(meter.usage("a1"), 1)
    meter.tx_index_multiplier = U.TX_INDEX_MULTIPLIER

    # 5. Longest ids the engine accepts: where the item crosses 1 KB and every write doubles.
    meter.reset()
    big_tenant, big_op = "t" * 256, "o" * 256
    with meter.phase("max"):
        engine.enqueue(
            big_tenant, big_op, "j" * 256, HASH, payload_ref="s3://" + "r" * 1019, target_class="B"
        )
        claim = engine.claim_next(big_tenant, "w" * 256, lease_ms=LEASE_MS, job_types=["j" * 256])
        assert claim is not None
        engine.complete(big_tenant, big_op, claim.fence, "o" * 256)
    out["lifecycle_max_ids"] = _summary(meter.usage("max"), 1)

    # 6. The floor: three single-item writes, no index (put, then two conditional updates).
    floor = "bench-floor"
    _plain_table(raw, floor, ("tenant_id", "operation_id"))
    meter.reset()
    for _ in range(runs):
        op = _ids(rng)
        key = {"tenant_id": {"S": TENANT}, "operation_id": {"S": op}}
        with meter.phase("floor"):
            client.put_item(
                TableName=floor,
                Item={
                    **key,
                    "job_type": {"S": JOB_TYPE},
                    "payload_hash": {"S": HASH},
                    "payload_ref": {"S": PAYLOAD_REF},
                    "state": {"S": "queued"},
                    "fence": {"N": "0"},
                    "created_at": {"N": str(clock())},
                },
                ConditionExpression="attribute_not_exists(operation_id)",
            )
            client.update_item(
                TableName=floor,
                Key=key,
                UpdateExpression="SET #s = :c, fence = fence + :one, lease_owner = :w, lease_expires_at = :e",
                ConditionExpression="#s = :q",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":c": {"S": "claimed"},
                    ":q": {"S": "queued"},
                    ":one": {"N": "1"},
                    ":w": {"S": WORKER},
                    ":e": {"N": str(clock() + LEASE_MS)},
                },
            )
            client.update_item(
                TableName=floor,
                Key=key,
                UpdateExpression="SET #s = :d, outcome_code = :o REMOVE lease_owner, lease_expires_at",
                ConditionExpression="#s = :c AND fence = :f",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":d": {"S": "succeeded"},
                    ":c": {"S": "claimed"},
                    ":f": {"N": "1"},
                    ":o": {"S": "refunded"},
                },
            )
    out["floor"] = _summary(meter.usage("floor"), runs)

    # 7. Powertools idempotency, per call: first execution, then a replay of the same event.
    out["powertools"] = _powertools(bench, meter, raw, runs)

    # 8. Issue 32: each item write of an ordinary lifecycle, by kind, with the bench's payload
    #    kept inline; at the bench's ids, then with every id at its limit in 4-byte characters.
    out["item_writes"] = _item_writes(engine, meter, clock, rng, BENCH_IDS)
    out["item_writes_max_ids"] = _item_writes(engine, meter, clock, rng, max_ids())
    return out


#: The kinds of item write of an ordinary lifecycle (issue 32), in the order they happen.
ITEM_WRITE_KINDS = ("enqueue", "claim", "heartbeat", "fail", "requeue", "complete")
#: The bench's ids: tenant, job type and worker as above; operation ids are UUIDs.
BENCH_IDS = {"tenant": "items-corp", "job_type": JOB_TYPE, "worker": WORKER, "operation": ""}
#: A 4-byte character (outside the BMP): an id of 256 of them is 1 KiB of UTF-8.
WIDE_CHAR = "\N{GRINNING FACE}"


def max_ids() -> dict[str, str]:
    """Every id at its limit (:data:`~leasefence.limits.MAX_ID_LENGTH` characters of 4 bytes)."""
    from leasefence.limits import MAX_ID_LENGTH

    return {
        name: letter + WIDE_CHAR * (MAX_ID_LENGTH - 1)
        for name, letter in (
            ("tenant", "t"),
            ("job_type", "j"),
            ("worker", "w"),
            ("operation", "o"),
        )
    }


def _item_writes(
    engine: Engine, meter: Meter, clock: ManualClock, rng: random.Random, ids: dict[str, str]
) -> dict[str, Any]:
    """One operation through every ordinary write: enqueue (the bench's payload inline), claim,
    heartbeat, a retryable failure, the retry's claim, a park and an operator's requeue, the
    requeue's claim, the completion. Per kind, the units of its largest single item write on the
    table (index writes apart) and the index units beside them."""
    from leasefence.payloads import canonicalize
    from leasefence_tools.bench.payload import PAYLOAD

    body = canonicalize(PAYLOAD)
    tenant, job_type, worker = ids["tenant"], ids["job_type"], ids["worker"]
    op = ids["operation"] or _ids(rng)
    engine._register_job_type(tenant, job_type)
    meter.reset()

    def claim() -> int:
        clock.advance(LEASE_MS)
        with meter.phase("claim"):
            got = engine.claim_next(tenant, worker, lease_ms=LEASE_MS, job_types=[job_type])
        assert got is not None and got.operation_id == op
        return got.fence

    with meter.phase("enqueue"):
        engine.enqueue(tenant, op, job_type, body.hash, target_class="B", payload_json=body.body)
    fence = claim()
    clock.advance(LEASE_MS // 3)
    with meter.phase("heartbeat"):
        engine.heartbeat(tenant, op, fence, worker)
    with meter.phase("fail"):
        engine.fail(tenant, op, fence, retryable=True, reason="upstream 503", retry_after_ms=0)
    fence = claim()
    engine.park_unknown(tenant, op, fence, "timeout calling upstream")
    with meter.phase("requeue"):
        engine.resolve(tenant, op, "requeue", note="checked upstream", actor="operator-1")
    fence = claim()
    with meter.phase("complete"):
        engine.complete(tenant, op, fence, "refunded")
    by_kind: dict[str, Any] = {}
    for kind in ITEM_WRITE_KINDS:
        writes = [c for c in meter.usage(kind).calls if c.wcu and not c.refused]
        by_kind[kind] = {
            "item_write_units_max": max((c.wcu - c.wcu_index for c in writes), default=0),
            "item_writes": len(writes),
            "index_units": sum(c.wcu_index for c in writes),
            "steps": [c.describe() for c in meter.usage(kind).calls],
        }
    meter.reset()
    return {
        "ids_bytes": {name: len(value.encode()) for name, value in ids.items() if value},
        "payload_bytes": len(body.body),
        "by_kind": by_kind,
        "item_write_units_max": max(k["item_write_units_max"] for k in by_kind.values()),
    }


def _takeover_latency(
    engine: Engine, poller: Engine, meter: Meter, clock: ManualClock, rng: random.Random, step: int
) -> dict[str, Any]:
    """How long after a real crash the polling worker takes a long job over. The job heartbeats
    (every lease/3) past two lease periods while the poller polls (every lease/6), so the poller
    has met its lapsed entry and remembers a lease; then the worker dies right after a heartbeat
    and the poller keeps polling, its first poll ``offset`` after the crash (every phase of the
    poll grid against the lease). Latency: from the last heartbeat to the takeover claim; the
    bound is one lease period plus one poll interval."""
    runs = []
    for offset in (1, step // 2, step - 1):
        op = _ids(rng)
        engine.enqueue(LONG_TENANT, op, JOB_TYPE, HASH, payload_ref=PAYLOAD_REF, target_class="B")
        claim = engine.claim_next(LONG_TENANT, WORKER, lease_ms=LEASE_MS, job_types=[JOB_TYPE])
        assert claim is not None and claim.operation_id == op
        for tick in range(1, 13):
            clock.advance(step)
            if tick % 2 == 0:
                engine.heartbeat(LONG_TENANT, op, claim.fence, WORKER)
            if tick < 12:  # the crash comes right after the last heartbeat
                with meter.phase("takeover-poll"):
                    poller.claim_next(
                        LONG_TENANT, "idle-worker", lease_ms=LEASE_MS, job_types=[JOB_TYPE]
                    )
        crashed_at = clock()
        clock.advance(offset)
        while True:
            with meter.phase("takeover-poll"):
                taken = poller.claim_next(
                    LONG_TENANT, "idle-worker", lease_ms=LEASE_MS, job_types=[JOB_TYPE]
                )
            if taken is not None:
                break
            if clock() - crashed_at > 3 * LEASE_MS:
                raise RuntimeError("the crashed long job was never taken over")
            clock.advance(step)
        assert taken.operation_id == op and taken.takeover
        runs.append(clock() - crashed_at)
        poller.complete(LONG_TENANT, op, taken.fence, "refunded")
    return {
        "crash": "right after a heartbeat; first poll 1 ms, half a poll and a poll - 1 ms later",
        "latency_ms": runs,
        "max_ms": max(runs),
        "bound_ms": LEASE_MS + step,
        "within_bound": max(runs) <= LEASE_MS + step,
        # Writes of the poller other than its takeover claims (0: it only read while held).
        "poller_writes_while_held": meter.usage("takeover-poll").requests["update_item"]
        - len(runs),
    }


def _powertools(bench: ServerProcess, meter: Meter, raw: Any, runs: int) -> dict[str, Any]:
    import os

    os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "leasefence-bench")
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    table = "bench-idempotency"
    _plain_table(raw, table, ("id",))
    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=meter.client(bench.client()))
    config = IdempotencyConfig(expires_after_seconds=3600)

    @idempotent_function(data_keyword_argument="job", persistence_store=layer, config=config)
    def process(job: dict[str, Any]) -> dict[str, Any]:
        return {"refunded": True, "operation_id": job["operation_id"]}

    rng = random.Random(13)
    meter.reset()
    jobs = [
        {"operation_id": _ids(rng), "tenant_id": TENANT, "amount_cents": 12999} for _ in range(runs)
    ]
    with warnings.catch_warnings():
        # Outside a Lambda invocation Powertools cannot know the remaining time; irrelevant here.
        warnings.simplefilter("ignore", UserWarning)
        for job in jobs:
            with meter.phase("pt-first"):
                process(job=job)
        for job in jobs:
            with meter.phase("pt-replay"):
                process(job=job)
    first, replay = meter.usage("pt-first"), meter.usage("pt-replay")
    return {
        "first_call": _summary(first, runs),
        "replay": _summary(replay, runs),
        "first_call_steps": _steps(first, runs),
        "note": "idempotency only: no queue, lease, fence, retry or unknown state; the job still "
        "needs a queue to arrive (e.g. SQS: send, receive, delete = 3 requests per job)",
    }
