"""Fenced commands: what only the holder of a claim may do, each one write conditional on the
state and the fence (heartbeat, complete, fail, park as unknown, quarantine).

A refusal is decoded from the refused write's own ``ALL_OLD`` item (:mod:`._rules`): the same
fence's retry after a lost answer is a replay, a requeue with no attempt left becomes a terminal
failure, anything else is a stale fence (or a missing operation).
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

from leasefence import history
from leasefence.engine import _expr as x
from leasefence.engine import _payload_items as payload_items
from leasefence.engine import _rules as rules
from leasefence.engine._context import EngineContext, Key
from leasefence.errors import InvalidInput, StaleFence, TargetRefused
from leasefence.limits import (
    MAX_BUSINESS_WRITES,
    MAX_ID_LENGTH,
    MAX_REASON_LENGTH,
    MAX_RETRY_AFTER_MS,
)
from leasefence.metrics import Metric
from leasefence.model import Operation, State
from leasefence.schema import (
    DUE_HOME,
    DUE_PK,
    DUE_SK,
    PARKED_PK,
    PARKED_SK,
    SWEEP_PK,
    SWEEP_SK,
    OperationItem,
)
from leasefence.store import ConditionFailed, to_item
from leasefence.validation import (
    MISSING,
    encode_checkpoint,
    is_int,
    validate_fence,
    validate_id,
    validate_lease,
    validate_text,
)

log = logging.getLogger("leasefence.engine")


class NoAttemptsLeft(Exception):
    """A retryable failure by the holding fence, refused as a requeue because no attempt is left."""


class FencedCommands:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def heartbeat(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        worker_id: str,
        lease_ms: int | None,
        checkpoint: Any,
        intent: str | None,
    ) -> int:
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        validate_id("worker_id", worker_id)
        fence = validate_fence(fence)
        now = self.ctx.clock()
        expr = x.Expr(x.STATE_FENCE).value(
            {":claimed": State.CLAIMED.value, ":f": fence, ":w": worker_id, ":now": now}
        )
        # Not conditional on the lease clock: a holder whose lease lapsed may still renew until
        # someone claims again or the sweeper parks the operation.
        condition = f"{x.IS_CLAIMED} AND {x.FENCE_HELD} AND {x.HELD_BY_WORKER}"
        if lease_ms is None:
            expr.set("lease_expires_at = :now + lease_ms", "updated_at = :now")
        else:
            expr.values[":lease"] = validate_lease(lease_ms)
            expr.set("lease_expires_at = :now + :lease", "lease_ms = :lease", "updated_at = :now")
            condition += f" AND {x.LEASE_ALLOWED}"
        if checkpoint is not MISSING:
            expr.values[":cp"] = encode_checkpoint(checkpoint)
            expr.set("checkpoint = :cp")
        if intent is not None:
            validate_text("intent", intent, MAX_ID_LENGTH)
            expr.values[":intent"] = json.dumps(
                {"fence": fence, "what": intent}, separators=(",", ":")
            )
            expr.set("intent = :intent")
        try:
            item = self.ctx.at_operation(
                tenant_id,
                operation_id,
                lambda key: self.ctx.store.update_operation(key, *expr.write(condition)),
            )
        except ConditionFailed as refused:
            current = refused.operation
            if lease_ms is not None and rules.lease_over_maximum(
                current, fence, worker_id, lease_ms
            ):
                assert current is not None
                raise rules.lease_too_long(current) from None
            raise self.refusal(current) from None
        assert item is not None
        return int(item["lease_expires_at"])

    def complete(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        outcome_code: str,
        writes: list[dict[str, Any]] | None = None,
    ) -> Operation:
        validate_text("outcome_code", outcome_code, MAX_ID_LENGTH)
        return self.close(
            tenant_id,
            operation_id,
            fence,
            command="complete",
            target=State.SUCCEEDED,
            fields={"outcome_code": outcome_code},
            writes=writes,
        )

    def complete_with(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        outcome_code: str,
        writes: list[dict[str, Any]],
    ) -> Operation:
        """Class A: the completion and the caller's business writes, in one transaction."""
        if not writes or len(writes) > MAX_BUSINESS_WRITES:
            raise InvalidInput(
                f"a class-A completion needs 1 to {MAX_BUSINESS_WRITES} business writes"
            )
        own = to_item(self.ctx.locate(tenant_id, operation_id))
        for i, write in enumerate(writes):
            if _names_item(write, self.ctx.store.table_name, own):
                raise InvalidInput(
                    f"business write {i} names the operation's own item, which its completion "
                    "writes: a class-A business write goes to another item"
                )
        return self.complete(tenant_id, operation_id, fence, outcome_code, writes)

    def fail(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        retryable: bool,
        reason: str,
        retry_after_ms: int | None,
    ) -> Operation:
        if not isinstance(retryable, bool):
            raise InvalidInput("retryable must be a boolean")
        validate_text("reason", reason, MAX_REASON_LENGTH)
        if retry_after_ms is not None and (
            not is_int(retry_after_ms) or not 0 <= retry_after_ms <= MAX_RETRY_AFTER_MS
        ):
            raise InvalidInput(
                f"retry_after must be from 0 to {MAX_RETRY_AFTER_MS // 1000} seconds"
            )
        fence = validate_fence(fence)
        if retryable:
            if retry_after_ms is None:
                retry_after_ms = self.ctx.rng.randint(0, rules.backoff_ceiling_ms(fence))
            try:
                return self.close(
                    tenant_id,
                    operation_id,
                    fence,
                    command="fail",
                    target=State.QUEUED,
                    fields={"reason": reason},
                    delay_ms=retry_after_ms,
                )
            except NoAttemptsLeft:
                pass  # this fence still holds the claim; the failure is terminal
        return self.close(
            tenant_id,
            operation_id,
            fence,
            command="fail",
            target=State.FAILED_TERMINAL,
            fields={"reason": reason},
        )

    def park(
        self, tenant_id: str, operation_id: str, fence: int, reason: str, target: State
    ) -> Operation:
        """``unknown`` (ambiguous outcome) or ``quarantined`` (uninterpretable input)."""
        validate_text("reason", reason, MAX_REASON_LENGTH)
        unknown = target is State.UNKNOWN
        return self.close(
            tenant_id,
            operation_id,
            fence,
            command="unknown" if unknown else "quarantine",
            target=target,
            fields={"reason": reason},
            event=Metric.UNKNOWN_PARKED if unknown else Metric.QUARANTINED,
        )

    def close(
        self,
        tenant_id: str,
        operation_id: str,
        fence: int,
        command: str,
        target: State,
        fields: dict[str, Any],
        delay_ms: int | None = None,
        event: Metric | None = None,
        writes: list[dict[str, Any]] | None = None,
    ) -> Operation:
        """Leave ``claimed`` for ``target``: one write conditional on the state and the fence.

        With ``writes`` (class A), the same conditional update and the caller's business writes
        commit together in one ``TransactWriteItems``, or not at all.
        """
        validate_id("tenant_id", tenant_id)
        validate_id("operation_id", operation_id)
        fence = validate_fence(fence)
        ctx = self.ctx
        now = ctx.clock()
        index_names = {"#dpk": DUE_PK, "#due": DUE_SK, "#spk": SWEEP_PK, "#sat": SWEEP_SK}
        expr = x.Expr(x.STATE_FENCE, x.TRANSITION_NAMES, index_names).history(
            entry := _close_entry(command, target, fields, now, delay_ms)
        )
        expr.value(
            {
                ":claimed": State.CLAIMED.value,
                ":f": fence,
                ":to": target.value,
                ":now": now,
                ":cmd": command,
                ":tr": entry["e"],
                ":one": 1,
            }
        )
        # The actor stays the claim's (the fence holder's worker id): only the holder closes.
        expr.set("#state = :to", "updated_at = :now", "closed_fence = :f", "closed_by = :cmd")
        expr.set("#tr = :tr")
        expr.remove("lease_owner", "lease_expires_at", "#spk", "#sat", "claim_token")
        for i, (name, value) in enumerate(fields.items()):
            expr.name({f"#x{i}": name}).value({f":x{i}": value}).set(f"#x{i} = :x{i}")
        condition = f"{x.IS_CLAIMED} AND {x.FENCE_HELD}"
        if target is State.QUEUED:
            condition += f" AND {x.ATTEMPTS_LEFT}"
            expr.values[":avail"] = now + (delay_ms or 0)
            expr.names["#home"] = DUE_HOME
            expr.set("#dpk = #home", "#due = :avail")
        else:
            expr.remove("#dpk", "#due")
        if target in (State.SUCCEEDED, State.FAILED_TERMINAL):
            expr.end_of_life(now, ctx.identity_retention_ms, ctx.payload_retention_ms)
        if target in (State.UNKNOWN, State.QUARANTINED):
            expr.name({"#ppk": PARKED_PK, "#pat": PARKED_SK})
            expr.values[":ppk"] = ctx.parked_pk(target, tenant_id, operation_id)
            expr.set("#ppk = :ppk", "#pat = :now")
        expr.add("#seq :one")

        def close_at(key: Key) -> OperationItem | None:
            if writes is None:
                return ctx.store.update_operation(key, *expr.write(condition))
            ctx.store.transact([ctx.store.update_action(key, *expr.write(condition)), *writes])
            return ctx.store.get_operation(key)

        try:
            item = (
                ctx.at_operation(tenant_id, operation_id, close_at)
                if writes is None
                else close_at(ctx.locate(tenant_id, operation_id))
            )
        except ConditionFailed as refused:
            if refused.reasons is not None and refused.reasons[0] is None:
                # The fence held; one of the caller's own guards refused. Nothing was written.
                failed = next(i for i, r in enumerate(refused.reasons) if r is not None)
                raise TargetRefused(
                    "a business write's condition was not met; nothing was written",
                    write_index=failed - 1,
                ) from None
            current = (
                refused.operation
                if refused.reasons is None
                else cast("OperationItem | None", refused.reasons[0] or None)
            )
            decided = rules.classify_close_refusal(current, fence, command, fields, target)
            if decided is rules.CloseRefusal.REPLAY:
                assert current is not None
                # (an end's payload expiry written again: a crash may have kept it from landing)
                return Operation.from_item(payload_items.after_close(ctx, current))
            if decided is rules.CloseRefusal.NO_ATTEMPTS_LEFT:
                raise NoAttemptsLeft() from None
            raise self.refusal(current) from None
        assert item is not None
        if event:
            ctx.count(event)
        log.info(
            "closed",
            extra={"op": ctx.tag(tenant_id, operation_id), "fence": fence, "state": target.value},
        )
        # An end sets its payload item's expiry (a live operation's payload has none).
        return Operation.from_item(payload_items.after_close(ctx, item))

    def refusal(self, current: OperationItem | None) -> Exception:
        """The error of a refused fenced command (a stale fence is counted)."""
        error = rules.fenced_refusal(current)
        if isinstance(error, StaleFence):
            self.ctx.count(Metric.STALE_FENCE_REJECTIONS)
        return error


def _names_item(write: Any, table: str, key: dict[str, Any]) -> bool:
    """Whether a ``TransactWriteItems`` action (``Put``, ``Update``, ``Delete``,
    ``ConditionCheck``) names the item of ``key`` (wire format) in ``table``."""
    if not isinstance(write, dict):
        return False
    for body in write.values():
        if not isinstance(body, dict) or body.get("TableName") != table:
            continue
        named = body.get("Key") or body.get("Item") or {}
        if isinstance(named, dict) and all(named.get(k) == v for k, v in key.items()):
            return True
    return False


def _close_entry(
    command: str, target: State, fields: dict[str, Any], now: int, delay_ms: int | None
) -> dict[str, Any]:
    """The history entry of a holder's closing command (its actor stays the claim's)."""
    return history.compact_entry(
        rules.closing_transition(command, target, delay_ms),
        now,
        state=target,
        outcome_code=fields.get("outcome_code"),
        reason=fields.get("reason"),
        available_at=now + (delay_ms or 0) if target is State.QUEUED else None,
    )
