"""The initial job-type catalogue of a deployment (``LeaseFenceServiceProps.job_types``), as a
CloudFormation custom resource.

On Create and Update it declares every listed entry of every listed tenant with the same engine
code as ``PUT /v1/job-types/{job_type}`` (``Catalogue.apply`` without pruning): an entry that
already says exactly this is not written again, so a redeploy changes nothing. Entries it does
not list are left alone, and Delete removes nothing: the catalogue is the tenants' data, and an
operation records the entry version it ran under. The answer goes to CloudFormation's presigned
``ResponseURL`` (a failure answers FAILED with the reason, so a deploy never hangs).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from leasefence.observability import logger
from leasefence.settings import runtime

#: Stable, so an update never replaces the resource (which would send a Delete for the old one).
PHYSICAL_ID = "leasefence-job-types"
ACTOR = "cloudformation"


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


@logger.inject_lambda_context(log_event=False, clear_state=True)
def lambda_handler(event: dict[str, Any], context: Any) -> None:
    status, reason, data = "SUCCESS", "", {}
    try:
        if event["RequestType"] in ("Create", "Update"):
            catalogues = json.loads(event["ResourceProperties"]["Catalogues"])
            data = apply_catalogues(runtime().engine, catalogues)
            logger.info("catalogue applied", extra=data)
    except Exception as error:  # noqa: BLE001 - every failure is answered, or the deploy hangs
        status = "FAILED"
        reason = f"{getattr(error, 'code', type(error).__name__)}: {getattr(error, 'message', '')}"
        logger.error("catalogue not applied", extra={"error_type": type(error).__name__})
    _respond(event, status, reason[:1000], data)
