"""The initial job-type catalogue of a deployment (``LeaseFenceServiceProps.job_types``), as a
CloudFormation custom resource.

On Create and Update it declares every listed entry of every listed tenant with the same engine
code as ``PUT /v1/job-types/{job_type}`` (``Catalogue.apply`` without pruning): an entry that
already says exactly this is not written again, so a redeploy changes nothing. Entries it does
not list are left alone, and Delete removes nothing: the catalogue is the tenants' data, and an
operation records the entry version it ran under.

The answer goes to CloudFormation's presigned ``ResponseURL``, and CloudFormation gets one on
every path, so a deploy (or its rollback) never waits for the custom resource's hour:

* this module imports the standard library only; ``leasefence`` (and with it Powertools and
  boto3) is imported inside the handler's ``try``, so a broken layer or import answers FAILED
  with the reason instead of failing the function before it runs;
* the work runs in a thread with a deadline :data:`ANSWER_MARGIN_MS` before the function's own
  timeout: work that hangs (a throttled table, a network stall) answers FAILED in time;
* the custom resource's ``ServiceTimeout`` (``leasefence_infra.catalogue``) bounds what is left
  (the function never starting at all: throttled, or its code missing).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from typing import Any

#: Stable, so an update never replaces the resource (which would send a Delete for the old one).
PHYSICAL_ID = "leasefence-job-types"
ACTOR = "cloudformation"
#: FAILED is answered this long before the function's timeout when the work has not finished
#: (the answer itself is one HTTPS PUT with a 30 s timeout at most).
ANSWER_MARGIN_MS = 35_000
#: Without a Lambda context (tests, a local run): how long the work may take.
DEFAULT_BUDGET_MS = 60_000

#: Standard library logging: Lambda's JSON log format carries it, and it works when
#: ``leasefence`` (its Powertools logger) cannot be imported.
log = logging.getLogger("leasefence.catalogue")
log.setLevel(logging.INFO)


def runtime() -> Any:
    """The function's runtime (:func:`leasefence.settings.runtime`), imported on first use."""
    from leasefence.settings import runtime as _runtime

    return _runtime()


def apply_catalogues(engine: Any, catalogues: dict[str, Any]) -> dict[str, int]:
    """Declare each tenant's listed entries (and its strict setting, when listed)."""
    counts = {"Changed": 0, "Tenants": 0}
    for tenant, document in sorted(catalogues.items()):
        changes, strict = engine.catalogue.apply(tenant, document, prune=False, actor=ACTOR)
        counts["Changed"] += len(changes) + (strict is not None)
        counts["Tenants"] += 1
    return counts


def _respond(event: dict[str, Any], status: str, reason: str, data: dict[str, Any]) -> None:
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason or status,
            "PhysicalResourceId": event.get("PhysicalResourceId") or PHYSICAL_ID,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(  # noqa: S310 - CloudFormation's presigned https URL
        event["ResponseURL"],
        data=body,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(body))},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - as above
        answer.read()


def _work(event: dict[str, Any]) -> dict[str, int]:
    """What a request asks for; every exception is the caller's to answer."""
    if event["RequestType"] not in ("Create", "Update"):
        return {}
    catalogues = json.loads(event["ResourceProperties"]["Catalogues"])
    data = apply_catalogues(runtime().engine, catalogues)
    log.info("catalogue applied", extra=data)
    return data


def _reason(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error)
    return f"{getattr(error, 'code', None) or type(error).__name__}: {message}"


def _budget_ms(context: Any) -> int:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return DEFAULT_BUDGET_MS
    return max(1_000, int(remaining()) - ANSWER_MARGIN_MS)


def lambda_handler(event: dict[str, Any], context: Any) -> None:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["data"] = _work(event)
        except BaseException as error:  # noqa: BLE001 - every failure is answered
            outcome["error"] = error

    worker = threading.Thread(target=run, name="catalogue", daemon=True)
    worker.start()
    budget_ms = _budget_ms(context)
    worker.join(budget_ms / 1000)
    data: dict[str, Any] = {}
    if worker.is_alive():
        status = "FAILED"
        reason = f"timed out: the catalogue was not applied within {budget_ms // 1000} s"
    elif "error" in outcome:
        error = outcome["error"]
        status, reason = "FAILED", _reason(error)
        log.error("catalogue not applied", extra={"error_type": type(error).__name__})
    else:
        status, reason, data = "SUCCESS", "", outcome.get("data") or {}
    try:
        _respond(event, status, reason[:1000], data)
    except Exception as error:  # nothing left to answer with: the log says why, Lambda retries
        log.error("answer not delivered", extra={"error_type": type(error).__name__})
        raise
