"""The construct deploys the console with the service (issue 25): its routes open on the same HTTP
API (the data routes behind the same JWT authorizer), the layer ships its files, sign-in settings
in the API function's environment, a Cognito app client for it with the user pool, and a prop that
turns it off. Synthesized offline with a pre-built core layer (no pip)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from leasefence.console import ASSETS
from leasefence_infra import LeaseFenceService, LocalLayerBundler
from leasefence_infra.props import LeaseFenceServiceProps

ISSUER = {"jwt_issuer": "https://login.example.com/", "jwt_audience": ["leasefence-api", "console-spa"]}
CONSOLE_ROUTES = {"GET /", "GET /console", "GET /console/{asset}"}


@pytest.fixture(scope="module")
def layer(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("console-layer")
    LocalLayerBundler(requirements=()).build(out)
    return out


@pytest.fixture(scope="module")
def synth(layer):
    app = App(outdir=str(layer.parent / "cdk.out"))
    services = {}
    for name, options in {
        "issuer": {**ISSUER, "console_client_id": "console-spa", "console_scopes": ["openid", "leasefence/operate"]},
        "off": {**ISSUER, "console": False},
        "pool": {"create_user_pool": True, "user_pool_domain_prefix": "lf-console-test",
                 "service_client_tenant": "acme"},
    }.items():
        stack = Stack(app, f"Console{name.title()}", env={"account": "123456789012", "region": "eu-west-1"})
        code = lambda_.Code.from_asset(str(layer))  # one per stack
        services[name] = (stack, LeaseFenceService(stack, "Jobs", core_layer=code, **options))
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return {name: (stack, svc, Template.from_stack(stack).to_json()) for name, (stack, svc) in services.items()}


def _routes(template: dict) -> dict[str, dict]:
    return {r["Properties"]["RouteKey"]: r["Properties"] for r in template["Resources"].values()
            if r["Type"] == "AWS::ApiGatewayV2::Route"}


def _api_environment(stack: Stack, svc: LeaseFenceService, template: dict) -> dict:
    lid = stack.get_logical_id(svc.api.function.function.node.default_child)
    return template["Resources"][lid]["Properties"]["Environment"]["Variables"]


def test_the_layer_ships_the_consoles_files(layer):
    package = next(layer.rglob("leasefence/console/__init__.py")).parent
    assert {p.name for p in (package / "static").iterdir()} >= set(ASSETS)


def test_console_routes_are_open_and_the_data_stays_behind_the_authorizer(synth):
    stack, svc, template = synth["issuer"]
    routes = _routes(template)
    for key in CONSOLE_ROUTES | {"GET /v1/target-classes"}:
        assert routes[key]["AuthorizationType"] == "NONE", key
    assert routes["GET /v1/state-counts"]["AuthorizationType"] == "JWT"
    assert routes["GET /v1/state-counts"]["AuthorizationScopes"] == ["leasefence/operate"]
    # An approver's inbox: the list route admits the approve scope too (the function limits it).
    assert routes["GET /v1/operations"]["AuthorizationScopes"] == ["leasefence/operate", "leasefence/approve"]
    # One integration: the console's files come from the API function itself.
    targets = {r["Target"]["Fn::Join"][1][1]["Ref"] for r in routes.values()}
    assert len(targets) == 1
    env = _api_environment(stack, svc, template)
    assert "LEASEFENCE_CONSOLE" not in env
    assert env["LEASEFENCE_CONSOLE_OIDC_ISSUER"] == "https://login.example.com/"
    assert env["LEASEFENCE_CONSOLE_OIDC_CLIENT_ID"] == "console-spa"
    assert env["LEASEFENCE_CONSOLE_OIDC_SCOPES"] == "openid leasefence/operate"


def test_console_false_routes_nothing_of_it_and_the_function_refuses_it(synth):
    stack, svc, template = synth["off"]
    routes = _routes(template)
    assert not CONSOLE_ROUTES & set(routes)
    assert "GET /v1/target-classes" in routes and "GET /v1/state-counts" in routes
    env = _api_environment(stack, svc, template)
    assert env["LEASEFENCE_CONSOLE"] == "off"
    assert not [k for k in env if k.startswith("LEASEFENCE_CONSOLE_OIDC_")]


def test_the_user_pool_gets_a_public_pkce_client_for_the_console(synth):
    stack, svc, template = synth["pool"]
    clients = {lid: r["Properties"] for lid, r in template["Resources"].items()
               if r["Type"] == "AWS::Cognito::UserPoolClient"}
    console_lid = stack.get_logical_id(svc.user_pool.console_client.node.default_child)
    console = clients[console_lid]
    assert console["GenerateSecret"] is False  # a browser keeps no secret: PKCE instead
    assert console["AllowedOAuthFlows"] == ["code"] and console["AllowedOAuthScopes"] == ["openid"]
    http_api = stack.get_logical_id(svc.api.http_api.node.default_child)
    callback = {"Fn::Join": ["", [{"Fn::GetAtt": [http_api, "ApiEndpoint"]}, "/console"]]}
    assert console["CallbackURLs"] == [callback] and console["LogoutURLs"] == [callback]
    # Its tokens are accepted by the same authorizer as the service client's.
    (authorizer,) = [r["Properties"] for r in template["Resources"].values()
                     if r["Type"] == "AWS::ApiGatewayV2::Authorizer"]
    assert {"Ref": console_lid} in authorizer["JwtConfiguration"]["Audience"]
    env = _api_environment(stack, svc, template)
    assert env["LEASEFENCE_CONSOLE_OIDC_CLIENT_ID"] == {"Ref": console_lid}
    for name, path in (("AUTHORIZATION", "/oauth2/authorize"), ("TOKEN", "/oauth2/token"), ("LOGOUT", "/logout")):
        joined = env[f"LEASEFENCE_CONSOLE_OIDC_{name}_ENDPOINT"]["Fn::Join"][1]
        assert joined[-1].endswith(path), name
    assert routes_open(template) >= CONSOLE_ROUTES


def routes_open(template: dict) -> set[str]:
    return {k for k, r in _routes(template).items() if r["AuthorizationType"] == "NONE"}


def test_no_unacknowledged_nag_findings(synth):
    for name, (stack, _svc, _template) in synth.items():
        finder = Annotations.from_stack(stack)
        for level in ("error", "warning"):
            found = getattr(finder, f"find_{level}")("*", Match.string_like_regexp("AwsSolutions-.*"))
            assert found == [], (name, level, [f.entry.data for f in found])


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"create_user_pool": True, "user_pool_domain_prefix": "p", "console_client_id": "x"}, ValueError),
        ({**ISSUER, "console": False, "console_client_id": "x"}, ValueError),
        ({**ISSUER, "console_client_id": " "}, ValueError),
        ({**ISSUER, "console_scopes": "openid profile"}, TypeError),
        ({**ISSUER, "console_scopes": ["openid profile"]}, ValueError),
    ],
)
def test_console_props_refuse_what_cannot_work(options, error):
    with pytest.raises(error):
        LeaseFenceServiceProps(**options)
