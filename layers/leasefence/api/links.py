"""OpenAPI links: how the answer of one route leads to the next (the operation's life cycle).

An enqueue's answer names the operation, so it leads to the routes of that operation (read it,
its history, claim it by id, cancel, erase, approve, reject); a claim's answer names
the operation and the fence, so it leads to the fenced commands (heartbeat, complete, fail,
unknown, quarantine); a job type's declaration leads to the entry. A client
generator, or a stateful fuzzer, follows these instead of guessing ids.

Links lead forward in the life cycle, from the answers that first name what the next route
needs (an id, a fence); the routes that take the id in their path already know it, so their
answers lead nowhere new.

Request bodies given here are partial: the named fields come from the earlier exchange, the
others are the caller's (Schemathesis merges them with what it generates).
:func:`leasefence.api.openapi.build_spec` puts each link on the answers named here.
"""

from __future__ import annotations

from typing import Any

_ENQUEUED = "$response.body#/operation/operation_id"
_CLAIMED = "$response.body#/claim/operation_id"
_FENCE = "$response.body#/claim/fence"


def _link(target: str, description: str, **fields: Any) -> dict[str, Any]:
    link: dict[str, Any] = {"operationId": target, "description": description}
    path_id = fields.pop("id", None)
    if path_id is not None:
        link["parameters"] = {"path.id": path_id}
    if fields:
        link["requestBody"] = fields
    return link


def _reads(source: str) -> dict[str, dict[str, Any]]:
    """The operation's read routes, for an answer that names it at ``source``."""
    return {
        "GetOperation": _link("getOperation", "Read the operation", id=source),
        "GetHistory": _link("getHistory", "Its history", id=source),
    }


def _holder(fence: str, source: str, worker: str) -> dict[str, dict[str, Any]]:
    """What the holder of a claim does next, with its fence."""
    return {
        "Heartbeat": _link(
            "heartbeat", "Extend the lease", id=source, fence=fence, worker_id=worker
        ),
        "Complete": _link("completeOperation", "Report success", id=source, fence=fence),
        "Fail": _link("failOperation", "Report a failure", id=source, fence=fence),
        "ParkUnknown": _link("parkUnknown", "Park as unknown", id=source, fence=fence),
        "Quarantine": _link("quarantineOperation", "Park as quarantined", id=source, fence=fence),
    }


def _enqueued() -> dict[str, dict[str, Any]]:
    return {
        **_reads(_ENQUEUED),
        "Claim": _link(
            "claimOperation",
            "Claim this operation by id",
            operation_id=_ENQUEUED,
            job_types=["$response.body#/operation/job_type"],
        ),
        "Cancel": _link("cancelOperation", "Withdraw it before any attempt", id=_ENQUEUED),
        "Erase": _link("eraseOperation", "Erase its payload and free text", id=_ENQUEUED),
        "Approve": _link(
            "approveOperation",
            "Approve it (awaiting approval), naming the payload seen",
            id=_ENQUEUED,
            payload_hash="$response.body#/operation/payload_hash",
        ),
        "Reject": _link("rejectOperation", "Reject it (awaiting approval)", id=_ENQUEUED),
    }


def _claimed() -> dict[str, dict[str, Any]]:
    return _holder(_FENCE, _CLAIMED, "$request.body#/worker_id")


#: operationId -> status -> name -> link.
LINKS: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "enqueueOperation": {"201": _enqueued(), "200": _enqueued()},
    "claimOperation": {"200": _claimed()},
    "putJobType": {
        "200": {
            "GetJobType": {
                "operationId": "getJobType",
                "description": "Read the entry",
                "parameters": {"path.job_type": "$request.path.job_type"},
            },
            "DeleteJobType": {
                "operationId": "deleteJobType",
                "description": "Remove it, at the version written",
                "parameters": {
                    "path.job_type": "$request.path.job_type",
                    "query.expected_version": "$response.body#/job_type/version",
                },
            },
        }
    },
}
