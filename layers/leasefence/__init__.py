"""leasefence: leases for liveness, per-operation fences for safety, on DynamoDB.

The names below are imported on first use (PEP 562), not with the package: a Lambda handler
imports ``leasefence.settings`` or ``leasefence.snapstart`` at cold start, and importing a
submodule imports this package first; an eager ``from leasefence.engine import Engine`` here
would pull the engine, the store and boto3's DynamoDB types into every handler's import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from leasefence.model import (
        Claim,
        EnqueueResult,
        Operation,
        Page,
        State,
        SweepResult,
        TargetClass,
    )

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

#: The module that defines each public name: the engine, the model's value types, else errors.
_MODEL = {"Claim", "EnqueueResult", "Operation", "Page", "State", "SweepResult", "TargetClass"}
_EXPORTS = {
    name: "leasefence.engine"
    if name == "Engine"
    else "leasefence.model"
    if name in _MODEL
    else "leasefence.errors"
    for name in __all__
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'leasefence' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
