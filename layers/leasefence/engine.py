"""The engine: the one owner of every state transition of an operation.

Each transition is ONE conditional write (or one transaction). Ownership is never decided by
reading, comparing in Python and then writing: where the engine uses values it read (an index
entry, or the item returned by a refused write), the write's condition pins those values, so a
change in between makes the write fail instead of acting on stale facts.

State machine::

    enqueue(approval required) ──> awaiting_approval ──approve──> queued
                                     ├──reject / sweep(approval expired)──> failed_terminal
                                     └──cancel──> cancelled
    enqueue ──> queued ──claim──> claimed ──complete──> succeeded
                  ^  └──cancel (never claimed)──> cancelled
                  │                  │ ├──fail(retryable, attempts left)──> queued
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
import contextlib
import json
import logging
import random
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from leasefence import cursor as cursors
from leasefence import history, keys
from leasefence.catalogue import ERASING as ERASING_ATTRIBUTE
from leasefence.catalogue import Admission, Catalogue
from leasefence.clock import Clock, system_clock
from leasefence.errors import (
    AlreadyAttempted,
    IdentityRequired,
    InlinePayloadRequired,
    InvalidInput,
    InvalidTransition,
    NotFound,
    PayloadConflict,
    PayloadMismatch,
    PayloadMissing,
    SelfApproval,
    StaleFence,
    TargetRefused,
    TooManyJobTypes,
    Unavailable,
)
from leasefence.limits import FENCE_EPOCH_SPAN, MAX_FENCE_EPOCH
from leasefence.model import (
    OPERATOR_ACTOR,
    SWEEPER_ACTOR,
    Claim,
    EnqueueResult,
    Operation,
    Page,
    PurgeResult,
    Resolution,
    State,
    SweepResult,
    TargetClass,
    TenantErasure,
    Transition,
    TtlClearing,
)
from leasefence.privacy import keyed_hash
from leasefence.schema import (
    DUE_HOME,
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
#: :meth:`Engine.oldest_parked_age_ms` reads at most this many pages of 10 per shard looking for
#: the oldest parked operation that is not a shadow tenant's.
PARKED_SCAN_PAGES = 5
MAX_PAYLOAD_REF_LENGTH = 1024
BACKOFF_BASE_MS = 1_000
BACKOFF_CAP_MS = 300_000
DAY_MS = 86_400_000
#: How long an ended operation's identity (id, payload hash, fences, state) is kept: within it a
#: replay is a replay and no fence of the operation is handed out again. None: forever.
DEFAULT_IDENTITY_RETENTION_MS: int | None = 400 * DAY_MS
#: How long an ended operation's stored payload is kept after it ended.
DEFAULT_PAYLOAD_RETENTION_MS = 30 * DAY_MS
#: A claim gives up retrying a lost or throttled write after this long (ms of its own clock).
CLAIM_RETRY_BUDGET_MS = 5_000
#: Entries read per claim attempt from one due shard (one 0.5-unit read: they are small).
DEFAULT_CANDIDATE_PAGE = 24
#: Entries read per claim attempt while claimers race for this tenant's work (see
#: :meth:`Engine._page_for`): about 1 to 1.5 read units, against a collision rate that falls with
#: the page (32 claimers on one tenant: 0.25 refused claim writes per claim at 24, under 0.1 at 64).
DEFAULT_CONTENDED_PAGE = 64
#: How many job types a tenant's directory holds at most. Every claim without ``job_types`` reads
#: the directory (one eventually consistent read: 0.5 unit up to 4 KB, 100 types of 40 characters)
#: and queries each type's shards, so a directory that only grew would make every idle poll dearer
#: (and reach DynamoDB's 400 KB item limit after about 1,500 types of 256 characters).
MAX_JOB_TYPES = 100
#: How many claims of a tenant after its last lost race still read the contended page.
CONTENTION_MEMORY = 20
#: How many tenants (contention) and live leases (:meth:`Engine._remember_held`) an engine
#: remembers at most, each: the oldest are forgotten first.
MEMORY_ENTRIES = 10_000
#: How long an operation awaits its approval when the caller names no validity, and the longest
#: it may (an awaiting operation has no TTL: it must end by itself).
DEFAULT_APPROVAL_VALID_MS = DAY_MS
MAX_APPROVAL_VALID_MS = 30 * DAY_MS
#: The outcome codes of the approval gate's ends (``failed_terminal``) and of a cancel.
OUTCOME_REJECTED = "rejected"
OUTCOME_APPROVAL_EXPIRED = "approval_expired"
OUTCOME_CANCELLED = "cancelled"
#: What an erased class-D intent says instead of the handler's description (its fence stays).
ERASED_INTENT = "erased"
#: After the identity retention became forever, the TTLs already set on ended identities are
#: cleared in passes over the table; a pass that started this long after the sweeper first saw
#: the switch is the last one: by then no function still configured with the old window (the
#: longest Lambda invocation is 15 minutes) can set another TTL.
RETENTION_SWITCH_GRACE_MS = 15 * 60_000
#: A tenant erasure deletes the tenant's catalogue, directory and hold only this long after it
#: held the tenant: longer than an engine trusts a catalogue read (5 s) plus an API request's
#: longest run (29 s), so no enqueue admitted without seeing the hold can commit after it.
TENANT_ERASURE_SETTLE_MS = 60_000

_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

# Attribute names that are DynamoDB reserved words, or that read better as placeholders.
_N = {"#state": "state", "#fence": "fence"}
#: What every transition writes besides its own changes: its name, who made it, and ``seq`` + 1
#: (see :class:`~leasefence.model.Transition`; the stream carries them to history and events).
_TRANSITION_NAMES = {"#tr": "transition", "#seq": "seq"}
_ACTOR = {"#actor": "actor"}


def _earliest(*values: Any) -> int | None:
    """The earliest of the times given (None for none)."""
    found = [int(v) for v in values if v is not None]
    return min(found) if found else None


def validate_id(name: str, value: Any) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_ID_LENGTH
        or _CONTROL_RE.search(value)
    ):
        raise InvalidInput(
            f"{name} must be 1-{MAX_ID_LENGTH} characters with no control characters"
        )
    return value


def validate_actor(actor: Any, default: str | None) -> str | None:
    """Who makes a transition (a worker id, an operator's or producer's identity): an id, or the
    default when none is given."""
    return default if actor is None else validate_id("actor", actor)


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


class _LostRace(Exception):
    """Another claimer took the candidate between this claimer's read and its write."""


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
        identity_retention_ms: int | None = DEFAULT_IDENTITY_RETENTION_MS,
        payload_retention_ms: int = DEFAULT_PAYLOAD_RETENTION_MS,
        candidate_page: int = DEFAULT_CANDIDATE_PAGE,
        client_factory: Callable[[], Any] | None = None,
        payloads: Any = None,
        contended_page: int = DEFAULT_CONTENDED_PAGE,
        max_job_types: int = MAX_JOB_TYPES,
        fence_epoch: int = 0,
    ) -> None:
        if (
            isinstance(fence_epoch, bool)
            or not isinstance(fence_epoch, int)
            or not 0 <= fence_epoch <= MAX_FENCE_EPOCH
        ):
            raise ValueError(f"fence_epoch must be an integer from 0 to {MAX_FENCE_EPOCH}")
        if payload_retention_ms < 0 or (
            identity_retention_ms is not None and identity_retention_ms < payload_retention_ms
        ):
            raise ValueError("payload retention must be from 0 to the identity retention")
        self.spec = spec if spec is not None else TableSpec()
        self.store = Store(self.spec.table_name, client=client, client_factory=client_factory)
        self.clock = clock
        self.rng = rng if rng is not None else random.Random()
        self.events = events if events is not None else (lambda _name, _value: None)
        self.identity_retention_ms = identity_retention_ms
        self.payload_retention_ms = payload_retention_ms
        self.candidate_page = candidate_page
        #: How many job types a tenant's directory holds at most (:meth:`_register_job_type`).
        self.max_job_types = max_job_types
        #: Every fence this engine hands out is above this (see :data:`FENCE_EPOCH_SPAN`).
        self.fence_floor = fence_epoch * FENCE_EPOCH_SPAN
        self.contended_page = max(contended_page, candidate_page)
        #: Per tenant: claims left that read the contended page (set by a lost race).
        self._contended: dict[str, int] = {}
        #: (tenant, operation) -> (fence, lease expiry) of claims seen live although their due
        #: entry had lapsed (heartbeats extended the lease): skipped without a request until then.
        self._held: dict[tuple[str, str], tuple[int, int]] = {}
        self._memory_lock = threading.Lock()
        #: Where inline payloads live (a :class:`~leasefence.payloads.PayloadStore`): needed to
        #: read, purge and erase them. None: this engine only handles operations by reference.
        self.payloads = payloads
        #: (tenant, job type) pairs this engine already put in the tenant's directory.
        self._registered: dict[tuple[str, str], None] = {}
        self._registered_lock = threading.Lock()
        #: The tenants' job-type catalogues (entries cached briefly: see :mod:`leasefence.catalogue`).
        self.catalogue = Catalogue(self.store, clock)

    # ------------------------------------------------------------------ helpers

    def _key(self, tenant_id: str, operation_id: str) -> dict[str, str]:
        return {"tenant_id": tenant_id, "operation_id": operation_id}

    def _due_pk(self, tenant_id: str, operation_id: str, job_type: str) -> str:
        return keys.due_partition(
            tenant_id, keys.shard_of(tenant_id, operation_id, self.spec.due_shards), job_type
        )

    def _sweep_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.sweep_partition(keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))

    def _parked_pk(self, state: State, tenant_id: str, operation_id: str) -> str:
        return keys.parked_partition(
            state.value, keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards)
        )

    def _purge_pk(self, tenant_id: str, operation_id: str) -> str:
        return keys.purge_partition(keys.shard_of(tenant_id, operation_id, self.spec.sweep_shards))

    def _ending(
        self,
        now: int,
        names: dict[str, str],
        values: dict[str, Any],
        sets: list[str],
        removes: list[str],
    ) -> None:
        """What every transition into a final state adds: the identity's retention (TTL, unless
        kept forever), the payload's purge time, and dropping what only a live operation needs."""
        if self.identity_retention_ms is not None:
            names["#ttl"] = TTL_ATTRIBUTE
            values[":ttl"] = (now + self.identity_retention_ms) // 1000
            sets.append("#ttl = :ttl")
        names["#pat_"] = PURGE_SK
        values[":purge"] = now + self.payload_retention_ms
        sets.append("#pat_ = :purge")
        # Compact: what only a live operation needs goes (the identity, fences, state, outcome and
        # the closing fence stay, about 0.5 KB).
        names["#home_"] = DUE_HOME
        removes += ["checkpoint", "lease_ms", "claimed_from", "attempt_budget", "#home_"]

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
        target_class: TargetClass | str | None = None,
        payload_inline: bool = False,
        actor: str | None = None,
        admission: Admission | None = None,
        approval_required: bool = False,
        approval_valid_ms: int | None = None,
    ) -> EnqueueResult:
        """Durably record an operation bound to its payload hash: one conditional put.

        Same id and hash again: a replay (nothing new is scheduled). Same id, other hash:
        :class:`PayloadConflict` (nothing is changed). Both hold for as long as the identity is
        retained (:attr:`identity_retention_ms` after the operation ended), whatever was purged
        or erased meanwhile. ``payload_inline``: ``payload_ref`` names an object that
        :attr:`payloads` stored for this identity (set only by the API's inline path). ``actor``:
        who enqueued it (the API passes the token's subject), recorded with the transition.

        The job type's catalogue entry decides the class and the attempt budget (``target_class``
        and ``max_attempts``, when given, must agree with it: else :class:`InvalidInput`), and the
        operation records the entry's version. ``admission``: the result of
        :meth:`Catalogue.admit` for this enqueue, when the caller already asked (the API does, to
        check the payload against the entry's schema before it stores the payload); without it
        the entry is looked up here (an entry with a payload schema then refuses: only an
        admission made with the payload proves the payload was checked). An uncatalogued type
        in a non-strict tenant: ``target_class`` (default C) and ``max_attempts`` as given.

        ``approval_required`` (a job type's catalogue entry asks for it, and then a caller cannot
        lift it; the entry's ``approval_valid_seconds`` replaces ``approval_valid_ms``): the operation starts
        ``awaiting_approval``, in no claim index, until :meth:`approve` (or :meth:`reject`,
        :meth:`cancel`, or the sweeper once ``approval_valid_ms`` passed: default
        :data:`DEFAULT_APPROVAL_VALID_MS`, at most :data:`MAX_APPROVAL_VALID_MS`). ``actor`` is
        kept as ``enqueued_by``: that identity can never approve it.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("job_type", job_type)
        if not isinstance(payload_hash, str) or not _HASH_RE.match(payload_hash):
            raise InvalidInput("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
        _validate_text("payload_ref", payload_ref, MAX_PAYLOAD_REF_LENGTH, required=False)
        if admission is None:
            admitted = self.admit(
                tenant_id,
                operation_id,
                job_type,
                payload_hash,
                target_class,
                max_attempts,
                inline=payload_inline,
                actor=actor,
            )
            if isinstance(admitted, EnqueueResult):
                return admitted
            admission = admitted
        elif (admission.tenant_id, admission.job_type) != (tenant_id, job_type):
            raise InvalidInput("the admission was made for another tenant or job type")
        target, max_attempts = admission.target_class, admission.max_attempts
        if admission.approval_required:
            # The entry's requirement: a caller cannot lift it.
            approval_required, approval_valid_ms = True, admission.approval_valid_ms
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
        ):
            raise InvalidInput(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
        if target is TargetClass.D and max_attempts != 1:
            raise InvalidInput("target_class D allows exactly one attempt (max_attempts 1)")

        if payload_inline and payload_ref is None:
            raise InvalidInput("an inline payload needs its payload_ref")
        actor = validate_actor(actor, None)
        if not isinstance(approval_required, bool):
            raise InvalidInput("approval_required must be a boolean")
        valid_ms = self._approval_valid_ms(approval_valid_ms)
        if approval_required and (not payload_inline or actor is None):
            # What the approver approves is bytes leasefence stores, and who enqueued it is on
            # record (that identity can never approve it). A retry of an accepted enqueue is
            # still a replay.
            refusal: Exception = (
                InlinePayloadRequired("an operation that needs approval needs an inline payload")
                if not payload_inline
                else IdentityRequired(
                    "an operation that needs approval needs its enqueuer's identity"
                )
            )
            return self._replay_or_raise(tenant_id, operation_id, payload_hash, refusal)
        self._register_job_type(tenant_id, job_type)
        now = self.clock()
        due_home = self._due_pk(tenant_id, operation_id, job_type)
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
            DUE_HOME: due_home,
            DUE_PK: due_home,
            DUE_SK: now,
            "created_at": now,
            "updated_at": now,
            "transition": Transition.ENQUEUE.value,
            "actor": actor,
            "seq": 1,
        }
        if admission.job_type_version is not None:
            # The entry's version, and its lease bounds for claims (read from the item by the
            # claim's write itself: no claim reads the catalogue).
            item["job_type_version"] = admission.job_type_version
            item["lease_default_ms"] = admission.lease_default_ms
            item["lease_max_ms"] = admission.lease_max_ms
        if approval_required:
            # In no claim index (no due_pk: no claimer can see it); its deadline is in the
            # sweeper's index, so an approval not given in time ends it without a scan.
            del item[DUE_PK], item[DUE_SK]
            item.update(
                {
                    "state": State.AWAITING_APPROVAL.value,
                    "approval_expires_at": now + valid_ms,
                    SWEEP_PK: self._sweep_pk(tenant_id, operation_id),
                    SWEEP_SK: now + valid_ms,
                    "enqueued_by": actor,
                }
            )
        if payload_inline:
            item["payload_inline"] = True
            item[PURGE_PK] = self._purge_pk(tenant_id, operation_id)
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
        log.info(
            "enqueued",
            extra={"op": self._tag(tenant_id, operation_id), "target_class": target.value},
        )
        return EnqueueResult(Operation.from_item(item), created=True)

    def admit(
        self,
        tenant_id: str,
        operation_id: str,
        job_type: str,
        payload_hash: str,
        target_class: TargetClass | str | None = None,
        max_attempts: int | None = None,
        payload: Any = None,
        payload_given: bool = False,
        inline: bool | None = None,
        actor: str | None = None,
    ) -> Admission | EnqueueResult:
        """What an enqueue of this identity runs under (:meth:`Catalogue.admit`), or, when the
        catalogue refuses it, the replay it is: an operation already enqueued under this identity
        with this payload hash is answered as a replay (``created`` False) even if its entry or the
        tenant's strict mode changed since, so a producer retrying after a lost answer is never
        told 422 about work that was accepted. Only on that refusal path is the identity read
        (one strongly consistent read); the refusal stands for an identity that is new or bound
        to another payload. Nothing is written either way.

        ``inline`` (default ``payload_given``): the payload is one leasefence stores; ``actor``:
        who enqueues (an entry that requires approval refuses a payload by reference and an
        enqueuer that names nobody)."""
        try:
            return self.catalogue.admit(
                tenant_id,
                job_type,
                target_class=target_class,
                max_attempts=max_attempts,
                payload=payload,
                payload_given=payload_given,
                inline=inline,
                identified=actor is not None,
            )
        except (InvalidInput, IdentityRequired) as refusal:
            return self._replay_or_raise(tenant_id, operation_id, payload_hash, refusal)

    def _replay_or_raise(
        self, tenant_id: str, operation_id: str, payload_hash: str, refusal: Exception
    ) -> EnqueueResult:
        """An enqueue refused before any write: the replay it is, when this identity was already
        enqueued with this payload hash (one strongly consistent read), else the refusal."""
        existing = self.store.get(self._key(tenant_id, operation_id))
        if existing is None or existing.get("payload_hash") != payload_hash:
            raise refusal
        self.events("Replays", 1)
        return EnqueueResult(Operation.from_item(existing), created=False)

    @staticmethod
    def _approval_valid_ms(value: Any) -> int:
        if value is None:
            return DEFAULT_APPROVAL_VALID_MS
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 1_000 <= value <= MAX_APPROVAL_VALID_MS
        ):
            raise InvalidInput(f"approval validity must be from 1000 to {MAX_APPROVAL_VALID_MS} ms")
        return value

    def _register_job_type(self, tenant_id: str, job_type: str) -> None:
        """Put the job type in the tenant's directory (once per engine, before the first enqueue
        of that type, so an unfiltered claimer can always find the type of any due operation).
        One idempotent write per (engine, tenant, type): nothing on the steady-state path.

        The directory is one small item that every claim without ``job_types`` reads (and whose
        every type it queries, per shard), so it is bounded: the write is conditional on the type
        being there already or the directory holding fewer than :attr:`max_job_types` types. A
        new type beyond that is :class:`TooManyJobTypes` (422), and nothing is written."""
        pair = (tenant_id, job_type)
        with self._registered_lock:
            if pair in self._registered:
                return
        try:
            self.store.add_to_set(
                self._key(tenant_id, keys.DIRECTORY_ID),
                "job_types",
                [job_type],
                {PARKED_PK: keys.DIRECTORY_PARTITION, PARKED_SK: 0},
                condition="attribute_not_exists(#set) OR contains(#set, :type) "
                "OR size(#set) < :cap",
                condition_values={":type": job_type, ":cap": self.max_job_types},
            )
        except ConditionFailed as refused:
            held = len((refused.item or {}).get("job_types", []))
            raise TooManyJobTypes(
                f"this tenant already has {held} job types, the most its directory holds "
                f"({self.max_job_types}): reuse a job type (job types name kinds of work, not "
                "instances)",
                limit=self.max_job_types,
            ) from None
        with self._registered_lock:
            self._registered[pair] = None
            while len(self._registered) > 10_000:
                self._registered.pop(next(iter(self._registered)))

    def job_types(self, tenant_id: str) -> list[str]:
        """The job types this tenant ever enqueued (its directory), sorted."""
        validate_id("tenant_id", tenant_id)
        item = self.store.get(self._key(tenant_id, keys.DIRECTORY_ID), consistent=False)
        return sorted((item or {}).get("job_types", []))

    # ------------------------------------------------------------------ claim

    def claim_next(
        self,
        tenant_id: str,
        worker_id: str,
        lease_ms: int | None = None,
        job_types: Iterable[str] | None = None,
        claim_token: str | None = None,
    ) -> Claim | None:
        """Claim one due operation of this tenant (queued and available, or an expired lease).

        Reads only this tenant's ``due`` partitions of the job types asked for (all the types in
        the tenant's directory when ``job_types`` is None), a page at a time, partitions in random
        order; tries candidates in random order and moves on when another claimer wins one. Due
        work of other job types is never read, so it cannot hide the work asked for. Returns None
        when nothing is claimable.

        An entry of a claimed operation is due when its lease (as last filed) lapsed: either its
        holder is gone (a takeover) or heartbeats extended the lease past the entry. The item
        is read before any write (a half-unit read, not a refused one-unit write), and a live
        claim is remembered and skipped without a request until its lease as read. Entries of
        live claims are re-filed at their leases only where they may hide work: when a full page
        gave nothing to claim. A lost race (another claimer took the candidate first) leaves the
        page stale: the claimer moves on to the next partition and reads the raced ones again
        only if no other partition gives a claim; and this engine reads larger pages of that
        tenant for a while (:meth:`_page_for`).

        ``claim_token``: the client's token for this claim request (see :meth:`claim`), resent
        unchanged when its answer was lost. Before each claim write the engine records which
        operation it is about to claim under that token (a small marker item, keyed by the worker
        and the token: :func:`keys.claim_marker_id`); a resend reads the marker first and, while
        the claim it names holds, answers that same claim (:meth:`_confirm_claim`), spending no
        attempt. The marker is written before the claim, so a claim that committed is always
        named by it, even when the engine never learned that it committed.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("worker_id", worker_id)
        token = self._client_claim_token(claim_token)
        lease_ms = self._claim_lease(lease_ms)
        types = self._job_types(job_types)
        marker = None
        if token is not None:
            marker = self._key(tenant_id, keys.claim_marker_id(worker_id, token))
            found = self.store.get(marker)
            if found is not None and "claimed_op" in found:
                again = self._confirm_claim(
                    self._key(tenant_id, found["claimed_op"]), worker_id, token, types
                )
                if isinstance(again, Claim):
                    return again
        partitions = [
            (job_type, shard)
            for job_type in (types if types is not None else self.job_types(tenant_id))
            for shard in range(self.spec.due_shards)
        ]
        self.rng.shuffle(partitions)
        raced = []
        for job_type, shard in partitions:
            claim, lost = self._claim_from_partition(
                tenant_id, job_type, shard, worker_id, lease_ms, True, token, marker
            )
            if claim is not None:
                return claim
            if lost:
                raced.append((job_type, shard))
        # A lost race left the rest of those pages stale: read them again, trying every candidate.
        for job_type, shard in raced:
            claim, _ = self._claim_from_partition(
                tenant_id, job_type, shard, worker_id, lease_ms, False, token, marker
            )
            if claim is not None:
                return claim
        return None

    def claim(
        self,
        tenant_id: str,
        operation_id: str,
        worker_id: str,
        lease_ms: int | None = None,
        job_types: Iterable[str] | None = None,
        claim_token: str | None = None,
    ) -> Claim | None:
        """Claim one named operation if it is claimable now; None if not; NotFound if absent.

        ``claim_token``: the client's token for this claim request (1-256 characters, no control
        characters), resent unchanged when the answer was lost. The claim write stores it on the
        operation; a resend whose worker and token are the ones the operation's claim carries
        gets that same claim back (same fence, same attempt) for as long as it holds (still
        ``claimed`` under that claim: not taken over, parked or finished). That is decided by a
        conditional write (:meth:`_confirm_claim`) or read from the refused claim write's
        ``ALL_OLD`` item, never from a read alone. Without a token, a resend is a new claim."""
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("worker_id", worker_id)
        token = self._client_claim_token(claim_token)
        lease_ms = self._claim_lease(lease_ms)
        types = self._job_types(job_types)
        snapshot = self.store.get(self._key(tenant_id, operation_id))
        if snapshot is None:
            raise NotFound("operation not found")
        return self._try_claim(snapshot, worker_id, lease_ms, types, retries=3, claim_token=token)

    def claim_seen(
        self,
        item: dict[str, Any],
        worker_id: str,
        lease_ms: int | None = None,
        job_types: Iterable[str] | None = None,
    ) -> Claim | None:
        """Claim an operation as a stream record showed it (``item``: its image after the write
        that made it claimable): no read, one conditional write pinned to that image's fence and
        attempt counters, exactly as a claim of an index entry. If the operation changed since
        (another worker took it), the write is refused and the refusal's current item decides:
        claimable now, one more try; otherwise None (the work is taken)."""
        validate_id("tenant_id", item.get("tenant_id"))
        validate_id("operation_id", item.get("operation_id"))
        validate_id("worker_id", worker_id)
        return self._try_claim(
            item, worker_id, self._claim_lease(lease_ms), self._job_types(job_types), retries=1
        )

    @staticmethod
    def _client_claim_token(claim_token: str | None) -> str | None:
        return None if claim_token is None else validate_id("claim_token", claim_token)

    def _claim_lease(self, lease_ms: int | None) -> int | None:
        """A claim's lease: None takes the job type's default (``lease_default_ms`` on the item,
        from its catalogue entry), else :data:`DEFAULT_LEASE_MS`, inside the claim's write."""
        return None if lease_ms is None else self._lease(lease_ms)

    def _lease(self, lease_ms: int) -> int:
        if (
            isinstance(lease_ms, bool)
            or not isinstance(lease_ms, int)
            or not 1_000 <= lease_ms <= MAX_LEASE_MS
        ):
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

    def _claim_from_partition(
        self,
        tenant_id: str,
        job_type: str,
        shard: int,
        worker_id: str,
        lease_ms: int | None,
        stop_at_race: bool,
        claim_token: str | None = None,
        marker: dict[str, str] | None = None,
    ) -> tuple[Claim | None, bool]:
        """A claim from one partition, a page at a time. With ``stop_at_race``, the first lost
        race ends it (the page it was read from is stale by then): (None, True)."""
        now = self.clock()
        query: dict[str, Any] = {
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "#pk = :pk AND #due <= :now",
            "ExpressionAttributeNames": {"#pk": DUE_PK, "#due": DUE_SK},
            "values": {":pk": keys.due_partition(tenant_id, shard, job_type), ":now": now},
            "Limit": self._page_for(tenant_id),
        }
        start = None
        for _page in range(4):
            page = self.store.query(start=start, **query)
            candidates = page.items
            self.rng.shuffle(candidates)
            held: list[dict[str, Any]] = []
            for candidate in candidates:
                snapshot = candidate
                if candidate.get("state") == State.CLAIMED:
                    lapsed = self._unless_held(candidate, now)
                    if lapsed is None:
                        held.append(candidate)
                        continue
                    snapshot = lapsed
                try:
                    claim = self._try_claim(
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
                except _LostRace:
                    return None, True
                if claim is not None:
                    return claim, False
            if page.last_key is None:
                return None, False
            # A full page gave nothing: entries of live claims may be crowding the head of the
            # partition. Re-file them at their leases, so that no claimer pages past them again.
            for entry in held:
                self._refile_held(entry, now)
            start = page.last_key
        return None, False

    def _page_for(self, tenant_id: str) -> int:
        """How many entries a claim query of this tenant reads: :attr:`candidate_page`, or
        :attr:`contended_page` for :data:`CONTENTION_MEMORY` claims after this engine lost a race
        (a claim write refused because another claimer took the candidate between this engine's
        read and its write). Claimers of one partition pick at random from the same head of it,
        so collisions fall with the page; an idle or lone claimer never reads more than before
        (an empty page costs the same at any limit)."""
        with self._memory_lock:
            return self.contended_page if self._contended.get(tenant_id) else self.candidate_page

    def _note_race(self, tenant_id: str, lost: bool) -> None:
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

    def _unless_held(self, entry: dict[str, Any], now: int) -> dict[str, Any] | None:
        """For a due entry of a claimed operation: None while its claim is live (known from an
        earlier read, else read now and remembered); otherwise the item as read (claim from it:
        the claim write pins what it shows). An eventually consistent read can only be behind:
        it shows an earlier lease or fence, never a later one, so at worst the write is refused."""
        key = (entry["tenant_id"], entry["operation_id"])
        with self._memory_lock:
            known = self._held.get(key)
        if known is not None and known[0] == int(entry["fence"]) and known[1] > now:
            return None
        item = self.store.get(self._key(*key), consistent=False)
        if item is None:
            return None
        if self._remember_held(item, now):
            return None
        return item

    def _remember_held(self, item: dict[str, Any], now: int) -> bool:
        """Remember a live claim's fence and lease (bounded memory, oldest forgotten first).
        Returns whether the item is a live claim."""
        if item.get("state") != State.CLAIMED or int(item.get("lease_expires_at", now)) <= now:
            return False
        key = (item["tenant_id"], item["operation_id"])
        with self._memory_lock:
            self._held.pop(key, None)
            self._held[key] = (int(item["fence"]), int(item["lease_expires_at"]))
            while len(self._held) > MEMORY_ENTRIES:
                self._held.pop(next(iter(self._held)))
        return True

    def _refile_held(self, entry: dict[str, Any], now: int) -> None:
        """Re-file a live claim's lapsed due entry at the lease this engine saw (at or before
        the real one, so a takeover is never delayed by it)."""
        with self._memory_lock:
            known = self._held.get((entry["tenant_id"], entry["operation_id"]))
        if known is not None and known[0] == int(entry["fence"]):
            self._repair_due_entry(dict(entry, lease_expires_at=known[1]), now)

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
        lease_ms: int | None,
        types: tuple[str, ...] | None,
        retries: int,
        repair: bool = True,
        stop_at_race: bool = False,
        claim_token: str | None = None,
        marker: dict[str, str] | None = None,
    ) -> Claim | None:
        """One conditional write per try, pinned to the snapshot's fence and attempt counters.

        A refusal returns the item as it is now; if that is still claimable the next try uses it
        (no extra read); a live claim is remembered (and with ``repair``, its stale index entry
        re-filed at its lease); otherwise the claimer moves on. A refusal because another
        claimer took the operation counts as a lost race (:meth:`_page_for`); with
        ``stop_at_race`` it raises :class:`_LostRace`.

        Every claim write carries a claim token (the client's, else one made for this call), so a
        write that committed although its answer was lost is recognized from the refusal of its
        resend (:meth:`_is_claim_of`). A snapshot that already shows this worker's claim under
        the client's token (a resent request) is answered by :meth:`_confirm_claim`. With a
        ``marker`` (claim-next with a client token), the operation about to be claimed is
        recorded there before its claim write.
        """
        tenant_id, operation_id = snapshot["tenant_id"], snapshot["operation_id"]
        claim_token = claim_token or uuid.uuid4().hex
        started = self.clock()
        marked = None
        for _ in range(retries + 1):
            if self._is_claim_of(snapshot, worker_id, claim_token):
                confirmed = self._confirm_claim(
                    self._key(tenant_id, operation_id), worker_id, claim_token, types
                )
                if isinstance(confirmed, Claim):
                    return confirmed
                if confirmed is None or self._is_claim_of(confirmed, worker_id, claim_token):
                    return None  # gone; or still ours, but of a job type not asked for now
                snapshot = confirmed  # the claim no longer holds: the item as it is now
                continue
            if not self._claimable(snapshot, self.clock(), types):
                self._remember_held(snapshot, self.clock())
                if repair:
                    self._repair_due_entry(snapshot, self.clock())
                return None
            if marker is not None and marked != operation_id:
                # Before the claim write: a claim that commits is always named by the marker.
                self._write_retrying(
                    marker, partial(self._marker_write, operation_id=operation_id), started
                )
                marked = operation_id
            try:
                item = self._write_retrying(
                    self._key(tenant_id, operation_id),
                    # Built from this try's snapshot (the loop moves on to the refused item).
                    partial(
                        self._claim_write,
                        snapshot,
                        worker_id=worker_id,
                        lease_ms=lease_ms,
                        types=types,
                        claim_token=claim_token,
                    ),
                    started,
                )
            except ConditionFailed as refused:
                current = refused.item
                if current is None:
                    return None
                if self._is_claim_of(current, worker_id, claim_token):
                    # Our own write committed and its answer was lost (the store client, or the
                    # client of a resent request, sent it again): that claim, still held.
                    item = current
                else:
                    if int(current.get("fence", 0)) > int(snapshot["fence"]):
                        self._note_race(tenant_id, lost=True)
                        if stop_at_race:
                            raise _LostRace() from None
                    if (
                        lease_ms is not None
                        and int(current.get("lease_max_ms", lease_ms)) < lease_ms
                    ):
                        # The job type's maximum lease: the next try asks for exactly that.
                        lease_ms = int(current["lease_max_ms"])
                    snapshot = current
                    continue
            assert item is not None
            self._note_race(tenant_id, lost=False)
            return self._claimed(item, worker_id)
        self._remember_held(snapshot, self.clock())
        if repair:
            self._repair_due_entry(snapshot, self.clock())
        return None

    @staticmethod
    def _is_claim_of(item: dict[str, Any] | None, worker_id: str, claim_token: str) -> bool:
        """Whether ``item`` (as a refused write returned it, or as read) shows the claim this
        worker made under this token, still held: every claim write sets ``claim_token``, so a
        later claim by anyone else replaced it; a finished or parked claim is no longer
        ``claimed``. A lapsed lease alone does not end it (as for every fenced write)."""
        return (
            item is not None
            and item.get("state") == State.CLAIMED
            and item.get("claim_token") == claim_token
            and item.get("lease_owner") == worker_id
        )

    def _confirm_claim(
        self,
        key: dict[str, str],
        worker_id: str,
        claim_token: str,
        types: tuple[str, ...] | None,
    ) -> Claim | dict[str, Any] | None:
        """A resent claim request: one conditional write that changes nothing, on condition that
        the operation still holds the claim this worker made under this token. Returns that
        claim (same fence, same attempt: nothing is spent), else the item as the refusal showed
        it (None: no such item). The write changes no attribute and no ``seq``: it is no
        transition (history and events skip a record of it, and it is no work to dispatch)."""
        names = {"#state": "state"}
        values: dict[str, Any] = {
            ":tok": claim_token,
            ":w": worker_id,
            ":claimed": State.CLAIMED.value,
        }
        condition = "#state = :claimed AND claim_token = :tok AND lease_owner = :w"
        if types:
            type_values = {f":jt{i}": t for i, t in enumerate(types)}
            condition += f" AND job_type IN ({', '.join(type_values)})"
            values.update(type_values)
        try:
            item = self.store.update(key, "SET claim_token = :tok", condition, names, values)
        except ConditionFailed as refused:
            return refused.item
        assert item is not None
        return self._claimed(item, worker_id, replay=True)

    def _marker_write(
        self, now: int, operation_id: str
    ) -> tuple[str, str, dict[str, str], dict[str, Any]]:
        """The claim-next marker (:func:`keys.claim_marker_id`): the operation a claim request
        with a client token is about to claim. Written before that claim write (never onto an
        operation item); kept a day (TTL); only a pointer for a resend: the claim's own item
        decides."""
        return (
            "SET claimed_op = :op, #ttl = :ttl",
            "attribute_not_exists(#state)",
            {"#ttl": TTL_ATTRIBUTE, "#state": "state"},
            {":op": operation_id, ":ttl": (now + DAY_MS) // 1000},
        )

    def _claim_write(
        self,
        snapshot: dict[str, Any],
        now: int,
        worker_id: str,
        lease_ms: int | None,
        types: tuple[str, ...] | None,
        claim_token: str,
    ) -> tuple[str, str, dict[str, str], dict[str, Any]]:
        """The claim's conditional update at time ``now``, pinned to the snapshot's counters.

        ``lease_ms`` None: the item's ``lease_default_ms`` (its job type's default), else
        :data:`DEFAULT_LEASE_MS`, computed inside the write. A lease asked for is refused above
        the item's ``lease_max_ms`` (the caller retries with that maximum)."""
        tenant_id, operation_id = snapshot["tenant_id"], snapshot["operation_id"]
        fence, attempts, max_attempts = (
            int(snapshot["fence"]),
            int(snapshot["attempts"]),
            int(snapshot["max_attempts"]),
        )
        last_attempt = attempts + 1 >= max_attempts
        names = dict(_N, **_TRANSITION_NAMES, **_ACTOR, **{"#due": DUE_SK})
        values: dict[str, Any] = {
            ":tr": Transition.CLAIM.value,
            ":one": 1,
            ":f": fence,
            # Pinned to the snapshot's fence (the condition): one above it, and above the floor
            # of this engine's fence epoch (after a restore, above every fence handed out before).
            ":f1": max(fence + 1, self.fence_floor + 1),
            ":a": attempts,
            ":a1": attempts + 1,
            ":m": max_attempts,
            ":queued": State.QUEUED.value,
            ":claimed": State.CLAIMED.value,
            ":now": now,
            ":w": worker_id,
            ":tok": claim_token,
        }
        condition = (
            "#fence = :f AND attempts = :a AND max_attempts = :m AND "
            "((#state = :queued AND #due <= :now) OR (#state = :claimed AND lease_expires_at <= :now))"
        )
        if lease_ms is None:
            values[":lease"] = DEFAULT_LEASE_MS
            # Every operand is read from the item as it was before this write.
            lease = "if_not_exists(lease_default_ms, :lease)"
            expires = f":now + {lease}"
        else:
            values[":lease"] = lease_ms
            lease, expires = ":lease", ":now + :lease"
            condition += " AND (attribute_not_exists(lease_max_ms) OR lease_max_ms >= :lease)"
        if types:
            type_values = {f":jt{i}": t for i, t in enumerate(types)}
            condition += f" AND job_type IN ({', '.join(type_values)})"
            values.update(type_values)
        update = (
            "SET claimed_from = #state, #state = :claimed, #fence = :f1, attempts = :a1, "
            f"lease_owner = :w, lease_expires_at = {expires}, lease_ms = {lease}, "
            "claimed_at = :now, claim_token = :tok, updated_at = :now, #tr = :tr, #actor = :w"
        )
        if last_attempt:
            # The final attempt leaves the claim index for the sweeper's index: if this lease
            # lapses, the operation is parked as unknown, never claimed again.
            names.update({"#dpk": DUE_PK, "#spk": SWEEP_PK, "#sat": SWEEP_SK})
            values.update({":spk": self._sweep_pk(tenant_id, operation_id)})
            update += f", #spk = :spk, #sat = {expires} REMOVE #dpk, #due"
        else:
            update += f", #due = {expires}"
        return update + " ADD #seq :one", condition, names, values

    def _write_retrying(
        self,
        key: dict[str, Any],
        build: Callable[[int], tuple[str, str, dict[str, str], dict[str, Any]]],
        started: int,
        attempts: int = 3,
    ) -> dict[str, Any] | None:
        """A claim write sent again when its answer was lost or the store was busy, each time
        built afresh from the clock (a retry never commits a lease computed before it), and not
        past :data:`CLAIM_RETRY_BUDGET_MS`. Safe because the write carries a claim token: if an
        earlier one committed, the retry is refused and the refusal shows our token (recognized
        by the caller as our own claim)."""
        for attempt in range(attempts):
            now = self.clock()
            try:
                return self.store.update(key, *build(now))
            except Unavailable:
                if attempt == attempts - 1 or self.clock() - started >= CLAIM_RETRY_BUDGET_MS:
                    raise
        return None  # pragma: no cover

    def _claimed(self, item: dict[str, Any], worker_id: str, replay: bool = False) -> Claim:
        """The claim ``item`` shows; ``replay``: a resent request answered with it again."""
        takeover = item.get("claimed_from") == State.CLAIMED
        if replay:
            self.events("ClaimReplays", 1)
        else:
            self.events("Claims", 1)
            if takeover:
                self.events("Takeovers", 1)
        log.info(
            "claimed again" if replay else "claimed",
            extra={
                "op": self._tag(item["tenant_id"], item["operation_id"]),
                "fence": int(item["fence"]),
                "takeover": takeover,
            },
        )
        operation = Operation.from_item(item)
        lease_expires_at, lease_ms = int(item["lease_expires_at"]), int(item["lease_ms"])
        return Claim(
            tenant_id=operation.tenant_id,
            operation_id=operation.operation_id,
            job_type=operation.job_type,
            fence=operation.fence,
            attempts=operation.attempts,
            lease_expires_at=lease_expires_at,
            lease_ms=lease_ms,
            payload_ref=operation.payload_ref,
            payload_hash=operation.payload_hash,
            target_class=operation.target_class,
            # Any claim after the first attempt (a requeue from unknown is always after one) may
            # follow a side effect that already happened: reconcile before acting.
            reconcile_required=operation.attempts > 1 or bool(item.get("requeued")),
            checkpoint=operation.checkpoint,
            takeover=takeover,
            worker_id=worker_id,
            intent=operation.intent,
            payload_inline=operation.payload_inline,
            # A claim written before ``claimed_at`` was kept, and not renewed since, says it so.
            claimed_at=int(item.get("claimed_at", lease_expires_at - lease_ms)),
        )

    def _repair_due_entry(self, item: dict[str, Any], now: int) -> bool:
        """A live claim whose lease heartbeats moved past its index position is re-filed at the
        lease ``item`` shows (its real expiry, or an earlier one if heartbeats extended it since:
        never later), so claimers stop meeting it. Pinned to state, fence and a lease at least
        that: harmless if anything changed meanwhile."""
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
                "#state = :claimed AND #fence = :f AND lease_expires_at >= :lease AND attribute_exists(#pk)",
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
        intent: str | None = None,
    ) -> int:
        """Extend the lease of the claim held by ``fence`` (and keep an optional checkpoint).

        ``intent`` (class D) durably records, under this fence, that a side effect is about to
        start: its own attribute, which no later checkpoint overwrites and every later claim of
        the operation (a takeover, a requeue) sees, so reconciling never forgets it.

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
        values: dict[str, Any] = {
            ":claimed": State.CLAIMED.value,
            ":f": fence,
            ":w": worker_id,
            ":now": now,
        }
        condition = "#state = :claimed AND #fence = :f AND lease_owner = :w"
        if lease_ms is None:
            update = "SET lease_expires_at = :now + lease_ms, updated_at = :now"
        else:
            values[":lease"] = self._lease(lease_ms)
            update = "SET lease_expires_at = :now + :lease, lease_ms = :lease, updated_at = :now"
            condition += " AND (attribute_not_exists(lease_max_ms) OR lease_max_ms >= :lease)"
        if checkpoint is not MISSING:
            values[":cp"] = _encode_checkpoint(checkpoint)
            update += ", checkpoint = :cp"
        if intent is not None:
            _validate_text("intent", intent, MAX_ID_LENGTH)
            values[":intent"] = json.dumps({"fence": fence, "what": intent}, separators=(",", ":"))
            update += ", intent = :intent"
        try:
            item = self.store.update(
                self._key(tenant_id, operation_id), update, condition, names, values
            )
        except ConditionFailed as refused:
            current = refused.item
            if (
                lease_ms is not None
                and current is not None
                and current.get("state") == State.CLAIMED
                and int(current.get("fence", -1)) == fence
                and current.get("lease_owner") == worker_id
                and int(current.get("lease_max_ms", lease_ms)) < lease_ms
            ):
                raise InvalidInput(
                    f"lease_seconds exceeds this job type's maximum lease "
                    f"({int(current['lease_max_ms']) // 1000} s)"
                ) from None
            raise self._refusal(current) from None
        assert item is not None
        return int(item["lease_expires_at"])

    def complete(
        self, tenant_id: str, operation_id: str, fence: int, outcome_code: str
    ) -> Operation:
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
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        outcome_code: str,
        writes: list[dict[str, Any]] | None,
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
            isinstance(retry_after_ms, bool)
            or not isinstance(retry_after_ms, int)
            or not 0 <= retry_after_ms <= 86_400_000
        ):
            raise InvalidInput("retry_after must be from 0 to 86400 seconds")
        fence = self._fence(fence)
        if retryable:
            if retry_after_ms is None:
                # The fence's place in its epoch: each claim raises it (and attempts) by one.
                step = (fence - 1) % FENCE_EPOCH_SPAN
                ceiling = min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** min(step, 20))
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
            tenant_id,
            operation_id,
            fence,
            command="fail",
            target=State.FAILED_TERMINAL,
            fields={"reason": reason},
        )

    def park_unknown(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The outcome is ambiguous: park for reconciliation; nothing retries it automatically."""
        _validate_text("reason", reason, MAX_REASON_LENGTH)
        return self._close(
            tenant_id,
            operation_id,
            fence,
            command="unknown",
            target=State.UNKNOWN,
            fields={"reason": reason},
            event="UnknownParked",
        )

    def quarantine(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The input cannot be interpreted: park it for an operator."""
        _validate_text("reason", reason, MAX_REASON_LENGTH)
        return self._close(
            tenant_id,
            operation_id,
            fence,
            command="quarantine",
            target=State.QUARANTINED,
            fields={"reason": reason},
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
        index_names = {"#dpk": DUE_PK, "#due": DUE_SK, "#spk": SWEEP_PK, "#sat": SWEEP_SK}
        names = dict(_N, **_TRANSITION_NAMES, **index_names)
        values: dict[str, Any] = {
            ":claimed": State.CLAIMED.value,
            ":f": fence,
            ":to": target.value,
            ":now": now,
            ":cmd": command,
            ":tr": self._closing_transition(command, target, delay_ms).value,
            ":one": 1,
        }
        # The actor stays the claim's (the fence holder's worker id): only the holder closes.
        sets = ["#state = :to", "updated_at = :now", "closed_fence = :f", "closed_by = :cmd"]
        sets.append("#tr = :tr")
        removes = ["lease_owner", "lease_expires_at", "#spk", "#sat", "claim_token"]
        for i, (name, value) in enumerate(fields.items()):
            names[f"#x{i}"] = name
            values[f":x{i}"] = value
            sets.append(f"#x{i} = :x{i}")
        condition = "#state = :claimed AND #fence = :f"
        if target is State.QUEUED:
            condition += " AND attempts < max_attempts"
            values[":avail"] = now + (delay_ms or 0)
            names["#home"] = DUE_HOME
            sets += ["#dpk = #home", "#due = :avail"]
        else:
            removes += ["#dpk", "#due"]
        if target in (State.SUCCEEDED, State.FAILED_TERMINAL):
            self._ending(now, names, values, sets, removes)
        if target in (State.UNKNOWN, State.QUARANTINED):
            names.update({"#ppk": PARKED_PK, "#pat": PARKED_SK})
            values[":ppk"] = self._parked_pk(target, tenant_id, operation_id)
            sets += ["#ppk = :ppk", "#pat = :now"]
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)} ADD #seq :one"
        key = self._key(tenant_id, operation_id)
        try:
            if writes is None:
                item = self.store.update(key, update, condition, names, values)
            else:
                self.store.transact(
                    [self.store.update_action(key, update, condition, names, values), *writes]
                )
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
                and int(current.get("fence", -1))
                == fence  # nobody claimed since: not a stale fence
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
            raise self._refusal(current) from None
        assert item is not None
        if event:
            self.events(event, 1)
        log.info(
            "closed",
            extra={"op": self._tag(tenant_id, operation_id), "fence": fence, "state": target.value},
        )
        return Operation.from_item(item)

    @staticmethod
    def _closing_transition(command: str, target: State, delay_ms: int | None) -> Transition:
        if target is State.QUEUED:
            return Transition.RETRY if not delay_ms else Transition.RETRY_LATER
        return {
            "complete": Transition.COMPLETE,
            "fail": Transition.FAIL,
            "unknown": Transition.UNKNOWN,
            "quarantine": Transition.QUARANTINE,
        }[command]

    def _refusal(self, current: dict[str, Any] | None) -> Exception:
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
        """Park expired final-attempt claims as ``unknown``, and end operations whose approval
        was not given in time (``failed_terminal``, outcome ``approval_expired``).

        Stateless, bounded by ``limit`` and lock-free: it reads only the due part of the
        ``sweep`` index, and each park is a write conditional on the fence, the state and the
        expired lease, so two sweepers (or a sweeper racing a late heartbeat) cannot both act.
        """
        result = SweepResult()
        for entry in self._due_entries(
            SWEEP_INDEX, SWEEP_PK, SWEEP_SK, keys.sweep_partition, limit
        ):
            result.examined += 1
            if entry.get("state") == State.AWAITING_APPROVAL:
                self._expire_approval(entry, result)
            else:
                self._sweep_one(entry, result)
        # Shadow operations parked here (a shadow run record whose completion was lost) are not
        # the fleet's: they stay out of the metric (and its alarm).
        fleet_swept = sum(1 for t, _ in result.swept_keys if not keys.is_shadow_tenant(t))
        if fleet_swept:
            self.events("SweptToUnknown", fleet_swept)
        if result.approvals_expired:
            self.events("ApprovalsExpired", result.approvals_expired)
        return result

    def _due_entries(
        self, index: str, pk: str, sk: str, partition: Callable[[int], str], limit: int
    ) -> Iterable[dict[str, Any]]:
        """At most ``limit`` entries of a sparse, sharded index (``sweep``, ``purge``) whose sort key
        is due (``<= now``), from the shards in random order, one page per shard."""
        shards = list(range(self.spec.sweep_shards))
        self.rng.shuffle(shards)
        count = 0
        for shard in shards:
            if count >= limit:
                return
            page = self.store.query(
                IndexName=index,
                KeyConditionExpression="#pk = :pk AND #at <= :now",
                ExpressionAttributeNames={"#pk": pk, "#at": sk},
                values={":pk": partition(shard), ":now": self.clock()},
                Limit=limit - count,
            )
            for entry in page.items:
                count += 1
                yield entry

    def _sweep_one(self, entry: dict[str, Any], result: SweepResult) -> None:
        now = self.clock()
        tenant_id, operation_id = entry["tenant_id"], entry["operation_id"]
        try:
            self.store.update(
                self._key(tenant_id, operation_id),
                "SET #state = :unknown, updated_at = :now, reason = :why, #ppk = :ppk, "
                "#pat = :now, #tr = :tr, #actor = :actor "
                "REMOVE #spk, #sat, #dpk, #due, claim_token, lease_owner, lease_expires_at "
                "ADD #seq :one",
                "#state = :claimed AND #fence = :f AND lease_expires_at <= :now AND attempts >= max_attempts",
                dict(
                    _N,
                    **_TRANSITION_NAMES,
                    **_ACTOR,
                    **{
                        "#spk": SWEEP_PK,
                        "#sat": SWEEP_SK,
                        "#dpk": DUE_PK,
                        "#due": DUE_SK,
                        "#ppk": PARKED_PK,
                        "#pat": PARKED_SK,
                    },
                ),
                {
                    ":tr": Transition.SWEEP.value,
                    ":actor": SWEEPER_ACTOR,
                    ":one": 1,
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

    def resolve(
        self,
        tenant_id: str,
        operation_id: str,
        resolution: Resolution | str,
        note: str = "",
        actor: str | None = None,
        request_token: str | None = None,
    ) -> Operation:
        """Operator decision for a parked operation (``unknown`` or ``quarantined`` only).

        ``requeue`` grants a fresh attempt budget; the fence keeps rising and the next claim has
        ``reconcile_required``. ``actor``: the operator's identity (the API passes the token's
        subject), recorded with the transition.

        A resolve sent again after it succeeded (its answer was lost) is a replay: the current
        operation, unchanged. Decided from the refused write's own item: with ``request_token``
        (the caller's name for this decision, recorded with it), a request whose token is on
        the item already resolved it, and the write's condition refuses it while the item carries
        it (so it is not applied again even once the operation is parked again); without one, the
        item's last transition is this decision (same resolution, actor and note).
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        try:
            resolution = Resolution(resolution)
        except ValueError as error:
            raise InvalidInput(
                "resolution must be succeeded, failed_terminal or requeue"
            ) from error
        _validate_text("note", note, MAX_REASON_LENGTH, required=False)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        if request_token is not None:
            validate_id("request_token", request_token)
        now = self.clock()
        names = {
            "#state": "state",
            "#ppk": PARKED_PK,
            "#pat": PARKED_SK,
            "#rtok": "resolve_token",
            "#ras": "resolved_as",
            **_TRANSITION_NAMES,
            **_ACTOR,
        }
        transition = Transition.REQUEUE if resolution is Resolution.REQUEUE else Transition.RESOLVE
        values: dict[str, Any] = {
            ":unknown": State.UNKNOWN.value,
            ":quarantined": State.QUARANTINED.value,
            ":now": now,
            ":note": note or "",
            ":tr": transition.value,
            ":actor": actor,
            ":one": 1,
            ":as": resolution.value,
        }
        sets = [
            "resolution_note = :note",
            "updated_at = :now",
            "#tr = :tr",
            "#actor = :actor",
            "#ras = :as",
        ]
        removes = ["#ppk", "#pat"]
        condition = "#state IN (:unknown, :quarantined)"
        if request_token is None:
            removes.append("#rtok")
        else:
            values[":tok"] = request_token
            sets.append("#rtok = :tok")
            condition += " AND (attribute_not_exists(#rtok) OR #rtok <> :tok)"
        if resolution is Resolution.REQUEUE:
            names.update({"#dpk": DUE_PK, "#due": DUE_SK, "#home": DUE_HOME})
            values.update({":queued": State.QUEUED.value, ":true": True})
            sets += [
                "#state = :queued",
                "max_attempts = attempts + attempt_budget",
                "#dpk = #home",
                "#due = :now",
                "requeued = :true",
            ]
        else:
            values.update({":to": resolution.value, ":code": f"resolved:{resolution.value}"})
            sets += ["#state = :to", "outcome_code = :code"]
            self._ending(now, names, values, sets, removes)
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)} ADD #seq :one"
        try:
            item = self.store.update(
                self._key(tenant_id, operation_id), update, condition, names, values
            )
        except ConditionFailed as refused:
            current = refused.item
            if current is None:
                raise NotFound("operation not found") from None
            if self._resolved_already(current, resolution, note or "", actor, request_token):
                self.events("Replays", 1)
                return Operation.from_item(current)  # this decision, sent again: a replay
            raise InvalidTransition(
                f"only unknown or quarantined operations can be resolved (state is {current['state']})"
            ) from None
        assert item is not None
        return Operation.from_item(item)

    @staticmethod
    def _resolved_already(
        item: dict[str, Any],
        resolution: Resolution,
        note: str,
        actor: str | None,
        request_token: str | None,
    ) -> bool:
        """Whether the refused item shows this very decision applied already (see :meth:`resolve`)."""
        if item.get("resolved_as") != resolution.value:
            return False
        if request_token is not None:
            return bool(item.get("resolve_token") == request_token)
        transition = Transition.REQUEUE if resolution is Resolution.REQUEUE else Transition.RESOLVE
        return (
            item.get("transition") == transition.value
            and item.get("actor") == actor
            and item.get("resolution_note", "") == note
            and "resolve_token" not in item
        )

    # ------------------------------------------------------------------ approval gate, cancel

    def approve(
        self, tenant_id: str, operation_id: str, payload_hash: str, actor: str
    ) -> Operation:
        """``awaiting_approval`` -> ``queued`` (claimable at once): one conditional write.

        ``payload_hash`` is the hash of the payload the approver saw: the write is conditional on
        it being the operation's, on the approval window still being open, and on ``actor`` (the
        approver's identity, recorded as ``approved_by`` and as the transition's actor) not being
        the identity that enqueued it. So a changed payload (:class:`PayloadMismatch`), a late
        approval (:class:`InvalidTransition`) or a self-approval (:class:`SelfApproval`) changes
        nothing, and what refused it is read from the refusal itself, never checked beforehand.
        Approving an approved operation again with the same hash is a replay (its current state
        is returned unchanged)."""
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        if not isinstance(payload_hash, str) or not _HASH_RE.match(payload_hash):
            raise InvalidInput("payload_hash must be 'sha256:' followed by 64 lowercase hex digits")
        actor = validate_id("actor", actor)
        now = self.clock()
        try:
            item = self.store.update(
                self._key(tenant_id, operation_id),
                "SET #state = :queued, #dpk = #home, #due = :now, approved_by = :actor, "
                "approved_at = :now, updated_at = :now, #tr = :tr, #actor = :actor "
                "REMOVE #spk, #sat, approval_expires_at ADD #seq :one",
                "#state = :awaiting AND payload_hash = :h AND approval_expires_at > :now "
                "AND (attribute_not_exists(enqueued_by) OR enqueued_by <> :actor)",
                dict(
                    _TRANSITION_NAMES,
                    **_ACTOR,
                    **{
                        "#state": "state",
                        "#dpk": DUE_PK,
                        "#due": DUE_SK,
                        "#home": DUE_HOME,
                        "#spk": SWEEP_PK,
                        "#sat": SWEEP_SK,
                    },
                ),
                {
                    ":queued": State.QUEUED.value,
                    ":awaiting": State.AWAITING_APPROVAL.value,
                    ":h": payload_hash,
                    ":now": now,
                    ":actor": actor,
                    ":tr": Transition.APPROVE.value,
                    ":one": 1,
                },
            )
        except ConditionFailed as refused:
            current = refused.item
            if current is None:
                raise NotFound("operation not found") from None
            if current["payload_hash"] != payload_hash:
                self.events("ApprovalMismatches", 1)
                raise PayloadMismatch(
                    "payload_hash is not the operation's: the approval names other content"
                ) from None
            if current.get("approved_by") is not None:
                return Operation.from_item(current)  # approved already: a replay
            state = current["state"]
            if state != State.AWAITING_APPROVAL:
                raise InvalidTransition(
                    f"only an operation awaiting approval can be approved (state is {state})"
                ) from None
            if current.get("enqueued_by") == actor:
                raise SelfApproval(
                    "an operation cannot be approved by the identity that enqueued it"
                ) from None
            raise InvalidTransition(
                "the approval window closed; the operation ends approval_expired"
            ) from None
        assert item is not None
        self.events("Approvals", 1)
        log.info("approved", extra={"op": self._tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def reject(self, tenant_id: str, operation_id: str, actor: str, note: str = "") -> Operation:
        """``awaiting_approval`` -> ``failed_terminal`` with outcome ``rejected``: one conditional
        write (the approver's ``note`` is kept as the reason). Rejecting a rejected operation again
        is a replay."""
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_id("actor", actor)
        _validate_text("note", note, MAX_REASON_LENGTH, required=False)
        try:
            item = self._end_early(
                tenant_id,
                operation_id,
                Transition.REJECT,
                State.FAILED_TERMINAL,
                OUTCOME_REJECTED,
                actor,
                (State.AWAITING_APPROVAL,),
                note or None,
            )
        except ConditionFailed as refused:
            current = refused.item
            if current is None:
                raise NotFound("operation not found") from None
            if (
                current["state"] == State.FAILED_TERMINAL
                and current.get("outcome_code") == OUTCOME_REJECTED
            ):
                return Operation.from_item(current)  # rejected already: a replay
            raise InvalidTransition(
                f"only an operation awaiting approval can be rejected (state is {current['state']})"
            ) from None
        self.events("Rejections", 1)
        log.info("rejected", extra={"op": self._tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def cancel(self, tenant_id: str, operation_id: str, actor: str | None = None) -> Operation:
        """``queued`` or ``awaiting_approval`` -> ``cancelled`` (final: retention, payload purge
        and index removal as every final state), only while no worker ever claimed it: one write
        conditional on the state and on no attempt made (``attempts`` and ``fence`` still 0), so
        a claim racing it either wins first (the cancel is refused) or finds it gone.

        An operation queued again after an attempt (a retryable failure, a takeover's retry, an
        operator's requeue from ``unknown``) may have had its side effect: cancelling it would
        skip the reconcile its next claim must make, so it is :class:`AlreadyAttempted` (409
        ``already_attempted``); a claimed or ended operation is :class:`InvalidTransition`.
        Cancelling a cancelled one again is a replay. Each refusal is read from the refused
        write's own answer."""
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        try:
            item = self._end_early(
                tenant_id,
                operation_id,
                Transition.CANCEL,
                State.CANCELLED,
                OUTCOME_CANCELLED,
                actor,
                (State.QUEUED, State.AWAITING_APPROVAL),
                None,
                extra_condition=" AND attempts = :zero AND #fence = :zero",
                extra_names={"#fence": "fence"},
                extra_values={":zero": 0},
            )
        except ConditionFailed as refused:
            current = refused.item
            if current is None:
                raise NotFound("operation not found") from None
            if current["state"] == State.CANCELLED:
                return Operation.from_item(current)  # cancelled already: a replay
            if current["state"] in (State.QUEUED, State.AWAITING_APPROVAL):
                raise AlreadyAttempted(
                    "only an operation no worker ever claimed can be cancelled: this one was "
                    f"attempted {int(current.get('attempts', 0))} time(s) and is queued again; "
                    "its next claim reconciles it (or an operator resolves it)",
                    attempts=int(current.get("attempts", 0)),
                ) from None
            raise InvalidTransition(
                "only a queued operation or one awaiting approval can be cancelled "
                f"(state is {current['state']})"
            ) from None
        self.events("Cancellations", 1)
        log.info("cancelled", extra={"op": self._tag(tenant_id, operation_id)})
        return Operation.from_item(item)

    def _end_early(
        self,
        tenant_id: str,
        operation_id: str,
        transition: Transition,
        target: State,
        outcome_code: str,
        actor: str | None,
        sources: tuple[State, ...],
        reason: str | None,
        extra_condition: str = "",
        extra_names: dict[str, str] | None = None,
        extra_values: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """End an operation no worker holds (one of ``sources``) in ``target``: one conditional
        write that takes it out of every index and gives it a final state's retention.
        :class:`ConditionFailed` (with the current item) when it was in no source state."""
        now = self.clock()
        names = dict(
            _TRANSITION_NAMES,
            **_ACTOR,
            **{
                "#state": "state",
                "#dpk": DUE_PK,
                "#due": DUE_SK,
                "#spk": SWEEP_PK,
                "#sat": SWEEP_SK,
            },
        )
        source_values = {f":src{i}": state.value for i, state in enumerate(sources)}
        values: dict[str, Any] = {
            ":to": target.value,
            ":code": outcome_code,
            ":now": now,
            ":tr": transition.value,
            ":actor": actor,
            ":one": 1,
            **source_values,
        }
        sets = [
            "#state = :to",
            "outcome_code = :code",
            "updated_at = :now",
            "#tr = :tr",
            "#actor = :actor",
        ]
        if reason is not None:
            values[":why"] = reason
            sets.append("reason = :why")
        removes = ["#dpk", "#due", "#spk", "#sat", "approval_expires_at"]
        names.update(extra_names or {})
        values.update(extra_values or {})
        self._ending(now, names, values, sets, removes)
        item = self.store.update(
            self._key(tenant_id, operation_id),
            f"SET {', '.join(sets)} REMOVE {', '.join(removes)} ADD #seq :one",
            f"#state IN ({', '.join(source_values)})" + extra_condition,
            names,
            values,
        )
        assert item is not None
        return item

    def _expire_approval(self, entry: dict[str, Any], result: SweepResult) -> None:
        """The sweeper's end of an approval not given in time: ``failed_terminal`` with outcome
        ``approval_expired``, conditional on the operation still awaiting approval past its
        deadline (an approval that won the race stands; a second sweeper changes nothing)."""
        tenant_id, operation_id = entry["tenant_id"], entry["operation_id"]
        try:
            self._end_early(
                tenant_id,
                operation_id,
                Transition.APPROVAL_EXPIRE,
                State.FAILED_TERMINAL,
                OUTCOME_APPROVAL_EXPIRED,
                SWEEPER_ACTOR,
                (State.AWAITING_APPROVAL,),
                "no approval within its validity",
                extra_condition=" AND approval_expires_at <= :now",
            )
        except ConditionFailed:
            return
        result.approvals_expired += 1
        log.info("approval expired", extra={"op": self._tag(tenant_id, operation_id)})

    def oldest_parked_age_ms(self, state: State | str = State.UNKNOWN) -> int:
        """How long the oldest operation in ``state`` (unknown or quarantined) has waited, in ms
        (0 when none waits). One small query per shard of the sparse ``parked`` index (oldest
        first), across tenants: for the sweeper's on-call metric, never exposed per tenant.
        Shadow tenants' operations are skipped (they are not the fleet's): a shard's pages are
        read on past them, at most :data:`PARKED_SCAN_PAGES` pages of 10."""
        state = State(state)
        if state not in (State.UNKNOWN, State.QUARANTINED):
            raise InvalidInput("only unknown and quarantined operations are parked")
        now = self.clock()
        oldest: int | None = None
        for shard in range(self.spec.sweep_shards):
            start = None
            for _page in range(PARKED_SCAN_PAGES):
                page = self.store.query(
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

    # ------------------------------------------------------------------ payloads, retention, erasure

    def _inline(self, tenant_id: str, operation_id: str, operation: Operation | Claim) -> bool:
        if operation.payload_inline:
            return True
        # Items written before the flag existed: a ref this store would have written is ours.
        owns = getattr(self.payloads, "owns", None)
        return bool(
            owns and owns(tenant_id, operation_id, operation.payload_hash, operation.payload_ref)
        )

    def payload(self, operation: Operation | Claim) -> bytes:
        """The inline payload of an operation (or of a claim), checked against its hash.

        :class:`NotFound` when the operation has no inline payload (its ``payload_ref`` is the
        caller's own); :class:`PayloadMissing` when it was purged, erased or its object is gone:
        never None, so no handler runs without its input. A store that refuses access raises
        :class:`~leasefence.errors.PayloadAccessDenied` (:class:`Unavailable`): a fault to fix,
        not a missing payload.
        """
        if not self._inline(operation.tenant_id, operation.operation_id, operation):
            raise NotFound("this operation has no inline payload")
        if isinstance(operation, Operation) and operation.payload_state in ("purged", "erased"):
            raise PayloadMissing(f"the payload was {operation.payload_state}")
        if self.payloads is None:
            raise PayloadMissing("this engine has no payload store configured")
        assert operation.payload_ref is not None
        return self.payloads.read(operation.payload_ref, operation.payload_hash)

    def erase(self, tenant_id: str, operation_id: str, actor: str | None = None) -> Operation:
        """Erase one operation's payload and free text (reasons, notes, checkpoint, the intent's
        description, and its history) and keep its identity (id, payload hash, fences, state,
        outcome code), so a replay is still a replay and a different payload still a conflict.
        Refused while the operation is ``claimed`` (:class:`InvalidTransition`; erase it once it
        left ``claimed``). A queued or parked operation stays in its state; a claim of it finds
        no payload and the worker quarantines it. Erasing again is harmless.

        What a reconcile needs stays: a class-D intent is kept as ``{"fence": f, "what":
        "erased"}`` (the fence under which a call may have started, without the handler's text),
        also when an older operation kept it in its checkpoint (``intent_fence``), so the next
        claim after a requeue still reconciles it as "a call may have been made" and never calls
        again. The checkpoint itself goes (it is the handler's own data).

        One read (to find the intent's fence in the text that goes) and one write conditional on
        the operation not being claimed and pinned to the intent and checkpoint it read: if a
        claim changed them in between, the write is refused and made again from the refusal's
        item; a refusal that shows the operation claimed is :class:`InvalidTransition`.

        The stored payload is deleted right after the write; if that fails the write has already
        made it due in the ``purge`` index, so the sweeper deletes it. The history is replaced by
        the erasure's own entry right after the write too; if that fails, the publisher does it
        when the erasure's stream record arrives (:mod:`leasefence.history`).
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        actor = validate_actor(actor, OPERATOR_ACTOR)
        current = self.store.get(self._key(tenant_id, operation_id))
        item: dict[str, Any] | None = None
        for _ in range(3):
            if current is None:
                raise NotFound("operation not found")
            try:
                item = self.store.update(
                    self._key(tenant_id, operation_id), *self._erase_write(current, actor)
                )
                break
            except ConditionFailed as refused:
                current = refused.item
                if current is not None and current.get("state") == State.CLAIMED:
                    raise InvalidTransition(
                        "a claimed operation cannot be erased until it leaves claimed"
                    ) from None
        else:
            raise Unavailable("the operation kept changing while it was erased; erase it again")
        assert item is not None
        self.events("Erasures", 1)
        log.info("erased", extra={"op": self._tag(tenant_id, operation_id)})
        try:
            history.record(self.store, item, history.entry_from(None, item), reset=True)
        except Unavailable:
            log.warning(
                "history not reset yet; the publisher will",
                extra={"op": self._tag(tenant_id, operation_id)},
            )
        operation = Operation.from_item(item)
        if self._inline(tenant_id, operation_id, operation) and operation.payload_purged_at is None:
            try:
                self._purge_one(item)
            except Unavailable:
                log.warning(
                    "erased payload not deleted yet; the sweeper will",
                    extra={"op": self._tag(tenant_id, operation_id)},
                )
            else:
                operation = self.get(tenant_id, operation_id)
        return operation

    @staticmethod
    def _erased_intent(item: dict[str, Any]) -> str | None:
        """The intent an erasure keeps (JSON ``{"fence": f, "what": "erased"}``), or None when no
        intent was ever recorded: from the ``intent`` attribute, or from a checkpoint of an
        operation recorded before that attribute existed (``{"intent_fence": f, ...}``)."""
        fence = None
        for name, field in (("intent", "fence"), ("checkpoint", "intent_fence")):
            try:
                value = json.loads(item[name]) if name in item else None
            except (TypeError, ValueError):
                value = None
            if isinstance(value, dict) and isinstance(value.get(field), int):
                fence = value[field]
                break
        if fence is None:
            return None
        return json.dumps({"fence": fence, "what": ERASED_INTENT}, separators=(",", ":"))

    def _erase_write(
        self, current: dict[str, Any], actor: str | None
    ) -> tuple[str, str, dict[str, str], dict[str, Any]]:
        """The erasure's update, pinned to the state class (not claimed) and to the intent and
        checkpoint it was computed from."""
        now = self.clock()
        names = {
            "#op": "operation_id",
            "#state": "state",
            "#pat": PURGE_SK,
            **_TRANSITION_NAMES,
            **_ACTOR,
        }
        values: dict[str, Any] = {
            ":now": now,
            ":claimed": State.CLAIMED.value,
            ":tr": Transition.ERASE.value,
            ":actor": actor,
            ":one": 1,
        }
        sets = [
            "erased_at = if_not_exists(erased_at, :now)",
            "updated_at = :now",
            "#pat = :now",
            "#tr = :tr",
            "#actor = :actor",
        ]
        removes = ["reason", "resolution_note", "checkpoint"]
        kept = self._erased_intent(current)
        if kept is None:
            removes.append("intent")
        else:
            values[":intent"] = kept
            sets.append("intent = :intent")
        condition = "attribute_exists(#op) AND #state <> :claimed"
        for name in ("intent", "checkpoint"):
            if name in current:
                values[f":was_{name}"] = current[name]
                condition += f" AND {name} = :was_{name}"
            else:
                condition += f" AND attribute_not_exists({name})"
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)} ADD #seq :one"
        return update, condition, names, values

    def _purge_one(self, item: dict[str, Any]) -> bool:
        """Delete one operation's stored payload, then record that (pinned to the purge time the
        deletion acted on). Deleting twice is harmless, so a crash in between only repeats it."""
        if self.payloads is None:
            raise Unavailable("no payload store configured: cannot purge payloads")
        if item.get("payload_ref"):
            self.payloads.delete(item["payload_ref"])
        try:
            self.store.update(
                self._key(item["tenant_id"], item["operation_id"]),
                "SET payload_purged_at = :now REMOVE #ppk, #pat",
                "#pat = :pat",
                {"#ppk": PURGE_PK, "#pat": PURGE_SK},
                {":now": self.clock(), ":pat": int(item[PURGE_SK])},
                returns="NONE",
            )
        except ConditionFailed:
            return False
        return True

    def purge_payloads(self, limit: int = 100) -> PurgeResult:
        """Delete the stored payloads that are due (their operation ended more than the payload
        retention ago, or was erased). Stateless, bounded by ``limit``, safe to run twice at once:
        reads the due part of the sparse ``purge`` index, re-reads each item (the index may lag
        the table) and acts only when the item itself says its payload is due."""
        result = PurgeResult()
        for entry in self._due_entries(
            PURGE_INDEX, PURGE_PK, PURGE_SK, keys.purge_partition, limit
        ):
            result.examined += 1
            try:
                item = self.store.get(self._key(entry["tenant_id"], entry["operation_id"]))
                if (
                    item is None
                    or PURGE_PK not in item
                    or int(item.get(PURGE_SK, 2**62)) > self.clock()
                ):
                    continue  # the index was behind the table
                if self._purge_one(item):
                    result.purged += 1
            except Unavailable:
                result.failed += 1  # still due: the next run tries again
        if result.purged:
            self.events("PayloadsPurged", result.purged)
        return result

    def clear_ttls(self, limit: int = 100) -> TtlClearing:
        """One bounded step of keeping ended identities forever once this deployment's identity
        retention is forever (:attr:`identity_retention_ms` None): the TTLs set while it was a
        window would otherwise still delete them. The sweeper runs it on every run.

        A pass reads the table a page of ``limit`` items at a time (a ``Scan`` for items that
        carry a TTL: ended operations and their histories) and removes each TTL with one write
        conditional on the TTL it read (an item deleted or changed meanwhile is left alone: the
        write never creates one). Its progress (the page to continue from) is kept on one item of
        the deployment (:data:`keys.FLEET_TENANT`), written conditionally on the pass and the
        position it read, so overlapping runs never move it back. The first pass starts when a
        sweeper first sees forever; a pass that ended before :data:`RETENTION_SWITCH_GRACE_MS`
        had passed since is followed by another one, started after it (functions still running
        the old window may have set TTLs behind the first). Then it is done and costs one read
        per call.

        With a window, a finished or started clearing is forgotten (one read, and one write when
        there is something to forget), so switching to forever again clears again."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be from 1 to 1000")
        key = self._key(keys.FLEET_TENANT, keys.RETENTION_ID)
        result = TtlClearing()
        if self.identity_retention_ms is not None:
            marker = self.store.get(key, consistent=False)
            if marker is not None and "since" in marker:
                with contextlib.suppress(ConditionFailed):  # another run forgot it first
                    self.store.update(
                        key,
                        "REMOVE since, pass_started, pass_ended, done_at, #cursor",
                        "since = :since",
                        {"#cursor": "cursor"},
                        {":since": int(marker["since"])},
                        returns="NONE",
                    )
            return result
        now = self.clock()
        marker = self.store.get(key)
        if marker is None or "since" not in marker:
            try:
                marker = self.store.update(
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
                marker = self.store.update(
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
        page = self.store.scan(
            FilterExpression="attribute_exists(#ttl)",
            ProjectionExpression="tenant_id, operation_id, #ttl",
            ExpressionAttributeNames={"#ttl": TTL_ATTRIBUTE},
            Limit=limit,
            start=json.loads(cursor) if cursor else None,
        )
        result.examined = page.scanned
        for item in page.items:
            try:
                self.store.update(
                    self._key(item["tenant_id"], item["operation_id"]),
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
            values[":now"] = self.clock()
            update = "SET done_at = :now REMOVE #cursor"
            result.state = "done"
        else:
            values[":now"] = self.clock()
            update = "SET pass_ended = :now REMOVE #cursor"
            result.state = "waiting"
        condition = "pass_started = :started AND "
        if cursor is None:
            condition += "attribute_not_exists(#cursor)"
        else:
            values[":cursor"] = cursor
            condition += "#cursor = :cursor"
        with contextlib.suppress(ConditionFailed):  # an overlapping run moved on first
            self.store.update(key, update + " ADD cleared :n", condition, names, values, "NONE")
        if result.cleared:
            self.events("TtlsCleared", result.cleared)
        return result

    def erase_tenant(
        self, tenant_id: str, limit: int = 100, cursor: str | None = None
    ) -> TenantErasure:
        """One bounded step of erasing everything of one tenant. Call again with ``next_cursor``
        until it is None; ``finished`` says whether everything is gone.

        1. **Hold** (every step): one conditional write on the tenant's settings item records
           when the erasure started (``tenant_erasing``; a later step or a re-run finds it and
           keeps the first start), and the tenant's catalogue entries are marked the same way.
           From then on an admission that reads either refuses the enqueue with 409
           ``tenant_erasing`` (within :data:`~leasefence.catalogue.CACHE_MS`: what an engine
           read of the catalogue before is trusted that long).
        2. **Rows**: its operations (rows and stored payloads) and their histories, a page of
           ``limit`` per step. Claimed operations are left alone and counted as ``held`` (a claim
           may be acting on them): the tenant stays held until a later run finds them ended.
        3. **Objects**: once no row is left, any payload object still under the tenant's prefix
           (an upload whose enqueue never committed).
        4. **Tenant items**, last, and only :data:`TENANT_ERASURE_SETTLE_MS` after the hold and
           once a consistent read finds no row again: its job-type directory, catalogue entries
           and finally the settings item (the hold). An enqueue admitted just before the hold
           (whose write commits after the rows pass) was admitted under the catalogue, which is
           still there, so it kept its approval gate; its row is found here and sends the erasure
           back to step 2. The catalogue is never gone while an enqueue could still be admitted
           without seeing the hold.

        Idempotent: a re-run (with or without a cursor) resumes; a re-run after it finished holds
        the tenant again for the settle time and finds nothing. Every delete of an operation is
        conditional on it not being claimed."""
        validate_id("tenant_id", tenant_id)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidInput("limit must be from 1 to 1000")
        result = TenantErasure()
        phase, position, held_before = self._decode_erasure_cursor(cursor)
        since = self._hold_tenant(tenant_id)
        with self._registered_lock:  # its directory is about to go: register types again later
            for pair in [p for p in self._registered if p[0] == tenant_id]:
                del self._registered[pair]
        self.catalogue.forget(tenant_id)  # its catalogue goes with its rows
        if phase == "rows":
            page = self.store.query(
                # Operations and histories; the tenant's own items (directory, catalogue,
                # settings: sort keys before HISTORY_PREFIX) go last.
                KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                values={":t": tenant_id, ":first": keys.HISTORY_PREFIX},
                ConsistentRead=True,
                Limit=limit,
                start={"tenant_id": tenant_id, "operation_id": position}
                if position and position >= keys.HISTORY_PREFIX
                else None,
            )
            for item in page.items:
                self._erase_row(item, result)
            held_before = held_before or result.held > 0
            if page.last_key is not None:
                result.next_cursor = self._encode_erasure_cursor(
                    "rows", page.last_key["operation_id"], held_before
                )
                return self._erasure_step(result)
            phase, position = "objects", None
        if self._tenant_rows_left(tenant_id):
            # This pass left claimed rows alone: run it again once they ended. Otherwise rows
            # were enqueued after the pass went by (admitted just before the hold): another pass.
            if not held_before:
                result.next_cursor = self._encode_erasure_cursor("rows", "")
            return self._erasure_step(result)
        if phase == "objects":
            if self.payloads is not None:
                deleted, token = self.payloads.delete_tenant_objects(
                    tenant_id, limit=limit, token=position or None
                )
                result.payloads_deleted += deleted
                if token is not None:
                    result.next_cursor = self._encode_erasure_cursor("objects", token)
                    return self._erasure_step(result)
            phase = "tenant"
        wait = since + TENANT_ERASURE_SETTLE_MS - self.clock()
        if wait > 0:
            result.wait_ms = wait
            result.next_cursor = self._encode_erasure_cursor("tenant", "")
            return self._erasure_step(result)
        if self._tenant_rows_left(tenant_id):
            result.next_cursor = self._encode_erasure_cursor("rows", "")
            return self._erasure_step(result)
        self._erase_tenant_items(tenant_id, since, result)
        return self._erasure_step(result)

    def _erasure_step(self, result: TenantErasure) -> TenantErasure:
        self.events("TenantErasureSteps", 1)
        return result

    def _hold_tenant(self, tenant_id: str) -> int:
        """Hold the tenant for its erasure (one conditional write on its settings item: the
        first start is kept, read from the refusal on a later step) and mark its catalogue
        entries. Returns when the erasure started (ms)."""
        now = self.clock()
        key = self._key(tenant_id, keys.SETTINGS_ID)
        try:
            self.store.update(
                key,
                "SET #erasing = :now",
                "attribute_not_exists(#erasing)",
                {"#erasing": ERASING_ATTRIBUTE},
                {":now": now},
                returns="NONE",
            )
            since = now
            log.info("tenant held for erasure", extra={"tenant": keyed_hash(tenant_id)})
        except ConditionFailed as refused:
            since = int((refused.item or {})[ERASING_ATTRIBUTE])
        self.catalogue.hold(tenant_id, since)
        return since

    def _tenant_rows_left(self, tenant_id: str) -> bool:
        """Whether any operation or history of the tenant is left (one consistent read)."""
        return bool(
            self.store.query(
                KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                values={":t": tenant_id, ":first": keys.HISTORY_PREFIX},
                ConsistentRead=True,
                Limit=1,
            ).items
        )

    def _erase_tenant_items(self, tenant_id: str, since: int, result: TenantErasure) -> None:
        """The tenant's own items (job-type directory, catalogue entries, then the settings item
        that holds it), each deleted once: the erasure is finished."""
        start = None
        while True:
            page = self.store.query(
                KeyConditionExpression="tenant_id = :t AND operation_id < :first",
                values={":t": tenant_id, ":first": keys.HISTORY_PREFIX},
                ConsistentRead=True,
                start=start,
            )
            for item in page.items:
                if item["operation_id"] == keys.SETTINGS_ID:
                    continue
                try:
                    self.store.delete(
                        self._key(tenant_id, item["operation_id"]),
                        "attribute_exists(#k)",
                        {"#k": "operation_id"},
                        {},
                    )
                    result.rows_deleted += 1
                except ConditionFailed:
                    pass  # another step deleted it first
            if page.last_key is None:
                break
            start = page.last_key
        try:
            self.store.delete(
                self._key(tenant_id, keys.SETTINGS_ID),
                "#erasing = :since",
                {"#erasing": ERASING_ATTRIBUTE},
                {":since": since},
            )
            result.rows_deleted += 1
        except ConditionFailed:
            pass  # another step finished first
        result.finished = True
        self.catalogue.forget(tenant_id)
        log.info("tenant erased", extra={"tenant": keyed_hash(tenant_id)})

    def _erase_row(self, item: dict[str, Any], result: TenantErasure) -> None:
        if item.get("state") == State.CLAIMED:
            result.held += 1
            return
        key = self._key(item["tenant_id"], item["operation_id"])
        if (
            item.get("payload_inline")
            or (
                item.get("payload_ref")
                and self.payloads is not None
                and self.payloads.owns(
                    item["tenant_id"],
                    item["operation_id"],
                    item.get("payload_hash", ""),
                    item["payload_ref"],
                )
            )
        ) and "payload_purged_at" not in item:
            if self.payloads is None:
                raise Unavailable("no payload store configured: cannot erase payloads")
            self.payloads.delete(item["payload_ref"])
            result.payloads_deleted += 1
        try:
            self.store.delete(
                key,
                "attribute_not_exists(#state) OR #state <> :claimed",
                {"#state": "state"},
                {":claimed": State.CLAIMED.value},
            )
        except ConditionFailed:
            result.held += 1
            return
        result.rows_deleted += 1

    @staticmethod
    def _encode_erasure_cursor(phase: str, position: str, held: bool = False) -> str:
        """Where the next step starts: the phase, the position in it, and (rows) whether this
        pass over the rows left a claimed one alone so far."""
        raw = json.dumps({"p": phase, "at": position, **({"h": 1} if held else {})}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @staticmethod
    def _decode_erasure_cursor(cursor: str | None) -> tuple[str, str | None, bool]:
        if not cursor:
            return "rows", None, False
        try:
            raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
            phase, position, held = raw["p"], raw["at"], raw.get("h", 0)
            if (
                phase not in ("rows", "objects", "tenant")
                or not isinstance(position, str)
                or held not in (0, 1)
            ):
                raise ValueError(phase)
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as error:
            raise InvalidInput("cursor is not valid") from error
        return phase, position, bool(held)

    def oldest_due_age_ms(self, max_queries: int = 200) -> int:
        """How long the oldest due operation of any tenant and job type has waited to be claimed
        (ms; 0 when nothing is overdue). Due work of a job type no worker serves (a typo, a
        retired type, a fleet that is down) shows here instead of waiting silently.

        Reads the tenants' job-type directories and one small page per (tenant, type, shard), at
        most ``max_queries`` requests per call (directory pages and items included). A fleet
        larger than that is covered over several calls: each one resumes where the last one
        stopped (a cursor in one small item, :data:`keys.OLDEST_DUE_CURSOR_ID`) and starts
        again from the first tenant after the last, so every tenant is visited once per *cycle*.
        A call that reads a whole cycle itself (from the first tenant to the last: a small
        fleet, or a large budget) reports exactly what it read. Any other call reports its own
        reads together with the rest of the cycle in progress and the last complete cycle, so
        every tenant is always in the figure (at most one cycle stale: work claimed meanwhile
        leaves it once a cycle that no longer finds it completes). Shadow tenants (``shadow:``)
        are skipped: their queued operations record what an existing consumer did and are never
        dispatched, so they are not the fleet's overdue work.

        A claimed entry whose lease heartbeats extended is skipped, not counted (and re-filed at
        its lease when such entries fill the page, as claims do). Overlapping calls are harmless:
        the cursor is written only if no other call wrote it since it was read."""
        now = self.clock()
        key = self._key(keys.FLEET_TENANT, keys.OLDEST_DUE_CURSOR_ID)
        saved = self.store.get(key) or {}
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
                page = self.store.query(
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
                            for job_type in self.job_types(tenant_id)
                            for shard in range(self.spec.due_shards)
                        ]
                        done = skip
                        while done < len(partitions) and budget > 0:
                            budget -= 1
                            job_type, shard = partitions[done]
                            since = self._oldest_due_since(tenant_id, job_type, shard, now)
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
        self._save_fleet_cursor(
            key,
            saved,
            {"cursor": cursor, "skip": skip, "cycle_since": cycle_since, "last_since": last_since},
            now,
        )
        return 0 if since is None else max(0, now - since)

    def _oldest_due_since(self, tenant_id: str, job_type: str, shard: int, now: int) -> int | None:
        """Since when the oldest due entry of one due partition has been due (None: nothing)."""
        page = self.store.query(
            IndexName=DUE_INDEX,
            KeyConditionExpression="#pk = :pk AND #due <= :now",
            ExpressionAttributeNames={"#pk": DUE_PK, "#due": DUE_SK},
            values={":pk": keys.due_partition(tenant_id, shard, job_type), ":now": now},
            Limit=3,
        )
        held = []
        for entry in page.items:
            if entry.get("state") == State.CLAIMED:
                item = self._unless_held(entry, now)
                if item is None:
                    held.append(entry)
                    continue
                if item.get("state") != State.CLAIMED:
                    continue
                return int(item.get("lease_expires_at", now))
            return int(entry[DUE_SK])
        if page.last_key is not None:
            for entry in held:
                self._refile_held(entry, now)
        return None

    def _save_fleet_cursor(
        self, key: dict[str, str], saved: dict[str, Any], updates: dict[str, Any], now: int
    ) -> None:
        """One conditional write: only if nobody wrote the item since ``saved`` was read (an
        overlapping call that wrote first wins; this call's progress is simply not kept)."""
        names = {"#v": "ver", "#at": "updated_at"}
        values: dict[str, Any] = {":v1": int(saved.get("ver", 0)) + 1, ":now": now}
        sets, removes = ["#v = :v1", "#at = :now"], []
        for i, (name, value) in enumerate(updates.items()):
            names[f"#a{i}"] = name
            if value is None:
                removes.append(f"#a{i}")
            else:
                values[f":a{i}"] = value
                sets.append(f"#a{i} = :a{i}")
        if "ver" in saved:
            condition = "#v = :v"
            values[":v"] = int(saved["ver"])
        else:
            condition = "attribute_not_exists(#v)"
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        with contextlib.suppress(ConditionFailed):
            self.store.update(key, expression, condition, names, values, returns="NONE")

    # ------------------------------------------------------------------ reads

    def history(
        self, tenant_id: str, operation_id: str, limit: int = 50, cursor: str | None = None
    ) -> history.HistoryPage:
        """One page of the operation's history, oldest first (:mod:`leasefence.history`).
        :class:`NotFound` when the operation does not exist (for this tenant); an empty page when
        nothing was recorded for it yet (history trails the operation by the stream's lag)."""
        operation = self.get(tenant_id, operation_id)
        return history.read(
            self.store, tenant_id, operation_id, operation.created_at, limit=limit, cursor=cursor
        )

    def get(self, tenant_id: str, operation_id: str) -> Operation:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        item = self.store.get(self._key(tenant_id, operation_id))
        if item is None:
            raise NotFound("operation not found")
        return Operation.from_item(item)

    def list(
        self,
        tenant_id: str,
        state: State | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
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
            # From the first possible operation id: the tenant's directory item sorts before it.
            "KeyConditionExpression": "tenant_id = :t AND operation_id >= :first",
            "values": {":t": tenant_id, ":first": keys.FIRST_OPERATION_ID},
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
        return cursors.encode_operation_cursor(key["operation_id"])

    @staticmethod
    def _decode_cursor(cursor: str, tenant_id: str) -> dict[str, str] | None:
        # Any position the cursor's pattern admits; one before the first possible id: the start.
        position = cursors.decode_operation_cursor(cursor)
        if position < keys.FIRST_OPERATION_ID:
            return None
        # The cursor names only a position; the tenant always comes from the caller.
        return {"tenant_id": tenant_id, "operation_id": position}
