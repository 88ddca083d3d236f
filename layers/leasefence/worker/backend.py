"""How a worker reaches leasefence: in-process against the engine, or over the HTTP API.

Both backends speak the same small protocol, so handler code does not change between a Lambda
or container with IAM access to the table and a worker that only has an API token. They also
fail the same documented way: ``load_payload`` raises
:class:`~leasefence.errors.PayloadMissing` when the inline payload was purged, erased or its
object is gone, :class:`~leasefence.errors.Unavailable` when the payload store refuses access
(:class:`~leasefence.errors.PayloadAccessDenied`: a permission or KMS key fault, not a missing
payload) or cannot be reached, and :class:`~leasefence.errors.NotFound` when the operation has no
inline payload; it never returns None for a payload that is gone.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from leasefence.engine import Engine
from leasefence.keys import is_shadow_tenant
from leasefence.model import Claim
from leasefence.validation import MISSING


class Backend(Protocol):
    def claim_next(
        self, worker_id: str, lease_ms: int, job_types: Iterable[str] | None
    ) -> Claim | None: ...

    def heartbeat(
        self,
        claim: Claim,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
        intent: str | None = None,
    ) -> int: ...

    def complete(self, claim: Claim, outcome_code: str) -> None: ...

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None: ...

    def park_unknown(self, claim: Claim, reason: str) -> None: ...

    def quarantine(self, claim: Claim, reason: str) -> None: ...

    def load_payload(self, claim: Claim) -> Any: ...


class EngineBackend:
    """In-process: the worker calls the engine directly (needs IAM access to the table).

    A fleet serving several tenants claims from them in turn, starting each claim at the next
    tenant: a tenant with a deep queue cannot starve another (at most ``len(tenants) - 1``
    claims for other tenants pass between two chances of any one tenant).
    """

    def __init__(
        self,
        engine: Engine,
        tenants: Sequence[str],
        payload_loader: Callable[[Claim], Any] | None = None,
    ) -> None:
        """``payload_loader``: how a claim's payload is loaded (default: the engine's inline
        payload, parsed as JSON; see :meth:`load_payload`)."""
        if not tenants:
            raise ValueError("an engine backend serves at least one tenant")
        shadows = [t for t in tenants if is_shadow_tenant(t)]
        if shadows:
            raise ValueError(
                f"{shadows[0]!r} is a shadow tenant: shadow operations record what an existing "
                "consumer ran and are never dispatched to workers"
            )
        self.engine = engine
        self.tenants = list(tenants)
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._payload_loader = payload_loader

    def claim_next(
        self, worker_id: str, lease_ms: int, job_types: Iterable[str] | None = None
    ) -> Claim | None:
        with self._lock:
            start = next(self._turn) % len(self.tenants)
        types = list(job_types) if job_types is not None else None
        for i in range(len(self.tenants)):
            tenant = self.tenants[(start + i) % len(self.tenants)]
            claim = self.engine.claim_next(tenant, worker_id, lease_ms=lease_ms, job_types=types)
            if claim is not None:
                return claim
        return None

    def heartbeat(
        self,
        claim: Claim,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
        intent: str | None = None,
    ) -> int:
        return self.engine.heartbeat(
            claim.tenant_id,
            claim.operation_id,
            claim.fence,
            claim.worker_id,
            lease_ms=lease_ms,
            checkpoint=checkpoint,
            intent=intent,
        )

    def complete(self, claim: Claim, outcome_code: str) -> None:
        self.engine.complete(claim.tenant_id, claim.operation_id, claim.fence, outcome_code)

    def complete_with(self, claim: Claim, outcome_code: str, writes: list[dict[str, Any]]) -> None:
        self.engine.complete_with(
            claim.tenant_id, claim.operation_id, claim.fence, outcome_code, writes
        )

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None:
        self.engine.fail(
            claim.tenant_id, claim.operation_id, claim.fence, retryable, reason, retry_after_ms
        )

    def park_unknown(self, claim: Claim, reason: str) -> None:
        self.engine.park_unknown(claim.tenant_id, claim.operation_id, claim.fence, reason)

    def quarantine(self, claim: Claim, reason: str) -> None:
        self.engine.quarantine(claim.tenant_id, claim.operation_id, claim.fence, reason)

    def load_payload(self, claim: Claim) -> Any:
        """The claim's payload: :class:`~leasefence.errors.PayloadMissing` when it is gone,
        :class:`~leasefence.errors.Unavailable` when the store refuses access or is unreachable,
        :class:`~leasefence.errors.NotFound` when the operation has none inline."""
        if self._payload_loader is None:
            return json.loads(self.engine.payload(claim))
        return self._payload_loader(claim)
