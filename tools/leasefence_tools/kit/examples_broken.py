"""Deliberately broken variants of :mod:`leasefence_tools.kit.examples`: ``leasefence verify`` must say
no-go for each, naming the check that catches it (``tests/tools/kit/test_verify.py``).

Each attribute is a handler mapping (``leasefence_tools.kit.examples_broken:NO_FENCE``), verified with
the examples' fixture. The comment says which check catches it.
"""

from __future__ import annotations

import threading

from leasefence.targets import single_shot
from leasefence.worker import Ambiguous, FunctionHandler, Job, LostOwnership, Reconciled
from leasefence_tools.kit import examples
from leasefence_tools.kit.examples import (
    account,
    post,
    raise_ledger_fence,
    reconcile_post,
    reconcile_receipt,
)


def _append_unfenced(job: Job) -> None:
    """The ledger entry written with the plain client: no fence in the condition."""
    key = {name: {"S": value} for name, value in account(job).items()}
    entry = {"M": {"op": {"S": job.operation_id}, "cents": {"N": str(job.payload["cents"])}}}
    examples.dynamodb.update_item(
        TableName=examples.LEDGER,
        Key=key,
        UpdateExpression="SET entries = list_append(if_not_exists(entries, :none), :entry)",
        ExpressionAttributeValues={":none": {"L": []}, ":entry": {"L": [entry]}},
    )


def post_unfenced(job: Job) -> str:
    job.progress()
    _append_unfenced(job)
    return "posted"


#: stale-write: the class-B write carries no fence, so a stale holder's write lands.
NO_FENCE = {"ledger-post": FunctionHandler(post_unfenced, reconcile_post, raise_ledger_fence)}

#: stale-write (early wake): fenced writes, but the fence is not raised on claim, so a stale
#: holder still writes between the new holder's claim and its first write.
NO_RAISE_FENCE = {"ledger-post": FunctionHandler(post, reconcile_post)}

#: crash-after-effect: no reconcile at all, so every takeover parks the operation unknown.
NO_RECONCILE = {"ledger-post": FunctionHandler(post, None, raise_ledger_fence)}

#: crash-after-effect: a reconcile that does not look, so a takeover posts a second time.
BLIND_RECONCILE = {
    "ledger-post": FunctionHandler(post, lambda _job: Reconciled.not_done(), raise_ledger_fence)
}


def post_anyway(job: Job) -> str:
    job.progress()
    try:
        examples.ledger.write(
            job, account(job), {}, append={"entries": [{"op": job.operation_id, "cents": 1}]}
        )
    except LostOwnership:
        _append_unfenced(job)  # "we were nearly done": writes anyway
    return "posted"


#: hang (and stale-write): catches LostOwnership and writes without the fence.
SWALLOWS_LOST_OWNERSHIP = {
    "ledger-post": FunctionHandler(post_anyway, reconcile_post, raise_ledger_fence)
}


def post_with_keepalive(job: Job) -> str:
    stop = threading.Event()

    def keep_alive() -> None:  # progress from a thread that knows nothing about the work
        while not stop.wait(0.002):
            try:
                job.progress()
            except LostOwnership:
                return

    threading.Thread(target=keep_alive, daemon=True).start()
    try:
        return post(job)
    finally:
        stop.set()


#: hang: a heartbeat that lies (progress from a timer), so a stuck job never lapses.
LYING_HEARTBEAT = {
    "ledger-post": FunctionHandler(post_with_keepalive, reconcile_post, raise_ledger_fence)
}


def send_sms_retrying(job: Job) -> str:
    text = {"to": job.payload["phone"], "text": "Your refund is on its way"}
    job.record_intent("sms")
    for _attempt in range(3):
        try:
            examples.gateway.send(text)
            return "sent"
        except TimeoutError:
            continue  # "the gateway is flaky": sends again
    raise Ambiguous("the gateway never answered")


#: ambiguous-target: a class-D handler that retries the call after a lost answer.
RETRIES_CALL = {"sms": FunctionHandler(send_sms_retrying, single_shot.reconcile)}


def send_receipt_keyed_by_operation(job: Job) -> str:
    job.progress()
    result = examples.provider.execute(
        f"receipt-{job.operation_id}", {"template": "receipt", "order": job.payload["order"]}
    )
    return f"sent:{result['id']}"


#: two-tenants: the idempotency key leaves the tenant out, so one tenant's receipt is taken
#: for the other's repeat and never sent.
KEY_WITHOUT_TENANT = {
    "receipt-email": FunctionHandler(send_receipt_keyed_by_operation, reconcile_receipt)
}

__all__ = [
    "BLIND_RECONCILE",
    "KEY_WITHOUT_TENANT",
    "LYING_HEARTBEAT",
    "NO_FENCE",
    "NO_RAISE_FENCE",
    "NO_RECONCILE",
    "RETRIES_CALL",
    "SWALLOWS_LOST_OWNERSHIP",
]
