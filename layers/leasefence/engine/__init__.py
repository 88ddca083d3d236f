"""The engine: the one owner of every state transition of an operation (:class:`Engine`).

A package of private modules, one per lifecycle phase, behind the one facade (see
:mod:`leasefence.engine._engine`). The names the single-module engine exported are kept here:
limits (from :mod:`leasefence.limits`), validation (from :mod:`leasefence.validation`) and the
outcome codes.
"""

from leasefence.engine._engine import Engine, EventSink
from leasefence.engine._payload_items import closing_round
from leasefence.engine._rules import (
    ERASED_INTENT,
    OUTCOME_APPROVAL_EXPIRED,
    OUTCOME_CANCELLED,
    OUTCOME_REJECTED,
)
from leasefence.limits import (
    BACKOFF_BASE_MS,
    BACKOFF_CAP_MS,
    CLAIM_RETRY_BUDGET_MS,
    CONTENTION_MEMORY,
    DAY_MS,
    DEFAULT_APPROVAL_VALID_MS,
    DEFAULT_CANDIDATE_PAGE,
    DEFAULT_CONTENDED_PAGE,
    DEFAULT_IDENTITY_RETENTION_MS,
    DEFAULT_LEASE_MS,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PAYLOAD_RETENTION_MS,
    MAX_APPROVAL_VALID_MS,
    MAX_CHECKPOINT_BYTES,
    MAX_ID_LENGTH,
    MAX_JOB_TYPES,
    MAX_LEASE_MS,
    MAX_PAYLOAD_REF_LENGTH,
    MAX_REASON_LENGTH,
    MEMORY_ENTRIES,
    PARKED_SCAN_PAGES,
    RETENTION_SWITCH_GRACE_MS,
    TENANT_ERASURE_SETTLE_MS,
)
from leasefence.limits import MAX_ATTEMPTS as MAX_ATTEMPTS_LIMIT
from leasefence.validation import MISSING, validate_actor, validate_id

__all__ = [
    "BACKOFF_BASE_MS",
    "BACKOFF_CAP_MS",
    "CLAIM_RETRY_BUDGET_MS",
    "CONTENTION_MEMORY",
    "DAY_MS",
    "DEFAULT_APPROVAL_VALID_MS",
    "DEFAULT_CANDIDATE_PAGE",
    "DEFAULT_CONTENDED_PAGE",
    "DEFAULT_IDENTITY_RETENTION_MS",
    "DEFAULT_LEASE_MS",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PAYLOAD_RETENTION_MS",
    "ERASED_INTENT",
    "MAX_APPROVAL_VALID_MS",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_CHECKPOINT_BYTES",
    "MAX_ID_LENGTH",
    "MAX_JOB_TYPES",
    "MAX_LEASE_MS",
    "MAX_PAYLOAD_REF_LENGTH",
    "MAX_REASON_LENGTH",
    "MEMORY_ENTRIES",
    "MISSING",
    "OUTCOME_APPROVAL_EXPIRED",
    "OUTCOME_CANCELLED",
    "OUTCOME_REJECTED",
    "PARKED_SCAN_PAGES",
    "RETENTION_SWITCH_GRACE_MS",
    "TENANT_ERASURE_SETTLE_MS",
    "Engine",
    "EventSink",
    "closing_round",
    "validate_actor",
    "validate_id",
]
