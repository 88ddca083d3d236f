"""What every lifecycle phase of the engine shares: the store, the table's layout, the clock, the
randomness, the metric sink, the retentions, the payload store and the catalogue.

One :class:`EngineContext` per :class:`~leasefence.engine.Engine`; the phases hold it (never a
copy of its fields), so a caller that replaces ``engine.clock`` or ``engine.payloads`` changes
what every phase sees.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from leasefence import keys
from leasefence.catalogue import Catalogue
from leasefence.clock import Clock
from leasefence.engine._layout import TenantLayouts
from leasefence.engine._spread import DueSpread
from leasefence.limits import SPREAD_SHARD_RATE
from leasefence.metrics import Metric, MetricSink
from leasefence.model import State
from leasefence.privacy import keyed_hash
from leasefence.schema import TableSpec
from leasefence.store import ConditionFailed, Store

if TYPE_CHECKING:
    from leasefence.engine._engine import Engine

Key = dict[str, str]
T = TypeVar("T")


@dataclass
class EngineContext:
    store: Store
    spec: TableSpec
    clock: Clock
    rng: random.Random
    #: Called with (metric name, value) for every domain event worth counting.
    metrics: MetricSink
    #: How long an ended operation's identity is kept (ms; None: forever).
    identity_retention_ms: int | None
    #: How long an ended operation's stored payload is kept (ms).
    payload_retention_ms: int
    #: Where inline payloads live (a :class:`~leasefence.payloads.PayloadStore`): needed to read,
    #: purge and erase them. None: this engine only handles operations by reference.
    payloads: Any
    #: The tenants' job-type catalogues (entries cached briefly: see :mod:`leasefence.catalogue`).
    catalogue: Catalogue
    #: Every fence this engine hands out is above this (see :data:`~leasefence.limits.FENCE_EPOCH_SPAN`).
    fence_floor: int = 0
    #: Payload items keep a payload packed where that is shorter (:func:`leasefence.payloads.pack`);
    #: False: always as text, for tables that readers from before packing still read.
    pack_payloads: bool = True
    #: Lifecycles a second one engine sends to one due shard before it raises the spread
    #: (:data:`~leasefence.limits.SPREAD_SHARD_RATE`, derived from a partition's write limit: a
    #: run against limits divided by N divides it by N too).
    spread_shard_rate: float = SPREAD_SHARD_RATE
    #: How many due shards each (tenant, job type) uses now (:mod:`leasefence.engine._spread`).
    spread: DueSpread = field(init=False, repr=False)
    #: Each tenant's write shard counts (:mod:`leasefence.engine._layout`).
    layouts: TenantLayouts = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.spread = DueSpread(self)
        self.layouts = TenantLayouts(self.store, self.spec)

    def count(self, metric: Metric, value: float = 1) -> None:
        self.metrics(metric, value)

    def key(self, tenant_id: str, operation_id: str) -> Key:
        """The key a new operation item gets: its write shard under the deployment's write count
        (:func:`leasefence.keys.operation_key`). An existing operation found by id alone is
        where :meth:`locate` finds it; one read from an index or a page is at its own key
        (:func:`leasefence.keys.item_key`)."""
        return keys.operation_key(tenant_id, operation_id, self.layouts.counts(tenant_id)[0])

    def candidates(self, tenant_id: str, operation_id: str, record: bool = False) -> list[Key]:
        """Every key the operation may have in this deployment (its write count's first; with
        ``record``, for an enqueue, the tenant's counts are recorded first if they are not)."""
        return [
            {"tenant_id": partition, "operation_id": operation_id}
            for partition in keys.operation_partitions(
                tenant_id, operation_id, self.layouts.counts(tenant_id, record)
            )
        ]

    def find(self, tenant_id: str, operation_id: str, consistent: bool = True) -> Any:
        """The operation item (or None): one ``GetItem`` where the write count puts it, and only
        in a deployment that changed its write count, one more per other count until found."""
        for key in self.candidates(tenant_id, operation_id):
            item = self.store.get_operation(key, consistent=consistent)
            if item is not None:
                return item
        return None

    def locate(self, tenant_id: str, operation_id: str) -> Key:
        """The key of the operation for a command by id: :meth:`key`, with no read, unless the
        deployment changed its write count; then the key where :meth:`find` finds it (the
        write count's when it is nowhere: the command then answers as for a missing one)."""
        candidates = self.candidates(tenant_id, operation_id)
        if len(candidates) > 1:
            item = self.find(tenant_id, operation_id)
            if item is not None:
                return keys.item_key(item)
        return candidates[0]

    def at_operation(self, tenant_id: str, operation_id: str, write: Callable[[Key], T]) -> T:
        """``write(key)`` at the write count's key, with no read first; in a deployment that
        changed its write count, when that was refused for want of an item there
        (:class:`ConditionFailed` without one), once more where :meth:`find` finds the
        operation under another count. For the commands of every lifecycle (heartbeat,
        complete, fail): an operation written under the write count costs no extra read."""
        first, *others = self.candidates(tenant_id, operation_id)
        try:
            return write(first)
        except ConditionFailed as refused:
            if refused.item is not None or not others:
                raise
            for key in others:
                if self.store.get(key) is not None:
                    return write(key)
            raise

    def marker_key(self, tenant_id: str, marker_id: str) -> Key:
        """A claim marker's key (:func:`leasefence.keys.claim_marker_key`)."""
        return keys.claim_marker_key(tenant_id, marker_id, self.layouts.counts(tenant_id)[0])

    def partitions(self, tenant_id: str) -> list[str]:
        """Every write shard of the tenant (:func:`leasefence.keys.tenant_partitions`)."""
        return keys.tenant_partitions(tenant_id, self.layouts.counts(tenant_id))

    @staticmethod
    def tag(tenant_id: str, operation_id: str) -> str:
        """The operation as logs name it: a keyed hash, never the raw ids."""
        return keyed_hash(tenant_id, operation_id)

    # ------------------------------------------------------------------ index partitions

    def due_pk(self, tenant_id: str, operation_id: str, job_type: str) -> str:
        """A new operation's due partition: its shard below the pair's spread
        (:meth:`~leasefence.engine._spread.DueSpread.enqueue_shard`)."""
        return keys.due_partition(
            tenant_id, self.spread.enqueue_shard(tenant_id, operation_id, job_type), job_type
        )

    def sweep_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.sweep_partition(keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))

    def parked_pk(self, state: State, tenant_id: str, operation_id: str) -> str:
        return keys.parked_partition(
            state.value, keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards)
        )

    def purge_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.purge_partition(keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))


class Shared(Generic[T]):
    """An engine attribute kept by one of its parts (``part``: an attribute of the engine), read
    and set through the engine: replacing ``engine.clock`` changes what every phase reads."""

    def __init__(self, part: str, field: str) -> None:
        self.part, self.field = part, field

    @overload
    def __get__(self, engine: None, owner: type | None = None) -> Shared[T]: ...
    @overload
    def __get__(self, engine: Engine, owner: type | None = None) -> T: ...
    def __get__(self, engine: Engine | None, owner: type | None = None) -> T | Shared[T]:
        if engine is None:
            return self
        value: T = getattr(getattr(engine, self.part), self.field)
        return value

    def __set__(self, engine: Engine, value: T) -> None:
        setattr(getattr(engine, self.part), self.field, value)
