"""What an operator should know per target class before resolving a parked operation: one static
table, served as ``GET /v1/target-classes`` and shown by the operator console next to every
``unknown`` or ``quarantined`` operation and before each resolution's click.

The words follow the README's "Target classes": what the fence enforces for that class, how to
find out whether the side effect happened, and what each resolution (``requeue``, ``succeeded``,
``failed_terminal``) then does.

:data:`RISKS` says which resolution is dangerous for a class given an operation's facts (class D:
requeue while an intent is on record): the console never makes it the primary choice and asks for
a confirmation naming the risk, and a bulk requeue refuses to sweep such an operation in unless
the request names it (:func:`risk`).
"""

from __future__ import annotations

from typing import Any

from leasefence.model import Resolution, TargetClass

#: Per class: its name, what it can honestly claim, how to reconcile a parked operation, and what
#: each resolution means for it.
ADVICE: dict[TargetClass, dict[str, Any]] = {
    TargetClass.A: {
        "name": "same database",
        "guarantee": "The business writes commit with the completion in one transaction, "
        "conditional on the fence: a stale worker's write cannot commit.",
        "reconcile": "Look at the business rows the job writes: they changed only if the "
        "completion committed with them. An unknown class-A operation usually means the worker "
        "stopped before its transaction; nothing was written.",
        "resolutions": {
            Resolution.REQUEUE: "Safe: the next claim runs the job again under a higher fence; "
            "its transaction commits only if nothing completed it before.",
            Resolution.SUCCEEDED: "Only if the business rows show the work was done (they cannot "
            "have been written without the completion, so this is rare).",
            Resolution.FAILED_TERMINAL: "Ends it without running again: nothing was written, "
            "and nothing will be.",
        },
    },
    TargetClass.B: {
        "name": "conditional-write store",
        "guarantee": "The target item records each operation's fence and refuses a lower one "
        "inside the write: a stale holder's write is rejected by the target.",
        "reconcile": "Read the target item: its fence entry for this operation (lf_fence_...) "
        "shows whether a holder wrote it, and under which fence.",
        "resolutions": {
            Resolution.REQUEUE: "Safe: the next claim raises the target's fence before it acts, "
            "so an earlier holder can no longer write; the handler reconciles first.",
            Resolution.SUCCEEDED: "When the target item shows this operation's write under its "
            "latest fence.",
            Resolution.FAILED_TERMINAL: "When the target item has no write of this operation and "
            "it should not run again.",
        },
    },
    TargetClass.C: {
        "name": "idempotency key and lookup",
        "guarantee": "A key derived from the tenant and operation id, stable across attempts: "
        "the provider deduplicates (dedupe, not fencing).",
        "reconcile": "Look the idempotency key up at the provider: it tells whether the call "
        "was made and what it answered. Mind the provider's retention window for keys.",
        "resolutions": {
            Resolution.REQUEUE: "Safe within the provider's key retention: the next claim looks "
            "the key up before calling again, and the provider deduplicates a repeat.",
            Resolution.SUCCEEDED: "When the lookup shows the call succeeded.",
            Resolution.FAILED_TERMINAL: "When the lookup shows no call, or a refused one, and it "
            "should not be tried again.",
        },
    },
    TargetClass.D: {
        "name": "no idempotency, no lookup",
        "guarantee": "Not enforceable: one attempt, the intent recorded under the fence before "
        "the call, anything ambiguous parked as unknown. At most one call, never exactly-once.",
        "reconcile": "Check the target by hand (its own records, the customer, the counterpart): "
        "leasefence cannot tell. An intent on record means a call may have been made under "
        "that fence.",
        "resolutions": {
            Resolution.REQUEUE: "Runs again only if no intent is on record: with an intent, the "
            "next claim parks it as unknown again without calling. Requeue only once you know "
            "the call was not made and no intent is recorded.",
            Resolution.SUCCEEDED: "When you verified at the target that the call took effect.",
            Resolution.FAILED_TERMINAL: "When you verified that it did not, and it must not be "
            "tried again (or you will redo it by hand).",
        },
    },
}


#: Per class: resolution -> (the operation's fact that makes it dangerous, the risk in words).
#: Facts: ``intent`` (an intent is on record: a call may have been made under its fence).
RISKS: dict[TargetClass, dict[Resolution, tuple[str, str]]] = {
    TargetClass.D: {
        Resolution.REQUEUE: (
            "intent",
            "An intent is on record: a call may already have been made under that fence. A "
            "requeue does not call again (the next claim parks it as unknown again), so it only "
            "postpones the decision; verify at the target, then mark it succeeded or failed.",
        ),
    },
}


def risk(target_class: TargetClass | str, resolution: Resolution | str, intent: Any) -> str | None:
    """The risk of ``resolution`` for an operation of ``target_class`` with ``intent`` (None
    when none is recorded), in words; None when the resolution is not dangerous for it."""
    found = RISKS.get(TargetClass(target_class), {}).get(Resolution(resolution))
    if found is None:
        return None
    fact, text = found
    return text if fact == "intent" and intent is not None else None


def target_classes() -> list[dict[str, Any]]:
    """The table as the API serves it: one object per class, A to D."""
    return [
        {
            "target_class": cls.value,
            "name": advice["name"],
            "guarantee": advice["guarantee"],
            "reconcile": advice["reconcile"],
            "resolutions": {r.value: text for r, text in advice["resolutions"].items()},
            "risks": {
                r.value: {"when": fact, "risk": text}
                for r, (fact, text) in RISKS.get(cls, {}).items()
            },
        }
        for cls, advice in ADVICE.items()
    ]
