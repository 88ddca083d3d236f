"""Who is calling, and may they call this route.

In AWS the HTTP API's JWT authorizer validates the token (issuer, audience, expiry, route scopes)
and hands the Lambda its claims under ``requestContext.authorizer.jwt``. Locally,
:mod:`leasefence_tools.local.server` does the same with HS256 tokens. Either way the handler checks
again (defence in depth): no claims or no usable ``tenant_id`` claim is 401, a missing route
scope is 403. The tenant comes from the ``tenant_id`` claim and from nowhere else.

Callers inside AWS may come through a second HTTP API instead, authorized by IAM (SigV4; the
construct's ``iam_tenant`` option): there every route sits under the name of its scope
(``POST /work/v1/claims``, ``GET /produce/v1/operations/{id}``), so an IAM policy on the path
prefix (``execute-api:Invoke`` on ``<api>/*/*/work/*``) is the grant of exactly that scope.
Such a request (``requestContext.authorizer.iam``, from the API ``LEASEFENCE_IAM_API_ID``) acts
for the one tenant ``LEASEFENCE_IAM_TENANT``, with the scope its prefix names and nothing else,
as the signing principal (``userArn``): :func:`iam_request`, :func:`iam_caller`.

:data:`ROUTES` is the route table, shared by the resolver (registration), the handler (the scope
gate that runs before body validation, so a caller without the scope learns nothing about the
body rules) and the local server (``routeKey`` and ``pathParameters``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from leasefence.api.errors import Forbidden, Unauthorized
from leasefence.keys import SHADOW_PREFIX, is_shadow_tenant
from leasefence.limits import MAX_ID_LENGTH
from leasefence.validation import CONTROL_RE

PRODUCE = "leasefence/produce"
WORK = "leasefence/work"
OPERATE = "leasefence/operate"
#: Approve or reject an operation awaiting approval (docs/api-contract-extensions.md).
APPROVE = "leasefence/approve"
ALL_SCOPES = (PRODUCE, WORK, OPERATE, APPROVE)
#: Shadow mode (:mod:`leasefence.shadow`): tenant ids starting ``shadow:`` are a reserved
#: namespace, usable only by a token that also carries this scope (a *shadow token*); any other
#: token for such a tenant is refused (403). Never among :data:`ALL_SCOPES`, so no ordinary token
#: acquires it by default (docs/api-contract-extensions.md).
SHADOW = "leasefence/shadow"
#: What shadow mode over HTTP needs: enqueue and read (produce), claim by id, heartbeat, complete
#: and fail (work), list for the report (operate), and the shadow scope itself.
SHADOW_MODE_SCOPES = (PRODUCE, WORK, OPERATE, SHADOW)


@dataclass(frozen=True)
class RouteSpec:
    method: str
    template: str  # OpenAPI style: /v1/operations/{id}
    scope: str | None  # None: open route
    operation_id: str  # the OpenAPI operationId
    #: Other scopes that may call the route, for what they serve only (the approve scope reads
    #: the operations that went through the approval gate: the route checks that).
    also: tuple[str, ...] = ()

    @property
    def scopes(self) -> tuple[str, ...]:
        """Every scope that opens the route (a token needs one of them, as API Gateway's)."""
        return () if self.scope is None else (self.scope, *self.also)

    @property
    def key(self) -> str:
        """The HTTP API route key, e.g. ``POST /v1/operations/{id}/complete``."""
        return f"{self.method} {self.template}"

    @property
    def rule(self) -> str:
        """The Powertools rule (``<name>`` placeholders)."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.template)

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(
            "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template)) + "$"
        )


ROUTES: tuple[RouteSpec, ...] = (
    RouteSpec("GET", "/v1/health", None, "health"),
    RouteSpec("POST", "/v1/operations", PRODUCE, "enqueueOperation"),
    RouteSpec("GET", "/v1/operations", OPERATE, "listOperations", also=(APPROVE,)),
    RouteSpec("GET", "/v1/operations/{id}", PRODUCE, "getOperation", also=(OPERATE, APPROVE)),
    RouteSpec("POST", "/v1/claims", WORK, "claimOperation"),
    RouteSpec("POST", "/v1/operations/{id}/heartbeat", WORK, "heartbeat"),
    RouteSpec("POST", "/v1/operations/{id}/complete", WORK, "completeOperation"),
    RouteSpec("POST", "/v1/operations/{id}/fail", WORK, "failOperation"),
    RouteSpec("POST", "/v1/operations/{id}/unknown", WORK, "parkUnknown"),
    RouteSpec("POST", "/v1/operations/{id}/quarantine", WORK, "quarantineOperation"),
    RouteSpec("GET", "/v1/operations/{id}/payload", WORK, "getPayload", also=(APPROVE,)),
    RouteSpec("POST", "/v1/operations/{id}/resolve", OPERATE, "resolveOperation"),
    # Extensions of the shared contract: docs/api-contract-extensions.md.
    RouteSpec("POST", "/v1/operations/{id}/erase", OPERATE, "eraseOperation"),
    RouteSpec("GET", "/v1/operations/{id}/history", OPERATE, "getHistory", also=(APPROVE,)),
    RouteSpec("GET", "/v1/job-types", OPERATE, "listJobTypes"),
    RouteSpec("GET", "/v1/job-types/{job_type}", OPERATE, "getJobType"),
    RouteSpec("PUT", "/v1/job-types/{job_type}", OPERATE, "putJobType"),
    RouteSpec("DELETE", "/v1/job-types/{job_type}", OPERATE, "deleteJobType"),
    RouteSpec("GET", "/v1/settings", OPERATE, "getSettings"),
    RouteSpec("PUT", "/v1/settings", OPERATE, "putSettings"),
    RouteSpec("GET", "/v1/controls", OPERATE, "getControls"),
    RouteSpec("POST", "/v1/operations/{id}/approve", APPROVE, "approveOperation"),
    RouteSpec("POST", "/v1/operations/{id}/reject", APPROVE, "rejectOperation"),
    RouteSpec("POST", "/v1/operations/{id}/cancel", PRODUCE, "cancelOperation"),
    # Batches: several operations in one request, each its own write and answer.
    RouteSpec("POST", "/v1/batch/enqueue", PRODUCE, "enqueueBatch"),
    RouteSpec("POST", "/v1/batch/claim", WORK, "claimBatch"),
    RouteSpec("POST", "/v1/batch/heartbeat", WORK, "heartbeatBatch"),
    RouteSpec("POST", "/v1/batch/finish", WORK, "finishBatch"),
    RouteSpec("POST", "/v1/batch/work", WORK, "workBatch"),
    # The operator's bulk routes (issue 37): the approvers' inbox and bulk triage.
    RouteSpec("GET", "/v1/approvals", APPROVE, "listApprovals", also=(OPERATE,)),
    RouteSpec("POST", "/v1/batch/triage", OPERATE, "triageBatch"),
    # For the operator console (docs/api-contract-extensions.md, section 14).
    RouteSpec("GET", "/v1/state-counts", OPERATE, "countOperations"),
    RouteSpec("GET", "/v1/target-classes", None, "listTargetClasses"),
    RouteSpec("GET", "/", None, "consoleRedirect"),
    RouteSpec("GET", "/console", None, "consolePage"),
    RouteSpec("GET", "/console/{asset}", None, "consoleAsset"),
)
#: The console's own routes (open static files: :mod:`leasefence.console`); a deployment without
#: the console leaves them out, and the API function answers them 404.
CONSOLE_ROUTES = frozenset({"consoleRedirect", "consolePage", "consoleAsset"})

_BY_ID = {route.operation_id: route for route in ROUTES}
_COMPILED = tuple((route, route.regex) for route in ROUTES)


def route(operation_id: str) -> RouteSpec:
    return _BY_ID[operation_id]


def match_route(method: str, path: str) -> tuple[RouteSpec, dict[str, str]] | None:
    """The route for a method and a raw (still percent-encoded) path, with its raw parameters."""
    method = method.upper()
    for spec, regex in _COMPILED:
        if spec.method != method:
            continue
        found = regex.match(path)
        if found:
            return spec, found.groupdict()
    return None


def allowed_methods(path: str, without: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The methods declared for a raw path (empty: no route has this path at all), leaving out
    the routes named in ``without`` (the console's, when it is turned off)."""
    return tuple(
        sorted(
            {
                spec.method
                for spec, regex in _COMPILED
                if spec.operation_id not in without and regex.match(path)
            }
        )
    )


@dataclass(frozen=True)
class Caller:
    tenant_id: str
    scopes: frozenset[str]
    #: Who is calling (the token's ``sub``, else ``client_id``, else ``username``), as history
    #: records it with the caller's transitions; None when the token names nobody usable.
    subject: str | None = None

    def require(self, scope: str | None, also: tuple[str, ...] = ()) -> Caller:
        """This caller, if its token holds ``scope`` or one of ``also``; else :class:`Forbidden`."""
        if scope is not None and scope not in self.scopes and self.scopes.isdisjoint(also):
            raise Forbidden(f"this token lacks the scope {' or '.join((scope, *also))}")
        return self


def _scopes_of(claims: Mapping[str, Any], listed: Any) -> frozenset[str]:
    found: set[str] = set()
    raw = claims.get("scope")
    if isinstance(raw, str):
        # API Gateway hands claims over as strings; an array claim arrives as "[a b]".
        found.update(raw.strip().strip("[]").split())
    elif isinstance(raw, (list, tuple)):
        found.update(str(s) for s in raw)
    if isinstance(listed, (list, tuple)):
        found.update(str(s) for s in listed)
    return frozenset(found)


def caller_from_event(event: Mapping[str, Any]) -> Caller:
    """The caller named by the JWT authorizer's context; :class:`Unauthorized` without one."""
    context = event.get("requestContext") or {}
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    jwt = authorizer.get("jwt") if isinstance(authorizer, Mapping) else None
    claims = jwt.get("claims") if isinstance(jwt, Mapping) else None
    if not isinstance(jwt, Mapping) or not isinstance(claims, Mapping) or not claims:
        raise Unauthorized("a bearer token is required")
    tenant_id = claims.get("tenant_id")
    if (
        not isinstance(tenant_id, str)
        or not 1 <= len(tenant_id) <= MAX_ID_LENGTH
        or CONTROL_RE.search(tenant_id)
    ):
        raise Unauthorized("the token has no usable tenant_id claim")
    scopes = _scopes_of(claims, jwt.get("scopes"))
    if is_shadow_tenant(tenant_id) and SHADOW not in scopes:
        # A reserved namespace: shadow operations are excluded from the fleet's signals and never
        # dispatched, so an ordinary tenant must not be able to live there.
        raise Forbidden(
            f"tenant ids starting {SHADOW_PREFIX!r} are reserved for shadow mode: "
            f"this token lacks the scope {SHADOW}"
        )
    return Caller(tenant_id=tenant_id, scopes=scopes, subject=_subject_of(claims))


def _subject_of(claims: Mapping[str, Any]) -> str | None:
    for name in ("sub", "client_id", "username"):
        value = claims.get(name)
        if (
            isinstance(value, str)
            and 1 <= len(value) <= MAX_ID_LENGTH
            and not CONTROL_RE.search(value)
        ):
            return value
    return None


#: The IAM API's path prefixes: the name of each scope (``work`` for ``leasefence/work``).
IAM_PREFIXES = {scope.split("/", 1)[1]: scope for scope in ALL_SCOPES}


def _iam_context(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    context = event.get("requestContext")
    authorizer = context.get("authorizer") if isinstance(context, Mapping) else None
    iam = authorizer.get("iam") if isinstance(authorizer, Mapping) else None
    return iam if isinstance(iam, Mapping) else None


def iam_request(event: Mapping[str, Any], path: str) -> tuple[str, str] | None:
    """For a request the IAM authorizer let through: (the scope its path prefix names, the path
    without the prefix). None for any other request (JWT or open routes).

    :class:`Unauthorized` when it did not come through this deployment's IAM API
    (``LEASEFENCE_IAM_API_ID``; none configured: IAM callers are not accepted at all) or its path
    names no scope."""
    if _iam_context(event) is None:
        return None
    api_id = os.environ.get("LEASEFENCE_IAM_API_ID")
    context = event.get("requestContext") or {}
    if not api_id or context.get("apiId") != api_id:
        raise Unauthorized("IAM-signed requests are accepted only through this service's IAM API")
    prefix, _, rest = path.lstrip("/").partition("/")
    if prefix not in IAM_PREFIXES or not rest:
        raise Unauthorized("an IAM route starts with the name of its scope, e.g. /work/v1/claims")
    return IAM_PREFIXES[prefix], "/" + rest


def iam_caller(event: Mapping[str, Any], scope: str) -> Caller:
    """The caller of an IAM request: the deployment's IAM tenant, only the scope its path names,
    the signing principal as its identity."""
    iam = _iam_context(event) or {}
    tenant_id = os.environ.get("LEASEFENCE_IAM_TENANT")
    if (
        not isinstance(tenant_id, str)
        or not 1 <= len(tenant_id) <= MAX_ID_LENGTH
        or CONTROL_RE.search(tenant_id)
    ):
        raise Unauthorized("this service's IAM API has no tenant configured")
    if is_shadow_tenant(tenant_id):
        # Shadow tenants need the shadow scope, which the IAM API never grants.
        raise Forbidden(f"tenant ids starting {SHADOW_PREFIX!r} are reserved for shadow mode")
    subject = None
    for name in ("userArn", "callerId"):
        value = iam.get(name)
        if (
            isinstance(value, str)
            and 1 <= len(value) <= MAX_ID_LENGTH
            and not CONTROL_RE.search(value)
        ):
            subject = value
            break
    return Caller(tenant_id=tenant_id, scopes=frozenset({scope}), subject=subject)
