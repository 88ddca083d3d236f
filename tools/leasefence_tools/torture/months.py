"""The months phase: workers pause, a backlog is enqueued, and the clock jumps 45 days (past the
payload retention), then 300 more days (within the identity retention) while operations are
queued, parked or finished (see the package docstring)."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Any

from leasefence import history, keys
from leasefence.engine import DAY_MS, Engine
from leasefence.errors import InvalidTransition, PayloadMissing
from leasefence.model import Operation, State, TargetClass
from leasefence_tools.torture.chaos import ChaosHooks
from leasefence_tools.torture.checker import history_of
from leasefence_tools.torture.settings import FastClock, Report, Settings


def months_phase(
    settings: Settings,
    report: Report,
    clock: FastClock,
    aws: Any,
    engine: Engine,
    checker: Engine,
    hooks: ChaosHooks,
    window: Any,
    paused: threading.Event,
    enqueued: list[tuple[str, str, TargetClass]],
    submit: Any,
    replay_and_conflict: Any,
    sweep_once: Any,
    retrying: Any,
    deadline: float,
) -> dict[str, Any]:
    """Months pass while operations are queued, parked or finished (see the module docstring)."""
    rng = random.Random(settings.seed + 2)
    stats: Counter[str] = Counter()
    t0 = time.monotonic()
    paused.set()  # the endpoint serves one request at a time: idle polls would slow the bookkeeping
    time.sleep(0.2)  # claims in flight finish their write

    def stage(text: str) -> None:
        if settings.progress:
            print(
                f"torture: months phase: {text} ({time.monotonic() - t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    def table() -> dict[tuple[str, str], Operation]:
        return operations(checker, {t for t, _, _ in enqueued})

    now = table()
    finished = [
        op for op in enqueued if now[op[:2]].state in (State.SUCCEEDED, State.FAILED_TERMINAL)
    ]
    parked = [op for op in enqueued if now[op[:2]].state == State.UNKNOWN]
    sample = max(10, len(enqueued) // 20)

    tenants = sorted({t for t, _, _ in enqueued})

    def keep_histories() -> None:
        """Read every history that has not expired yet: the jump may take an ended operation
        past its history retention (the payload purge slims it, or, for a payload item, its
        reader shows it slim from then on), and the checker judges what the history held from
        this copy (:func:`leasefence_tools.torture.checker.history_of`)."""
        for tenant, operation_id, _target in list(enqueued):
            item = checker.stored_item(tenant, operation_id)
            if item is None or history.ITEM_HISTORY_EXPIRED in item:
                continue
            entries, dropped, expired = history_of(checker, tenant, operation_id)
            if expired is None:  # (an expired one keeps the copy an earlier jump took)
                report.histories_kept[(tenant, operation_id)] = (entries, dropped, dict(item))

    def jump(days: int) -> int:
        keep_histories()
        before = identities(checker, tenants)  # before the endpoint's clock moves: it reaps
        clock.jump(days * DAY_MS)
        aws.set_time(clock())
        reaped = aws.reap_ttl()
        deleted = before - identities(checker, tenants)
        stats["ttl_deleted_within_window"] += deleted
        stats["ttl_deleted_other_items"] += reaped - deleted  # short-lived markers
        if deleted:
            report.violate(
                "identity_forgotten",
                "*",
                "*",
                f"TTL deleted {deleted} identities within the window",
            )

        # The sweeper's purge until nothing is due, by two sweepers at once (stateless, lock-free:
        # running it concurrently is allowed and is exercised here; more of them only read and
        # refuse each other's entries: four made 2.6 reads and writes per payload purged).
        def drain() -> None:
            while retrying(lambda: sweep_once(limit=100)):
                pass

        sweepers = [threading.Thread(target=drain, name=f"purge-{i}") for i in range(2)]
        for thread in sweepers:
            thread.start()
        for thread in sweepers:
            thread.join()
        return deleted

    # 1. A backlog nobody works on, then 45 days pass (past the payload retention).
    base = len(enqueued)
    backlog = [
        (f"tenant-{i % settings.tenants}", f"late-{i:05d}", list(TargetClass)[i % 4])
        for i in range(sample)
    ]
    for tenant, operation_id, target in backlog:
        submit(
            tenant, operation_id, target, wait=False
        )  # nobody works now: the window cannot drain
    stats["backlog"] = len(backlog)
    stage("backlog enqueued")
    jump(45)
    stage("45 days later, payloads purged")
    now = table()
    for tenant, operation_id, _target in backlog + parked:  # every live payload is still there
        if (tenant, operation_id) in hooks.erased:
            continue  # erased by the operator while parked (composed runs)
        live = now[(tenant, operation_id)]
        if live.payload_state not in ("stored", "external") or not _readable(checker, live):
            report.violate(
                "payload_purged_while_live",
                tenant,
                operation_id,
                "a live operation lost its payload",
            )
    for tenant, operation_id, _ in finished:
        operation = now[(tenant, operation_id)]
        if (tenant, operation_id) in hooks.erased:
            continue
        if operation.payload_state not in ("purged", "external"):
            report.violate(
                "payload_kept",
                tenant,
                operation_id,
                f"payload {operation.payload_state} 45 days after the end",
            )
        elif payload_items_left(checker, tenant, operation_id):  # TTL's work (days late at most)
            report.violate(
                "payload_kept",
                tenant,
                operation_id,
                "a payload item left 45 days after the end",
            )
        stats["payloads_purged_after_45_days"] += operation.payload_state == "purged"
    stats["payloads_purged_by_the_sweeper"] = report.purged

    # 2. Late replays and conflicts of finished operations; erasures; requeues of old unknowns.
    for tenant, operation_id, target in rng.sample(finished, min(sample, len(finished))):
        replay_and_conflict(tenant, operation_id, target, "after 45 days")
        stats["late_replays"] += 1
    for tenant, operation_id, _ in rng.sample(finished, min(sample // 4 + 1, len(finished))):
        hooks.erased.add((tenant, operation_id))
        retrying(partial(engine.erase, tenant, operation_id))
        report.note(tenant, operation_id, "erased")
        stats["erased_finished"] += 1
    for tenant, operation_id, _ in backlog[: max(1, len(backlog) // 10)]:
        hooks.erased.add((tenant, operation_id))
        retrying(partial(engine.erase, tenant, operation_id))
        report.note(tenant, operation_id, "erased while queued")
        stats["erased_queued"] += 1
    for tenant, operation_id, _ in parked[:sample]:
        window.add(tenant, operation_id)
        try:
            retrying(
                partial(
                    engine.resolve, tenant, operation_id, "requeue", note="checked after 45 days"
                )
            )
        except InvalidTransition:  # an earlier try committed and its answer was lost
            if checker.get(tenant, operation_id).state == State.UNKNOWN:
                raise
        report.note(tenant, operation_id, "requeued after 45 days")
        stats["requeued_unknown"] += 1
    stage("replayed, erased, requeued")
    paused.clear()
    window.wait_below(1, deadline)
    stage("backlog and requeued operations done")

    # 3. Most of a year later, still inside the identity retention: replays stay replays.
    paused.set()
    jump(300)
    stage("345 days later")
    now = table()
    for tenant, operation_id, target in rng.sample(enqueued[:base], min(sample, base)):
        if now[(tenant, operation_id)].state in (State.SUCCEEDED, State.FAILED_TERMINAL):
            replay_and_conflict(tenant, operation_id, target, "after 345 days")
            stats["late_replays"] += 1
    return dict(stats)


def operations(engine: Engine, tenants: Iterable[str]) -> dict[tuple[str, str], Operation]:
    """Every operation of these tenants, a page of 500 per read (the operator listing), not one
    read each."""
    found: dict[tuple[str, str], Operation] = {}
    for tenant in sorted(tenants):
        cursor = None
        while True:
            page = engine.list(tenant, limit=500, cursor=cursor)
            found.update({(tenant, op.operation_id): op for op in page.operations})
            cursor = page.next_cursor
            if cursor is None:
                break
    return found


def _readable(engine: Engine, operation: Operation) -> bool:
    """Whether a stored payload reads (an external one is the caller's: not read)."""
    if operation.payload_state != "stored":
        return True
    try:
        engine.payload(operation)
    except PayloadMissing:
        return False
    return True


def payload_items_left(engine: Engine, tenant: str, operation_id: str) -> int:
    """How many payload items (layout 2) of the operation the table still holds."""
    return len(
        engine.store.query(
            KeyConditionExpression="tenant_id = :t AND begins_with(operation_id, :p)",
            values={
                ":t": keys.operation_partition(tenant, operation_id),
                ":p": keys.payload_prefix(operation_id),
            },
            ProjectionExpression="operation_id",
            ConsistentRead=True,
        ).items
    )


def identities(engine: Engine, tenants: Iterable[str]) -> int:
    """How many operation identities (operation items, nothing else of the tenants' partitions:
    histories, directories, catalogue entries, claim markers) the table holds now."""
    found = 0
    for tenant in tenants:
        for partition in engine.partitions(tenant):
            start = None
            while True:
                page = engine.store.query(
                    KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                    values={":t": partition, ":first": keys.FIRST_OPERATION_ID},
                    ProjectionExpression="operation_id",
                    ConsistentRead=True,
                    start=start,
                )
                found += len(page.items)
                start = page.last_key
                if start is None:
                    break
    return found
