"""Class D: a target with no idempotency and no lookup. It cannot be fenced.

So: record the intent under the fence before the call (a fenced, durable write: if it is
refused, nothing is called), make exactly one call, and treat anything ambiguous as ``unknown``
for a person or an out-of-band check. Operations of class D have one attempt. The honest claim is
"at most one call", never "exactly once".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from leasefence.worker.handler import Ambiguous, Job, Permanent, Reconciled


class NotSent(Exception):
    """The target definitely did not act (e.g. refused before sending): a definite failure."""


def call_once(job: Job, send: Callable[[], Any], what: str = "call") -> Any:
    job.guard()
    job.record_intent(what)
    try:
        return send()
    except NotSent as error:
        raise Permanent(str(error) or "not sent") from error
    except Exception as error:  # any other failure leaves the outcome unknown
        raise Ambiguous(f"{what} outcome unknown: {type(error).__name__}") from error


def reconcile(job: Job) -> Reconciled:
    """An earlier holder that recorded an intent may have called: cannot tell. No intent on
    record proves no call was started, so acting is safe.

    The intent is the operation's own attribute (``job.claim.intent``), which no checkpoint
    overwrites and an erasure keeps (as ``{"fence": f, "what": "erased"}``: the description goes,
    the fence stays). Operations recorded before it existed kept the intent in the checkpoint
    (``{"intent_fence": f, ...}``): still honoured (an erasure lifts it into the intent)."""
    intent = job.claim.intent
    if isinstance(intent, dict) and "fence" in intent:
        return Reconciled.unknown(f"intent recorded by fence {intent['fence']}; no lookup exists")
    checkpoint = job.checkpoint
    if isinstance(checkpoint, dict) and "intent_fence" in checkpoint:
        return Reconciled.unknown(
            f"intent recorded by fence {checkpoint['intent_fence']}; no lookup exists"
        )
    return Reconciled.not_done()
