"""The names the single-module worker runtime exported, for imports written against it.

The handler-facing API is :mod:`leasefence.worker` (defined in :mod:`leasefence.worker.handler`);
the machinery is :mod:`leasefence.worker._runtime`.
"""

from leasefence.worker._runtime import MAX_REASON, Worker
from leasefence.worker.handler import (
    RETRY_BASE_MS,
    RETRY_CAP_MS,
    RETRY_MAX_TRIES,
    Ambiguous,
    FunctionHandler,
    Handler,
    HandlerOutcome,
    Job,
    LostOwnership,
    Permanent,
    Reconciled,
    Retry,
    Uninterpretable,
    retry_unavailable,
)

__all__ = [
    "MAX_REASON",
    "RETRY_BASE_MS",
    "RETRY_CAP_MS",
    "RETRY_MAX_TRIES",
    "Ambiguous",
    "FunctionHandler",
    "Handler",
    "HandlerOutcome",
    "Job",
    "LostOwnership",
    "Permanent",
    "Reconciled",
    "Retry",
    "Uninterpretable",
    "Worker",
    "retry_unavailable",
]
