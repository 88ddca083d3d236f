"""Housekeeping, run by the sweeper: expired final-attempt claims parked as ``unknown``, approvals
not given in time ended, due payloads purged, TTLs cleared once identities are kept forever, and
the fleet's on-call signals (the oldest parked and the oldest due operation).

Every step is stateless, bounded and lock-free: it reads the due part of a sparse index (or a
cursor kept in one small item) and each write is conditional on what it read, so two sweepers
at once change nothing twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from leasefence import history, keys
from leasefence.engine import _expr as x
from leasefence.engine._claim import Claimer
from leasefence.engine._context import EngineContext, Key
from leasefence.engine._erasure import purge_one
from leasefence.engine._gate import end_early
from leasefence.engine._reads import Reads
from leasefence.engine._rules import OUTCOME_APPROVAL_EXPIRED
from leasefence.errors import InvalidInput, Unavailable
from leasefence.limits import MAX_STEP_ITEMS, PARKED_SCAN_PAGES, RETENTION_SWITCH_GRACE_MS
from leasefence.metrics import Metric
from leasefence.model import (
    SWEEPER_ACTOR,
    PurgeResult,
    State,
    SweepResult,
    Transition,
    TtlClearing,
)
from leasefence.schema import (
    DUE_INDEX,
    DUE_PK,
    DUE_SK,
    PARKED_INDEX,
    PARKED_PK,
    PARKED_SK,
    PURGE_INDEX,
    PURGE_PK,
    PURGE_SK,
    SWEEP_INDEX,
    SWEEP_PK,
    SWEEP_SK,
    TTL_ATTRIBUTE,
    OperationItem,
)
from leasefence.store import ConditionFailed
from leasefence.validation import validate_limit

log = logging.getLogger("leasefence.engine")


def _earliest(*values: Any) -> int | None:
    """The earliest of the times given (None for none)."""
    found = [int(v) for v in values if v is not None]
    return min(found) if found else None


class Housekeeper:
    def __init__(self, ctx: EngineContext, claimer: Claimer, reads: Reads) -> None:
        self.ctx = ctx
        #: Its memory of live leases: the fleet signal skips (and re-files) them as claims do.
        self.claimer = claimer
        self.reads = reads

    # ------------------------------------------------------------------ the sweep

    def sweep(self, limit: int) -> SweepResult:
        result = SweepResult()
        for entry in self.due_entries(SWEEP_INDEX, SWEEP_PK, SWEEP_SK, keys.sweep_partition, limit):
            result.examined += 1
            if entry.get("state") == State.AWAITING_APPROVAL:
                self.expire_approval(entry, result)
            else:
                self.sweep_one(entry, result)
        # Shadow operations parked here (a shadow run record whose completion was lost) are not
        # the fleet's: they stay out of the metric (and its alarm).
        fleet_swept = sum(1 for t, _ in result.swept_keys if not keys.is_shadow_tenant(t))
        if fleet_swept:
            self.ctx.count(Metric.SWEPT_TO_UNKNOWN, fleet_swept)
        if result.approvals_expired:
            self.ctx.count(Metric.APPROVALS_EXPIRED, result.approvals_expired)
        return result

    def due_entries(
        self, index: str, pk: str, sk: str, partition: Callable[[int], str], limit: int
    ) -> Iterable[OperationItem]:
        """At most ``limit`` entries of a sparse, sharded index (``sweep``, ``purge``) whose sort key
        is due (``<= now``), from the shards in random order, one page per shard."""
        shards = list(range(self.ctx.spec.sweep_shards))
        self.ctx.rng.shuffle(shards)
        count = 0
        for shard in shards:
            if count >= limit:
                return
            page = self.ctx.store.query(
                IndexName=index,
                KeyConditionExpression="#pk = :pk AND #at <= :now",
                ExpressionAttributeNames={"#pk": pk, "#at": sk},
                values={":pk": partition(shard), ":now": self.ctx.clock()},
                Limit=limit - count,
            )
            for entry in page.operations:
                count += 1
                yield entry

    def sweep_one(self, entry: OperationItem, result: SweepResult) -> None:
        """Park an expired final-attempt claim as ``unknown``: conditional on the fence, the state
        and the lease it read (a late heartbeat or another sweeper wins, and nothing changes)."""
        ctx = self.ctx
        now = ctx.clock()
        tenant_id, operation_id = keys.tenant_of(entry["tenant_id"]), entry["operation_id"]
        expr = x.Expr(
            x.STATE_FENCE,
            x.TRANSITION_NAMES,
            x.ACTOR,
            {"#spk": SWEEP_PK, "#sat": SWEEP_SK, "#dpk": DUE_PK, "#due": DUE_SK},
            {"#ppk": PARKED_PK, "#pat": PARKED_SK},
        )
        expr.value(
            {
                ":tr": Transition.SWEEP.value,
                ":actor": SWEEPER_ACTOR,
                ":one": 1,
                ":ppk": ctx.parked_pk(State.UNKNOWN, tenant_id, operation_id),
                ":unknown": State.UNKNOWN.value,
                ":claimed": State.CLAIMED.value,
                ":f": int(entry["fence"]),
                ":now": now,
                ":why": "lease expired on the final attempt; outcome unknown",
            }
        )
        expr.set("#state = :unknown", "updated_at = :now", "reason = :why", "#ppk = :ppk")
        expr.set("#pat = :now", "#tr = :tr", "#actor = :actor")
        expr.history(
            history.compact_entry(
                Transition.SWEEP, now, actor=SWEEPER_ACTOR, reason=expr.values[":why"]
            )
        )
        expr.remove(
            "#spk", "#sat", "#dpk", "#due", "claim_token", "lease_owner", "lease_expires_at"
        )
        condition = (
            f"{x.IS_CLAIMED} AND {x.FENCE_UNCHANGED} AND {x.LEASE_EXPIRED} AND {x.NO_ATTEMPTS_LEFT}"
        )
        try:
            ctx.store.update(
                keys.item_key(entry),
                *expr.add("#seq :one").write(condition),
                returns="NONE",
            )
        except ConditionFailed as refused:
            current = refused.operation
            if current is not None and self.claimer.repair_due_entry(current, now):
                result.repaired += 1
            return
        result.swept += 1
        result.swept_keys.append((tenant_id, operation_id))
        log.info("swept to unknown", extra={"op": ctx.tag(tenant_id, operation_id)})

    def expire_approval(self, entry: OperationItem, result: SweepResult) -> None:
        """The sweeper's end of an approval not given in time: ``failed_terminal`` with outcome
        ``approval_expired``, conditional on the operation still awaiting approval past its
        deadline (an approval that won the race stands; a second sweeper changes nothing)."""
        tenant_id, operation_id = keys.tenant_of(entry["tenant_id"]), entry["operation_id"]
        try:
            end_early(
                self.ctx,
                tenant_id,
                operation_id,
                Transition.APPROVAL_EXPIRE,
                State.FAILED_TERMINAL,
                OUTCOME_APPROVAL_EXPIRED,
                SWEEPER_ACTOR,
                (State.AWAITING_APPROVAL,),
                "no approval within its validity",
                extra_condition=f" AND {x.APPROVAL_WINDOW_CLOSED}",
            )
        except ConditionFailed:
            return
        result.approvals_expired += 1
        log.info("approval expired", extra={"op": self.ctx.tag(tenant_id, operation_id)})

    # ------------------------------------------------------------------ payloads and TTLs

    def purge_payloads(self, limit: int) -> PurgeResult:
        result = PurgeResult()
        ctx = self.ctx
        for entry in self.due_entries(PURGE_INDEX, PURGE_PK, PURGE_SK, keys.purge_partition, limit):
            result.examined += 1
            try:
                item = ctx.store.get_operation(keys.item_key(entry))
                if (
                    item is None
                    or PURGE_PK not in item
                    or int(item.get(PURGE_SK, 2**62)) > ctx.clock()
                ):
                    continue  # the index was behind the table
                if purge_one(ctx, item):
                    result.purged += 1
            except Unavailable:
                result.failed += 1  # still due: the next run tries again
        if result.purged:
            ctx.count(Metric.PAYLOADS_PURGED, result.purged)
        return result

    def clear_ttls(self, limit: int) -> TtlClearing:
        validate_limit(limit, MAX_STEP_ITEMS)
        ctx = self.ctx
        key = keys.tenant_key(keys.FLEET_TENANT, keys.RETENTION_ID)
        result = TtlClearing()
        if ctx.identity_retention_ms is not None:
            marker = ctx.store.get(key, consistent=False)
            if marker is not None and "since" in marker:
                with contextlib.suppress(ConditionFailed):  # another run forgot it first
                    ctx.store.update(
                        key,
                        "REMOVE since, pass_started, pass_ended, done_at, #cursor",
                        "since = :since",
                        {"#cursor": "cursor"},
                        {":since": int(marker["since"])},
                        returns="NONE",
                    )
            return result
        now = ctx.clock()
        marker = ctx.store.get(key)
        if marker is None or "since" not in marker:
            try:
                marker = ctx.store.update(
                    key,
                    "SET since = :now, pass_started = :now REMOVE pass_ended, done_at, #cursor",
                    "attribute_not_exists(since)",
                    {"#cursor": "cursor"},
                    {":now": now},
                )
                log.info("identity retention is forever: clearing the TTLs already set")
            except ConditionFailed as refused:
                marker = refused.item
        assert marker is not None
        if "done_at" in marker:
            result.state = "done"
            return result
        since, started = int(marker["since"]), int(marker["pass_started"])
        if "pass_ended" in marker:
            if now < since + RETENTION_SWITCH_GRACE_MS:
                result.state = "waiting"
                return result
            try:
                marker = ctx.store.update(
                    key,
                    "SET pass_started = :now REMOVE pass_ended, #cursor",
                    "pass_started = :started AND attribute_exists(pass_ended)",
                    {"#cursor": "cursor"},
                    {":now": now, ":started": started},
                )
            except ConditionFailed:
                result.state = "clearing"  # another run started it
                return result
            assert marker is not None
            started = now
        result.state = "clearing"
        cursor = marker.get("cursor")
        # Identities and their histories only: a claim-next marker keeps its own day (it is a
        # pointer for a resend, no identity; kept forever, every one alive at the switch would be).
        page = ctx.store.scan(
            FilterExpression="attribute_exists(#ttl) AND NOT begins_with(#op, :marker)",
            ProjectionExpression="tenant_id, #op, #ttl",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE, "#op": "operation_id"},
            values={":marker": keys.CLAIM_MARKER_PREFIX},
            Limit=limit,
            start=json.loads(cursor) if cursor else None,
        )
        result.examined = page.scanned
        for item in page.items:
            try:
                ctx.store.update(
                    keys.item_key(item),
                    "REMOVE #ttl",
                    "#ttl = :seen",
                    {"#ttl": TTL_ATTRIBUTE},
                    {":seen": item[TTL_ATTRIBUTE]},
                    returns="NONE",
                )
            except ConditionFailed:
                continue  # deleted (erased, or its TTL came first) or changed meanwhile
            result.cleared += 1
        names = {"#cursor": "cursor"}
        values: dict[str, Any] = {":started": started, ":n": result.cleared}
        if page.last_key is not None:
            values[":next"] = json.dumps(page.last_key, sort_keys=True)
            update = "SET #cursor = :next"
        elif started >= since + RETENTION_SWITCH_GRACE_MS:
            values[":now"] = ctx.clock()
            update = "SET done_at = :now REMOVE #cursor"
            result.state = "done"
        else:
            values[":now"] = ctx.clock()
            update = "SET pass_ended = :now REMOVE #cursor"
            result.state = "waiting"
        # The pass, and the position in it, this run read: an overlapping run never moves it back.
        condition = "pass_started = :started AND "
        if cursor is None:
            condition += "attribute_not_exists(#cursor)"
        else:
            values[":cursor"] = cursor
            condition += "#cursor = :cursor"
        with contextlib.suppress(ConditionFailed):  # an overlapping run moved on first
            ctx.store.update(key, update + " ADD cleared :n", condition, names, values, "NONE")
        if result.cleared:
            ctx.count(Metric.TTLS_CLEARED, result.cleared)
        return result

    # ------------------------------------------------------------------ fleet signals

    def oldest_parked_age_ms(self, state: State | str) -> int:
        state = State(state)
        if state not in (State.UNKNOWN, State.QUARANTINED):
            raise InvalidInput("only unknown and quarantined operations are parked")
        ctx = self.ctx
        now = ctx.clock()
        oldest: int | None = None
        for shard in range(ctx.spec.sweep_shards):
            start = None
            for _page in range(PARKED_SCAN_PAGES):
                page = ctx.store.query(
                    IndexName=PARKED_INDEX,
                    KeyConditionExpression="#pk = :pk",
                    ExpressionAttributeNames={"#pk": PARKED_PK},
                    values={":pk": keys.parked_partition(state.value, shard)},
                    Limit=10,
                    start=start,
                )
                found = next(
                    (e for e in page.items if not keys.is_shadow_tenant(e["tenant_id"])), None
                )
                if found is not None:
                    parked_at = int(found[PARKED_SK])
                    oldest = parked_at if oldest is None else min(oldest, parked_at)
                    break
                start = page.last_key
                if start is None:
                    break
        return 0 if oldest is None else max(0, now - oldest)

    def oldest_due_age_ms(self, max_queries: int) -> int:
        ctx = self.ctx
        now = ctx.clock()
        key = keys.tenant_key(keys.FLEET_TENANT, keys.OLDEST_DUE_CURSOR_ID)
        saved = ctx.store.get(key) or {}
        budget = max_queries
        # Where the cycle in progress stands: the next directory page starts after ``cursor``
        # (None: at the first tenant), and its first tenant skips the (type, shard) partitions
        # an earlier call already read. ``cycle_since``: the earliest due time the cycle in
        # progress found so far; ``last_since``: the last complete cycle's.
        cursor: dict[str, Any] | None = saved.get("cursor") or None
        skip = int(saved.get("skip", 0))
        cycle_since: int | None = _earliest(saved.get("cycle_since"))
        last_since: int | None = _earliest(saved.get("last_since"))
        fresh = False  # this call read a whole cycle itself

        while budget > 0:
            from_start = cursor is None and skip == 0
            start = cursor
            finished = False
            while budget > 0:
                budget -= 1
                page = ctx.store.query(
                    IndexName=PARKED_INDEX,
                    KeyConditionExpression="#pk = :pk",
                    ExpressionAttributeNames={"#pk": PARKED_PK},
                    values={":pk": keys.DIRECTORY_PARTITION},
                    Limit=min(max(budget, 1), 100),
                    start=start,
                )
                stopped = False
                for directory in page.items:
                    tenant_id = directory["tenant_id"]
                    if not keys.is_shadow_tenant(tenant_id):
                        if budget <= 0:
                            stopped = True  # its directory is read first next time
                            break
                        budget -= 1
                        partitions = [
                            (job_type, shard)
                            for job_type in self.reads.job_types(tenant_id)
                            for shard in range(ctx.spec.due_shards)
                        ]
                        done = skip
                        while done < len(partitions) and budget > 0:
                            budget -= 1
                            job_type, shard = partitions[done]
                            since = self.oldest_due_since(tenant_id, job_type, shard, now)
                            cycle_since = _earliest(cycle_since, since)
                            done += 1
                        if done < len(partitions):
                            skip = done
                            stopped = True
                            break
                    # This tenant is done (or a shadow tenant): the cycle goes on after it.
                    cursor = {
                        k: directory[k] for k in ("tenant_id", "operation_id", PARKED_PK, PARKED_SK)
                    }
                    skip = 0
                if stopped:
                    break
                if page.last_key is None:
                    finished = True
                    break
                start = page.last_key
            if not finished:
                break
            # The cycle is complete: it becomes the last one, and the next starts at the top.
            last_since, cycle_since, cursor, skip = cycle_since, None, None, 0
            if from_start:
                fresh = True
                break
        since = last_since if fresh else _earliest(last_since, cycle_since)
        self.save_fleet_cursor(
            key,
            saved,
            {"cursor": cursor, "skip": skip, "cycle_since": cycle_since, "last_since": last_since},
            now,
        )
        return 0 if since is None else max(0, now - since)

    def oldest_due_since(self, tenant_id: str, job_type: str, shard: int, now: int) -> int | None:
        """Since when the oldest due entry of one due partition has been due (None: nothing)."""
        page = self.ctx.store.query(
            IndexName=DUE_INDEX,
            KeyConditionExpression="#pk = :pk AND #due <= :now",
            ExpressionAttributeNames={"#pk": DUE_PK, "#due": DUE_SK},
            values={":pk": keys.due_partition(tenant_id, shard, job_type), ":now": now},
            Limit=3,
        )
        held = []
        for entry in page.operations:
            if entry.get("state") == State.CLAIMED:
                item = self.claimer.unless_held(entry, now)
                if item is None:
                    held.append(entry)
                    continue
                if item.get("state") != State.CLAIMED:
                    continue
                return int(item.get("lease_expires_at", now))
            return int(entry[DUE_SK])
        if page.last_key is not None:
            for entry in held:
                self.claimer.refile_held(entry, now)
        return None

    def save_fleet_cursor(
        self, key: Key, saved: dict[str, Any], updates: dict[str, Any], now: int
    ) -> None:
        """One conditional write: only if nobody wrote the item since ``saved`` was read (an
        overlapping call that wrote first wins; this call's progress is simply not kept)."""
        expr = x.Expr({"#v": "ver", "#at": "updated_at"})
        expr.value({":v1": int(saved.get("ver", 0)) + 1, ":now": now}).set("#v = :v1", "#at = :now")
        for i, (name, value) in enumerate(updates.items()):
            expr.names[f"#a{i}"] = name
            if value is None:
                expr.remove(f"#a{i}")
            else:
                expr.value({f":a{i}": value}).set(f"#a{i} = :a{i}")
        if "ver" in saved:
            condition = "#v = :v"
            expr.values[":v"] = int(saved["ver"])
        else:
            condition = "attribute_not_exists(#v)"
        with contextlib.suppress(ConditionFailed):
            self.ctx.store.update(key, *expr.write(condition), returns="NONE")
