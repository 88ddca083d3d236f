"""One handler per target class, written the way the README tells you to.

``leasefence verify`` says go for each of them (``tests/tools/kit/test_verify.py``); the README's
"Workers and targets" section shows the same code. Where the side effects go is set by
:func:`connect`: a worker function would call it at import with its real clients; a
verification fixture (:mod:`leasefence_tools.kit.example_fixture`) points it at the embedded stack.
"""

from __future__ import annotations

import logging
from typing import Any

from leasefence.clock import Clock
from leasefence.errors import TargetRefused
from leasefence.targets import fenced_table, idempotent_api, same_table, single_shot
from leasefence.worker import FunctionHandler, Job, Permanent, Reconciled

log = logging.getLogger("ledger")

ORDERS = "orders"  # class A: a table in the same DynamoDB as leasefence's
LEDGER = "ledger"  # class B: a table whose items carry fences

dynamodb: Any = None
ledger: fenced_table.FencedTable
provider: idempotent_api.IdempotentApi  # class C: execute(key, request), lookup(key)
gateway: Any = None  # class D: send(request); no idempotency, no lookup


def connect(
    dynamodb_client: Any, provider_client: Any, gateway_client: Any, clock: Clock | None = None
) -> None:
    """Point the handlers at their targets."""
    global dynamodb, ledger, provider, gateway
    dynamodb = dynamodb_client
    ledger = fenced_table.FencedTable(dynamodb_client, LEDGER, clock=clock)
    provider = provider_client
    gateway = gateway_client


def refund(job: Job) -> None:  # class A: the refund commits with the completion, or not at all
    job.progress()
    order = {"tenant_id": job.tenant_id, "order_id": job.payload["order"]}
    paid_to_refunded = same_table.update(
        ORDERS,
        order,
        "SET #s = :refunded",
        condition="#s = :paid",  # the business guard: only a paid order can become refunded
        names={"#s": "status"},
        values={":paid": "paid", ":refunded": "refunded"},
    )
    job.complete_with("refunded", [paid_to_refunded])


def reconcile_refund(job: Job) -> Reconciled:
    key = {"tenant_id": {"S": job.tenant_id}, "order_id": {"S": job.payload["order"]}}
    item = dynamodb.get_item(TableName=ORDERS, Key=key, ConsistentRead=True).get("Item", {})
    refunded = item.get("status", {}).get("S") == "refunded"
    return Reconciled.done("refunded") if refunded else Reconciled.not_done()


def account(job: Job) -> dict[str, str]:
    return {"tenant_id": job.tenant_id, "account": job.payload["account"]}


def raise_ledger_fence(job: Job) -> None:  # on claim: the ledger refuses older fences from now on
    ledger.raise_fence(job, account(job))


def post(job: Job) -> str:  # class B: the write carries the fence; the ledger checks it
    job.progress()
    entry = {"op": job.operation_id, "cents": job.payload["cents"]}
    try:
        ledger.write(
            job,
            account(job),  # the item's key
            {"last_op": job.operation_id},  # values: the attributes to set
            condition="attribute_not_exists(#closed)",  # your own guard, beside the fence's
            names={"#closed": "closed"},
            append={"entries": [entry]},  # lists to append to
        )
    except TargetRefused as refused:  # your guard failed: no retry will open the account
        raise Permanent("account closed") from refused
    except Exception:  # your own errors; a LostOwnership never lands here (a BaseException)
        log.exception("ledger write failed")
        raise
    return "posted"


def reconcile_post(job: Job) -> Reconciled:  # a previous holder may have posted: look first
    entries = (ledger.read(account(job)) or {}).get("entries", [])
    posted = any(entry["op"] == job.operation_id for entry in entries)
    return Reconciled.done("posted") if posted else Reconciled.not_done()


def send_receipt(job: Job) -> str:  # class C: one tenant-scoped key per operation, every attempt
    job.progress()
    result = idempotent_api.call(
        job, provider, {"template": "receipt", "order": job.payload["order"]}
    )
    return f"sent:{result['id']}"


def reconcile_receipt(job: Job) -> Reconciled:  # look the key up before sending again
    return idempotent_api.reconcile(job, provider, lambda result: f"sent:{result['id']}")


def send_sms(job: Job) -> str:  # class D: intent first, one call, anything ambiguous is unknown
    job.progress()
    text = {"to": job.payload["phone"], "text": "Your refund is on its way"}
    single_shot.call_once(job, lambda: gateway.send(text), what="sms")
    return "sent"


HANDLERS = {
    "refund": FunctionHandler(refund, reconcile_refund),
    "ledger-post": FunctionHandler(post, reconcile_post, raise_ledger_fence),
    "receipt-email": FunctionHandler(send_receipt, reconcile_receipt),
    "sms": FunctionHandler(send_sms, single_shot.reconcile),
}
#: The job types above, by target class.
CLASSES = {"refund": "A", "ledger-post": "B", "receipt-email": "C", "sms": "D"}
