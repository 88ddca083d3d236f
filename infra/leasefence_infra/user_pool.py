"""The optional Cognito user pool (``create_user_pool=True``) that issues the API's tokens, with
the shipped pre token generation trigger (``functions/pretoken``) that adds ``tenant_id``."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from .contract import RESOURCE_SERVER_ID
from .function import FunctionRuntime, ServiceFunction
from .nag import acknowledge

#: The pre token generation trigger shipped with the user pool (``functions/pretoken``).
PRETOKEN_HANDLER = "pretoken.handler.lambda_handler"

_SCOPES = (
    ("produce", "enqueue operations, read and cancel them"),
    ("work", "claim operations and report their outcome"),
    ("operate", "list operations, resolve unknown/quarantined ones, erase operations"),
    ("approve", "approve or reject operations awaiting approval"),
    ("shadow", "shadow mode: act as a shadow:<tenant> (a reserved namespace, never dispatched)"),
)
#: The scopes of the pool's one service client: all but ``approve``. An approver must be another
#: identity than the producer that enqueued the operation (the API refuses a self-approval), and
#: the service client's tokens all carry the same identity (its client id): approvers are users
#: in the group ``leasefence-approve`` or an app client of your own (listed in ``jwt_audience``).
_SERVICE_CLIENT_SCOPES = ("produce", "work", "operate")


class LeaseFenceUserPool(Construct):
    """A machine-to-machine pool: resource server ``leasefence`` with the four scopes, a domain
    for the token endpoint, one confidential client-credentials app client (every scope but
    ``approve``: see :data:`_SERVICE_CLIENT_SCOPES`).

    :attr:`issuer` and :attr:`audience` are what the API's JWT authorizer checks.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        domain_prefix: str,
        pre_token_generation: lambda_.IFunction | None,
        client_tenants: Mapping[str, str],
        runtime: FunctionRuntime,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        #: The shipped trigger, unless you gave ``pre_token_generation``.
        self.pre_token: ServiceFunction | None = None
        if pre_token_generation is None:
            self.pre_token = ServiceFunction(
                self,
                "PreToken",
                runtime=runtime,
                handler=PRETOKEN_HANDLER,
                description="leasefence: tenant_id and scope claims for the user pool's tokens",
                environment={
                    "LEASEFENCE_CLIENT_TENANTS": json.dumps(dict(client_tenants), sort_keys=True)
                },
                memory_mb=128,
                timeout=Duration.seconds(5),
                layers=(),  # the standard library only
            )
            pre_token_generation = self.pre_token.function
        self.pool = pool = cognito.UserPool(
            self,
            "Pool",
            self_sign_up_enabled=False,
            sign_in_case_sensitive=False,
            # Machine-to-machine pool (client credentials); a password policy and MFA still apply
            # to any human user someone adds later.
            password_policy=cognito.PasswordPolicy(
                min_length=14,
                require_digits=True,
                require_lowercase=True,
                require_uppercase=True,
                require_symbols=True,
            ),
            mfa=cognito.Mfa.REQUIRED,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            account_recovery=cognito.AccountRecovery.NONE,
            # V3 trigger events (client-credentials tokens too) need the Essentials plan.
            feature_plan=cognito.FeaturePlan.ESSENTIALS,
            removal_policy=removal_policy,
        )
        # V3 events reach the trigger for client-credentials tokens too: that is where a
        # `tenant_id` claim is added (see infra/README.md).
        pool.add_trigger(
            cognito.UserPoolOperation.PRE_TOKEN_GENERATION_CONFIG,
            pre_token_generation,
            cognito.LambdaVersion.V3_0,
        )
        acknowledge(
            pool,
            "AwsSolutions-COG8",
            "The Plus feature plan adds threat protection for user sign-ins; this pool issues "
            "client-credentials tokens to services only (no users sign in).",
        )
        scopes = [
            cognito.ResourceServerScope(scope_name=name, scope_description=desc)
            for name, desc in _SCOPES
        ]
        self.resource_server = pool.add_resource_server(
            "ResourceServer", identifier=RESOURCE_SERVER_ID, scopes=scopes
        )
        self.domain = pool.add_domain(
            "Domain", cognito_domain=cognito.CognitoDomainOptions(domain_prefix=domain_prefix)
        )
        self.client = pool.add_client(
            "ServiceClient",
            generate_secret=True,
            auth_flows=cognito.AuthFlow(),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(client_credentials=True),
                scopes=[
                    cognito.OAuthScope.resource_server(self.resource_server, s)
                    for s in scopes
                    if s.scope_name in _SERVICE_CLIENT_SCOPES
                ],
            ),
            access_token_validity=Duration.hours(1),
            prevent_user_existence_errors=True,
        )
        stack = Stack.of(self)
        #: The issuer as it appears in the tokens' ``iss`` (CloudFormation's ProviderURL lacks the
        #: scheme, so it is built here the way HttpUserPoolAuthorizer builds it).
        self.issuer = f"https://cognito-idp.{stack.region}.{stack.url_suffix}/{pool.user_pool_id}"
        #: Cognito access tokens have no ``aud``; API Gateway then checks ``client_id`` against
        #: the audience list, so the audience is the app client id.
        self.audience = [self.client.user_pool_client_id]

    @property
    def token_url(self) -> str:
        """The OAuth2 token endpoint (client credentials)."""
        return f"{self.domain.base_url()}/oauth2/token"
