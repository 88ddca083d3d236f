"""leasefence: leases for liveness, per-operation fences for safety, on DynamoDB."""

from leasefence.engine import Engine
from leasefence.errors import (
    InvalidInput,
    InvalidTransition,
    LeaseFenceError,
    NotFound,
    PayloadConflict,
    PayloadTooLarge,
    StaleFence,
    TargetRefused,
    Unavailable,
)
from leasefence.model import Claim, EnqueueResult, Operation, Page, State, SweepResult, TargetClass

__all__ = [
    "Claim",
    "Engine",
    "EnqueueResult",
    "InvalidInput",
    "InvalidTransition",
    "LeaseFenceError",
    "NotFound",
    "Operation",
    "Page",
    "PayloadConflict",
    "PayloadTooLarge",
    "StaleFence",
    "State",
    "SweepResult",
    "TargetClass",
    "TargetRefused",
    "Unavailable",
]
