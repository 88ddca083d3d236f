"""Class B: a DynamoDB table (or any store with conditional writes) that carries fences.

Each target item keeps, per operation that writes it, the highest fence it has seen, and every
write through :class:`FencedTable` is conditional on that fence not being higher than the
writer's, inside the write (one conditional ``UpdateItem``; never read-compare-write). Fences are
per operation, so an item written by several operations compares each operation's fence
separately. A stale holder must be refused even before the new holder's first write, so a new
holder calls :meth:`FencedTable.raise_fence` right after its claim (a write that only raises the
fence) and before it reconciles or acts. A stale write that landed before the raise is visible to
the new holder's reconcile; one that comes after it is refused.

Bounded items
-------------
An item written by many operations (an account balance) would otherwise keep one fence entry per
operation forever and reach DynamoDB's 400 KB item limit after about 8,000 of them. So entries are
pruned, and what pruning forgets is summed up in one number, the item's *horizon*:

- ``lf_fence_<40 hex digits of the operation's identity digest>``: one entry per operation, a
  number ``F.T``: its integer part ``F`` is the highest fence of that operation that wrote the
  item, its 13 fraction digits ``T`` that holder's claim time in ms since the epoch (see "Claim
  time" below), i.e. ``F + T * 10**-13``. A plain integer (what earlier versions wrote) is an
  entry whose claim time is unknown.
- ``lf_horizon``: the latest claim time (ms) of any entry ever pruned from the item; absent until
  the first prune. It only rises.

A write by fence ``F`` of an operation claimed at ``C`` sets the entry to ``F.C`` under

    entry < F + 1  OR  (no entry AND (no horizon OR horizon < C))

(plus the caller's own guard). After its write (the write returns the new item), a writer that
finds ``max_entries`` (N, default 64) or more entries, or at least N/4 entries whose claim time
is older than ``prune_age_ms`` (default one day, by this writer's clock), removes the oldest
entries (by claim time; entries of unknown time first) down to N/2, and all of those older than
the prune age, keeping its own, in one more conditional ``UpdateItem``: each removed entry is
pinned to the exact value it read, and the horizon is raised to the latest claim time removed
(the pruner's clock, if it is later, when an entry of unknown time is removed) on condition that
it is not already higher. A refused prune (someone changed the item in between) changes nothing
and is not reported to the caller; the next write tries again. Cost: one extra write per N/2 new
operations on a busy item, at most one per N/4 on a quiet one.

Why this is safe. For every operation, the item holds either its entry, with the highest fence
that wrote, or a horizon at least the claim time of that fence, because a prune removes an entry
only while raising the horizon to cover it. A holder's claim time is never later than its
successor's: a takeover happens only after the old lease has expired, in the claim's own
condition, and the new claim time is the time that condition was checked against (a claim after
a requeue is checked against the time the operation became due again, set after the old lease
expired: that one needs the engine instances' clocks to agree within a lease). So a stale holder
meets either a higher fence or a horizon not older than its claim, and is refused forever.
No writer's clock takes part in that argument (the pruner's clock only chooses what to prune,
except for entries of unknown time, where it must not lag the engine's clocks by more than a
lease). The cost is liveness: an honest holder whose own entry was pruned and whose claim is
older than the horizon is refused too (:class:`HorizonRefused`, a :class:`LostOwnership`: its
lease lapses and the next claim reconciles). That happens only to an operation that writes the
item again after about N/2 operations claimed after it have written the item, or after its
claim has aged past the prune age; so N should exceed twice the number of operations that write
one item while one job runs. Pruning entries of unknown time (below) raises the horizon to the
pruner's clock: operations claimed before that which had not yet written the item are refused
once (liveness, during an upgrade only).

Size bound. An entry is a 49-byte name and a number of at most 21 bytes (10 for a fence below
100,000 with a 13-digit time); the horizon 10 + at most 21 bytes. After any write the item holds
at most N entries, plus one for each other write in flight: fence bookkeeping stays under
``N * 70 + 31`` bytes (4,511 at N = 64; about 3.7 KB in practice) however many operations write
the item. Each write still costs 1 write unit per KB of the whole item, so a smaller N makes
writes cheaper and needs more prunes.

Claim time
----------
The claim time is the one the engine states (``claim.claimed_at``: the time its claim write was
checked against, by its clock), never one a worker computes from the lease it asked for: a job
type's ``max_lease_seconds`` may cut that lease, and ``lease_expires_at - requested lease`` then
lies before the real claim, so a pruned entry would leave a horizon older than a stalled
predecessor's claim and let its write through. A claim must be consistent with its lease: the
engine grants ``lease_expires_at = claimed_at + lease_ms`` exactly, with ``lease_ms`` the lease
GRANTED. A claim that states a claim time that breaks this (a backend that put the requested lease
in ``lease_ms``, a corrupted claim) is refused before any write (:class:`InconsistentClaim`, a
:class:`LostOwnership`: nothing is written, the lease lapses and the next claim reconciles;
counted as ``InconsistentClaimsRefused``). A claim that states none (built by hand) is taken as
``lease_expires_at - lease_ms``. The target's clock is no part of the safety argument (per
operation, claim times rise by the engine's own lease condition), so by default a claim time in
the future is not refused; ``max_claim_skew_ms`` refuses claims stated more than that ahead of
the target's ``clock`` (a sanity bound on the engine's clock; its cost is liveness, if clocks
drift apart by more than it).

Upgrading: entries written by earlier versions (plain integers) are honoured as fences and pruned
first (their claim time being unknown, the horizon rises to the pruner's clock). Earlier versions
do not know the horizon: stop every old writer of a table before any new one prunes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from leasefence import otel
from leasefence.clock import Clock, system_clock
from leasefence.errors import LeaseFenceError, TargetRefused
from leasefence.metrics import Metric
from leasefence.model import Claim
from leasefence.store import Store, translate
from leasefence.targets.identity import identity_digest
from leasefence.worker.handler import Job, LostOwnership

ENTRY_PREFIX = "lf_fence_"
HORIZON = "lf_horizon"
#: Claim times are 13-digit milliseconds (until the year 2286): the fraction of an entry.
TIME_DIGITS = 13
_SCALE = 10**TIME_DIGITS
#: Entries removed by one prune at most (keeps the expressions well under 4 KB); a bigger backlog
#: (an item from before pruning) shrinks by this much per write.
MAX_PRUNE_BATCH = 100
DEFAULT_MAX_ENTRIES = 64
DEFAULT_PRUNE_AGE_MS = 24 * 3600 * 1000

#: How a refusal by this target starts its lost-ownership reason (the runtime logs it).
_REFUSED = "class B target write refused:"

_SERIALIZER = TypeSerializer()
_DESERIALIZER = TypeDeserializer()


class InconsistentClaim(LostOwnership):
    """The claim's stated claim time does not agree with its lease (``claimed_at + lease_ms !=
    lease_expires_at``), or lies further in the future than the target allows: nothing is
    written with it (see "Claim time" in the module docstring)."""


class HorizonRefused(LostOwnership):
    """The target no longer has this operation's fence entry (it was pruned), and its horizon is
    not older than this claim. Either a stale holder, refused for safety, or an honest holder
    whose claim outlived the item's memory, refused for liveness: stop, the lease will lapse and
    the next claim reconciles."""


@dataclass(frozen=True)
class FenceState:
    """The fence bookkeeping of one item: per entry name, ``(fence, claim time or None)``."""

    entries: dict[str, tuple[int, int | None]]
    horizon: int | None


def fence_attribute(tenant_id: str, operation_id: str) -> str:
    return ENTRY_PREFIX + identity_digest(tenant_id, operation_id)[:40]


def claimed_at(claim: Claim) -> int:
    """When the claim was granted, in ms, as the engine states it (``claim.claimed_at``); for a
    claim that states none, ``lease_expires_at - lease_ms``. :class:`InconsistentClaim` when the
    stated time and the lease disagree: the engine grants ``lease_expires_at = claimed_at +
    lease_ms`` exactly, so a ``lease_ms`` other than the granted lease shows here."""
    derived = claim.lease_expires_at - claim.lease_ms
    if claim.claimed_at is None:
        return derived
    if claim.claimed_at != derived:
        raise InconsistentClaim(
            f"claim of fence {claim.fence} is inconsistent: claimed at {claim.claimed_at} with a "
            f"lease of {claim.lease_ms} ms, but its lease expires at {claim.lease_expires_at} "
            "(a lease other than the one granted?)"
        )
    return claim.claimed_at


def entry_value(fence: int, claim_time: int) -> Decimal:
    """``fence + claim_time * 10**-13``: fence and claim time in one number."""
    if not 0 < claim_time < _SCALE:
        raise ValueError(f"claim time {claim_time} is not a {TIME_DIGITS}-digit ms time")
    if fence < 0:
        raise ValueError("fences are not negative")
    return Decimal(fence) + Decimal(claim_time).scaleb(-TIME_DIGITS)


def parse_entry(value: Any) -> tuple[int, int | None]:
    """``(fence, claim time)``; the claim time is None for an entry from an earlier version."""
    number = Decimal(str(value))
    fence = int(number)
    time = int((number - fence).scaleb(TIME_DIGITS))
    return fence, (time or None)


def state_of(item: dict[str, Any] | None) -> FenceState:
    """The fence bookkeeping of an item as :func:`decode` returns it (numbers exact). Anything
    under the entry prefix that is not a number is not an entry of ours and is left alone."""
    item = item or {}
    entries = {
        name: parse_entry(value)
        for name, value in item.items()
        if name.startswith(ENTRY_PREFIX)
        and isinstance(value, (int, Decimal))
        and not isinstance(value, bool)
    }
    horizon = item.get(HORIZON)
    return FenceState(entries, None if horizon is None else int(horizon))


def decode(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    """A wire-format item with its numbers as exact ``Decimal`` (``Store`` turns fractions into
    floats, which would blur a 13-digit claim time)."""
    if raw is None:
        return None
    return {name: _DESERIALIZER.deserialize(value) for name, value in raw.items()}


class _Refused(Exception):
    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("condition failed")
        self.item = item


class FencedTable:
    """Fenced writes to one target table, with per-item fence entries kept to a fixed number.

    ``max_entries`` (N) and ``prune_age_ms`` bound the item (see the module docstring); ``clock``
    (ms) is used to tell which entries are older than the prune age and, with
    ``max_claim_skew_ms`` (default None: off), to refuse claims stated further in the future.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        events: Callable[[str, float], None] | None = None,
        *,
        clock: Clock | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        prune_age_ms: int = DEFAULT_PRUNE_AGE_MS,
        max_claim_skew_ms: int | None = None,
    ) -> None:
        if max_claim_skew_ms is not None and max_claim_skew_ms < 0:
            raise ValueError("max_claim_skew_ms must not be negative")
        if max_entries < 2:
            raise ValueError("max_entries must be at least 2")
        if prune_age_ms <= 0:
            raise ValueError("prune_age_ms must be positive")
        self.store = Store(table_name, client=client)
        self.events = events if events is not None else (lambda _name, _value: None)
        self.clock = clock if clock is not None else system_clock
        self.max_entries = max_entries
        self.prune_age_ms = prune_age_ms
        self.max_claim_skew_ms = max_claim_skew_ms

    # ------------------------------------------------------------ public

    def raise_fence(self, job: Job, key: dict[str, Any]) -> None:
        """Make the target refuse every lower fence of this operation from now on."""
        attr = fence_attribute(job.tenant_id, job.operation_id)
        item = self._write(
            job, key, "SET #lf = :e", {"#lf": attr}, {":e": self._entry(job)}, business=None
        )
        self._maybe_prune(key, item, keep=attr)

    def write(
        self,
        job: Job,
        key: dict[str, Any],
        values: dict[str, Any],
        condition: str | None = None,
        names: dict[str, str] | None = None,
        condition_values: dict[str, Any] | None = None,
        append: dict[str, list[Any]] | None = None,
    ) -> None:
        """Set ``values`` (and append to the lists in ``append``) on the target item under this
        job's fence, plus an optional guard of the caller's."""
        job.guard()
        attr = fence_attribute(job.tenant_id, job.operation_id)
        all_names = {"#lf": attr, **(names or {})}
        all_values: dict[str, Any] = {":e": self._entry(job), **(condition_values or {})}
        sets = ["#lf = :e"]
        for i, (name, value) in enumerate(values.items()):
            all_names[f"#v{i}"] = name
            all_values[f":v{i}"] = value
            sets.append(f"#v{i} = :v{i}")
        for i, (name, items) in enumerate((append or {}).items()):
            all_names[f"#a{i}"] = name
            all_values[f":a{i}"] = list(items)
            all_values[":empty"] = []
            sets.append(f"#a{i} = list_append(if_not_exists(#a{i}, :empty), :a{i})")
        item = self._write(
            job, key, "SET " + ", ".join(sets), all_names, all_values, business=condition
        )
        self._maybe_prune(key, item, keep=attr)

    def read(self, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item (fence entries come back as floats here: :meth:`fence_state` is exact)."""
        return self.store.get(key)

    def fence_state(self, key: dict[str, Any]) -> FenceState:
        """The item's fence entries and horizon, read consistently."""
        response = self._call("get_item", Key=self._key(key), ConsistentRead=True)
        return state_of(decode(response.get("Item")))

    # ------------------------------------------------------------ the fenced write

    def _claim_time(self, job: Job) -> int:
        """The job's claim time (:func:`claimed_at`); an inconsistent claim puts the job in
        lost-ownership mode and raises :class:`InconsistentClaim` before anything is written."""
        try:
            claim_time = claimed_at(job.claim)
            if (
                self.max_claim_skew_ms is not None
                and claim_time > self.clock() + self.max_claim_skew_ms
            ):
                raise InconsistentClaim(
                    f"claim of fence {job.fence} states a claim time {claim_time} more than "
                    f"{self.max_claim_skew_ms} ms ahead of this target's clock"
                )
        except InconsistentClaim as refused:
            self.events(Metric.INCONSISTENT_CLAIMS_REFUSED, 1)
            job.lose(f"{_REFUSED} {refused}")
            raise
        return claim_time

    def _entry(self, job: Job) -> Decimal:
        return entry_value(job.fence, self._claim_time(job))

    def _write(
        self,
        job: Job,
        key: dict[str, Any],
        update: str,
        names: dict[str, str],
        values: dict[str, Any],
        business: str | None,
    ) -> dict[str, Any] | None:
        """One conditional write under the fence; returns the item as it is after it."""
        job.guard()
        claim_time = self._claim_time(job)
        fence_ok = "(#lf < :fnext OR (attribute_not_exists(#lf) AND (attribute_not_exists(#hz) OR #hz < :claimed)))"
        condition = f"{fence_ok} AND ({business})" if business else fence_ok
        with otel.target_write_span(job, self.store.table_name) as span:
            try:
                response = self._call(
                    "update_item",
                    Key=self._key(key),
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ExpressionAttributeNames={**names, "#hz": HORIZON},
                    ExpressionAttributeValues=_attrs(
                        {**values, ":fnext": job.fence + 1, ":claimed": claim_time}
                    ),
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except _Refused as refused:
                state = state_of(refused.item)
                seen = state.entries.get(names["#lf"])
                if seen is not None and seen[0] > job.fence:
                    otel.refused(span, seen[0])
                    self.events(Metric.STALE_TARGET_WRITES_REJECTED, 1)
                    job.lose(f"{_REFUSED} it has seen fence {seen[0]}")
                    raise LostOwnership(
                        f"target refused fence {job.fence}: it has seen {seen[0]}"
                    ) from None
                if seen is None and state.horizon is not None and state.horizon >= claim_time:
                    otel.refused(span, None)
                    self.events(Metric.TARGET_HORIZON_REFUSALS, 1)
                    reason = (
                        f"target refused fence {job.fence}: it no longer keeps this operation's fence entry "
                        f"and its horizon ({state.horizon}) is not older than this claim ({claim_time}): "
                        "a stale holder, or a claim older than what the item remembers"
                    )
                    job.lose(f"{_REFUSED} {reason}")
                    raise HorizonRefused(reason) from None
                raise TargetRefused("the target's own condition was not met") from None
            return decode(response.get("Attributes"))

    # ------------------------------------------------------------ pruning

    def _maybe_prune(self, key: dict[str, Any], item: dict[str, Any] | None, keep: str) -> None:
        """After a write: if the item holds too many (or too old) entries, remove the oldest in
        one conditional update pinned to their values. Never raises for a refusal."""
        if item is None:
            return
        state = state_of(item)
        now = self.clock()
        victims = self._victims(state, keep, now)
        if not victims:
            return
        times = [time for _, (_, time) in victims if time is not None]
        horizon = max(times) if times else now
        if len(times) < len(victims):  # entries of unknown claim time: the pruner's clock bounds it
            horizon = max(horizon, now)
        if state.horizon is not None:
            horizon = max(horizon, state.horizon)
        names = {"#hz": HORIZON}
        values: dict[str, Any] = {":h": horizon}
        pins = []
        for i, (name, _) in enumerate(victims):
            names[f"#p{i}"] = name
            values[f":p{i}"] = item[name]
            pins.append(f"#p{i} = :p{i}")
        try:
            self._call(
                "update_item",
                Key=self._key(key),
                UpdateExpression=f"REMOVE {', '.join(f'#p{i}' for i in range(len(victims)))} SET #hz = :h",
                ConditionExpression=f"{' AND '.join(pins)} AND (attribute_not_exists(#hz) OR #hz <= :h)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=_attrs(values),
                ReturnValues="NONE",
            )
        except _Refused:
            self.events(Metric.TARGET_PRUNES_REFUSED, 1)
            return
        except LeaseFenceError:  # busy, unreachable: the write itself succeeded; prune next time
            self.events(Metric.TARGET_PRUNES_FAILED, 1)
            return
        self.events(Metric.TARGET_PRUNES, 1)
        self.events(Metric.TARGET_ENTRIES_PRUNED, len(victims))

    def _victims(
        self, state: FenceState, keep: str, now: int
    ) -> list[tuple[str, tuple[int, int | None]]]:
        """The entries to remove: oldest claim first (unknown time first), never ``keep``."""
        entries = state.entries
        oldest_first = sorted(
            ((name, entry) for name, entry in entries.items() if name != keep),
            key=lambda pair: (pair[1][1] is not None, pair[1][1] or 0, pair[0]),
        )
        cutoff = now - self.prune_age_ms
        expired = sum(1 for _, (_, time) in oldest_first if time is None or time <= cutoff)
        count = 0
        if len(entries) >= self.max_entries:
            count = max(len(entries) - self.max_entries // 2, expired)
        elif expired >= max(1, self.max_entries // 4):
            count = expired
        return oldest_first[: min(count, MAX_PRUNE_BATCH)]

    # ------------------------------------------------------------ the store

    def _key(self, key: dict[str, Any]) -> dict[str, Any]:
        return _attrs(key)

    def _call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """A raw client call: numbers come back exact; a failed condition raises :class:`_Refused`
        with the item as it is now, anything else the domain error ``Store`` would raise."""
        try:
            return getattr(self.store.client, method)(TableName=self.store.table_name, **kwargs)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                raise _Refused(decode(error.response.get("Item"))) from None
            raise translate(error) from error
        except Exception as error:  # translated, never swallowed
            raise translate(error) from error


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    return {name: _SERIALIZER.serialize(value) for name, value in values.items()}
