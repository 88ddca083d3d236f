"""IAM ways in: the IAM-authorized API (one scope per path prefix, one tenant), the grant_*
methods, the tenant-erasure operator policy (exactly what ``erase-tenant`` calls), and a service
imported into another stack."""

from __future__ import annotations

import inspect
import json
import random
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from tests.support.infra import as_list, getatt, invoked_arn, logical_id, props, resources, role_statements

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.payloads import PayloadStore, canonicalize
from leasefence_infra import LeaseFenceService, service_props_from_context
from leasefence_infra.access import (
    ERASURE_KEY_ACTIONS,
    ERASURE_LIST_ACTIONS,
    ERASURE_OBJECT_ACTIONS,
    ERASURE_TABLE_ACTIONS,
    SCOPE_PREFIXES,
    iam_route_path,
)
from leasefence_infra.contract import ALSO_SCOPES, ROUTES, SCOPE_PRODUCE, SCOPE_WORK


def _full(synth) -> tuple[Stack, LeaseFenceService, dict[str, Any]]:
    stack = synth.stacks["full"]
    return stack, stack.service, synth.template_json("full")


def _api_routes(template: dict[str, Any], api_lid: str) -> dict[str, dict[str, Any]]:
    return {r["Properties"]["RouteKey"]: r["Properties"] for r in resources(template, "AWS::ApiGatewayV2::Route").values()
            if r["Properties"]["ApiId"] == {"Ref": api_lid}}


def test_the_iam_api_has_every_scoped_route_under_its_scope_with_iam_authorization(synth) -> None:
    stack, svc, tpl = _full(synth)
    routes = _api_routes(tpl, logical_id(stack, svc.iam_api.http_api))
    expected = {f"{m} /{SCOPE_PREFIXES[s]}{p}" for m, p, s in ROUTES if s is not None}
    # A route another scope opens too is also under that scope's prefix (approvers read).
    expected |= {f"{m} /{SCOPE_PREFIXES[also]}{p}" for (m, p), scopes in ALSO_SCOPES.items() for also in scopes}
    assert "GET /approve/v1/operations/{id}/payload" in expected
    assert set(routes) == expected
    assert all(r["AuthorizationType"] == "AWS_IAM" for r in routes.values())
    assert "GET /v1/health" not in routes  # open, on the JWT API only
    # The JWT API is unchanged: no prefixes, JWT on every scoped route.
    jwt_routes = _api_routes(tpl, logical_id(stack, svc.http_api))
    # Open: health, the console's files, and $default (what no route declares: 404/405 from the function).
    open_routes = {f"{m} {p}" for m, p, s in ROUTES if s is None} | {"$default"}
    assert "$default" in jwt_routes and "$default" not in routes  # the IAM API keeps API Gateway's 404
    assert {k for k in jwt_routes if k not in open_routes} == {f"{m} {p}" for m, p, s in ROUTES if s}
    # The same function (its live alias with SnapStart) serves both.
    integrations = [i["Properties"] for i in resources(tpl, "AWS::ApiGatewayV2::Integration").values()
                    if i["Properties"]["ApiId"] == {"Ref": logical_id(stack, svc.iam_api.http_api)}]
    assert [i["IntegrationUri"] for i in integrations] == [invoked_arn(stack, svc.api.function)]


def test_the_api_function_knows_the_iam_api_and_its_tenant(synth) -> None:
    stack, svc, tpl = _full(synth)
    env = props(tpl, logical_id(stack, svc.api.function.function))["Environment"]["Variables"]
    assert env["LEASEFENCE_IAM_TENANT"] == "acme"
    assert env["LEASEFENCE_IAM_API_ID"] == {"Ref": logical_id(stack, svc.iam_api.http_api)}
    default = synth.stacks["default"]
    env = props(synth.template_json("default"), logical_id(default, default.service.api.function.function))
    assert "LEASEFENCE_IAM_API_ID" not in env["Environment"]["Variables"]  # no IAM API: IAM refused


def test_the_iam_api_stage_is_throttled_and_logged(synth) -> None:
    stack, svc, tpl = _full(synth)
    stage = props(tpl, logical_id(stack, svc.iam_api.stage))
    assert stage["StageName"] == "$default" and stage["AutoDeploy"] is True
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] == svc.props.throttling_rate_limit
    log = stage["AccessLogSettings"]
    assert log["DestinationArn"] == getatt(logical_id(stack, svc.iam_api.access_log_group))
    assert "$context.routeKey" in log["Format"] and "$context.path" not in log["Format"]


def _principal_statements(tpl, stack, role) -> list[dict[str, Any]]:
    return role_statements(tpl, logical_id(stack, role))


def test_grants_give_exactly_the_routes_of_their_scope(synth) -> None:
    stack, svc, tpl = _full(synth)
    statements = _principal_statements(tpl, stack, stack.billing_role)
    invoke = [s for s in statements if s["Action"] == "execute-api:Invoke"]
    api = {"Ref": logical_id(stack, svc.iam_api.http_api)}
    resources_ = [r for s in invoke for r in as_list(s["Resource"])]
    suffixes = sorted(r["Fn::Join"][1][-1] for r in resources_)
    assert suffixes == ["/*/*/produce/*", "/*/*/work/*"]
    assert all(api in r["Fn::Join"][1] for r in resources_)
    assert {a for s in statements for a in as_list(s["Action"])} == {"execute-api:Invoke"}
    # The prefixes are the ones the API function reads (leasefence.api.security.IAM_PREFIXES).
    from leasefence.api.security import IAM_PREFIXES

    assert {v: k for k, v in SCOPE_PREFIXES.items()} == IAM_PREFIXES
    assert iam_route_path("/v1/claims", SCOPE_WORK) == "/work/v1/claims"
    assert iam_route_path("/v1/operations", SCOPE_PRODUCE) == "/produce/v1/operations"


@pytest.mark.parametrize("method", ["grant_enqueue", "grant_work", "grant_operate", "grant_approve"])
def test_grants_without_the_iam_api_are_refused(synth, method: str) -> None:
    svc = synth.stacks["default"].service
    with pytest.raises(ValueError, match="iam_tenant"):
        getattr(svc, method)(iam.ArnPrincipal("arn:aws:iam::111122223333:role/x"))


# ----------------------------------------------------------------------------- tenant erasure


def test_the_operators_may_erase_a_tenant_and_nothing_else(synth) -> None:
    stack, svc, tpl = _full(synth)
    statements = {s.get("Sid"): s for s in _principal_statements(tpl, stack, stack.operator_role)}
    table, bucket = logical_id(stack, svc.table), logical_id(stack, svc.payload_bucket)
    assert sorted(statements["TenantRows"]["Action"]) == sorted(ERASURE_TABLE_ACTIONS)
    assert statements["TenantRows"]["Resource"] == getatt(table)
    assert statements["TenantPayloadObjects"]["Action"] == "s3:DeleteObject"
    assert statements["TenantPayloadObjects"]["Resource"] == {"Fn::Join": ["", [getatt(bucket), "/payloads/*"]]}
    assert statements["ListTenantPayloads"]["Condition"] == {"StringLike": {"s3:prefix": ["payloads/*"]}}
    assert statements["LogHashKey"]["Resource"] == {"Ref": logical_id(stack, svc.storage.log_hash_key)}
    assert statements["DataKeys"]["Resource"] == getatt(logical_id(stack, svc.encryption_key))
    assert set(statements) == {"TenantRows", "TenantPayloadObjects", "ListTenantPayloads", "LogHashKey", "DataKeys"}
    # The example stack hands the same statements to operators as a managed policy.
    default = synth.stacks["default"]
    dtpl = synth.template_json("default")
    policy = props(dtpl, logical_id(default, default.service.tenant_erasure_policy()))
    assert {s["Sid"] for s in policy["PolicyDocument"]["Statement"]} == {
        "TenantRows", "TenantPayloadObjects", "ListTenantPayloads", "LogHashKey"}  # no CMK there
    assert dtpl["Outputs"]["TenantErasurePolicyArn"]["Value"] == {"Ref": logical_id(default, default.service.tenant_erasure_policy())}


#: The IAM action each AWS call of the erasure needs.
_ACTION_OF = {
    ("dynamodb", "Query"): "dynamodb:Query",
    ("dynamodb", "DeleteItem"): "dynamodb:DeleteItem",
    ("dynamodb", "UpdateItem"): "dynamodb:UpdateItem",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "DeleteObject"): "s3:DeleteObject",
    ("s3", "DeleteObjects"): "s3:DeleteObject",  # each key is checked as DeleteObject
}


def test_the_erasure_policy_covers_every_call_erase_tenant_makes(aws, spec) -> None:
    """Run the engine's tenant erasure (what `leasefence erase-tenant` runs) and record each AWS
    call: every one is an action the operator policy grants."""
    calls: list[tuple[str, str]] = []

    def recorded(service: str):
        client = aws.client(service)
        client.meta.events.register("before-call.*.*", lambda model, **_: calls.append(
            (service, model.name)))
        return client

    s3 = aws.client("s3")
    s3.create_bucket(Bucket="erasure-payloads")
    payloads = PayloadStore("erasure-payloads", client=recorded("s3"))
    clock = ManualClock()
    engine = Engine(client=recorded("dynamodb"), spec=spec, clock=clock, rng=random.Random(3),
                    payloads=payloads)
    engine.catalogue.put("acme", "job", {"target_class": "C"})  # a catalogue entry: erased too
    for i in range(3):  # with inline payloads, as the API enqueues them
        canonical = canonicalize({"n": i})
        stored = payloads.put("acme", f"op-{i}", canonical)
        engine.enqueue("acme", f"op-{i}", "job", canonical.hash, stored.ref, payload_inline=True)
    s3.put_object(Bucket="erasure-payloads", Key=payloads.tenant_prefix("acme") + "orphan.json", Body=b"{}")
    calls.clear()
    step = engine.erase_tenant("acme", limit=10)
    for _ in range(50):  # as `leasefence erase-tenant --all` does: wait out the settle time
        if step.next_cursor is None:
            break
        clock.advance(getattr(step, "wait_ms", 0) or 0)
        step = engine.erase_tenant("acme", limit=10, cursor=step.next_cursor)
    assert step.next_cursor is None, "the erasure did not finish"
    assert calls, "nothing recorded"
    granted = set(ERASURE_TABLE_ACTIONS) | set(ERASURE_OBJECT_ACTIONS) | set(ERASURE_LIST_ACTIONS)
    needed = {_ACTION_OF.get(c, f"unmapped {c}") for c in calls}
    assert needed <= granted, needed - granted
    assert {"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "s3:DeleteObject",
            "s3:ListBucket"} <= needed
    assert s3.list_objects_v2(Bucket="erasure-payloads").get("KeyCount") == 0  # it did erase
    assert set(ERASURE_KEY_ACTIONS) == {"kms:Decrypt", "kms:DescribeKey"}


# ----------------------------------------------------------------------------- other stacks


def test_a_service_imported_into_another_stack_grants_the_same(synth) -> None:
    app = App()
    stack = Stack(app, "Consumer")
    jobs = LeaseFenceService.from_attributes(
        stack, "Jobs", table_name="leasefence-ops", payload_bucket_name="acme-leasefence-payloads",
        log_hash_secret_arn="arn:aws:secretsmanager:eu-west-1:111122223333:secret:lf-log-hash-AbCdEf",
        encryption_key_arn="arn:aws:kms:eu-west-1:111122223333:key/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        iam_api_id="a1b2c3d4e5", api_url="https://x.execute-api.eu-west-1.amazonaws.com",
    )
    caller = iam.Role(stack, "Reporting", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    jobs.grant_operate(caller)
    jobs.grant_approve(caller)
    operators = iam.Role(stack, "Operators", assumed_by=iam.AccountRootPrincipal())
    jobs.grant_erase_tenant(operators)
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    tpl = Template.from_stack(stack).to_json()
    invoke = [s for s in role_statements(tpl, logical_id(stack, caller)) if s["Action"] == "execute-api:Invoke"]
    suffixes = sorted(r["Fn::Join"][1][-1] for s in invoke for r in as_list(s["Resource"]))
    assert suffixes == [":a1b2c3d4e5/*/*/approve/*", ":a1b2c3d4e5/*/*/operate/*"]
    erasure = {s["Sid"]: s for s in role_statements(tpl, logical_id(stack, operators))}
    assert erasure["LogHashKey"]["Resource"] == "arn:aws:secretsmanager:eu-west-1:111122223333:secret:lf-log-hash-AbCdEf"
    assert "leasefence-ops" in json.dumps(erasure["TenantRows"]["Resource"])
    for level in ("error", "warning"):
        found = getattr(Annotations.from_stack(stack), f"find_{level}")("*", Match.string_like_regexp("AwsSolutions-.*"))
        assert [str(m.entry.data)[:200] for m in found] == []
    assert jobs.iam_api_url is not None and jobs.iam_api_url.startswith("https://a1b2c3d4e5.execute-api.")


def test_attributes_are_what_from_attributes_takes(synth) -> None:
    svc = synth.stacks["full"].service
    parameters = set(inspect.signature(LeaseFenceService.from_attributes).parameters) - {"scope", "construct_id"}
    attributes = svc.attributes()
    assert set(attributes) <= parameters
    assert attributes["iam_api_id"] is not None and attributes["metrics_namespace"] == svc.metrics_namespace
    with pytest.raises(ValueError, match="exactly one of table_name and table_arn"):
        LeaseFenceService.from_attributes(Stack(App(), "X"), "J", payload_bucket_name="b")


def test_the_example_app_reads_iam_tenant_from_context() -> None:
    props_ = service_props_from_context({"allowPlaceholderIssuer": "true", "iamTenant": "acme"})
    assert props_["iam_tenant"] == "acme"
    assert "iam_tenant" not in service_props_from_context({"allowPlaceholderIssuer": "true"})


def test_a_shadow_tenant_cannot_be_the_iam_tenant() -> None:
    from leasefence_infra import LeaseFenceServiceProps

    with pytest.raises(ValueError, match="shadow tenant"):
        LeaseFenceServiceProps(jwt_issuer="https://i.example/", jwt_audience=["a"], iam_tenant="shadow:acme")
