"""Admission: an operation durably recorded, bound to its payload hash, in one conditional put.

The catalogue decides what an enqueue runs under (:meth:`~leasefence.catalogue.Catalogue.admit`);
a refusal of an identity already enqueued with this payload is answered as the replay it is.
Before the first enqueue of a job type, the type goes in the tenant's bounded directory (what
unfiltered claims and the fleet signals read).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

from leasefence import history, keys
from leasefence.catalogue import Admission
from leasefence.engine import _expr as x
from leasefence.engine import _payload_items as payload_items
from leasefence.engine._context import EngineContext
from leasefence.errors import (
    IdentityRequired,
    InlinePayloadRequired,
    InvalidInput,
    PayloadConflict,
    TooManyJobTypes,
    Unavailable,
)
from leasefence.limits import (
    MAX_ATTEMPTS,
    MAX_ITEM_PAYLOAD_BYTES,
    MAX_PACKED_PAYLOAD_BYTES,
    MAX_PAYLOAD_REF_LENGTH,
    MEMORY_ENTRIES,
)
from leasefence.metrics import Metric
from leasefence.model import EnqueueResult, Operation, State, TargetClass, Transition
from leasefence.payloads import fits_packed, packed_form
from leasefence.schema import (
    DUE_HOME,
    DUE_PK,
    DUE_SK,
    LAYOUT,
    LAYOUT_ATTRIBUTE,
    PARKED_PK,
    PARKED_SK,
    PURGE_PK,
    SWEEP_PK,
    SWEEP_SK,
    OperationItem,
)
from leasefence.store import ConditionFailed
from leasefence.tracecontext import TraceContext
from leasefence.validation import (
    is_int,
    validate_actor,
    validate_approval_valid_ms,
    validate_hash,
    validate_id,
    validate_text,
)

log = logging.getLogger("leasefence.engine")


class Enqueuer:
    """Enqueues, and the job-type directory each one registers its type in (once per engine)."""

    def __init__(self, ctx: EngineContext, max_job_types: int) -> None:
        self.ctx = ctx
        #: How many job types a tenant's directory holds at most (:meth:`register_job_type`).
        self.max_job_types = max_job_types
        #: (tenant, job type) pairs this engine already put in the tenant's directory.
        self._registered: dict[tuple[str, str], None] = {}
        self._registered_lock = threading.Lock()

    def enqueue(
        self,
        tenant_id: str,
        operation_id: str,
        job_type: str,
        payload_hash: str,
        payload_ref: str | None,
        max_attempts: int | None,
        target_class: TargetClass | str | None,
        payload_inline: bool,
        actor: str | None,
        admission: Admission | None,
        approval_required: bool,
        approval_valid_ms: int | None,
        payload_json: bytes | None = None,
        trace_context: TraceContext | None = None,
    ) -> EnqueueResult:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("job_type", job_type)
        validate_hash(payload_hash)
        validate_text("payload_ref", payload_ref, MAX_PAYLOAD_REF_LENGTH, required=False)
        kept = _kept_payload(payload_json, payload_hash, payload_ref, self.ctx.pack_payloads)
        if trace_context is not None:  # bounded, as the item's budget counts it
            trace_context = TraceContext.checked(
                trace_context.traceparent, trace_context.tracestate
            )
        payload_inline = payload_inline or kept is not None
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
        if not is_int(max_attempts) or not 1 <= max_attempts <= MAX_ATTEMPTS:
            raise InvalidInput(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS}")
        if target is TargetClass.D and max_attempts != 1:
            raise InvalidInput("target_class D allows exactly one attempt (max_attempts 1)")

        if payload_inline and payload_ref is None and kept is None:
            raise InvalidInput("an inline payload needs its payload_ref or its payload_json")
        actor = validate_actor(actor, None)
        if not isinstance(approval_required, bool):
            raise InvalidInput("approval_required must be a boolean")
        valid_ms = validate_approval_valid_ms(approval_valid_ms)
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
            return self.replay_or_raise(tenant_id, operation_id, payload_hash, refusal)
        self.register_job_type(tenant_id, job_type)
        ctx = self.ctx
        now = ctx.clock()
        due_home = ctx.due_pk(tenant_id, operation_id, job_type)
        # Its write shard; in a deployment that changed its write count, the keys the other
        # counts give it must hold nothing (checked in the put's own transaction).
        key, *elsewhere = ctx.candidates(tenant_id, operation_id, record=True)
        partition = key["tenant_id"]
        item: OperationItem = {
            "tenant_id": partition,
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
            if admission.lease_default_ms is not None:
                item["lease_default_ms"] = admission.lease_default_ms
            if admission.lease_max_ms is not None:
                item["lease_max_ms"] = admission.lease_max_ms
        if approval_required:
            # In no claim index (no due_pk: no claimer can see it); its deadline is in the
            # sweeper's index, so an approval not given in time ends it without a scan.
            del item[DUE_PK], item[DUE_SK]
            item.update(
                {
                    "state": State.AWAITING_APPROVAL.value,
                    "approval_expires_at": now + valid_ms,
                    SWEEP_PK: ctx.sweep_pk(tenant_id, operation_id),
                    SWEEP_SK: now + valid_ms,
                    "enqueued_by": actor,
                }
            )
        if payload_inline:
            item["payload_inline"] = True
            if kept is None:  # in S3: the purge deletes it (a payload item: DynamoDB's TTL)
                item[PURGE_PK] = ctx.purge_pk(tenant_id, operation_id)
        if trace_context is not None:
            item.update(trace_context.item_fields())  # type: ignore[typeddict-item]
        item[LAYOUT_ATTRIBUTE] = LAYOUT
        fresh = True
        if kept is not None:
            # Kept in a payload item of its own, written first (see _payload_items): the
            # operation item's put below decides alone whether this is new, a replay or a
            # conflict; a refused put drops the payload item unless the operation refers to it.
            fresh = payload_items.write(ctx, partition, operation_id, payload_hash, *kept)
        history.start(item, now, actor)  # the history starts in the item, with this entry
        try:
            with ctx.spread.throttled(tenant_id, job_type):  # throttled: spread the next ones wider
                ctx.store.put_new_where_absent(item, x.IS_NEW, x.OPERATION_ID, elsewhere)
        except ConditionFailed as refused:
            existing = refused.operation
            if existing is None:  # refused for an item gone by the store's read-back: retry
                # (a payload item this enqueue wrote stays: the retry's operation refers to it)
                raise Unavailable("the operation changed while this enqueue ran, retry") from None
            if kept is not None and (
                existing["tenant_id"] != partition
                or not payload_items.keeps(existing, payload_hash, now)
            ):
                payload_items.drop(ctx, partition, operation_id, payload_hash)
            if existing["payload_hash"] == payload_hash:
                ctx.count(Metric.REPLAYS)
                return EnqueueResult(Operation.from_item(existing), created=False)
            ctx.count(Metric.PAYLOAD_CONFLICTS)
            raise PayloadConflict("operation_id already exists with a different payload") from None
        if not fresh:  # it found the same bytes there: kept without a TTL while it is live
            payload_items.hold(ctx, item)
        log.info(
            "enqueued",
            extra={"op": ctx.tag(tenant_id, operation_id), "target_class": target.value},
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
        try:
            return self.ctx.catalogue.admit(
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
            return self.replay_or_raise(tenant_id, operation_id, payload_hash, refusal)

    def replay_or_raise(
        self, tenant_id: str, operation_id: str, payload_hash: str, refusal: Exception
    ) -> EnqueueResult:
        """An enqueue refused before any write: the replay it is, when this identity was already
        enqueued with this payload hash (one strongly consistent read), else the refusal."""
        existing = self.ctx.find(tenant_id, operation_id)
        if existing is None or existing.get("payload_hash") != payload_hash:
            raise refusal
        self.ctx.count(Metric.REPLAYS)
        return EnqueueResult(Operation.from_item(existing), created=False)

    def register_job_type(self, tenant_id: str, job_type: str) -> None:
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
        may_list_it = f"{x.DIRECTORY_NEW} OR {x.TYPE_LISTED} OR {x.DIRECTORY_HAS_ROOM}"
        try:
            listed = self.ctx.store.add_to_set(
                keys.tenant_key(tenant_id, keys.DIRECTORY_ID),
                "job_types",
                [job_type],
                {PARKED_PK: keys.DIRECTORY_PARTITION, PARKED_SK: 0},
                condition=may_list_it,
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
        if job_type not in listed:
            # A type new to the tenant has no due entry in any shard: its claimers start at the
            # idle spread (one shard) instead of every shard (a pair without a hint item may have
            # entries from before the spread: leasefence.engine._spread).
            self.ctx.spread.start(tenant_id, job_type)
        with self._registered_lock:
            self._registered[pair] = None
            while len(self._registered) > MEMORY_ENTRIES:
                self._registered.pop(next(iter(self._registered)))

    def forget_tenant(self, tenant_id: str) -> None:
        """Its directory is about to go (a tenant erasure): register its types again later."""
        with self._registered_lock:
            for pair in [p for p in self._registered if p[0] == tenant_id]:
                del self._registered[pair]


def _kept_payload(
    body: bytes | None, payload_hash: str, payload_ref: str | None, packing: bool
) -> tuple[str, bytes | None] | None:
    """A payload to keep in a payload item (``payload_json``) as its text and what the item keeps
    instead when packed (:func:`~leasefence.payloads.packed_form`; None: the text), checked:
    canonical JSON that the item keeps in at most :data:`MAX_ITEM_PAYLOAD_BYTES`, that hashes
    to ``payload_hash``, and no ``payload_ref`` beside it. None when there is none."""
    if body is None:
        return None
    if payload_ref is not None:
        raise InvalidInput("a payload kept in the item has no payload_ref")
    packed = packed_form(body, packing) if isinstance(body, bytes) else None
    if not isinstance(body, bytes) or not fits_packed(body, packed):
        raise InvalidInput(
            f"payload_json must be canonical JSON of at most {MAX_ITEM_PAYLOAD_BYTES} bytes"
            + (f", or packing to that from at most {MAX_PACKED_PAYLOAD_BYTES}" if packing else "")
        )
    if "sha256:" + hashlib.sha256(body).hexdigest() != payload_hash:
        raise InvalidInput("payload_json does not hash to payload_hash")
    try:
        return body.decode("utf-8"), packed
    except UnicodeDecodeError:
        raise InvalidInput("payload_json must be UTF-8 canonical JSON") from None
