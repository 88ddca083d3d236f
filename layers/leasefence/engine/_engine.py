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

:class:`Engine` is a facade: each public method is one call into the lifecycle phase that owns
it (admission :mod:`._enqueue`, claims :mod:`._claim`, fenced commands :mod:`._fenced`, the
approval gate and operator decisions :mod:`._gate`, housekeeping :mod:`._housekeeping`, payloads
and erasure :mod:`._erasure`, reads :mod:`._reads`). The phases share one
:class:`~._context.EngineContext`; their guards are built from named fragments (:mod:`._expr`)
and their decisions on refused writes are pure functions (:mod:`._rules`).

Times are integer milliseconds from the injected clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, cast

from leasefence import history, listing, otel
from leasefence.catalogue import Admission, Catalogue
from leasefence.clock import Clock, system_clock
from leasefence.engine._claim import Claimer
from leasefence.engine._context import EngineContext, Shared
from leasefence.engine._enqueue import Enqueuer
from leasefence.engine._erasure import Eraser
from leasefence.engine._fenced import FencedCommands
from leasefence.engine._gate import ApprovalGate
from leasefence.engine._housekeeping import Housekeeper
from leasefence.engine._reads import Reads
from leasefence.limits import (
    DEFAULT_CANDIDATE_PAGE,
    DEFAULT_CONTENDED_PAGE,
    DEFAULT_IDENTITY_RETENTION_MS,
    DEFAULT_PAYLOAD_RETENTION_MS,
    FENCE_EPOCH_SPAN,
    MAX_FENCE_EPOCH,
    MAX_JOB_TYPES,
    SPREAD_SHARD_RATE,
)
from leasefence.metrics import MetricSink, no_metrics
from leasefence.model import (
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
    TtlClearing,
)
from leasefence.payloads import CanonicalPayload, fits_in_item
from leasefence.schema import OperationItem, TableSpec
from leasefence.store import Store
from leasefence.tracecontext import TraceContext
from leasefence.validation import MISSING, is_int

#: Called with (metric name, value) for every domain event worth counting.
EventSink = MetricSink


class Engine:
    """Lease-Plus-Fence over one DynamoDB table (see :mod:`leasefence.schema`)."""

    store: Shared[Store] = Shared("_ctx", "store")
    spec: Shared[TableSpec] = Shared("_ctx", "spec")
    clock: Shared[Clock] = Shared("_ctx", "clock")
    rng: Shared[random.Random] = Shared("_ctx", "rng")
    events: Shared[MetricSink] = Shared("_ctx", "metrics")
    identity_retention_ms: Shared[int | None] = Shared("_ctx", "identity_retention_ms")
    payload_retention_ms: Shared[int] = Shared("_ctx", "payload_retention_ms")
    #: Where inline payloads live (a :class:`~leasefence.payloads.PayloadStore`): needed to
    #: read, purge and erase them. None: this engine only handles operations by reference.
    payloads: Shared[Any] = Shared("_ctx", "payloads")
    #: The tenants' job-type catalogues (entries cached briefly: see :mod:`leasefence.catalogue`).
    catalogue: Shared[Catalogue] = Shared("_ctx", "catalogue")
    #: Every fence this engine hands out is above this (see :data:`FENCE_EPOCH_SPAN`).
    fence_floor: Shared[int] = Shared("_ctx", "fence_floor")
    candidate_page: Shared[int] = Shared("_claimer", "candidate_page")
    contended_page: Shared[int] = Shared("_claimer", "contended_page")
    #: How many job types a tenant's directory holds at most.
    max_job_types: Shared[int] = Shared("_enqueuer", "max_job_types")

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
        pack_payloads: bool = True,
        spread_shard_rate: float = SPREAD_SHARD_RATE,
    ) -> None:
        if not spread_shard_rate > 0:
            raise ValueError("spread_shard_rate must be above 0")
        if not is_int(fence_epoch) or not 0 <= fence_epoch <= MAX_FENCE_EPOCH:
            raise ValueError(f"fence_epoch must be an integer from 0 to {MAX_FENCE_EPOCH}")
        if payload_retention_ms < 0 or (
            identity_retention_ms is not None and identity_retention_ms < payload_retention_ms
        ):
            raise ValueError("payload retention must be from 0 to the identity retention")
        spec = spec if spec is not None else TableSpec()
        store = Store(spec.table_name, client=client, client_factory=client_factory)
        # An update refused for the item's size compacts the history and is sent again.
        store.make_room = partial(history.make_room_at, store)
        self._ctx = EngineContext(
            store=store,
            spec=spec,
            clock=clock,
            rng=rng if rng is not None else random.Random(),
            metrics=events if events is not None else no_metrics,
            identity_retention_ms=identity_retention_ms,
            payload_retention_ms=payload_retention_ms,
            payloads=payloads,
            catalogue=Catalogue(store, clock),
            fence_floor=fence_epoch * FENCE_EPOCH_SPAN,
            pack_payloads=pack_payloads,
            spread_shard_rate=spread_shard_rate,
        )
        self._reads = Reads(self._ctx)
        self._enqueuer = Enqueuer(self._ctx, max_job_types)
        self._claimer = Claimer(self._ctx, self._reads, candidate_page, contended_page)
        self._fenced = FencedCommands(self._ctx)
        self._gate = ApprovalGate(self._ctx)
        self._housekeeper = Housekeeper(self._ctx, self._claimer, self._reads)
        self._eraser = Eraser(self._ctx, self._reads, self._enqueuer)

    # Parts of the single-module engine that its tools and tests reached for.
    def _register_job_type(self, tenant_id: str, job_type: str) -> None:
        self._enqueuer.register_job_type(tenant_id, job_type)

    def _page_for(self, tenant_id: str) -> int:
        return self._claimer.page_for(tenant_id)

    def _expire_approval(self, entry: dict[str, Any], result: SweepResult) -> None:
        self._housekeeper.expire_approval(cast("OperationItem", entry), result)

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
        payload_json: bytes | None = None,
        trace_context: TraceContext | None = None,
    ) -> EnqueueResult:
        """Durably record an operation bound to its payload hash: one conditional put.

        Same id and hash again: a replay (nothing new is scheduled). Same id, other hash:
        :class:`PayloadConflict` (nothing is changed). Both hold for as long as the identity is
        retained (:attr:`identity_retention_ms` after the operation ended), whatever was purged
        or erased meanwhile. ``payload_inline``: ``payload_ref`` names an object that
        :attr:`payloads` stored for this identity (set only by the API's inline path).
        ``payload_json``: an inline payload kept in DynamoDB instead (its canonical JSON, hashing
        to ``payload_hash``, that :meth:`keeps_in_item` accepts: at most
        :data:`~leasefence.limits.MAX_ITEM_PAYLOAD_BYTES`, or packing to that; no
        ``payload_ref``), in a payload item written before the operation's put and never changed
        after.
        ``actor``: who enqueued it (the API passes the token's subject), recorded with the
        transition.

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

        ``trace_context``: the producer's W3C trace context (:mod:`leasefence.tracecontext`:
        validated, bounded; the API passes the request's ``traceparent`` header, an in-process
        producer :func:`leasefence.otel.current_trace_context`), kept with the operation and
        handed on by every claim (:mod:`leasefence.otel`). A replay keeps the first one.
        """
        return self._enqueuer.enqueue(
            tenant_id,
            operation_id,
            job_type,
            payload_hash,
            payload_ref,
            max_attempts,
            target_class,
            payload_inline,
            actor,
            admission,
            approval_required,
            approval_valid_ms,
            payload_json,
            trace_context,
        )

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
        return self._enqueuer.admit(
            tenant_id,
            operation_id,
            job_type,
            payload_hash,
            target_class,
            max_attempts,
            payload,
            payload_given,
            inline,
            actor,
        )

    def job_types(self, tenant_id: str) -> list[str]:
        """The job types this tenant ever enqueued (its directory), sorted."""
        return self._reads.job_types(tenant_id)

    def claim_next(
        self,
        tenant_id: str,
        worker_id: str,
        lease_ms: int | None = None,
        job_types: Iterable[str] | None = None,
        claim_token: str | None = None,
        after: str | None = None,
    ) -> Claim | None:
        """Claim one due operation of this tenant (queued and available, or an expired lease).

        Reads only this tenant's ``due`` partitions of the job types asked for (all the types in
        the tenant's directory when ``job_types`` is None: as this engine read it within
        :data:`~leasefence.limits.DIRECTORY_CACHE_MS`, and read again before answering None), a
        page at a time, partitions in random order; tries candidates in random order and moves
        on when another claimer wins one. Due work of other job types is never read, so it cannot
        hide the work asked for. Returns None when nothing is claimable.

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
        and the token: :func:`keys.claim_marker_id`); a resend finds the marker (a first send
        does not read it: one that is there refuses the first send's conditional write of it)
        and, while the claim it names holds, answers that same claim (:meth:`_confirm_claim`),
        spending no attempt. The marker is written before the claim, so a claim that committed is
        always named by it, even when the engine never learned that it committed. One token makes at
        most one claim, also when resent while the first request still runs: the marker is
        changed by conditional writes only (:mod:`leasefence.engine._marker`), and a resend that
        cannot tell whether the first request's write will still commit raises
        :class:`~leasefence.errors.Unavailable` ("in progress"), never claims another.

        ``after`` (with a ``claim_token``): the operation this worker closes in the same request
        (:func:`closing_round`). The marker is kept in that operation's payload item instead of
        an item of its own, written together with the payload's expiry that the close sets
        anyway: one write unit less. Send the same ``after`` with every resend of the token (it
        says where the marker is). :class:`~leasefence.errors.NotFound` when no operation of the
        tenant has that id.
        """
        with otel.claim_span() as continued:  # a span per claim granted (OpenTelemetry)
            return continued(
                self._claimer.claim_next(
                    tenant_id, worker_id, lease_ms, job_types, claim_token, after
                )
            )

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
        with otel.claim_span() as continued:
            return continued(
                self._claimer.claim(
                    tenant_id, operation_id, worker_id, lease_ms, job_types, claim_token
                )
            )

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
        with otel.claim_span() as continued:
            return continued(self._claimer.claim_seen(item, worker_id, lease_ms, job_types))

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
        return self._fenced.heartbeat(
            tenant_id, operation_id, fence, worker_id, lease_ms, checkpoint, intent
        )

    def complete(
        self, tenant_id: str, operation_id: str, fence: int, outcome_code: str
    ) -> Operation:
        """``claimed`` -> ``succeeded`` for the holding fence. A retry of the same completion by
        the same fence (after a lost response) is recognized as done."""
        return self._fenced.complete(tenant_id, operation_id, fence, outcome_code)

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
        return self._fenced.complete_with(tenant_id, operation_id, fence, outcome_code, writes)

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
        return self._fenced.fail(tenant_id, operation_id, fence, retryable, reason, retry_after_ms)

    def park_unknown(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The outcome is ambiguous: park for reconciliation; nothing retries it automatically."""
        return self._fenced.park(tenant_id, operation_id, fence, reason, State.UNKNOWN)

    def quarantine(self, tenant_id: str, operation_id: str, fence: int, reason: str) -> Operation:
        """The input cannot be interpreted: park it for an operator."""
        return self._fenced.park(tenant_id, operation_id, fence, reason, State.QUARANTINED)

    def sweep(self, limit: int = 100) -> SweepResult:
        """Park expired final-attempt claims as ``unknown``, and end operations whose approval
        was not given in time (``failed_terminal``, outcome ``approval_expired``).

        Stateless, bounded by ``limit`` and lock-free: it reads only the due part of the
        ``sweep`` index, and each park is a write conditional on the fence, the state and the
        expired lease, so two sweepers (or a sweeper racing a late heartbeat) cannot both act.
        """
        return self._housekeeper.sweep(limit)

    def resolve(
        self,
        tenant_id: str,
        operation_id: str,
        resolution: Resolution | str,
        note: str = "",
        actor: str | None = None,
        request_token: str | None = None,
        expected_state: State | str | None = None,
        expected_fence: int | None = None,
    ) -> Operation:
        """Operator decision for a parked operation (``unknown`` or ``quarantined`` only).

        ``expected_state``/``expected_fence``: the state and fence the operator saw (a bulk
        triage's items), part of the write's condition; an operation that moved on since is
        :class:`~leasefence.errors.StaleFence` (409 ``stale_fence``), nothing written.

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
        return self._gate.resolve(
            tenant_id,
            operation_id,
            resolution,
            note,
            actor,
            request_token,
            (None if expected_state is None else State(expected_state), expected_fence),
        )

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
        return self._gate.approve(tenant_id, operation_id, payload_hash, actor)

    def reject(self, tenant_id: str, operation_id: str, actor: str, note: str = "") -> Operation:
        """``awaiting_approval`` -> ``failed_terminal`` with outcome ``rejected``: one conditional
        write (the approver's ``note`` is kept as the reason). Rejecting a rejected operation again
        is a replay."""
        return self._gate.reject(tenant_id, operation_id, actor, note)

    def cancel(
        self,
        tenant_id: str,
        operation_id: str,
        actor: str | None = None,
        expected_state: State | str | None = None,
    ) -> Operation:
        """``queued`` or ``awaiting_approval`` -> ``cancelled`` (final: retention, payload purge
        and index removal as every final state), only while no worker ever claimed it: one write
        conditional on the state and on no attempt made (``attempts`` and ``fence`` still 0), so
        a claim racing it either wins first (the cancel is refused) or finds it gone.

        An operation queued again after an attempt (a retryable failure, a takeover's retry, an
        operator's requeue from ``unknown``) may have had its side effect: cancelling it would
        skip the reconcile its next claim must make, so it is :class:`AlreadyAttempted` (409
        ``already_attempted``); a claimed or ended operation is :class:`InvalidTransition`.
        Cancelling a cancelled one again is a replay. Each refusal is read from the refused
        write's own answer. ``expected_state``: the state the operator saw (a bulk triage's
        items), part of the condition; one that moved on since is :class:`StaleFence`."""
        return self._gate.cancel(
            tenant_id,
            operation_id,
            actor,
            None if expected_state is None else State(expected_state),
        )

    def oldest_parked_age_ms(self, state: State | str = State.UNKNOWN) -> int:
        """How long the oldest operation in ``state`` (unknown or quarantined) has waited, in ms
        (0 when none waits). One small query per shard of the sparse ``parked`` index (oldest
        first), across tenants: for the sweeper's on-call metric, never exposed per tenant.
        Shadow tenants' operations are skipped (they are not the fleet's): a shard's pages are
        read on past them, at most :data:`PARKED_SCAN_PAGES` pages of 10."""
        return self._housekeeper.oldest_parked_age_ms(state)

    def keeps_in_item(self, payload: CanonicalPayload) -> bool:
        """Whether :meth:`enqueue` keeps this inline payload in DynamoDB (``payload_json``: a
        payload item, text or packed as this engine packs) rather than needing it in S3."""
        return fits_in_item(payload, packing=self._ctx.pack_payloads)

    def payload(self, operation: Operation | Claim) -> bytes:
        """The inline payload of an operation (or of a claim), checked against its hash: from
        the item itself when it keeps it (``payload_json``: no request), else its S3 object.

        :class:`NotFound` when the operation has no inline payload (its ``payload_ref`` is the
        caller's own); :class:`PayloadMissing` when it was purged, erased or its object is gone:
        never None, so no handler runs without its input. A store that refuses access raises
        :class:`~leasefence.errors.PayloadAccessDenied` (:class:`Unavailable`): a fault to fix,
        not a missing payload.
        """
        return self._eraser.payload(operation)

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
        return self._eraser.erase(tenant_id, operation_id, actor)

    def purge_payloads(self, limit: int = 100) -> PurgeResult:
        """Delete the stored payloads that are due (their operation ended more than the payload
        retention ago, or was erased). Stateless, bounded by ``limit``, safe to run twice at once:
        reads the due part of the sparse ``purge`` index, re-reads each item (the index may lag
        the table) and acts only when the item itself says its payload is due."""
        return self._housekeeper.purge_payloads(limit)

    def clear_ttls(self, limit: int = 100) -> TtlClearing:
        """One bounded step of keeping ended identities forever once this deployment's identity
        retention is forever (:attr:`identity_retention_ms` None): the TTLs set while it was a
        window would otherwise still delete them. The sweeper runs it on every run.

        A pass reads the table a page of ``limit`` items at a time (a ``Scan`` for items that
        carry a TTL: ended operations and their histories; a claim-next marker keeps its own day's
        TTL, being no identity) and removes each TTL with one write
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
        return self._housekeeper.clear_ttls(limit)

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
        return self._eraser.erase_tenant(tenant_id, limit, cursor)

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
        return self._housekeeper.oldest_due_age_ms(max_queries)

    def history(
        self, tenant_id: str, operation_id: str, limit: int = 50, cursor: str | None = None
    ) -> history.HistoryPage:
        """One page of the operation's history, oldest first (:mod:`leasefence.history`).
        :class:`NotFound` when the operation does not exist (for this tenant). Each transition
        wrote its own entry into the operation's item: nothing to wait for."""
        return self._reads.history(tenant_id, operation_id, limit, cursor)

    def get(self, tenant_id: str, operation_id: str) -> Operation:
        return self._reads.get(tenant_id, operation_id)

    def stored_item(self, tenant_id: str, operation_id: str) -> OperationItem | None:
        """The operation's item as stored (None: none), in whichever of the tenant's write
        shards it lives: for tools that check the table (the torture run), not for callers."""
        item: OperationItem | None = self._ctx.find(tenant_id, operation_id)
        return item

    def partitions(self, tenant_id: str) -> list[str]:
        """The base table's partition keys of the tenant's write shards, the bare tenant id first
        (what a listing, a count or an erasure reads): for tools that check the table."""
        return self._ctx.partitions(tenant_id)

    def list(
        self,
        tenant_id: str,
        state: State | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        filters: listing.Filters | None = None,
    ) -> Page:
        """One tenant's operations (write shard by write shard, each in id order), optionally in
        one state and matching ``filters`` (:mod:`leasefence.listing`). An operator path: it reads
        the tenant's partitions (the filters
        are applied after the read, so a page may be short and still carry a cursor)."""
        return self._reads.list(tenant_id, state, limit, cursor, filters)

    def state_counts(
        self,
        tenant_id: str,
        filters: listing.Filters | None = None,
        limit: int = listing.DEFAULT_COUNT_ITEMS,
    ) -> listing.StateCounts:
        """How many of the tenant's operations (matching ``filters``, whatever their state) are in
        each state, over at most ``limit`` of them (:func:`leasefence.listing.count_states`)."""
        return self._reads.state_counts(tenant_id, filters, limit)
