"""The public API contract as the HTTP API deploys it: routes and their scopes."""

from __future__ import annotations

SCOPE_PRODUCE = "leasefence/produce"
SCOPE_WORK = "leasefence/work"
SCOPE_OPERATE = "leasefence/operate"
#: Approve or reject an operation awaiting approval (docs/api-contract-extensions.md).
SCOPE_APPROVE = "leasefence/approve"
#: Shadow mode: a token for a ``shadow:<tenant>`` tenant is refused without it (no route of its
#: own: the API function checks it; docs/api-contract-extensions.md).
SCOPE_SHADOW = "leasefence/shadow"
#: Resource server identifier of the optional Cognito user pool (scopes ``<id>/<name>``).
RESOURCE_SERVER_ID = "leasefence"

#: Every route of the public contract (section 4) with the one scope section 2 gives it, and the
#: extensions of ``docs/api-contract-extensions.md``.
#: ``None``: open route (no authorizer). A test keeps it equal to the API function's own table.
ROUTES: tuple[tuple[str, str, str | None], ...] = (
    ("GET", "/v1/health", None),
    ("POST", "/v1/operations", SCOPE_PRODUCE),
    ("GET", "/v1/operations/{id}", SCOPE_PRODUCE),
    ("POST", "/v1/claims", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/heartbeat", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/complete", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/fail", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/unknown", SCOPE_WORK),
    ("POST", "/v1/operations/{id}/quarantine", SCOPE_WORK),
    ("GET", "/v1/operations/{id}/payload", SCOPE_WORK),
    ("GET", "/v1/operations", SCOPE_OPERATE),
    ("GET", "/v1/operations/{id}/history", SCOPE_OPERATE),  # docs/api-contract-extensions.md
    ("POST", "/v1/operations/{id}/resolve", SCOPE_OPERATE),
    ("POST", "/v1/operations/{id}/erase", SCOPE_OPERATE),
    # The job-type catalogue, tenant settings and the go/no-go report.
    ("GET", "/v1/job-types", SCOPE_OPERATE),
    ("GET", "/v1/job-types/{job_type}", SCOPE_OPERATE),
    ("PUT", "/v1/job-types/{job_type}", SCOPE_OPERATE),
    ("DELETE", "/v1/job-types/{job_type}", SCOPE_OPERATE),
    ("GET", "/v1/settings", SCOPE_OPERATE),
    ("PUT", "/v1/settings", SCOPE_OPERATE),
    ("GET", "/v1/controls", SCOPE_OPERATE),
    ("POST", "/v1/operations/{id}/approve", SCOPE_APPROVE),
    ("POST", "/v1/operations/{id}/reject", SCOPE_APPROVE),
    ("POST", "/v1/operations/{id}/cancel", SCOPE_PRODUCE),
    # Batches: several operations in one request, each its own write and answer.
    ("POST", "/v1/batch/enqueue", SCOPE_PRODUCE),
    ("POST", "/v1/batch/claim", SCOPE_WORK),
    ("POST", "/v1/batch/heartbeat", SCOPE_WORK),
    ("POST", "/v1/batch/finish", SCOPE_WORK),
    ("POST", "/v1/batch/work", SCOPE_WORK),
    # The operator's bulk routes: the approvers' inbox and bulk triage.
    ("GET", "/v1/approvals", SCOPE_APPROVE),
    ("POST", "/v1/batch/triage", SCOPE_OPERATE),
    # For the operator console (docs/api-contract-extensions.md, section 14).
    ("GET", "/v1/state-counts", SCOPE_OPERATE),
    ("GET", "/v1/target-classes", None),
    # The console's own files (open, like /v1/health; left out with console=False).
    ("GET", "/", None),
    ("GET", "/console", None),
    ("GET", "/console/{asset}", None),
)

#: The operator console's routes: static files that hold no data (the page calls the API with
#: the signed-in person's token). A service with ``console=False`` does not route them.
CONSOLE_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {("GET", "/"), ("GET", "/console"), ("GET", "/console/{asset}")}
)

#: Routes that other scopes open too (a token needs any one of the route's scopes, as API
#: Gateway checks them): an operator (``leasefence/operate``) reads any one operation, as it lists
#: them all; an approver (``leasefence/approve``) reads the operations it approves, their payloads
#: and their histories (the API function limits it to operations that went through the approval
#: gate). A test keeps it equal to the API function's own table.
ALSO_SCOPES: dict[tuple[str, str], tuple[str, ...]] = {
    # An approver's inbox: the API function limits it to state=awaiting_approval.
    ("GET", "/v1/operations"): (SCOPE_APPROVE,),
    # An operator reads one operation as it lists them all (the console's operation view).
    ("GET", "/v1/operations/{id}"): (SCOPE_OPERATE, SCOPE_APPROVE),
    ("GET", "/v1/operations/{id}/payload"): (SCOPE_APPROVE,),
    ("GET", "/v1/operations/{id}/history"): (SCOPE_APPROVE,),
    # The approvers' inbox, which operators read too.
    ("GET", "/v1/approvals"): (SCOPE_OPERATE,),
}
