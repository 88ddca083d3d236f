"""`leasefence demo`: the zombie-worker story, once per target class, with real threads.

For each class, zombie workers claim operations and pause (a GC stop, a lost network) past their
lease just before acting. A rescuer takes over (class D: the sweeper parks instead, since it has
one attempt), and then each zombie wakes up and tries to act. The targets count what really
happened. Class D also gets one call whose answer is lost: ambiguous, so parked as unknown.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from leasefence.engine import Engine
from leasefence.model import State
from leasefence.schema import TableSpec
from leasefence.worker import EngineBackend, Worker
from leasefence_tools.testing.kits import Hooks, Kit, SingleShotKit, all_kits, overtaken


@dataclass
class ClassReport:
    target_class: str
    operations: int
    expected_effects: str
    side_effects: int
    duplicates: int
    stale_writes_rejected: int
    unknown: int
    succeeded: int


class _Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, float] = {}

    def __call__(self, name: str, value: float) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + value


def _wait(predicate: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("demo step did not finish in time")
        time.sleep(0.02)


def _run_class(
    engine: Engine, kit: Kit, tenant: str, per_class: int, lease_ms: int, events: _Events
) -> ClassReport:
    ops = [f"{kit.target_class.value.lower()}-zombie-{i}" for i in range(per_class)]
    extra: list[str] = []

    def pause_past_lease(job: Any) -> None:
        """A GC stop or a lost network: past the lease, and until someone else acted on the
        operation (taken over, or parked by the sweeper), however slow this machine is."""
        time.sleep(lease_ms * 1.6 / 1000)
        _wait(lambda: overtaken(engine, job), 60)

    for op in ops:
        kit.setup(tenant, op)
        engine.enqueue(
            tenant,
            op,
            kit.job_type,
            "sha256:" + f"{abs(hash(op)):064x}"[-64:],
            target_class=kit.target_class,
        )
        kit.hooks.on_before(tenant, op, 1, pause_past_lease)

    def worker(name: str) -> Worker:
        return Worker(
            EngineBackend(engine, [tenant]),
            {kit.job_type: kit.handler()},
            worker_id=name,
            lease_ms=lease_ms,
            heartbeat_interval_ms=lease_ms // 3,
            idle_sleep_ms=50,
            events=events,
        )

    zombies = [worker(f"zombie-{i}") for i in range(per_class)]
    zombie_threads = [threading.Thread(target=z.run_once, name=z.worker_id) for z in zombies]
    for thread in zombie_threads:
        thread.start()
    _wait(lambda: all(engine.get(tenant, op).fence >= 1 for op in ops), 30)

    if isinstance(kit, SingleShotKit):
        # One more class-D operation whose call goes out but whose answer is lost.
        op = "d-ambiguous"
        extra.append(op)
        kit.lose_answer.add((tenant, op))
        engine.enqueue(
            tenant, op, kit.job_type, "sha256:" + "d" * 64, target_class=kit.target_class
        )

    rescuer = worker("rescuer")
    rescuer_thread = threading.Thread(target=rescuer.run, name="rescuer")
    rescuer_thread.start()
    stop_sweeper = threading.Event()

    def sweeper() -> None:
        while not stop_sweeper.wait(0.1):
            engine.sweep()

    sweeper_thread = threading.Thread(target=sweeper, name="sweeper")
    sweeper_thread.start()
    for thread in zombie_threads:
        thread.join()
    everything = ops + extra
    _wait(
        lambda: all(
            engine.get(tenant, op).state not in (State.QUEUED, State.CLAIMED) for op in everything
        ),
        30,
    )
    rescuer.stop()
    stop_sweeper.set()
    rescuer_thread.join()
    sweeper_thread.join()

    final = [engine.get(tenant, op) for op in everything]
    effects = [kit.effects(tenant, op) for op in everything]
    return ClassReport(
        target_class=kit.target_class.value,
        operations=len(everything),
        expected_effects="at most 1 each" if isinstance(kit, SingleShotKit) else "exactly 1 each",
        side_effects=sum(effects),
        duplicates=sum(max(0, n - 1) for n in effects),
        # Each zombie that woke up and tried to act was refused at a fenced write or guard.
        stale_writes_rejected=int(events.counts.get("LostOwnership", 0)),
        unknown=sum(1 for o in final if o.state == State.UNKNOWN),
        succeeded=sum(1 for o in final if o.state == State.SUCCEEDED),
    )


def run_demo(per_class: int = 3, lease_ms: int = 1_000) -> dict[str, Any]:
    from leasefence_tools.local.embedded import EmbeddedAws

    started = time.monotonic()
    results: dict[str, ClassReport] = {}
    with EmbeddedAws() as aws:
        spec = aws.create_tables(TableSpec(table_name="demo-operations"))
        client = aws.client()
        engine = Engine(client=client, spec=spec)
        threads = []
        for kit in all_kits(client, "demo", hooks=Hooks()):
            sink = _Events()
            kit.events = sink
            tenant = f"tenant-{kit.target_class.value.lower()}"

            def run(kit: Kit = kit, sink: _Events = sink, tenant: str = tenant) -> None:
                results[kit.target_class.value] = _run_class(
                    engine, kit, tenant, per_class, lease_ms, sink
                )

            threads.append(threading.Thread(target=run, name=f"class-{kit.target_class.value}"))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    reports = [results[c] for c in "ABCD"]
    return {
        "operations": sum(r.operations for r in reports),
        "side_effects": sum(r.side_effects for r in reports),
        "duplicates": sum(r.duplicates for r in reports),
        "stale_writes_rejected": sum(r.stale_writes_rejected for r in reports),
        "unknown": sum(r.unknown for r in reports),
        "seconds": round(time.monotonic() - started, 2),
        "classes": [asdict(r) for r in reports],
    }


def print_report(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="leasefence demo: a zombie worker per operation, per target class")
    for column in (
        "class",
        "operations",
        "side effects expected",
        "seen",
        "duplicates",
        "stale rejected",
        "unknown",
    ):
        table.add_column(column, justify="left" if column == "side effects expected" else "right")
    for row in summary["classes"]:
        table.add_row(
            row["target_class"],
            str(row["operations"]),
            row["expected_effects"],
            str(row["side_effects"]),
            str(row["duplicates"]),
            str(row["stale_writes_rejected"]),
            str(row["unknown"]),
        )
    Console(width=110).print(table)
    print(json.dumps({k: v for k, v in summary.items() if k != "classes"}))


def main(per_class: int = 3, lease_ms: int = 1_000) -> int:
    import logging

    logging.getLogger("leasefence").setLevel(
        logging.ERROR
    )  # the refusals are the point; the table shows them
    summary = run_demo(per_class=per_class, lease_ms=lease_ms)
    print_report(summary)
    return 1 if summary["duplicates"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
