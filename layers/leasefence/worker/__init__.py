"""The worker runtime: handlers per job type, progress-tied heartbeats, lost-ownership mode."""

from leasefence.worker.backend import Backend, EngineBackend
from leasefence.worker._runtime import (
    Ambiguous,
    FunctionHandler,
    Handler,
    Job,
    LostOwnership,
    Permanent,
    Reconciled,
    Retry,
    Uninterpretable,
    Worker,
)

__all__ = [
    "Ambiguous",
    "Backend",
    "EngineBackend",
    "FunctionHandler",
    "Handler",
    "Job",
    "LostOwnership",
    "Permanent",
    "Reconciled",
    "Retry",
    "Uninterpretable",
    "Worker",
]
