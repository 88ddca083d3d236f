"""The worker: handlers per job type, progress-tied heartbeats, lost-ownership mode.

What a handler needs is here: :class:`Job` (the claimed operation, its payload, progress and
guards), the :class:`Handler` protocol (``run``, and the ``on_claim`` and ``reconcile`` hooks) or
:class:`FunctionHandler`, the outcomes it raises (:class:`HandlerOutcome`: :class:`Retry`,
:class:`Permanent`, :class:`Ambiguous`, :class:`Uninterpretable`), :class:`Reconciled`, and
:class:`LostOwnership` (a ``BaseException``: the order to stop). :class:`Worker` runs handlers
against a :class:`Backend` (:class:`EngineBackend` in process, or the HTTP API's). The machinery
(claim loop, renewer, shutdown) is private: :mod:`leasefence.worker._runtime`.
"""

from leasefence.worker._runtime import Worker
from leasefence.worker.backend import Backend, EngineBackend
from leasefence.worker.handler import (
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
    "Ambiguous",
    "Backend",
    "EngineBackend",
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
