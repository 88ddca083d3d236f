"""Instrumented side-effect targets, one per class, for tests, the demo and the torture harness.

Each kit owns a target, a handler that acts on it the way the class demands, and a count of the
side effects the *target itself* recorded, so a duplicate is seen where it would hurt.
Hooks let a test or the demo stall or crash a worker at the worst moments: just before the side
effect, and just after it (before the completion write).
"""

from __future__ import annotations

import contextlib
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from leasefence.model import State, TargetClass
from leasefence.targets import fenced_table, idempotent_api, same_table, single_shot
from leasefence.targets.identity import identity_digest
from leasefence.worker import FunctionHandler, Job, LostOwnership, Reconciled

if TYPE_CHECKING:
    from leasefence.engine import Engine

Hook = Callable[[Job], None]


def overtaken(engine: Engine, job: Job) -> bool:
    """Someone else acted on the job's operation since it was claimed: a later claim raised the
    fence, or the operation left ``claimed`` (the sweeper parked it). A paused worker ("zombie")
    waits for this so that it wakes up into the situation it is meant to test."""
    current = engine.get(job.tenant_id, job.operation_id)
    return current.fence > job.fence or current.state != State.CLAIMED


class Hooks:
    """Per-operation, per-fence fault hooks: ``before`` the side effect and ``after`` it."""

    def __init__(self) -> None:
        self._before: dict[tuple[str, str, int], Hook] = {}
        self._after: dict[tuple[str, str, int], Hook] = {}

    def on_before(self, tenant_id: str, operation_id: str, fence: int, hook: Hook) -> None:
        self._before[(tenant_id, operation_id, fence)] = hook

    def on_after(self, tenant_id: str, operation_id: str, fence: int, hook: Hook) -> None:
        self._after[(tenant_id, operation_id, fence)] = hook

    def before(self, job: Job) -> None:
        hook = self._before.pop((job.tenant_id, job.operation_id, job.fence), None)
        if hook:
            hook(job)

    def after(self, job: Job) -> None:
        hook = self._after.pop((job.tenant_id, job.operation_id, job.fence), None)
        if hook:
            hook(job)


def _create_table(client: Any, name: str) -> None:
    with contextlib.suppress(client.exceptions.ResourceInUseException):
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )


class Kit(ABC):
    target_class: TargetClass
    job_type: str

    def __init__(
        self, hooks: Hooks | None = None, events: Callable[[str, float], None] | None = None
    ) -> None:
        self.hooks = hooks if hooks is not None else Hooks()
        self.events = events if events is not None else (lambda _name, _value: None)
        self.lock = threading.Lock()

    def setup(self, tenant_id: str, operation_id: str) -> None:  # noqa: B027 - optional hook
        """Prepare the target for one operation (class A: the order to refund)."""

    @abstractmethod
    def handler(self) -> FunctionHandler:
        """The job type's handler, acting on this kit's target."""

    @abstractmethod
    def effects(self, tenant_id: str, operation_id: str) -> int:
        """Side effects the target itself recorded for one operation."""

    def attempts_at_target(self, tenant_id: str, operation_id: str) -> int:
        """Calls that reached the target (class C and D may differ from effects)."""
        return self.effects(tenant_id, operation_id)


class SameTableKit(Kit):
    """Class A: refund an order in DynamoDB in the completion's own transaction."""

    target_class = TargetClass.A
    job_type = "refund-a"

    def __init__(self, client: Any, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = client
        self.table = table
        _create_table(client, table)

    def _key(self, tenant_id: str, operation_id: str) -> dict[str, str]:
        return {"pk": identity_digest(tenant_id, operation_id)}

    def setup(self, tenant_id: str, operation_id: str) -> None:
        self.client.put_item(
            TableName=self.table,
            Item={
                "pk": {"S": self._key(tenant_id, operation_id)["pk"]},
                "status": {"S": "paid"},
                "refunds": {"N": "0"},
            },
        )

    def order(self, tenant_id: str, operation_id: str) -> dict[str, Any]:
        key = {"pk": {"S": self._key(tenant_id, operation_id)["pk"]}}
        return self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get(
            "Item", {}
        )

    def handler(self) -> FunctionHandler:
        def run(job: Job) -> None:
            self.hooks.before(job)
            refund = same_table.update(
                self.table,
                self._key(job.tenant_id, job.operation_id),
                "SET #s = :refunded, refunded_by_fence = :f, refunded_payload = :ph ADD refunds :one",
                condition="#s = :paid",  # the business guard: only a paid order can be refunded
                names={"#s": "status"},
                values={
                    ":refunded": "refunded",
                    ":paid": "paid",
                    ":one": 1,
                    ":f": job.fence,
                    ":ph": job.claim.payload_hash,
                },
            )
            try:
                job.complete_with("refunded", [refund])
            except (Exception, LostOwnership):
                if job.cancelled.is_set():
                    self.events("StaleWritesRejected", 1)
                raise
            self.hooks.after(job)

        def reconcile(job: Job) -> Reconciled:
            order = self.order(job.tenant_id, job.operation_id)
            return (
                Reconciled.done("refunded")
                if order.get("status", {}).get("S") == "refunded"
                else Reconciled.not_done()
            )

        return FunctionHandler(run, reconcile)

    def effects(self, tenant_id: str, operation_id: str) -> int:
        return self.refunds(self.order(tenant_id, operation_id))

    @staticmethod
    def refunds(order: dict[str, Any]) -> int:
        """The refunds an order (as :meth:`order` returns it) records."""
        return int(order.get("refunds", {}).get("N", "0"))


class FencedTableKit(Kit):
    """Class B: write a ledger entry in a table that refuses lower fences per operation."""

    target_class = TargetClass.B
    job_type = "ledger-b"

    def __init__(self, client: Any, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _create_table(client, table)
        self.table = fenced_table.FencedTable(client, table, events=self.events)

    def _key(self, tenant_id: str, operation_id: str) -> dict[str, str]:
        return {"pk": identity_digest(tenant_id, operation_id)}

    def handler(self) -> FunctionHandler:
        def on_claim(job: Job) -> None:
            self.table.raise_fence(job, self._key(job.tenant_id, job.operation_id))

        def run(job: Job) -> str:
            self.hooks.before(job)
            try:
                self.table.write(
                    job,
                    self._key(job.tenant_id, job.operation_id),
                    {
                        "status": "posted",
                        "by_fence": job.fence,
                        "payload_hash": job.claim.payload_hash,
                    },
                    append={"history": [job.fence]},  # in commit order: the target's own record
                )
            except (Exception, LostOwnership):
                if job.cancelled.is_set():
                    self.events("StaleWritesRejected", 1)
                raise
            self.hooks.after(job)
            return "posted"

        def reconcile(job: Job) -> Reconciled:
            item = self.table.read(self._key(job.tenant_id, job.operation_id)) or {}
            return (
                Reconciled.done("posted")
                if item.get("status") == "posted"
                else Reconciled.not_done()
            )

        return FunctionHandler(run, reconcile, on_claim)

    def effects(self, tenant_id: str, operation_id: str) -> int:
        return len(self.history(tenant_id, operation_id))

    def entry(self, tenant_id: str, operation_id: str) -> dict[str, Any]:
        """The operation's ledger item as the target holds it (empty if it has none)."""
        return self.table.read(self._key(tenant_id, operation_id)) or {}

    def history(self, tenant_id: str, operation_id: str) -> list[int]:
        """Fences of the committed writes, in the order the target applied them."""
        return self.history_of(self.entry(tenant_id, operation_id))

    @staticmethod
    def history_of(entry: dict[str, Any]) -> list[int]:
        """The fences of the committed writes an :meth:`entry` records, in commit order."""
        return [int(f) for f in entry.get("history", [])]


class IdempotentApiKit(Kit):
    """Class C: send an email through a provider that deduplicates by idempotency key."""

    target_class = TargetClass.C
    job_type = "email-c"

    def __init__(
        self, api: idempotent_api.InMemoryIdempotentApi | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.api = api if api is not None else idempotent_api.InMemoryIdempotentApi()
        self.calls: Counter[tuple[str, str]] = Counter()

    def handler(self) -> FunctionHandler:
        def run(job: Job) -> str:
            self.hooks.before(job)
            with self.lock:
                self.calls[(job.tenant_id, job.operation_id)] += 1
            result = idempotent_api.call(
                job, self.api, {"template": "receipt", "payload_hash": job.claim.payload_hash}
            )
            self.hooks.after(job)
            return f"sent:{result['id']}"

        return FunctionHandler(
            run, lambda job: idempotent_api.reconcile(job, self.api, lambda r: f"sent:{r['id']}")
        )

    def effects(self, tenant_id: str, operation_id: str) -> int:
        key = idempotent_api.idempotency_key(tenant_id, operation_id)
        return self.api.executions.count(key)

    def attempts_at_target(self, tenant_id: str, operation_id: str) -> int:
        return self.calls[(tenant_id, operation_id)]


class SingleShotKit(Kit):
    """Class D: send an SMS through a gateway with no idempotency and no lookup."""

    target_class = TargetClass.D
    job_type = "sms-d"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: Counter[tuple[str, str]] = Counter()
        self.sent_payloads: dict[tuple[str, str], list[str]] = {}
        self.lose_answer: set[tuple[str, str]] = set()

    def handler(self) -> FunctionHandler:
        def send(job: Job) -> str:
            with self.lock:
                self.sent[(job.tenant_id, job.operation_id)] += 1
                self.sent_payloads.setdefault((job.tenant_id, job.operation_id), []).append(
                    job.claim.payload_hash
                )
                lost = (job.tenant_id, job.operation_id) in self.lose_answer
            if lost:
                raise TimeoutError("gateway did not answer")
            return "sent"

        def run(job: Job) -> str:
            self.hooks.before(job)
            result = single_shot.call_once(job, lambda: send(job), what="sms")
            self.hooks.after(job)
            return result

        return FunctionHandler(run, single_shot.reconcile)

    def effects(self, tenant_id: str, operation_id: str) -> int:
        return self.sent[(tenant_id, operation_id)]


def all_kits(
    client: Any,
    prefix: str,
    hooks: Hooks | None = None,
    events: Callable[[str, float], None] | None = None,
) -> list[Kit]:
    return [
        SameTableKit(client, f"{prefix}-orders", hooks=hooks, events=events),
        FencedTableKit(client, f"{prefix}-ledger", hooks=hooks, events=events),
        IdempotentApiKit(hooks=hooks, events=events),
        SingleShotKit(hooks=hooks, events=events),
    ]
