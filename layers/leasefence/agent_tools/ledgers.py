"""Where a tool server records its calls: the engine in-process (:class:`EngineLedger`, the
table's credentials) or the HTTP API (:class:`ClientLedger`, a token of the tenant). Either way
the tenant is the server's, fixed when it starts: nothing a client or a model sends names it."""

from __future__ import annotations

from typing import Any

from leasefence.agent_tools.calls import CallState, ToolSpec
from leasefence.client import LeaseFenceClient
from leasefence.clock import to_rfc3339
from leasefence.engine import Engine
from leasefence.errors import InvalidInput
from leasefence.model import Claim, EnqueueResult, Operation, State
from leasefence.payloads import CanonicalPayload
from leasefence.resources import Operation as ApiOperation
from leasefence.worker.backend import EngineBackend
from leasefence.worker.http_backend import HttpBackend


def _state(op: Operation) -> CallState:
    return CallState(
        operation_id=op.operation_id,
        state=op.state,
        fence=op.fence,
        payload_hash=op.payload_hash,
        outcome_code=op.outcome_code,
        reason=op.reason,
        lease_expires_at=to_rfc3339(op.lease_expires_at),
        approval_expires_at=to_rfc3339(op.approval_expires_at),
        gated=op.approval_gated,
    )


def _api_state(op: ApiOperation) -> CallState:
    return CallState(
        operation_id=op.operation_id,
        state=State(op.state),
        fence=op.fence,
        payload_hash=op.payload_hash,
        outcome_code=op.outcome_code,
        reason=op.reason,
        lease_expires_at=op.lease_expires_at.isoformat() if op.lease_expires_at else None,
        approval_expires_at=op.approval_expires_at.isoformat() if op.approval_expires_at else None,
        # Only an operation enqueued under the gate keeps its enqueuer.
        gated=op.enqueued_by is not None,
    )


class EngineLedger:
    """In-process: the engine, for one tenant, enqueueing as ``actor`` (the server's identity:
    what the gate keeps as ``enqueued_by``, so it can never approve its own calls). A tool
    declared ``approval=True`` is gated whatever its catalogue entry says."""

    def __init__(self, engine: Engine, tenant_id: str, actor: str) -> None:
        self.engine = engine
        self.tenant_id = tenant_id
        self.actor = actor
        self.backend = EngineBackend(engine, [tenant_id])

    def enqueue(
        self,
        operation_id: str,
        spec: ToolSpec,
        arguments: dict[str, Any],
        payload: CanonicalPayload,
    ) -> CallState:
        engine, tenant = self.engine, self.tenant_id
        admission = engine.admit(
            tenant,
            operation_id,
            spec.job_type,
            payload.hash,
            target_class=spec.target_class,
            max_attempts=spec.max_attempts,
            payload=arguments,
            payload_given=True,
            actor=self.actor,
        )
        if isinstance(admission, EnqueueResult):
            return _state(admission.operation)
        if not engine.keeps_in_item(payload):
            raise InvalidInput(
                "the arguments' canonical JSON does not fit an item (1 KiB, or 8 KiB that pack "
                "to 1 KiB): pass a reference"
            )
        return _state(
            engine.enqueue(
                tenant,
                operation_id,
                spec.job_type,
                payload.hash,
                max_attempts=spec.max_attempts,
                target_class=spec.target_class,
                actor=self.actor,
                admission=admission,
                approval_required=spec.approval or admission.approval_required,
                approval_valid_ms=spec.approval_valid_ms,
                payload_json=payload.body,
            ).operation
        )

    def get(self, operation_id: str) -> CallState:
        return _state(self.engine.get(self.tenant_id, operation_id))

    def claim(self, operation_id: str, worker_id: str, lease_ms: int) -> Claim | None:
        return self.engine.claim(self.tenant_id, operation_id, worker_id, lease_ms=lease_ms)


class ClientLedger:
    """Over the HTTP API with the server's token: ``leasefence/produce`` and ``leasefence/work``
    of the token's tenant (``tenant_id`` names it for the claims), whose subject is the enqueuer.
    The approval gate is the job type's catalogue entry here (``approval_required``): a tool
    declared ``approval=True`` whose calls come back ungated is refused before it runs
    (``approval_not_enforced``)."""

    def __init__(self, client: LeaseFenceClient, tenant_id: str) -> None:
        self.client = client
        self.backend = HttpBackend(client, tenant_id)

    def enqueue(
        self,
        operation_id: str,
        spec: ToolSpec,
        arguments: dict[str, Any],
        payload: CanonicalPayload,  # noqa: ARG002 - the API computes the same hash
    ) -> CallState:
        result = self.client.enqueue(
            operation_id,
            spec.job_type,
            arguments,
            max_attempts=spec.max_attempts,
            target_class=spec.target_class.value,
        )
        return _api_state(result.operation)

    def get(self, operation_id: str) -> CallState:
        return _api_state(self.client.get(operation_id))

    def claim(self, operation_id: str, worker_id: str, lease_ms: int) -> Claim | None:
        return self.backend.claim_operation(worker_id, operation_id, lease_ms, None)
