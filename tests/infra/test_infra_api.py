"""The HTTP API (``api.py``, ``contract.py``): the contract's routes and scopes, the JWT
authorizer, the stage, the tenant-isolation role, and the API function's timeout."""

from __future__ import annotations

import json

from tests.support.infra import (
    actions_by_resource,
    as_list,
    getatt,
    grant_set,
    index_arn,
    invoked_arn,
    logical_id,
    props,
    resources,
    role_statements,
    service_of,
)

from leasefence import schema

# The public contract, section 2, written out again on purpose: if ROUTES in the construct
# drifts from the contract, this table (not the construct's) decides.
CONTRACT_ROUTES = {
    "GET /v1/health": None,
    "POST /v1/operations": "leasefence/produce",
    "GET /v1/operations/{id}": "leasefence/produce",
    "POST /v1/claims": "leasefence/work",
    "POST /v1/operations/{id}/heartbeat": "leasefence/work",
    "POST /v1/operations/{id}/complete": "leasefence/work",
    "POST /v1/operations/{id}/fail": "leasefence/work",
    "POST /v1/operations/{id}/unknown": "leasefence/work",
    "POST /v1/operations/{id}/quarantine": "leasefence/work",
    "GET /v1/operations/{id}/payload": "leasefence/work",
    "GET /v1/operations": "leasefence/operate",
    "GET /v1/operations/{id}/history": "leasefence/operate",  # issue 13 (contract extension)
    "POST /v1/operations/{id}/resolve": "leasefence/operate",
    "POST /v1/operations/{id}/erase": "leasefence/operate",
    # issue 14 (contract extensions): the job-type catalogue, settings, the go/no-go report
    "GET /v1/job-types": "leasefence/operate",
    "GET /v1/job-types/{job_type}": "leasefence/operate",
    "PUT /v1/job-types/{job_type}": "leasefence/operate",
    "DELETE /v1/job-types/{job_type}": "leasefence/operate",
    "GET /v1/settings": "leasefence/operate",
    "PUT /v1/settings": "leasefence/operate",
    "GET /v1/controls": "leasefence/operate",
    # issue 14 (contract extensions): the approval gate and cancel
    "POST /v1/operations/{id}/approve": "leasefence/approve",
    "POST /v1/operations/{id}/reject": "leasefence/approve",
    "POST /v1/operations/{id}/cancel": "leasefence/produce",
    # issue 33 (contract extensions): batches of enqueues, heartbeats and finishes
    "POST /v1/batch/enqueue": "leasefence/produce",
    "POST /v1/batch/claim": "leasefence/work",
    "POST /v1/batch/heartbeat": "leasefence/work",
    "POST /v1/batch/finish": "leasefence/work",
    "POST /v1/batch/work": "leasefence/work",
    # issue 37 (contract extensions): the approvers' inbox and bulk triage
    "GET /v1/approvals": "leasefence/approve",
    "POST /v1/batch/triage": "leasefence/operate",
    # issue 25 (contract extensions): the operator console, its reads and its files
    "GET /v1/state-counts": "leasefence/operate",
    "GET /v1/target-classes": None,
    "GET /": None,
    "GET /console": None,
    "GET /console/{asset}": None,
}


# Issue 21: an approver reads what it approves (the handler limits it to gated operations).
CONTRACT_ALSO = {
    "GET /v1/operations": ("leasefence/approve",),  # issue 25: an approver's inbox
    "GET /v1/operations/{id}": ("leasefence/operate", "leasefence/approve"),  # issue 25: operators too
    "GET /v1/operations/{id}/payload": ("leasefence/approve",),
    "GET /v1/operations/{id}/history": ("leasefence/approve",),
    "GET /v1/approvals": ("leasefence/operate",),  # issue 37: operators read the inbox too
}


def test_routes_and_scopes_match_the_contract(variant) -> None:
    _, stack, svc, tpl = variant
    authorizer = logical_id(stack, svc.http_api.node.find_child("JwtAuthorizer"))
    api = {"Ref": logical_id(stack, svc.http_api)}  # (the full stack also has the IAM API)
    routes = {r["Properties"]["RouteKey"]: r["Properties"] for r in resources(tpl, "AWS::ApiGatewayV2::Route").values()
              if r["Properties"]["ApiId"] == api}
    # Besides the contract's routes, $default: what no route declares reaches the function, which
    # answers 405 (with Allow) or 404 in the contract's error body; it carries no authorizer.
    assert set(routes) == set(CONTRACT_ROUTES) | {"$default"}
    assert routes["$default"]["AuthorizationType"] == "NONE" and "AuthorizerId" not in routes["$default"]
    for key, scope in CONTRACT_ROUTES.items():
        route = routes[key]
        if scope is None:
            assert route["AuthorizationType"] == "NONE", key
            assert "AuthorizerId" not in route and "AuthorizationScopes" not in route
        else:
            assert route["AuthorizationType"] == "JWT", key
            assert route["AuthorizerId"] == {"Ref": authorizer}, key
            assert route["AuthorizationScopes"] == [scope, *CONTRACT_ALSO.get(key, ())], key
    # One Lambda proxy integration (payload 2.0) serves every route.
    ((integration_lid, integration),) = [(lid, i) for lid, i in resources(tpl, "AWS::ApiGatewayV2::Integration").items()
                                         if i["Properties"]["ApiId"] == api]
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    assert integration["Properties"]["IntegrationUri"] == invoked_arn(stack, svc.api.function)
    for route in routes.values():
        assert route["Target"] == {"Fn::Join": ["", ["integrations/", {"Ref": integration_lid}]]}


def test_jwt_authorizer_external_issuer(synth) -> None:
    _, _, tpl = service_of(synth, "default")
    (authorizer,) = resources(tpl, "AWS::ApiGatewayV2::Authorizer").values()
    assert authorizer["Properties"]["AuthorizerType"] == "JWT"
    assert authorizer["Properties"]["IdentitySource"] == ["$request.header.Authorization"]
    assert authorizer["Properties"]["JwtConfiguration"] == {
        "Issuer": "https://issuer.example.com/", "Audience": ["leasefence-api"]
    }
    assert not resources(tpl, "AWS::Cognito::UserPool")


def test_stage_throttling_and_access_logs(variant) -> None:
    _, stack, svc, tpl = variant
    p = props(tpl, logical_id(stack, svc.api.stage))
    assert p["StageName"] == "$default" and p["AutoDeploy"] is True
    assert p["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 200, "ThrottlingRateLimit": 100}
    assert p["AccessLogSettings"]["DestinationArn"] == getatt(logical_id(stack, svc.api.access_log_group))
    fmt = json.loads(p["AccessLogSettings"]["Format"])
    assert fmt["requestId"] == "$context.requestId"
    assert fmt["status"] == "$context.status"
    assert "$context.path" not in p["AccessLogSettings"]["Format"]  # ids stay out of logs
    assert props(tpl, logical_id(stack, svc.api.access_log_group))["RetentionInDays"] == 30


def test_tenant_isolation_role(synth) -> None:
    stack, svc, tpl = service_of(synth, "full")
    assert svc.api.tenant_role is not None
    table = logical_id(stack, svc.table)
    tenant = logical_id(stack, svc.api.tenant_role)
    api_role = logical_id(stack, svc.api.function.role)
    api = role_statements(tpl, api_role)
    # With isolation on, the API function itself cannot touch the table at all ...
    assert actions_by_resource(api, "dynamodb:") == []
    # ... it can only become its caller's tenant.
    assert actions_by_resource(api, "sts:") == [
        (frozenset({"sts:AssumeRole", "sts:TagSession"}), getatt(tenant))
    ]
    (trust,) = props(tpl, tenant)["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"AWS": getatt(api_role)}
    assert sorted(as_list(trust["Action"])) == ["sts:AssumeRole", "sts:TagSession"]
    assert trust["Condition"] == {
        "StringLike": {"aws:RequestTag/tenant_id": "?*"},
        "ForAllValues:StringEquals": {"aws:TagKeys": ["tenant_id"]},
    }
    statements = {s.get("Sid"): s for s in role_statements(tpl, tenant)}
    own_items = statements["OwnTenantItems"]
    assert own_items["Resource"] == getatt(table)
    # The bare tenant id and its write shards (<tenant>\t<n>); see the policy test below.
    assert own_items["Condition"] == {
        "ForAllValues:StringLike": {
            "dynamodb:LeadingKeys": ["${aws:PrincipalTag/tenant_id}", "${aws:PrincipalTag/tenant_id}\t*"]
        }
    }
    shards = statements["OwnTenantDueShards"]
    assert shards["Resource"] == index_arn(table, schema.DUE_INDEX)
    assert as_list(shards["Action"]) == ["dynamodb:Query"]
    # Due partitions are <tenant>#<shard>#<job type>; a session tag value holds no '#', '*', '?'.
    assert shards["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["${aws:PrincipalTag/tenant_id}#*"]}
    }
    # Every DynamoDB grant of the tenant role is conditioned on the tenant's leading keys.
    for st in role_statements(tpl, tenant):
        if any(a.startswith("dynamodb:") for a in as_list(st["Action"])):
            (condition,) = st["Condition"].values()
            assert "dynamodb:LeadingKeys" in condition
    env = props(tpl, logical_id(stack, svc.api.function.function))["Environment"]["Variables"]
    assert env["LEASEFENCE_TENANT_ROLE_ARN"] == getatt(tenant)
    assert env["LEASEFENCE_TENANT_SESSION_TAG"] == "tenant_id"
    # The sweeper stays the one, narrow, cross-tenant path.
    sweeper = actions_by_resource(role_statements(tpl, logical_id(stack, svc.sweeper.function.role)), "dynamodb:")
    assert grant_set(sweeper) == grant_set([
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.SWEEP_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PARKED_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.PURGE_INDEX)),
        (frozenset({"dynamodb:Query"}), index_arn(table, schema.DUE_INDEX)),
        (frozenset({"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Scan", "dynamodb:Query"}), getatt(table)),
    ])


def test_gateway_routes_match_the_handler_route_table() -> None:
    """The HTTP API and the API function's own scope gate must agree route by route."""
    from leasefence.api import security
    from leasefence_infra import ROUTES
    from leasefence_infra.contract import ALSO_SCOPES

    handler = {r.key: r.scope for r in security.ROUTES}
    gateway = {f"{method} {path}": scope for method, path, scope in ROUTES}
    assert gateway == handler == CONTRACT_ROUTES
    handler_also = {r.key: r.also for r in security.ROUTES if r.also}
    assert {f"{m} {p}": also for (m, p), also in ALSO_SCOPES.items()} == handler_also == CONTRACT_ALSO


def test_the_deployed_routes_are_the_handlers_routes() -> None:
    """The construct's route table and the API handler's cannot drift apart (a route the handler
    serves but API Gateway does not route would be unreachable once deployed)."""
    from leasefence.api.security import ROUTES as HANDLER_ROUTES
    from leasefence_infra.contract import ROUTES as DEPLOYED_ROUTES

    assert {(m, p, s) for m, p, s in DEPLOYED_ROUTES} == {(r.method, r.template, r.scope) for r in HANDLER_ROUTES}


def test_api_timeout_covers_a_claims_retry_budget(synth) -> None:
    """Issue 11, case 9: the API function was cut off (15 s) before a claim's own retries ended."""
    from leasefence.limits import CLAIM_RETRY_BUDGET_MS
    from leasefence.settings import STORE_CALL_WORST_S

    stack, svc, tpl = service_of(synth, "default")
    timeout = props(tpl, logical_id(stack, svc.api.function.function))["Timeout"]
    assert CLAIM_RETRY_BUDGET_MS / 1000 + STORE_CALL_WORST_S <= timeout < 30  # API Gateway's limit is 30 s


#: Lambda's cap on a function's resource-based policy (bytes; AddPermission fails past it).
RESOURCE_POLICY_CAP = 20 * 1024


def _statement_bytes(permission: dict) -> int:
    """About what Lambda stores for one AddPermission: the statement with its Sid, the function's
    ARN and the source condition (an ARN of 90 characters stands in for each token)."""
    statement = {
        "Sid": "x" * 64,
        "Effect": "Allow",
        "Principal": {"Service": permission["Principal"]},
        "Action": permission["Action"],
        "Resource": "arn:aws:lambda:ap-southeast-2:123456789012:function:" + "f" * 64 + ":live",
        "Condition": {"ArnLike": {"AWS:SourceArn": json.dumps(permission.get("SourceArn"))}},
    }
    return len(json.dumps(statement))


def test_the_api_functions_resource_policy_stays_far_below_lambdas_cap(variant) -> None:
    """One invoke permission per API (source ``<api>/*/*``), however many routes it has: one
    statement per route (30 JWT routes, about 400 bytes each) would approach Lambda's 20 KB
    resource-policy cap as routes are added, and a deploy past it fails."""
    name, stack, service, template = variant
    target = service.api.function.target
    permissions = [
        p["Properties"]
        for p in resources(template, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
        and json.dumps(p["Properties"]["FunctionName"]) == json.dumps(stack.resolve(target.function_arn))
    ]
    apis = len(resources(template, "AWS::ApiGatewayV2::Api"))
    assert len(permissions) == apis, (name, len(permissions), apis)
    for permission in permissions:
        source = json.dumps(permission["SourceArn"])
        assert source.endswith('/*/*"]]}'), source  # every stage, method and route of its API
    assert sum(_statement_bytes(p) for p in permissions) < RESOURCE_POLICY_CAP // 10
