"""The Cognito user pool (``user_pool.py``): the authorizer on the pool, its resource server,
its service client, and the token URL."""

from __future__ import annotations

from tests.support.infra import logical_id, props, resources, service_of


def test_jwt_authorizer_cognito_pool(synth) -> None:
    stack, svc, tpl = service_of(synth, "full")
    pool = logical_id(stack, svc.user_pool.pool)
    client = logical_id(stack, svc.user_pool.client)
    (authorizer,) = resources(tpl, "AWS::ApiGatewayV2::Authorizer").values()
    jwt = authorizer["Properties"]["JwtConfiguration"]
    # The service client's tokens, and the operator console's (issue 25: tests/console).
    console = logical_id(stack, svc.user_pool.console_client)
    assert jwt["Audience"] == [{"Ref": client}, {"Ref": console}]
    assert jwt["Issuer"] == {"Fn::Join": ["", ["https://cognito-idp.", {"Ref": "AWS::Region"}, ".",
                                               {"Ref": "AWS::URLSuffix"}, "/", {"Ref": pool}]]}
    (server,) = resources(tpl, "AWS::Cognito::UserPoolResourceServer").values()
    assert server["Properties"]["Identifier"] == "leasefence"
    assert {s["ScopeName"] for s in server["Properties"]["Scopes"]} == {"produce", "work", "operate", "approve",
                                                                        "shadow"}
    c = props(tpl, client)
    assert c["AllowedOAuthFlows"] == ["client_credentials"] and c["GenerateSecret"] is True
    # Every scope but approve: the service client enqueues, and nobody approves their own operations.
    granted = {s["Fn::Join"][1][-1] if isinstance(s, dict) else s for s in c["AllowedOAuthScopes"]}
    assert granted == {"/produce", "/work", "/operate"}, c["AllowedOAuthScopes"]
    p = props(tpl, pool)
    assert p["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}
    assert p["LambdaConfig"]["PreTokenGenerationConfig"]["LambdaVersion"] == "V3_0"
    assert resources(tpl, "AWS::Cognito::UserPoolDomain")


def test_cognito_token_url(synth) -> None:
    _, svc, _ = service_of(synth, "full")
    assert svc.token_url is not None and svc.token_url.endswith("/oauth2/token")
    assert service_of(synth, "default")[1].token_url is None
