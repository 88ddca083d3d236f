"""The shipped Cognito pre token generation trigger (``functions/pretoken``): the claims it adds
to the sample events in ``events/``, and the construct attaching it to the user pool it creates."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks
from tests.support.infra import as_list, getatt, logical_id, props, resources, role_statements
from leasefence_infra import LeaseFenceService, LeaseFenceServiceProps

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"


def _handler_module():
    spec = importlib.util.spec_from_file_location("pretoken_handler", ROOT / "functions" / "pretoken" / "handler.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


handler = _handler_module()


def _event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text())


def _details(event: dict[str, Any]) -> dict[str, Any]:
    return handler.lambda_handler(copy.deepcopy(event), None)["response"]["claimsAndScopeOverrideDetails"]


def test_user_event_gets_tenant_id_and_group_scopes() -> None:
    details = _details(_event("pretoken-user.json"))
    access = details["accessTokenGeneration"]
    assert access["claimsToAddOrOverride"] == {"tenant_id": "tenant-sample"}
    assert access["scopesToAdd"] == ["leasefence/operate", "leasefence/produce"]
    assert details["idTokenGeneration"]["claimsToAddOrOverride"] == {"tenant_id": "tenant-sample"}
    event = _event("pretoken-user.json")
    event["request"]["groupConfiguration"]["groupsToOverride"] = ["tenant:tenant-sample", "leasefence-approve"]
    assert _details(event)["accessTokenGeneration"]["scopesToAdd"] == ["leasefence/approve"]
    # Shadow mode: a user of a shadow:<tenant> tenant in the group leasefence-shadow.
    event["request"]["groupConfiguration"]["groupsToOverride"] = ["tenant:shadow:acme", "leasefence-work",
                                                                  "leasefence-shadow"]
    access = _details(event)["accessTokenGeneration"]
    assert access["claimsToAddOrOverride"] == {"tenant_id": "shadow:acme"}
    assert sorted(access["scopesToAdd"]) == ["leasefence/shadow", "leasefence/work"]


def test_tenant_attribute_wins_and_ambiguous_groups_give_no_tenant() -> None:
    event = _event("pretoken-user.json")
    event["request"]["userAttributes"]["custom:tenant_id"] = "acme"
    assert _details(event)["accessTokenGeneration"]["claimsToAddOrOverride"] == {"tenant_id": "acme"}
    event = _event("pretoken-user.json")
    event["request"]["groupConfiguration"]["groupsToOverride"].append("tenant:globex")
    assert _details(event)["accessTokenGeneration"]["claimsToAddOrOverride"] == {}  # fail closed
    event["request"]["groupConfiguration"]["groupsToOverride"] = []
    assert _details(event)["accessTokenGeneration"] == {"claimsToAddOrOverride": {}}


def test_client_credentials_event_gets_the_clients_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    event = _event("pretoken-client-credentials.json")
    monkeypatch.setenv("LEASEFENCE_CLIENT_TENANTS", json.dumps({"1example23456789": "tenant-sample"}))
    details = _details(event)
    assert details == {"accessTokenGeneration": {"claimsToAddOrOverride": {"tenant_id": "tenant-sample"}}}
    monkeypatch.setenv("LEASEFENCE_CLIENT_TENANTS", json.dumps({"another-client": "tenant-sample"}))
    assert _details(event) == {"accessTokenGeneration": {"claimsToAddOrOverride": {}}}
    monkeypatch.setenv("LEASEFENCE_CLIENT_TENANTS", "not json")
    assert _details(event) == {"accessTokenGeneration": {"claimsToAddOrOverride": {}}}


@pytest.fixture(scope="module")
def pool_stack(prebuilt_layer: Path) -> tuple[Stack, LeaseFenceService, dict[str, Any]]:
    app = App()
    stack = Stack(app, "LeaseFencePool")
    svc = LeaseFenceService(stack, "LeaseFence", create_user_pool=True, user_pool_domain_prefix="lf-pool",
                            client_tenants={"partner-client-1": "globex"},
                            service_client_tenant="tenant-sample",
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack, svc, Template.from_stack(stack).to_json()


def test_user_pool_gets_the_shipped_trigger(pool_stack) -> None:
    stack, svc, tpl = pool_stack
    assert svc.user_pool.pre_token is not None
    fn = logical_id(stack, svc.user_pool.pre_token.function)
    pool = props(tpl, logical_id(stack, svc.user_pool.pool))
    assert pool["LambdaConfig"]["PreTokenGenerationConfig"] == {"LambdaArn": getatt(fn), "LambdaVersion": "V3_0"}
    assert pool["UserPoolTier"] == "ESSENTIALS"  # V3 (client-credentials) triggers need it
    f = props(tpl, fn)
    assert f["Handler"] == "pretoken.handler.lambda_handler" and f["Runtime"] == "python3.12"
    assert json.loads(f["Environment"]["Variables"]["LEASEFENCE_CLIENT_TENANTS"]) == {
        "partner-client-1": "globex"}
    Template.from_json(tpl).has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunction", "FunctionName": getatt(fn),
        "Principal": "cognito-idp.amazonaws.com", "SourceArn": getatt(logical_id(stack, svc.user_pool.pool)),
    })
    # Its role writes its own log group and nothing else.
    role = f["Role"]["Fn::GetAtt"][0]
    statements = [st for p in resources(tpl, "AWS::IAM::Policy").values()
                  if {"Ref": role} in p["Properties"]["Roles"] for st in p["Properties"]["PolicyDocument"]["Statement"]]
    assert {a for st in statements for a in as_list(st["Action"])} == {
        "logs:CreateLogStream", "logs:PutLogEvents", "ssm:GetParameter"}


def test_user_pool_stack_has_no_unacknowledged_nag_findings(pool_stack) -> None:
    stack, _, _ = pool_stack
    finder = Annotations.from_stack(stack)
    for level in ("error", "warning"):
        found = getattr(finder, f"find_{level}")("*", Match.string_like_regexp("AwsSolutions-.*"))
        assert [str(m.entry.data)[:200] for m in found] == []


def test_own_trigger_replaces_the_shipped_one(synth) -> None:
    svc = synth.stacks["full"].service
    assert svc.user_pool.pre_token is None  # the full stack brings its own (imported) trigger


def _resolve(value: Any, region: str, account: str) -> Any:
    """A template value built from pseudo parameters and Fn::Join, as CloudFormation would."""
    pseudo = {"AWS::Partition": "aws", "AWS::Region": region, "AWS::AccountId": account}
    if isinstance(value, dict) and "Ref" in value and value["Ref"] in pseudo:
        return pseudo[value["Ref"]]
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolve(p, region, account) for p in parts)
    return value


def test_the_pools_own_client_gets_its_tenant(pool_stack, aws, monkeypatch) -> None:
    """The README's smoke test: a client-credentials token of the pool's own app client. The
    construct hands the trigger that client's id through SSM; the trigger, run with the sample
    event of that client and the environment the template gives it, adds the tenant."""
    stack, svc, tpl = pool_stack
    pool = svc.user_pool
    fn = props(tpl, logical_id(stack, pool.pre_token.function))
    env = fn["Environment"]["Variables"]
    assert env["LEASEFENCE_SERVICE_CLIENT_TENANT"] == "tenant-sample"
    ((_, parameter),) = resources(tpl, "AWS::SSM::Parameter").items()
    name = parameter["Properties"]["Name"]
    assert env["LEASEFENCE_SERVICE_CLIENT_PARAMETER"] == name
    # The parameter holds the client's id (a Ref: known once the client exists).
    assert parameter["Properties"]["Value"] == {"Ref": logical_id(stack, pool.client)}
    role = fn["Role"]["Fn::GetAtt"][0]
    (grant,) = [st for st in role_statements(tpl, role) if st["Action"] == "ssm:GetParameter"]

    # Deployed: CloudFormation resolves the Ref to the client's id, the sample event's.
    event = _event("pretoken-client-credentials.json")
    client_id = event["callerContext"]["clientId"]
    ssm = aws.client("ssm")
    ssm.put_parameter(Name=name, Value=client_id, Type="String", Overwrite=True)
    arn = ssm.get_parameter(Name=name)["Parameter"]["ARN"]
    region, account = arn.split(":")[3], arn.split(":")[4]
    assert _resolve(grant["Resource"], region, account) == arn  # the role may read exactly it
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(handler, "_ssm", lambda: ssm)
    monkeypatch.setattr(handler, "_service_client", {})
    assert _details(event) == {"accessTokenGeneration": {"claimsToAddOrOverride": {"tenant_id": "tenant-sample"}}}
    # Another client of the pool (not listed): no tenant, fail closed. A listed one: its own.
    other = copy.deepcopy(event)
    other["callerContext"]["clientId"] = "someone-else"
    assert _details(other) == {"accessTokenGeneration": {"claimsToAddOrOverride": {}}}
    other["callerContext"]["clientId"] = "partner-client-1"
    assert _details(other) == {"accessTokenGeneration": {"claimsToAddOrOverride": {"tenant_id": "globex"}}}


def test_an_unreadable_client_parameter_gives_no_tenant(monkeypatch) -> None:
    event = _event("pretoken-client-credentials.json")
    monkeypatch.setenv("LEASEFENCE_SERVICE_CLIENT_TENANT", "tenant-sample")
    monkeypatch.setenv("LEASEFENCE_SERVICE_CLIENT_PARAMETER", "/leasefence/service-client/x")
    monkeypatch.delenv("LEASEFENCE_CLIENT_TENANTS", raising=False)

    class Denied:
        def get_parameter(self, **_kwargs: Any) -> Any:
            raise PermissionError("AccessDenied")

    monkeypatch.setattr(handler, "_ssm", Denied)
    monkeypatch.setattr(handler, "_service_client", {})
    assert _details(event) == {"accessTokenGeneration": {"claimsToAddOrOverride": {}}}


def test_a_pool_without_a_service_client_tenant_warns_at_synth(prebuilt_layer: Path) -> None:
    app = App()
    stack = Stack(app, "PoolNoTenant")
    LeaseFenceService(stack, "LeaseFence", create_user_pool=True, user_pool_domain_prefix="lf-pool2",
                      core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(".*service_client_tenant.*"))
    assert len(warnings) == 1
    assert resources(Template.from_stack(stack).to_json(), "AWS::SSM::Parameter") == {}


@pytest.mark.parametrize("overrides", [
    {"service_client_tenant": "acme"},  # no pool
    {"create_user_pool": True, "user_pool_domain_prefix": "p", "service_client_tenant": ""},
    {"create_user_pool": True, "user_pool_domain_prefix": "p", "service_client_tenant": " acme"},
])
def test_a_bad_service_client_tenant_is_refused(overrides) -> None:
    base = {} if overrides.get("create_user_pool") else {"jwt_issuer": "https://i.example/", "jwt_audience": ["a"]}
    with pytest.raises(ValueError, match="service_client_tenant"):
        LeaseFenceServiceProps(**base, **overrides)
