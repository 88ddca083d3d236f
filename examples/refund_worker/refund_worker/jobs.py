"""A class-B refund worker: each refund is appended to its account's item in a DynamoDB table
whose items carry fences (``FencedTable``), so a worker that stalled past its lease and wakes up
after another took the refund over is refused by the table itself.

The worker function runs ``HANDLERS`` (``WorkerProps(handlers="refund_worker.jobs:HANDLERS")``);
the table's name comes from ``REFUNDS_TABLE``. Each refund's payload:
``{"account": "acct-1", "cents": 1250}``; its operation id is the refund request's id.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import boto3

from leasefence.errors import TargetRefused
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import FunctionHandler, Job, Permanent, Reconciled

#: The environment variable that names the refunds table (the stack sets it).
TABLE_ENV = "REFUNDS_TABLE"


@cache
def refunds() -> FencedTable:
    """The refunds table, its items keyed by ``account``."""
    return FencedTable(boto3.client("dynamodb"), os.environ[TABLE_ENV])


def account(job: Job) -> dict[str, Any]:
    return {"account": job.payload["account"]}


def raise_fence(job: Job) -> None:
    """On claim, before anything else: from now on the account's item refuses older fences of
    this refund, even before this holder writes."""
    refunds().raise_fence(job, account(job))


def refund(job: Job) -> str:
    """Append the refund to its account: one conditional write that carries the fence."""
    job.progress()
    entry = {"refund": job.operation_id, "cents": job.payload["cents"]}
    try:
        refunds().write(
            job,
            account(job),
            {"last_refund": job.operation_id},
            condition="attribute_not_exists(#closed)",  # the business guard, beside the fence's
            names={"#closed": "closed"},
            append={"refunds": [entry]},
        )
    except TargetRefused as refused:  # a closed account: no retry will open it
        raise Permanent("account closed") from refused
    return "refunded"


def reconcile(job: Job) -> Reconciled:
    """A previous holder may have refunded before it lost its lease: look first."""
    item = refunds().read(account(job)) or {}
    done = any(entry["refund"] == job.operation_id for entry in item.get("refunds", []))
    return Reconciled.done("refunded") if done else Reconciled.not_done()


HANDLERS = {"refund": FunctionHandler(refund, reconcile, raise_fence)}
