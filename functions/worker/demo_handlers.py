"""Handlers the example app deploys: one class-C job type against a provider stand-in.

Replace this module with your own (``LEASEFENCE_WORKER_HANDLERS=my_pkg.jobs:HANDLERS``).
"""

from __future__ import annotations

from leasefence.observability import logger
from leasefence.privacy import keyed_hash
from leasefence.targets import idempotent_api
from leasefence.worker import FunctionHandler, Job, Reconciled

#: A stand-in provider with an idempotency key and a lookup (a real one would be an HTTP API).
PROVIDER = idempotent_api.InMemoryIdempotentApi()


def send_receipt(job: Job) -> str:
    job.progress()
    result = idempotent_api.call(job, PROVIDER, {"template": "receipt"})
    logger.info("receipt sent", extra={"op": keyed_hash(job.tenant_id, job.operation_id)})
    return f"sent:{result['id']}"


def reconcile_receipt(job: Job) -> Reconciled:
    return idempotent_api.reconcile(job, PROVIDER, lambda result: f"sent:{result['id']}")


HANDLERS = {"demo-receipt": FunctionHandler(send_receipt, reconcile_receipt)}
