"""Claims: a due operation taken under a lease and a new fence, in one conditional write.

A :class:`Claimer` reads the tenant's ``due`` partitions a page at a time (those below each job
type's spread first: :mod:`leasefence.engine._spread`), tries candidates in random order and
writes a claim pinned to the fence and attempt counters it read (:func:`claim_write`). It
remembers, with bounded memory, which tenants it recently lost races for (it then reads larger
pages) and which live claims it saw (skipped without a request until their lease as read).
Resent requests are recognized by their claim token.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, TypeVar, cast

from leasefence import history, keys
from leasefence.engine import _expr as x
from leasefence.engine import _rules as rules
from leasefence.engine._claim_write import claim_write
from leasefence.engine._context import EngineContext, Key
from leasefence.engine._expr import Write
from leasefence.engine._marker import IN_PROGRESS, NO_FENCE, Marker, MarkerMoved, after_home
from leasefence.engine._reads import Reads
from leasefence.errors import NotFound, Unavailable
from leasefence.limits import (
    CLAIM_RETRY_BUDGET_MS,
    CONTENTION_MEMORY,
    MEMORY_ENTRIES,
    SPREAD_CLAIM_CACHE_MS,
)
from leasefence.metrics import Metric
from leasefence.model import TERMINAL_STATES, Claim, State
from leasefence.schema import DUE_INDEX, DUE_PK, DUE_SK, OperationItem
from leasefence.store import ConditionFailed
from leasefence.validation import validate_id, validate_job_types, validate_lease

log = logging.getLogger("leasefence.engine")

R = TypeVar("R")

#: How many times a claim-next reads its token's marker again after another request with the
#: token moved it, before answering "in progress" (:data:`~leasefence.engine._marker.IN_PROGRESS`).
MARKER_ROUNDS = 4


class LostRace(Exception):
    """Another claimer took the candidate between this claimer's read and its write."""


class Claimer:
    """Claims for one engine, with its page sizes and its memory of races and live leases."""

    def __init__(
        self, ctx: EngineContext, reads: Reads, candidate_page: int, contended_page: int
    ) -> None:
        self.ctx = ctx
        self.reads = reads
        self.candidate_page = candidate_page
        self.contended_page = max(contended_page, candidate_page)
        #: Per tenant: claims left that read the contended page (set by a lost race).
        self._contended: dict[str, int] = {}
        #: (tenant, operation) -> (fence, lease expiry) of claims seen live although their due
        #: entry had lapsed (heartbeats extended the lease): skipped without a request until then.
        self._held: dict[tuple[str, str], tuple[int, int]] = {}
        self._memory_lock = threading.Lock()

    # ------------------------------------------------------------------ the three ways to claim

    def claim_next(
        self,
        tenant_id: str,
        worker_id: str,
        lease_ms: int | None,
        job_types: Iterable[str] | None,
        claim_token: str | None,
        after: str | None = None,
    ) -> Claim | None:
        validate_id("tenant_id", tenant_id)
        validate_id("worker_id", worker_id)
        token = _client_claim_token(claim_token)
        lease_ms = _claim_lease(lease_ms)
        types = validate_job_types(job_types)
        home = None if after is None else after_home(self.ctx, tenant_id, after, token)
        if token is None:
            return self.search(tenant_id, worker_id, lease_ms, types, None, None)
        marker = Marker(self.ctx, tenant_id, worker_id, token, home)
        # The first round takes the marker to be absent, as it is for a first send, without
        # reading it: a marker that is there refuses this request's first point (created only
        # where there is none: MarkerMoved), and a search that finds no work and wrote no
        # marker reads it before answering none. Every later round reads it first.
        unread = True
        for _round in range(MARKER_ROUNDS + 1):
            try:
                if not unread and marker.read() is not None:
                    answered, claim = self.resume(marker, lease_ms, types)
                    if answered:
                        return claim
                claim = self.search(tenant_id, worker_id, lease_ms, types, token, marker)
                if claim is None:
                    if unread and marker.pair is None and marker.read() is not None:
                        raise MarkerMoved()  # a resend: go on from what the marker says
                    marker.seal()  # answered none: no request with this token claims any more
                return claim
            except MarkerMoved:
                unread = False  # another request with this token moved the marker: read it
        raise Unavailable(IN_PROGRESS)

    def search(
        self,
        tenant_id: str,
        worker_id: str,
        lease_ms: int | None,
        types: tuple[str, ...] | None,
        token: str | None,
        marker: Marker | None,
    ) -> Claim | None:
        """A claim from the tenant's due partitions: for each job type the shards below its
        spread first, then (now and then) every other shard, each group in random order (a lost
        race's partitions read again at the end). What the probes met moves the spreads: a lost
        race or a throttled probe raises the job type's, an empty poll may lower it
        (:mod:`leasefence.engine._spread`)."""
        spread = self.ctx.spread
        types, known = (types, False) if types is not None else self.reads.directory(tenant_id)
        first: list[tuple[str, int]] = []
        rest: list[tuple[str, int]] = []
        for job_type in types:
            below, beyond = spread.probe_order(tenant_id, job_type)
            first += [(job_type, shard) for shard in below]
            rest += [(job_type, shard) for shard in beyond]
        self.ctx.rng.shuffle(first)
        self.ctx.rng.shuffle(rest)
        raced = []
        claim = None
        for job_type, shard in first + rest:
            with spread.throttled(tenant_id, job_type):
                claim, lost = self.claim_from_partition(
                    tenant_id, job_type, shard, worker_id, lease_ms, True, token, marker
                )
            if claim is not None:
                break
            if lost:
                raced.append((job_type, shard))
                spread.raise_spread(tenant_id, job_type)
        else:
            # Lost races left those pages stale: read them again, trying every candidate.
            for job_type, shard in raced:
                with spread.throttled(tenant_id, job_type):
                    claim, _ = self.claim_from_partition(
                        tenant_id, job_type, shard, worker_id, lease_ms, False, token, marker
                    )
                if claim is not None:
                    break
        if claim is not None:
            spread.note_poll(tenant_id, claim.job_type, found=True)
            width = spread.spread(tenant_id, claim.job_type, SPREAD_CLAIM_CACHE_MS)
            spread.note_lifecycle(tenant_id, claim.job_type, width)
        else:
            for job_type in types:
                spread.note_poll(tenant_id, job_type, found=False)
            if known:  # searched the directory an earlier claim read: the types added since
                now_known, _ = self.reads.directory(tenant_id, fresh=True)
                added = tuple(t for t in now_known if t not in types)
                if added:
                    return self.search(tenant_id, worker_id, lease_ms, added, token, marker)
        return claim

    def resume(
        self, marker: Marker, lease_ms: int | None, types: tuple[str, ...] | None
    ) -> tuple[bool, Claim | None]:
        """A claim-next whose token's marker names a candidate (a resend, or a request that
        raced one), as (answered, claim): that claim when the candidate holds it under the token;
        a claim of it at the marker's fence when it is still claimable there (the first request's
        own write, sent again); not answered when the marker's claim provably was never made and
        never can be (the caller claims another, proving it: :meth:`Marker.point`); otherwise
        none, the marker sealed (the token's claim may have been made and ended). Raises
        :class:`Unavailable` while the first request's write may still be in flight."""
        assert marker.pair is not None
        operation_id, fence = marker.pair
        key = self.ctx.locate(marker.tenant_id, operation_id)
        found = self.confirm_claim(key, marker.worker_id, marker.token, types)
        if isinstance(found, Claim):
            return True, found
        if found is not None and rules.is_claim_of(found, marker.worker_id, marker.token):
            return True, None  # held under this token, but of a job type not asked for now
        if marker.sealed:
            return True, None
        if found is not None and int(found.get("fence", NO_FENCE)) == fence:
            if found.get("state") in TERMINAL_STATES:
                return False, None  # ended unclaimed: the marker's claim can never be made
            if not rules.is_claimable(found, self.ctx.clock(), types):
                raise Unavailable(IN_PROGRESS)
            marker.take()
            claim = self.try_claim(
                found,
                marker.worker_id,
                lease_ms,
                types,
                retries=1,
                claim_token=marker.token,
                marker=marker,
            )
            if claim is None:
                raise MarkerMoved()  # refused: read the marker again, and go on from what it says
            return True, claim
        if found is not None and rules.claimed_by_another(
            found, rules.claim_fence(fence, self.ctx.fence_floor), marker.token
        ):
            return False, None  # another claimer won the candidate: the token claims none yet
        marker.seal()
        return True, None

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        worker_id: str,
        lease_ms: int | None,
        job_types: Iterable[str] | None,
        claim_token: str | None,
    ) -> Claim | None:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("worker_id", worker_id)
        token = _client_claim_token(claim_token)
        lease_ms = _claim_lease(lease_ms)
        types = validate_job_types(job_types)
        snapshot = self.ctx.find(tenant_id, operation_id)
        if snapshot is None:
            raise NotFound("operation not found")
        return self.try_claim(snapshot, worker_id, lease_ms, types, retries=3, claim_token=token)

    def claim_seen(
        self,
        item: Mapping[str, Any],
        worker_id: str,
        lease_ms: int | None,
        job_types: Iterable[str] | None,
    ) -> Claim | None:
        partition = item.get("tenant_id")
        validate_id("tenant_id", keys.tenant_of(partition) if isinstance(partition, str) else None)
        validate_id("operation_id", item.get("operation_id"))
        validate_id("worker_id", worker_id)
        return self.try_claim(
            cast("OperationItem", item),
            worker_id,
            _claim_lease(lease_ms),
            validate_job_types(job_types),
            retries=1,
        )

    # ------------------------------------------------------------------ reading a partition

    def claim_from_partition(
        self,
        tenant_id: str,
        job_type: str,
        shard: int,
        worker_id: str,
        lease_ms: int | None,
        stop_at_race: bool,
        claim_token: str | None = None,
        marker: Marker | None = None,
    ) -> tuple[Claim | None, bool]:
        """A claim from one partition, a page at a time. With ``stop_at_race``, the first lost
        race ends it (the page it was read from is stale by then): (None, True)."""
        now = self.ctx.clock()
        query: dict[str, Any] = {
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "#pk = :pk AND #due <= :now",
            "ExpressionAttributeNames": {"#pk": DUE_PK, "#due": DUE_SK},
            "values": {":pk": keys.due_partition(tenant_id, shard, job_type), ":now": now},
            "Limit": self.page_for(tenant_id),
        }
        start = None
        for _page in range(4):
            page = self.ctx.store.query(start=start, **query)
            candidates = page.operations
            self.ctx.rng.shuffle(candidates)
            held: list[OperationItem] = []
            for candidate in candidates:
                snapshot = candidate
                if candidate.get("state") == State.CLAIMED:
                    lapsed = self.unless_held(candidate, now)
                    if lapsed is None:
                        held.append(candidate)
                        continue
                    snapshot = lapsed
                try:
                    claim = self.try_claim(
                        snapshot,
                        worker_id,
                        lease_ms,
                        None,
                        retries=1,
                        repair=False,
                        stop_at_race=stop_at_race,
                        claim_token=claim_token,
                        marker=marker,
                    )
                except LostRace:
                    return None, True
                if claim is not None:
                    return claim, False
            if page.last_key is None:
                return None, False
            # A full page gave nothing: entries of live claims may be crowding the head of the
            # partition. Re-file them at their leases, so that no claimer pages past them again.
            for entry in held:
                self.refile_held(entry, now)
            start = page.last_key
        return None, False

    def page_for(self, tenant_id: str) -> int:
        """How many entries a claim query of this tenant reads: :attr:`candidate_page`, or
        :attr:`contended_page` for :data:`~leasefence.limits.CONTENTION_MEMORY` claims after this
        engine lost a race (a claim write refused because another claimer took the candidate
        between this engine's read and its write). Claimers of one partition pick at random from
        the same head of it, so collisions fall with the page; an idle or lone claimer never
        reads more than before (an empty page costs the same at any limit)."""
        with self._memory_lock:
            return self.contended_page if self._contended.get(tenant_id) else self.candidate_page

    def note_race(self, tenant_id: str, lost: bool) -> None:
        with self._memory_lock:
            if lost:
                self._contended.pop(tenant_id, None)
                self._contended[tenant_id] = CONTENTION_MEMORY
                while len(self._contended) > MEMORY_ENTRIES:
                    self._contended.pop(next(iter(self._contended)))
            elif self._contended.get(tenant_id):
                self._contended[tenant_id] -= 1
                if not self._contended[tenant_id]:
                    del self._contended[tenant_id]

    # ------------------------------------------------------------------ live claims met on the way

    def unless_held(self, entry: OperationItem, now: int) -> OperationItem | None:
        """For a due entry of a claimed operation: None while its claim is live (known from an
        earlier read, else read now and remembered); otherwise the item as read (claim from it:
        the claim write pins what it shows). An eventually consistent read can only be behind:
        it shows an earlier lease or fence, never a later one, so at worst the write is refused."""
        key = (entry["tenant_id"], entry["operation_id"])
        with self._memory_lock:
            known = self._held.get(key)
        if known is not None and known[0] == int(entry["fence"]) and known[1] > now:
            return None
        item = self.ctx.store.get_operation(keys.item_key(entry), consistent=False)
        if item is None:
            return None
        if self.remember_held(item, now):
            return None
        return item

    def remember_held(self, item: OperationItem, now: int) -> bool:
        """Remember a live claim's fence and lease (bounded memory, oldest forgotten first).
        Returns whether the item is a live claim."""
        if not rules.is_live_claim(item, now):
            return False
        key = (item["tenant_id"], item["operation_id"])
        with self._memory_lock:
            self._held.pop(key, None)
            self._held[key] = (int(item["fence"]), int(item["lease_expires_at"]))
            while len(self._held) > MEMORY_ENTRIES:
                self._held.pop(next(iter(self._held)))
        return True

    def refile_held(self, entry: OperationItem, now: int) -> None:
        """Re-file a live claim's lapsed due entry at the lease this engine saw (at or before
        the real one, so a takeover is never delayed by it)."""
        with self._memory_lock:
            known = self._held.get((entry["tenant_id"], entry["operation_id"]))
        if known is not None and known[0] == int(entry["fence"]):
            self.repair_due_entry({**entry, "lease_expires_at": known[1]}, now)

    def repair_due_entry(self, item: OperationItem, now: int) -> bool:
        """A live claim whose lease heartbeats moved past its index position is re-filed at the
        lease ``item`` shows (its real expiry, or an earlier one if heartbeats extended it since:
        never later), so claimers stop meeting it. Pinned to state, fence and a lease at least
        that: harmless if anything changed meanwhile."""
        misfiled = rules.misfiled_index(item, now)
        if misfiled is None:
            return False
        attr, pk = misfiled
        try:
            self.ctx.store.update(
                keys.item_key(item),
                "SET #at = :lease",
                f"{x.IS_CLAIMED} AND {x.FENCE_UNCHANGED} AND {x.LEASE_AT_LEAST} AND {x.IN_INDEX}",
                dict(x.STATE_FENCE, **{"#at": attr, "#pk": pk}),
                {
                    ":claimed": State.CLAIMED.value,
                    ":f": int(item["fence"]),
                    ":lease": int(item["lease_expires_at"]),
                },
                returns="NONE",
            )
        except ConditionFailed:
            return False
        return True

    # ------------------------------------------------------------------ the claim write

    def try_claim(
        self,
        snapshot: OperationItem,
        worker_id: str,
        lease_ms: int | None,
        types: tuple[str, ...] | None,
        retries: int,
        repair: bool = True,
        stop_at_race: bool = False,
        claim_token: str | None = None,
        marker: Marker | None = None,
    ) -> Claim | None:
        """One conditional write per try, pinned to the snapshot's fence and attempt counters.

        A refusal returns the item as it is now; if that is still claimable the next try uses it
        (no extra read); a live claim is remembered (and with ``repair``, its stale index entry
        re-filed at its lease); otherwise the claimer moves on. A refusal because another
        claimer took the operation counts as a lost race (:meth:`page_for`); with
        ``stop_at_race`` it raises :class:`LostRace`.

        Every claim write carries a claim token (the client's, else one made for this call), so a
        write that committed although its answer was lost is recognized from the refusal of its
        resend (:func:`~leasefence.engine._rules.is_claim_of`). A snapshot that already shows this
        worker's claim under the client's token (a resent request) is answered by
        :meth:`confirm_claim`. With a ``marker`` (claim-next with a client token), the marker
        names the operation and the fence of each claim write before it is sent
        (:meth:`Marker.point`: one claim token, one claim)."""
        ctx = self.ctx
        tenant_id, operation_id = keys.tenant_of(snapshot["tenant_id"]), snapshot["operation_id"]
        key = keys.item_key(snapshot)  # where it lives (never derived again)
        claim_token = claim_token or uuid.uuid4().hex
        started = ctx.clock()
        for _ in range(retries + 1):
            if rules.is_claim_of(snapshot, worker_id, claim_token):
                confirmed = self.confirm_claim(key, worker_id, claim_token, types)
                if isinstance(confirmed, Claim):
                    return confirmed
                if confirmed is None or rules.is_claim_of(confirmed, worker_id, claim_token):
                    return None  # gone; or still ours, but of a job type not asked for now
                snapshot = confirmed  # the claim no longer holds: the item as it is now
                continue
            if not rules.is_claimable(snapshot, ctx.clock(), types):
                self.remember_held(snapshot, ctx.clock())
                if repair:
                    self.repair_due_entry(snapshot, ctx.clock())
                return None
            if marker is not None:
                # Before the claim write: the marker names the claim this token may make (raises
                # MarkerMoved when another request with the token moved it).
                self.write_retrying_marker(marker, operation_id, int(snapshot["fence"]), started)
            try:
                item = self.write_retrying(
                    key,
                    # Built from this try's snapshot (the loop moves on to the refused item).
                    partial(
                        claim_write,
                        snapshot,
                        worker_id=worker_id,
                        lease_ms=lease_ms,
                        types=types,
                        claim_token=claim_token,
                        sweep_pk=ctx.sweep_pk(tenant_id, operation_id),
                        fence_floor=ctx.fence_floor,
                    ),
                    started,
                )
            except ConditionFailed as refused:
                current = refused.operation
                if current is None:
                    return None
                if rules.is_claim_of(current, worker_id, claim_token):
                    # Our own write committed and its answer was lost (the store client, or the
                    # client of a resent request, sent it again): that claim, still held.
                    item = current
                elif history.needs_room(current) and not rules.lost_race(current, snapshot):
                    # Refused for the history's room only: compact it from this refusal's item
                    # (one write pinned to its seq) and claim again from it.
                    history.make_room(ctx.store, current)
                    snapshot = current
                    continue
                else:
                    if rules.lost_race(current, snapshot):
                        self.note_race(tenant_id, lost=True)
                        if stop_at_race:
                            raise LostRace() from None
                    # The job type's maximum lease: the next try asks for exactly that.
                    lease_ms = rules.capped_lease(current, lease_ms)
                    snapshot = current
                    continue
            assert item is not None
            self.note_race(tenant_id, lost=False)
            return self.claimed(item, worker_id)
        self.remember_held(snapshot, ctx.clock())
        if repair:
            self.repair_due_entry(snapshot, ctx.clock())
        return None

    def confirm_claim(
        self,
        key: Key,
        worker_id: str,
        claim_token: str,
        types: tuple[str, ...] | None,
    ) -> Claim | OperationItem | None:
        """A resent claim request: one conditional write that changes nothing, on condition that
        the operation still holds the claim this worker made under this token. Returns that
        claim (same fence, same attempt: nothing is spent), else the item as the refusal showed
        it (None: no such item). The write changes no attribute and no ``seq``: it is no
        transition (history and events skip a record of it, and it is no work to dispatch)."""
        values: dict[str, Any] = {
            ":tok": claim_token,
            ":w": worker_id,
            ":claimed": State.CLAIMED.value,
        }
        still_ours = f"{x.IS_CLAIMED} AND {x.CLAIM_TOKEN_MATCHES} AND {x.HELD_BY_WORKER}"
        if types:
            of_types, type_values = x.job_type_in(types)
            still_ours += f" AND {of_types}"
            values.update(type_values)
        try:
            item = self.ctx.store.update_operation(
                key, "SET claim_token = :tok", still_ours, dict(x.STATE), values
            )
        except ConditionFailed as refused:
            return refused.operation
        assert item is not None
        return self.claimed(item, worker_id, replay=True)

    def write_retrying(
        self,
        key: Key,
        build: Callable[[int], Write],
        started: int,
    ) -> OperationItem | None:
        """A claim write sent again when its answer was lost or the store was busy, each time
        built afresh from the clock (a retry never commits a lease computed before it), and not
        past :data:`~leasefence.limits.CLAIM_RETRY_BUDGET_MS`. Safe because the write carries a
        claim token: if an earlier one committed, the retry is refused and the refusal shows our
        token (recognized by the caller as our own claim)."""
        return self.retrying(
            lambda: self.ctx.store.update_operation(key, *build(self.ctx.clock())), started
        )

    def write_retrying_marker(
        self, marker: Marker, operation_id: str, fence: int, started: int
    ) -> None:
        """:meth:`Marker.point` sent again as :meth:`write_retrying` does (a retry of a write
        that committed is refused, and the request reads the marker again)."""
        self.retrying(lambda: marker.point(operation_id, fence), started)

    def retrying(self, send: Callable[[], R], started: int, attempts: int = 3) -> R:
        """``send()`` again after :class:`Unavailable`, at most ``attempts`` times and not past
        :data:`~leasefence.limits.CLAIM_RETRY_BUDGET_MS` from ``started``."""
        for attempt in range(attempts):
            try:
                return send()
            except Unavailable:
                if attempt == attempts - 1 or self.ctx.clock() - started >= CLAIM_RETRY_BUDGET_MS:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def claimed(self, item: OperationItem, worker_id: str, replay: bool = False) -> Claim:
        """The claim ``item`` shows; ``replay``: a resent request answered with it again."""
        takeover = item.get("claimed_from") == State.CLAIMED
        if replay:
            self.ctx.count(Metric.CLAIM_REPLAYS)
        else:
            self.ctx.count(Metric.CLAIMS)
            if takeover:
                self.ctx.count(Metric.TAKEOVERS)
        log.info(
            "claimed again" if replay else "claimed",
            extra={
                "op": self.ctx.tag(keys.tenant_of(item["tenant_id"]), item["operation_id"]),
                "fence": int(item["fence"]),
                "takeover": takeover,
            },
        )
        return rules.claim_of(item, worker_id, takeover)


def _client_claim_token(claim_token: str | None) -> str | None:
    return None if claim_token is None else validate_id("claim_token", claim_token)


def _claim_lease(lease_ms: int | None) -> int | None:
    """A claim's lease: None takes the job type's default (``lease_default_ms`` on the item,
    from its catalogue entry), else :data:`~leasefence.limits.DEFAULT_LEASE_MS`, inside the
    claim's write."""
    return None if lease_ms is None else validate_lease(lease_ms)
