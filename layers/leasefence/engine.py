"""The engine: the one owner of every state transition of an operation.

Each transition is ONE conditional write (or one transaction). Ownership is never decided by
reading, comparing in Python and then writing: where the engine uses values it read (an index
entry, or the item returned by a refused write), the write's condition pins those values, so a
change in between makes the write fail instead of acting on stale facts.

State machine::

    enqueue ──> queued ──claim──> claimed ──complete──> succeeded
                  ^                  │ ├──fail(retryable, attempts left)──> queued
                  │                  │ ├──fail(otherwise)──> failed_terminal
                  │                  │ ├──park_unknown / sweep(expired, no attempts left)──> unknown
                  │                  │ └──quarantine──> quarantined
                  │                  └──claim again once the lease lapsed (takeover, fence + 1)
                  └──resolve(requeue)── unknown | quarantined ──resolve──> succeeded | failed_terminal

Times are integer milliseconds from the injected clock.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import random
import re
import uuid
from typing import Any, Callable, Iterable

from leasefence import keys
from leasefence.clock import Clock, system_clock
from leasefence.errors import (
    InvalidInput,
    InvalidTransition,
    NotFound,
    PayloadConflict,
    StaleFence,
    TargetRefused,
    Unavailable,
)
from leasefence.model import (
    Claim,
    EnqueueResult,
    Operation,
    Page,
    Resolution,
    State,
    SweepResult,
    TargetClass,
)
from leasefence.privacy import keyed_hash
from leasefence.schema import (
    DUE_INDEX,
    DUE_PK,
    DUE_SK,
    PARKED_INDEX,
    PARKED_PK,
    PARKED_SK,
    SWEEP_INDEX,
    SWEEP_PK,
    SWEEP_SK,
    TTL_ATTRIBUTE,
    TableSpec,
)
from leasefence.store import ConditionFailed, Store

log = logging.getLogger("leasefence.engine")

#: Called with (metric name, value) for every domain event worth counting.
EventSink = Callable[[str, float], None]

MAX_ID_LENGTH = 256
MAX_ATTEMPTS_LIMIT = 100
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_LEASE_MS = 60_000
MAX_LEASE_MS = 900_000
MAX_CHECKPOINT_BYTES = 4096
MAX_REASON_LENGTH = 1024
MAX_PAYLOAD_REF_LENGTH = 1024
BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 300_000
DEFAULT_RETENTION_MS = 30 * 86_400_000
#: Entries read per claim attempt from one due shard (one 0.5-unit read: they are small).
DEFAULT_CANDIDATE_PAGE = 24

_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Attribute names that are DynamoDB reserved words, or that read better as placeholders.
_N = {"#state": "state", "#fence": "fence"}


def validate_id(name: str, value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_ID_LENGTH or _CONTROL_RE.search(value):
        raise InvalidInput(f"{name} must be 1-{MAX_ID_LENGTH} characters with no control characters")
    return value


def _validate_text(name: str, value: Any, limit: int, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or len(value) > limit or (required and not value):
        raise InvalidInput(f"{name} must be a string of at most {limit} characters")
    return value


def _encode_checkpoint(checkpoint: Any) -> str:
    try:
        text = json.dumps(checkpoint, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput("checkpoint must be JSON") from error
    if len(text.encode()) > MAX_CHECKPOINT_BYTES:
        raise InvalidInput(f"checkpoint must be at most {MAX_CHECKPOINT_BYTES} bytes of JSON")
    return text


class _Missing:
    pass


class _NoAttemptsLeft(Exception):
    """A retryable failure by the holding fence, refused as a requeue because no attempt is left."""


MISSING: Any = _Missing()


class Engine:
    """Lease-Plus-Fence over one DynamoDB table (see :mod:`leasefence.schema`)."""

    def __init__(
        self,
        client: Any = None,
        spec: TableSpec | None = None,
        clock: Clock = system_clock,
        rng: random.Random | None = None,
        events: EventSink | None = None,
        retention_ms: int = DEFAULT_RETENTION_MS,
        candidate_page: int = DEFAULT_CANDIDATE_PAGE,
        client_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.spec = spec if spec is not None else TableSpec()
        self.store = Store(self.spec.table_name, client=client, client_factory=client_factory)
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.events = events if events is not None else (lambda name, value: None)
        self.retention_ms = retention_ms
        self.candidate_page = candidate_page

    # ------------------------------------------------------------------ helpers

    def _key(self, tenant_id: str, operation_id: str) -> dict[str, str]:
        return {"tenant_id": tenant_id, "operation_id": operation_id}

    def _due_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.due_partition(tenant_id, keys.shard_of(tenant_id, operation_id, self.spec.due_shards))

    def _sweep_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.sweep_partition(keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))

    def _parked_pk(self, state: State, tenant_id: str, operation_id: str) -> str:
        return keys.parked_partition(state.value, keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))

    def _ttl(self, now: int) -> int:
        return (now + self.retention_ms) // 1000

    @staticmethod
    def _tag(tenant_id: str, operation_id: str) -> str:
        return keyed_hash(tenant_id, operation_id)

    # ------------------------------------------------------------------ enqueue

    def enqueue(
        self,
        tenant_id: str,
        operation_id: str,
        job_type: str,
        payload_hash: str,
        payload_ref: str | None = None,
        max_attempts: int | None = None,
        target_class: TargetClass | str = TargetClass.C,
    ) -> EnqueueResult:
        """Durably record an operation bound to its payload hash: one conditional put.

        Same id and hash again: a replay (nothing new is scheduled). Same id, other hash:
        :class:`PayloadConflict` (nothing is changed).
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("job_type", job_type)
        if not isinstance(payload_hash, str) or not _HASH_RE.match(payload_hash):
            raise InvalidInput("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
        _validate_text("payload_ref", payload_ref, MAX_PAYLOAD_REF_LENGTH, required=False)
        try:
            target = TargetClass(target_class)
        except ValueError as error:
            raise InvalidInput("target_class must be one of A, B, C, D") from error
        if max_attempts is None:
            max_attempts = 1 if target is TargetClass.D else DEFAULT_MAX_ATTEMPTS
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidInput(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
        if target is TargetClass.D and max_attempts != 1:
            raise InvalidInput("target_class D allows exactly one attempt (max_attempts 1)")

        now = self.clock()
        item = {
            "tenant_id": tenant_id,
            "operation_id": operation_id,
            "job_type": job_type,
            "target_class": target.value,
            "payload_hash": payload_hash,
            "payload_ref": payload_ref,
            "state": State.QUEUED.value,
            "fence": 0,
            "attempts": 0,
            "max_attempts": max_attempts,
            "attempt_budget": max_attempts,
            DUE_PK: self._due_pk(tenant_id, operation_id),
            DUE_SK: now,
            "created_at": now,
            "updated_at": now,
        }
        try:
            self.store.put_new(item, "attribute_not_exists(#op)", {"#op": "operation_id"})
        except ConditionFailed as refused:
            existing = refused.item
            if existing is None:  # pragma: no cover - a refused put-if-absent always has an item
                raise
            if existing["payload_hash"] == payload_hash:
                self.events("Replays", 1)
                return EnqueueResult(Operation.from_item(existing), created=False)
            self.events("PayloadConflicts", 1)
            raise PayloadConflict("operation_id already exists with a different payload") from None
        log.info("enqueued", extra={"op": self._tag(tenant_id, operation_id), "target_class": target.value})
        return EnqueueResult(Operation.from_item(item), created=True)

    # ------------------------------------------------------------------ claim

    def claim_next(
        self,
        tenant_id: str,
        worker_id: str,
        lease_ms: int = DEFAULT_LEASE_MS,
        job_types: Iterable[str] | None = None,
    ) -> Claim | None:
        """Claim one due operation of this tenant (queued and available, or an expired lease).

        Reads only this tenant's partitions of the ``due`` index, a page at a time from a
        randomly chosen shard; tries candidates in random order and moves on when another
        claimer wins one. Returns None when nothing is claimable.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("worker_id", worker_id)
        lease_ms = self._lease(lease_ms)
        types = self._job_types(job_types)
        shards = list(range(self.spec.due_shards))
        self.rng.shuffle(shards)
        for shard in shards:
            claim = self._claim_from_shard(tenant_id, shard, worker_id, lease_ms, types)
            if claim is not None:
                return claim
        return None

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        worker_id: str,
        lease_ms: int = DEFAULT_LEASE_MS,
        job_types: Iterable[str] | None = None,
    ) -> Claim | None:
        """Claim one named operation if it is claimable now; None if not; NotFound if absent."""
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("worker_id", worker_id)
        lease_ms = self._lease(lease_ms)
        types = self._job_types(job_types)
        snapshot = self.store.get(self._key(tenant_id, operation_id))
        if snapshot is None:
            raise NotFound("operation not found")
        return self._try_claim(snapshot, worker_id, lease_ms, types, retries=3)

    def _lease(self, lease_ms: int) -> int:
        if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or not 1_000 <= lease_ms <= MAX_LEASE_MS:
            raise InvalidInput(f"lease must be from 1000 to {MAX_LEASE_MS} ms")
        return lease_ms

    @staticmethod
    def _job_types(job_types: Iterable[str] | None) -> tuple[str, ...] | None:
        if job_types is None:
            return None
        types = tuple(dict.fromkeys(validate_id("job_type", t) for t in job_types))
        if not types or len(types) > 50:
            raise InvalidInput("job_types must list 1 to 50 job types")
        return types

    def _claim_from_shard(
        self, tenant_id: str, shard: int, worker_id: str, lease_ms: int, types: tuple[str, ...] | None
    ) -> Claim | None:
        now = self.clock()
        query: dict[str, Any] = {
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "#pk = :pk AND #due <= :now",
            "ExpressionAttributeNames": {"#pk": DUE_PK, "#due": DUE_SK},
            "values": {":pk": keys.due_partition(tenant_id, shard), ":now": now},
            "Limit": self.candidate_page,
        }
        if types:
            # A job-type filter is applied after the read: entries of other types in the page
            # are read (and paid for) and skipped. See README, "Claim cost".
            placeholders = {f":jt{i}": t for i, t in enumerate(types)}
            query["FilterExpression"] = f"#jt IN ({', '.join(placeholders)})"
            query["ExpressionAttributeNames"]["#jt"] = "job_type"
            query["values"].update(placeholders)
        start = None
        for _page in range(4):
            page = self.store.query(start=start, **query)
            candidates = page.items
            self.rng.shuffle(candidates)
            for candidate in candidates:
                claim = self._try_claim(candidate, worker_id, lease_ms, types, retries=1)
                if claim is not None:
                    return claim
            if page.last_key is None:
                return None
            start = page.last_key
        return None

    def _claimable(self, item: dict[str, Any], now: int, types: tuple[str, ...] | None) -> bool:
        if types is not None and item.get("job_type") not in types:
            return False
        if int(item["attempts"]) >= int(item["max_attempts"]):
            return False
        state = item.get("state")
        if state == State.QUEUED:
            return int(item.get(DUE_SK, now)) <= now
        if state == State.CLAIMED:
            # Index entries carry no lease; the write's condition checks the real one.
            return "lease_expires_at" not in item or int(item["lease_expires_at"]) <= now
        return False

    def _try_claim(
        self,
        snapshot: dict[str, Any],
        worker_id: str,
        lease_ms: int,
        types: tuple[str, ...] | None,
        retries: int,
    ) -> Claim | None:
        """One conditional write per try, pinned to the snapshot's fence and attempt counters.

        A refusal returns the item as it is now; if that is still claimable the next try uses it
        (no extra read), if its lease was extended by heartbeats the stale index entry is
        repaired, otherwise the claimer moves on.
        """
        tenant_id, operation_id = snapshot["tenant_id"], snapshot["operation_id"]
        claim_token = uuid.uuid4().hex
        for _ in range(retries + 1):
            now = self.clock()
            if not self._claimable(snapshot, now, types):
                self._repair_due_entry(snapshot, now)
                return None
            fence, attempts, max_attempts = int(snapshot["fence"]), int(snapshot["attempts"]), int(snapshot["max_attempts"])
            expires = now + lease_ms
            last_attempt = attempts + 1 >= max_attempts
            names = dict(_N, **{"#due": DUE_SK})
            values: dict[str, Any] = {
                ":f": fence,
                ":f1": fence + 1,
                ":a": attempts,
                ":a1": attempts + 1,
                ":m": max_attempts,
                ":queued": State.QUEUED.value,
                ":claimed": State.CLAIMED.value,
                ":now": now,
                ":w": worker_id,
                ":exp": expires,
                ":lease": lease_ms,
                ":tok": claim_token,
            }
            condition = (
                "#fence = :f AND attempts = :a AND max_attempts = :m AND "
                "((#state = :queued AND #due <= :now) OR (#state = :claimed AND lease_expires_at <= :now))"
            )
            if types:
                type_values = {f":jt{i}": t for i, t in enumerate(types)}
                condition += f" AND job_type IN ({', '.join(type_values)})"
                values.update(type_values)
            update = (
                "SET claimed_from = #state, #state = :claimed, #fence = :f1, attempts = :a1, "
                "lease_owner = :w, lease_expires_at = :exp, lease_ms = :lease, claim_token = :tok, "
                "updated_at = :now"
            )
            if last_attempt:
                # The final attempt leaves the claim index for the sweeper's index: if this lease
                # lapses, the operation is parked as unknown, never claimed again.
                names.update({"#dpk": DUE_PK, "#spk": SWEEP_PK, "#sat": SWEEP_SK})
                values.update({":spk": self._sweep_pk(tenant_id, operation_id)})
                update += ", #spk = :spk, #sat = :exp REMOVE #dpk, #due"
            else:
                update += ", #due = :exp"
            try:
                item = self._write_retrying(self._key(tenant_id, operation_id), update, condition, names, values)
            except ConditionFailed as refused:
                current = refused.item
                if current is None:
                    return None
                if current.get("claim_token") == claim_token:
                    # Our own write committed and its answer was lost (the client retried).
                    item = current
                else:
                    snapshot = current
                    continue
            assert item is not None
            return self._claimed(item, worker_id)
        self._repair_due_entry(snapshot, self.clock())
        return None

    def _write_retrying(self, key: dict[str, Any], *args: Any, attempts: int = 3) -> dict[str, Any] | None:
        """A claim write sent again when its answer was lost or the store was busy. Safe because
        the write carries a claim token: if the first one committed, the retry is refused and
        the refusal shows our token (recognized by the caller as our own claim)."""
        for attempt in range(attempts):
            try:
                return self.store.update(key, *args)
            except Unavailable:
                if attempt == attempts - 1:
                    raise
        return None  # pragma: no cover

    def _claimed(self, item: dict[str, Any], worker_id: str) -> Claim:
        takeover = item.get("claimed_from") == State.CLAIMED
        self.events("Claims", 1)
        if takeover:
            self.events("Takeovers", 1)
        log.info(
            "claimed",
            extra={"op": self._tag(item["tenant_id"], item["operation_id"]), "fence": int(item["fence"]), "takeover": takeover},
        )
        operation = Operation.from_item(item)
        return Claim(
            tenant_id=operation.tenant_id,
            operation_id=operation.operation_id,
            job_type=operation.job_type,
            fence=operation.fence,
            attempts=operation.attempts,
            lease_expires_at=int(item["lease_expires_at"]),
            lease_ms=int(item["lease_ms"]),
            payload_ref=operation.payload_ref,
            payload_hash=operation.payload_hash,
            target_class=operation.target_class,
            # Any claim after the first attempt (a requeue from unknown is always after one) may
            # follow a side effect that already happened: reconcile before acting.
            reconcile_required=operation.attempts > 1 or bool(item.get("requeued")),
            checkpoint=operation.checkpoint,
            takeover=takeover,
            worker_id=worker_id,
        )

    def _repair_due_entry(self, item: dict[str, Any], now: int) -> bool:
        """A live claim whose lease heartbeats moved past its index position is re-filed at the
        lease's real expiry, so claimers stop meeting it. Pinned to fence and lease: harmless if
        anything changed meanwhile."""
        if item.get("state") != State.CLAIMED or "lease_expires_at" not in item:
            return False
        lease = int(item["lease_expires_at"])
        if lease <= now:
            return False
        in_due = DUE_PK in item and int(item.get(DUE_SK, lease)) < lease
        in_sweep = SWEEP_PK in item and int(item.get(SWEEP_SK, lease)) < lease
        if not (in_due or in_sweep):
            return False
        attr = DUE_SK if in_due else SWEEP_SK
        pk = DUE_PK if in_due else SWEEP_PK
        try:
            self.store.update(
                self._key(item["tenant_id"], item["operation_id"]),
                "SET #at = :lease",
                "#state = :claimed AND #fence = :f AND lease_expires_at = :lease AND attribute_exists(#pk)",
                dict(_N, **{"#at": attr, "#pk": pk}),
                {":claimed": State.CLAIMED.value, ":f": int(item["fence"]), ":lease": lease},
                returns="NONE",
            )
        except ConditionFailed:
            return False
        return True

    # ------------------------------------------------------------------ fenced writes

    def heartbeat(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        worker_id: str,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
    ) -> int:
        """Extend the lease of the claim held by ``fence`` (and keep an optional checkpoint).

        Returns the new lease expiry (ms). Conditional on fence and state, not on the lease clock:
        a holder whose lease lapsed may still renew until someone claims again or the sweeper
        parks the operation. Does not touch index keys (no index write).
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("worker_id", worker_id)
        fence = self._fence(fence)
        now = self.clock()
        names = dict(_N)
        values: dict[str, Any] = {":claimed": State.CLAIMED.value, ":f": fence, ":w": worker_id, ":now": now}
        if lease_ms is None:
            update = "SET lease_expires_at = :now + lease_ms, updated_at = :now"
        else:
            values[":lease"] = self._lease(lease_ms)
            update = "SET lease_expires_at = :now + :lease, lease_ms = :lease, updated_at = :now"
        if checkpoint is not MISSING:
            values[":cp"] = _encode_checkpoint(checkpoint)
            update += ", checkpoint = :cp"
        try:
            item = self.store.update(
                self._key(tenant_id, operation_id),
                update,
                "#state = :claimed AND #fence = :f AND lease_owner = :w",
                names,
                values,
            )
        except ConditionFailed as refused:
            raise self._refusal(refused.item, fence) from None
        assert item is not None
        return int(item["lease_expires_at"])

    def complete(self, tenant_id: str, operation_id: str, fence: int, outcome_code: str) -> Operation:
        """``claimed`` -> ``succeeded`` for the holding fence. A retry of the same completion by
        the same fence (after a lost response) is recognized as done."""
        return self._complete(tenant_id, operation_id, fence, outcome_code, writes=None)

    def complete_with(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        outcome_code: str,
        writes: list[dict[str, Any]],
    ) -> Operation:
        """Class A: complete and perform business writes in one transaction.

        ``writes`` are ``TransactWriteItems`` actions (``Put``, ``Update``, ``Delete``,
        ``ConditionCheck``) on tables of the same account and region, each with its own guard
        (for example "only ``paid`` can become ``refunded``"). They commit together with the
        completion, which is conditional on the fence and state, or nothing commits: a stale
        worker's business write cannot. A refused business guard raises :class:`TargetRefused`;
        a retry of a committed transaction by the same fence is recognized as done.
        """
        if not writes or len(writes) > 99:
            raise InvalidInput("a class-A completion needs 1 to 99 business writes")
        return self._complete(tenant_id, operation_id, fence, outcome_code, writes=writes)

    def _complete(
        self, tenant_id: str, operation_id: str, fence: int, outcome_code: str, writes: list[dict[str, Any]] | None
    ) -> Operation:
        _validate_text("outcome_code", outcome_code, MAX_ID_LENGTH)
        return self._close(
            tenant_id,
            operation_id,
            fence,
            command="complete",
            target=State.SUCCEEDED,
            fields={"outcome_code": outcome_code},
            writes=writes,
        )

    def fail(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        retryable: bool,
        reason: str,
        retry_after_ms: int | None = None,
    ) -> Operation:
        """Retryable with attempts left: back to ``queued`` after a backoff with full jitter (or
        the caller's delay). Otherwise ``failed_terminal``."""
        if not isinstance(retryable, bool):
            raise InvalidInput("retryable must be a boolean")
        _validate_text("reason", reason, MAX_REASON_LENGTH)
        if retry_after_ms is not None and (
            isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int) or not 0 <= retry_after_ms <= 86_400_000
        ):
            raise InvalidInput("retry_after must be from 0 to 86400 seconds")
        fence = self._fence(fence)
        if retryable:
            if retry_after_ms is None:
                # attempts == fence: each claim raises both by one.
                ceiling = min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** min(fence - 1, 20))
                retry_after_ms = self.rng.randint(0, ceiling)
            try:
                return self._close(
                    tenant_id,
                    operation_id,
                    fence,
                    command="fail",
                    target=State.QUEUED,
                    fields={"reason": reason},
                    delay_ms=retry_after_ms,
                )
            except _NoAttemptsLeft:
                pass  # this fence still holds the claim; the failure is terminal
        return self._close(
            tenant_id, operation_id, fence, command="fail", target=State.FAILED_TERMINAL, fields={"reason": reason}
        )

    def park_unknown(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The outcome is ambiguous: park for reconciliation; nothing retries it automatically."""
        _validate_text("reason", reason, MAX_REASON_LENGTH)
        return self._close(
            tenant_id, operation_id, fence, command="unknown", target=State.UNKNOWN, fields={"reason": reason},
            event="UnknownParked",
        )

    def quarantine(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The input cannot be interpreted: park it for an operator."""
        _validate_text("reason", reason, MAX_REASON_LENGTH)
        return self._close(
            tenant_id, operation_id, fence, command="quarantine", target=State.QUARANTINED, fields={"reason": reason},
            event="Quarantined",
        )

    @staticmethod
    def _fence(fence: Any) -> int:
        if isinstance(fence, bool) or not isinstance(fence, int) or not 1 <= fence < 2**53:
            raise InvalidInput("fence must be a positive integer")
        return fence

    def _close(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        command: str,
        target: State,
        fields: dict[str, Any],
        delay_ms: int | None = None,
        event: str | None = None,
        writes: list[dict[str, Any]] | None = None,
    ) -> Operation:
        """Leave ``claimed`` for ``target``: one write conditional on the state and the fence.

        With ``writes`` (class A), the same conditional update and the caller's business writes
        commit together in one ``TransactWriteItems``, or not at all.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        fence = self._fence(fence)
        now = self.clock()
        names = dict(_N, **{"#dpk": DUE_PK, "#due": DUE_SK, "#spk": SWEEP_PK, "#sat": SWEEP_SK})
        values: dict[str, Any] = {
            ":claimed": State.CLAIMED.value,
            ":f": fence,
            ":to": target.value,
            ":now": now,
            ":cmd": command,
        }
        sets = ["#state = :to", "updated_at = :now", "closed_fence = :f", "closed_by = :cmd"]
        removes = ["lease_owner", "lease_expires_at", "#spk", "#sat", "claim_token"]
        for i, (name, value) in enumerate(fields.items()):
            names[f"#x{i}"] = name
            values[f":x{i}"] = value
            sets.append(f"#x{i} = :x{i}")
        condition = "#state = :claimed AND #fence = :f"
        if target is State.QUEUED:
            condition += " AND attempts < max_attempts"
            values.update({":dpk": self._due_pk(tenant_id, operation_id), ":avail": now + (delay_ms or 0)})
            sets += ["#dpk = :dpk", "#due = :avail"]
        else:
            removes += ["#dpk", "#due"]
        if target in (State.SUCCEEDED, State.FAILED_TERMINAL):
            names["#ttl"] = TTL_ATTRIBUTE
            values[":ttl"] = self._ttl(now)
            sets.append("#ttl = :ttl")
        if target in (State.UNKNOWN, State.QUARANTINED):
            names.update({"#ppk": PARKED_PK, "#pat": PARKED_SK})
            values[":ppk"] = self._parked_pk(target, tenant_id, operation_id)
            sets += ["#ppk = :ppk", "#pat = :now"]
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
        key = self._key(tenant_id, operation_id)
        try:
            if writes is None:
                item = self.store.update(key, update, condition, names, values)
            else:
                self.store.transact([self.store.update_action(key, update, condition, names, values), *writes])
                item = self.store.get(key)
        except ConditionFailed as refused:
            if refused.reasons is not None and refused.reasons[0] is None:
                # The fence held; one of the caller's own guards refused. Nothing was written.
                failed = next(i for i, r in enumerate(refused.reasons) if r is not None)
                raise TargetRefused(
                    "a business write's condition was not met; nothing was written",
                    write_index=failed - 1,
                ) from None
            current = refused.item if refused.reasons is None else (refused.reasons[0] or None)
            if (
                current is not None
                and current.get("closed_fence") == fence
                and current.get("closed_by") == command
                and all(current.get(k) == v for k, v in fields.items() if k == "outcome_code")
            ):
                # The same fence already made this transition: a retry after a lost answer.
                return Operation.from_item(current)
            if (
                target is State.QUEUED
                and current is not None
                and current.get("state") == State.CLAIMED
                and int(current.get("fence", -1)) == fence
            ):
                raise _NoAttemptsLeft() from None
            raise self._refusal(current, fence) from None
        assert item is not None
        if event:
            self.events(event, 1)
        log.info("closed", extra={"op": self._tag(tenant_id, operation_id), "fence": fence, "state": target.value})
        return Operation.from_item(item)

    def _refusal(self, current: dict[str, Any] | None, fence: int) -> Exception:
        if current is None:
            return NotFound("operation not found")
        self.events("StaleFenceRejections", 1)
        return StaleFence(
            "this fence no longer holds the claim",
            current_fence=int(current.get("fence", 0)),
            state=current.get("state"),
        )

    # ------------------------------------------------------------------ sweeper

    def sweep(self, limit: int = 100) -> SweepResult:
        """Park expired final-attempt claims as ``unknown``.

        Stateless, bounded by ``limit`` and lock-free: it reads only the due part of the
        ``sweep`` index, and each park is a write conditional on the fence, the state and the
        expired lease, so two sweepers (or a sweeper racing a late heartbeat) cannot both act.
        """
        result = SweepResult()
        shards = list(range(self.spec.sweep_shards))
        self.rng.shuffle(shards)
        for shard in shards:
            remaining = limit - result.examined
            if remaining <= 0:
                break
            now = self.clock()
            page = self.store.query(
                IndexName=SWEEP_INDEX,
                KeyConditionExpression="#pk = :pk AND #at <= :now",
                ExpressionAttributeNames={"#pk": SWEEP_PK, "#at": SWEEP_SK},
                values={":pk": keys.sweep_partition(shard), ":now": now},
                Limit=remaining,
            )
            for entry in page.items:
                result.examined += 1
                self._sweep_one(entry, result)
        if result.swept:
            self.events("SweptToUnknown", result.swept)
        return result

    def _sweep_one(self, entry: dict[str, Any], result: SweepResult) -> None:
        now = self.clock()
        tenant_id, operation_id = entry["tenant_id"], entry["operation_id"]
        try:
            self.store.update(
                self._key(tenant_id, operation_id),
                "SET #state = :unknown, updated_at = :now, reason = :why, #ppk = :ppk, #pat = :now "
                "REMOVE #spk, #sat, #dpk, #due, claim_token, lease_owner, lease_expires_at",
                "#state = :claimed AND #fence = :f AND lease_expires_at <= :now AND attempts >= max_attempts",
                dict(_N, **{"#spk": SWEEP_PK, "#sat": SWEEP_SK, "#dpk": DUE_PK, "#due": DUE_SK,
                            "#ppk": PARKED_PK, "#pat": PARKED_SK}),
                {
                    ":ppk": self._parked_pk(State.UNKNOWN, tenant_id, operation_id),
                    ":unknown": State.UNKNOWN.value,
                    ":claimed": State.CLAIMED.value,
                    ":f": int(entry["fence"]),
                    ":now": now,
                    ":why": "lease expired on the final attempt; outcome unknown",
                },
                returns="NONE",
            )
        except ConditionFailed as refused:
            if refused.item is not None and self._repair_due_entry(refused.item, now):
                result.repaired += 1
            return
        result.swept += 1
        result.swept_keys.append((tenant_id, operation_id))
        log.info("swept to unknown", extra={"op": self._tag(tenant_id, operation_id)})

    # ------------------------------------------------------------------ operator

    def resolve(self, tenant_id: str, operation_id: str, resolution: Resolution | str, note: str = "") -> Operation:
        """Operator decision for a parked operation (``unknown`` or ``quarantined`` only).

        ``requeue`` grants a fresh attempt budget; the fence keeps rising and the next claim has
        ``reconcile_required``.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        try:
            resolution = Resolution(resolution)
        except ValueError as error:
            raise InvalidInput("resolution must be succeeded, failed_terminal or requeue") from error
        _validate_text("note", note, MAX_REASON_LENGTH, required=False)
        now = self.clock()
        names = {"#state": "state"}
        values: dict[str, Any] = {
            ":unknown": State.UNKNOWN.value,
            ":quarantined": State.QUARANTINED.value,
            ":now": now,
            ":note": note or "",
        }
        if resolution is Resolution.REQUEUE:
            names.update({"#dpk": DUE_PK, "#due": DUE_SK})
            values.update(
                {":queued": State.QUEUED.value, ":dpk": self._due_pk(tenant_id, operation_id), ":true": True}
            )
            update = (
                "SET #state = :queued, max_attempts = attempts + attempt_budget, #dpk = :dpk, #due = :now, "
                "requeued = :true, resolution_note = :note, updated_at = :now"
            )
        else:
            names["#ttl"] = TTL_ATTRIBUTE
            values.update({":to": resolution.value, ":ttl": self._ttl(now), ":code": f"resolved:{resolution.value}"})
            update = "SET #state = :to, outcome_code = :code, resolution_note = :note, updated_at = :now, #ttl = :ttl"
        names.update({"#ppk": PARKED_PK, "#pat": PARKED_SK})
        update += " REMOVE #ppk, #pat"
        try:
            item = self.store.update(
                self._key(tenant_id, operation_id),
                update,
                "#state IN (:unknown, :quarantined)",
                names,
                values,
            )
        except ConditionFailed as refused:
            if refused.item is None:
                raise NotFound("operation not found") from None
            raise InvalidTransition(
                f"only unknown or quarantined operations can be resolved (state is {refused.item['state']})"
            ) from None
        assert item is not None
        return Operation.from_item(item)

    def oldest_parked_age_ms(self, state: State | str = State.UNKNOWN) -> int:
        """How long the oldest operation in ``state`` (unknown or quarantined) has waited, in ms
        (0 when none waits). One ``Limit=1`` query per shard of the sparse ``parked`` index,
        across tenants: for the sweeper's on-call metric, never exposed per tenant."""
        state = State(state)
        if state not in (State.UNKNOWN, State.QUARANTINED):
            raise InvalidInput("only unknown and quarantined operations are parked")
        now = self.clock()
        oldest: int | None = None
        for shard in range(self.spec.sweep_shards):
            page = self.store.query(
                IndexName=PARKED_INDEX,
                KeyConditionExpression="#pk = :pk",
                ExpressionAttributeNames={"#pk": PARKED_PK},
                values={":pk": keys.parked_partition(state.value, shard)},
                Limit=1,
            )
            for entry in page.items:
                parked_at = int(entry[PARKED_SK])
                oldest = parked_at if oldest is None else min(oldest, parked_at)
        return 0 if oldest is None else max(0, now - oldest)

    # ------------------------------------------------------------------ reads

    def get(self, tenant_id: str, operation_id: str) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        item = self.store.get(self._key(tenant_id, operation_id))
        if item is None:
            raise NotFound("operation not found")
        return Operation.from_item(item)

    def list(
        self, tenant_id: str, state: State | str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page:
        """One tenant's operations in id order, optionally in one state. An operator path: it
        reads the tenant's partition (a state filter is applied after the read)."""
        validate_id("tenant_id", tenant_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
            raise InvalidInput("limit must be from 1 to 500")
        if state is not None:
            try:
                state = State(state)
            except ValueError as error:
                raise InvalidInput("unknown state") from error
        start = self._decode_cursor(cursor, tenant_id) if cursor else None
        query: dict[str, Any] = {
            "KeyConditionExpression": "tenant_id = :t",
            "values": {":t": tenant_id},
            "ConsistentRead": True,
        }
        if state is not None:
            query["FilterExpression"] = "#state = :s"
            query["ExpressionAttributeNames"] = {"#state": "state"}
            query["values"][":s"] = state.value
        found: list[Operation] = []
        for _round in range(20):
            # Limit counts items read, so the page stops exactly where the cursor will resume.
            page = self.store.query(start=start, Limit=limit - len(found), **query)
            found.extend(Operation.from_item(i) for i in page.items)
            start = page.last_key
            if start is None or len(found) >= limit:
                break
        next_cursor = self._encode_cursor(start) if start else None
        return Page(operations=found, next_cursor=next_cursor)

    @staticmethod
    def _encode_cursor(key: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps({"o": key["operation_id"]}).encode()).decode().rstrip("=")

    @staticmethod
    def _decode_cursor(cursor: str, tenant_id: str) -> dict[str, str]:
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            operation_id = json.loads(raw)["o"]
            validate_id("cursor", operation_id)
        except (ValueError, KeyError, TypeError, binascii.Error, InvalidInput) as error:
            raise InvalidInput("cursor is not valid") from error
        # The cursor names only an operation id; the tenant always comes from the caller.
        return {"tenant_id": tenant_id, "operation_id": operation_id}
