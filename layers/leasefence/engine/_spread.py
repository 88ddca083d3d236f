"""The due spread: how many of the deployment's due shards one (tenant, job type) uses now.

An enqueue files its due entry in shard ``shard_of(tenant, operation, spread)``, and claimers
probe the shards below the spread (in random order), so at idle (spread 1) a lone job is in
shard 0 and one query finds it, whatever ``due_shards`` is. The spread is a small hint item
per (tenant, job type) in the tenant's partition, ``{spread, previous, changed_at}``, read
eventually consistent and trusted for :data:`~leasefence.limits.SPREAD_CACHE_MS` by each
engine (one read per engine and second at any rate: never a hot key).

Every change is one write conditional on the version read, so no change is
lost and no two engines undo each other:

- **raised** (doubled, or to what this engine's own rate needs) when a claimer loses a race, a
  store request of the job type is throttled, or one engine alone sends more than
  :data:`~leasefence.limits.SPREAD_SHARD_RATE` lifecycles a second per shard;
- **lowered** to 1 (from any spread, or from none: a pair without a hint item uses every
  shard, as before the spread, so due entries written before it are all found) when an
  engine's claim-nexts of it have found nothing for :data:`~leasefence.limits.SPREAD_IDLE_MS`,
  the last change is older than :data:`~leasefence.limits.SPREAD_GRACE_MS`, and every shard
  but 0 holds no entry of the pair at all (:meth:`DueSpread.high_shards_empty`: a claimed
  operation's entry waits there for its lease to lapse, a retry's for its backoff).

The hint is advice, never an ownership decision: an entry in any shard stays claimable by the
claim's own conditional write. No entry is stranded: after a fall claimers probe up to the
spread before it for :data:`~leasefence.limits.SPREAD_GRACE_MS` (an enqueue that used a cached
spread is found by the next poll), it never falls while a shard above 0 holds an entry, and
every engine that polls a (tenant, job type) probes
every due shard at least once per :data:`~leasefence.limits.SPREAD_FULL_PROBE_MS` (the bound
for an enqueue delayed past the grace, and for an operation that re-enters the index at its
``due_home`` after the fall: approved, or requeued by an operator).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from leasefence import keys
from leasefence.errors import Unavailable
from leasefence.limits import (
    MEMORY_ENTRIES,
    SECOND_MS,
    SPREAD_CACHE_MS,
    SPREAD_CLAIM_CACHE_MS,
    SPREAD_FULL_PROBE_MS,
    SPREAD_GRACE_MS,
    SPREAD_IDLE_MS,
    SPREAD_START_SHARDS,
)
from leasefence.schema import DUE_INDEX, DUE_PK
from leasefence.store import ConditionFailed

if TYPE_CHECKING:
    from leasefence.engine._context import EngineContext

Pair = tuple[str, str]
V = TypeVar("V")


@dataclass(frozen=True)
class Hint:
    """A (tenant, job type)'s spread as read. ``spread`` 0: no hint item (a pair never seen idle,
    or one with due entries from before the spread, in any shard): every shard, as before."""

    spread: int = 0
    previous: int = 0
    changed_at: int = 0
    version: int = 0

    def width(self, shards: int) -> int:
        """The spread within a deployment of ``shards`` due shards."""
        return min(self.spread or shards, shards)

    def reach(self, now: int, shards: int) -> int:
        """How many shards claimers probe first: the spread, or the one before it for
        :data:`~leasefence.limits.SPREAD_GRACE_MS` after a fall."""
        if now - self.changed_at < SPREAD_GRACE_MS:
            return max(self.width(shards), min(self.previous or shards, shards))
        return self.width(shards)


class _Memory(OrderedDict[Pair, V]):
    """Per (tenant, job type) values, bounded: the oldest forgotten first."""

    def remember(self, pair: Pair, value: V) -> None:
        self.pop(pair, None)
        self[pair] = value
        while len(self) > MEMORY_ENTRIES:
            self.popitem(last=False)


class DueSpread:
    """One engine's view of the spreads, with its own rates and probe times."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        #: (tenant, job type) -> (read at, hint).
        self._hints: _Memory[tuple[int, Hint]] = _Memory()
        #: (tenant, job type) -> when this engine last probed every due shard.
        self._probed_all: _Memory[int] = _Memory()
        #: (tenant, job type) -> since when this engine's claim-nexts found nothing.
        self._empty_since: _Memory[int] = _Memory()
        #: (tenant, job type) -> (second, lifecycles this engine saw in it).
        self._rate: _Memory[tuple[int, int]] = _Memory()
        #: (tenant, job type) -> when this engine last tried to change the hint.
        self._changed: _Memory[int] = _Memory()

    # ------------------------------------------------------------------ reading

    def hint(self, tenant_id: str, job_type: str, max_age_ms: int = SPREAD_CACHE_MS) -> Hint:
        """The hint, from this engine's cache if younger than the cache period. A failed read
        answers the cached hint, however old; with none, the caller sees the error (retried as
        any :class:`Unavailable`)."""
        pair, now = (tenant_id, job_type), self.ctx.clock()
        if self.ctx.spec.due_shards == 1:
            return Hint(1, 1)  # nothing to choose: no read
        with self._lock:
            cached = self._hints.get(pair)
        if cached is not None and now - cached[0] < max_age_ms:
            return cached[1]
        try:
            item = self.ctx.store.get(_key(tenant_id, job_type), consistent=False)
        except Unavailable:
            if cached is not None:
                return cached[1]
            raise  # no guess: a wider guess would file entries where claimers do not probe
        hint = (
            Hint(
                int(item["spread"]),
                int(item["previous"]),
                int(item["changed_at"]),
                int(item["version"]),
            )
            if item is not None
            else Hint()
        )
        with self._lock:
            self._hints.remember(pair, (now, hint))
        return hint

    def spread(self, tenant_id: str, job_type: str, max_age_ms: int = SPREAD_CACHE_MS) -> int:
        return self.hint(tenant_id, job_type, max_age_ms).width(self.ctx.spec.due_shards)

    def enqueue_shard(self, tenant_id: str, operation_id: str, job_type: str) -> int:
        """The due shard of a new operation: a hash of its id modulo the spread."""
        spread = self.spread(tenant_id, job_type)
        self.note_lifecycle(tenant_id, job_type, spread)
        return keys.shard_of(tenant_id, operation_id, spread)

    def probe_order(self, tenant_id: str, job_type: str) -> tuple[list[int], list[int]]:
        """The due shards a claim-next probes: those below the reach, and, once per
        :data:`~leasefence.limits.SPREAD_FULL_PROBE_MS` of this engine's polls of the pair (the
        period counted from its first poll), every other shard (else none)."""
        pair, now, shards = (tenant_id, job_type), self.ctx.clock(), self.ctx.spec.due_shards
        reach = self.hint(tenant_id, job_type, SPREAD_CLAIM_CACHE_MS).reach(now, shards)
        if reach == shards:
            return list(range(shards)), []
        with self._lock:
            probed = self._probed_all.get(pair)
            if probed is None:
                self._probed_all.remember(pair, now)
            full = probed is not None and now - probed >= SPREAD_FULL_PROBE_MS
            if full:
                self._probed_all.remember(pair, now)
        return list(range(reach)), list(range(reach, shards)) if full else []

    # ------------------------------------------------------------------ what claims and enqueues saw

    def note_lifecycle(self, tenant_id: str, job_type: str, spread: int) -> None:
        """An enqueue or a claim of the pair by this engine: past the context's
        ``spread_shard_rate`` (:data:`~leasefence.limits.SPREAD_SHARD_RATE`) per shard in one
        second, raise."""
        pair, second = (tenant_id, job_type), self.ctx.clock() // SECOND_MS
        with self._lock:
            at, count = self._rate.get(pair, (second, 0))
            count = count + 1 if at == second else 1
            self._rate.remember(pair, (second, count))
        rate = self.ctx.spread_shard_rate
        if count > spread * rate:
            self.raise_spread(tenant_id, job_type, math.ceil(count / rate))

    def note_poll(self, tenant_id: str, job_type: str, found: bool) -> None:
        """A claim-next's probes of the pair: work found, or none (idle: maybe lower)."""
        pair, now = (tenant_id, job_type), self.ctx.clock()
        with self._lock:
            if found:
                self._empty_since.pop(pair, None)
                return
            since = self._empty_since.get(pair)
            if since is None:
                since = now
                self._empty_since.remember(pair, now)
        if now - since < SPREAD_IDLE_MS:
            return
        hint = self.hint(tenant_id, job_type)
        if hint.spread == 1 or now - hint.changed_at < SPREAD_GRACE_MS:
            return
        with self._lock:
            self._empty_since.remember(pair, now)  # checked again after another idle period
        if self.high_shards_empty(tenant_id, job_type):
            self.change(tenant_id, job_type, hint, 1)

    def high_shards_empty(self, tenant_id: str, job_type: str) -> bool:
        """Whether every due shard but 0 holds no entry of the pair at all, due or not: a
        claimed operation's entry (its lease), a retry's (its backoff). Only then may the spread
        fall, so a takeover or a retry is never left in a shard claimers no longer probe. One
        query of one entry per shard, in random order, stopping at the first that has one."""
        shards = list(range(1, self.ctx.spec.due_shards))
        self.ctx.rng.shuffle(shards)
        for shard in shards:
            page = self.ctx.store.query(
                IndexName=DUE_INDEX,
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": DUE_PK},
                values={":pk": keys.due_partition(tenant_id, shard, job_type)},
                Limit=1,
            )
            if page.items:
                return False
        return True

    def raise_spread(self, tenant_id: str, job_type: str, needed: int = 0) -> None:
        """Contention or throttling on the pair (or ``needed`` shards for this engine's rate):
        double the spread, up to the deployment's due shards."""
        hint, shards = self.hint(tenant_id, job_type), self.ctx.spec.due_shards
        width = hint.width(shards)
        target = min(max(width * 2, needed), shards)
        if target > width:
            self.change(tenant_id, job_type, hint, target)

    @contextmanager
    def throttled(self, tenant_id: str, job_type: str) -> Iterator[None]:
        """Around a request of the pair: throttled (:class:`Unavailable`), raise the spread, and
        let the caller see the error."""
        try:
            yield
        except Unavailable:
            self.raise_spread(tenant_id, job_type)
            raise

    def start(self, tenant_id: str, job_type: str) -> None:
        """The hint of a pair new to its tenant's directory, at the idle spread (one conditional
        put; a refusal means another engine wrote it first, which is as good)."""
        if self.ctx.spec.due_shards < SPREAD_START_SHARDS:
            return
        # Refused: another engine wrote it first. Busy: the pair keeps probing every shard,
        # as a pair without a hint does (correct, only dearer).
        with contextlib.suppress(ConditionFailed, Unavailable):
            self.ctx.store.put_new(
                hint_item(tenant_id, job_type, IDLE), "attribute_not_exists(#k)", {"#k": "version"}
            )
        with self._lock:
            self._hints.pop((tenant_id, job_type), None)

    def change(self, tenant_id: str, job_type: str, hint: Hint, spread: int) -> None:
        """One write conditional on the hint as read (at most one try per engine, pair and cache
        period); refused or throttled, it is dropped: the next signal tries again."""
        pair, now = (tenant_id, job_type), self.ctx.clock()
        with self._lock:
            last = self._changed.get(pair)
            if last is not None and now - last < SPREAD_CACHE_MS:
                return
            self._changed.remember(pair, now)
        names = {"#s": "spread", "#p": "previous", "#c": "changed_at", "#v": "version"}
        reach = hint.reach(now, self.ctx.spec.due_shards)
        values = {":s": spread, ":p": reach, ":now": now, ":v": hint.version + 1}
        if hint.version:
            condition = "#v = :read"
            values[":read"] = hint.version
        else:
            condition = "attribute_not_exists(#v)"
        try:
            self.ctx.store.update(
                _key(tenant_id, job_type),
                "SET #s = :s, #p = :p, #c = :now, #v = :v",
                condition,
                names,
                values,
                returns="NONE",
            )
        except (ConditionFailed, Unavailable):
            spread = 0  # someone else changed it first, or the store is busy: read it again
        with self._lock:
            if spread:
                changed = Hint(spread, reach, now, hint.version + 1)
                self._hints.remember(pair, (now, changed))
            else:
                self._hints.pop(pair, None)


#: The hint an idle pair settles at, and a new pair starts at: one shard.
IDLE = Hint(1, 1, 0, 1)


def hint_item(tenant_id: str, job_type: str, hint: Hint) -> dict[str, object]:
    """The hint item of a pair as :class:`DueSpread` writes it (for tools and tests that set a
    spread, e.g. the one an idle pair settles at: ``Hint(1, 1, 0, 1)``)."""
    return {
        **_key(tenant_id, job_type),
        "spread": hint.spread,
        "previous": hint.previous,
        "changed_at": hint.changed_at,
        "version": hint.version,
    }


def _key(tenant_id: str, job_type: str) -> dict[str, str]:
    return keys.tenant_key(tenant_id, keys.spread_id(job_type))
