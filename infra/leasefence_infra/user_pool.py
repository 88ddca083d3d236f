"""The optional Cognito user pool (``create_user_pool=True``) that issues the API's tokens, with
the shipped pre token generation trigger (``functions/pretoken``) that adds ``tenant_id``.

The pool's own app client gets its tenant from ``service_client_tenant``. Its id is known only
once the pool exists, and the pool names the trigger, so the id cannot be in the trigger's
environment (a dependency cycle): it is written to an SSM parameter whose name is fixed at synth
(:func:`service_client_parameter_name`), which the trigger reads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from aws_cdk import Annotations, ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
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
#: Prefix of the SSM parameter holding the pool's own app client id (one per pool construct).
SERVICE_CLIENT_PARAMETER_PREFIX = "/leasefence/service-client/"


def service_client_parameter_name(pool_construct: Construct) -> str:
    """The SSM parameter naming a pool's own app client: fixed at synth (the construct's
    address, unique per construct path, so per stack and service), so the trigger's role can
    be granted it without depending on the parameter."""
    return f"{SERVICE_CLIENT_PARAMETER_PREFIX}{pool_construct.node.addr}"


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
        service_client_tenant: str | None = None,
        console_callback_url: str | None = None,
        console_scopes: Sequence[str] = ("openid",),
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
                # boto3 (the pool's own client id, from SSM) imports faster with more memory.
                memory_mb=256 if service_client_tenant is not None else 128,
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
        #: The operator console's app client (``console_callback_url``), else None: public (no
        #: secret), authorization code with PKCE, redirected back to the console. Its tokens carry
        #: a person's identity; the groups ``leasefence-<scope>`` and ``tenant:<id>`` (or the
        #: ``custom:tenant_id`` attribute) give them scopes and a tenant (the shipped trigger).
        self.console_client: cognito.UserPoolClient | None = None
        if console_callback_url is not None:
            self.console_client = pool.add_client(
                "ConsoleClient",
                generate_secret=False,
                auth_flows=cognito.AuthFlow(),
                o_auth=cognito.OAuthSettings(
                    flows=cognito.OAuthFlows(authorization_code_grant=True),
                    scopes=[cognito.OAuthScope.custom(name) for name in console_scopes],
                    callback_urls=[console_callback_url],
                    logout_urls=[console_callback_url],
                ),
                supported_identity_providers=[cognito.UserPoolClientIdentityProvider.COGNITO],
                access_token_validity=Duration.hours(1),
                id_token_validity=Duration.hours(1),
                refresh_token_validity=Duration.hours(12),
                prevent_user_existence_errors=True,
            )
        stack = Stack.of(self)
        #: The SSM parameter holding :attr:`client`'s id, with ``service_client_tenant``.
        self.service_client_parameter: ssm.StringParameter | None = None
        if self.pre_token is not None and service_client_tenant is not None:
            self._map_service_client(stack, self.pre_token, service_client_tenant)
        elif self.pre_token is not None:
            Annotations.of(self).add_warning_v2(
                "leasefence:service-client-without-tenant",
                "The user pool's app client is mapped to no tenant: its client-credentials "
                "tokens carry no tenant_id and the API answers 401. Set service_client_tenant "
                "(context serviceClientTenant) to the tenant it acts for.",
            )
        #: The issuer as it appears in the tokens' ``iss`` (CloudFormation's ProviderURL lacks the
        #: scheme, so it is built here the way HttpUserPoolAuthorizer builds it).
        self.issuer = f"https://cognito-idp.{stack.region}.{stack.url_suffix}/{pool.user_pool_id}"
        #: Cognito access tokens have no ``aud``; API Gateway then checks ``client_id`` against
        #: the audience list, so the audience is the app client id.
        self.audience = [self.client.user_pool_client_id]
        if self.console_client is not None:
            self.audience.append(self.console_client.user_pool_client_id)

    def _map_service_client(self, stack: Stack, pre_token: ServiceFunction, tenant: str) -> None:
        name = service_client_parameter_name(self)
        self.service_client_parameter = ssm.StringParameter(
            self,
            "ServiceClientId",
            parameter_name=name,
            string_value=self.client.user_pool_client_id,
            description="leasefence: the user pool's own app client id (pre token trigger)",
        )
        function = pre_token.function
        function.add_environment("LEASEFENCE_SERVICE_CLIENT_TENANT", tenant)
        function.add_environment("LEASEFENCE_SERVICE_CLIENT_PARAMETER", name)
        pre_token.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ServiceClientId",
                actions=["ssm:GetParameter"],
                # Built from the name, not the parameter: the parameter depends on the client,
                # the client on the pool, the pool on this function and its role.
                resources=[
                    stack.format_arn(
                        service="ssm",
                        resource="parameter",
                        resource_name=name.lstrip("/"),
                        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                    )
                ],
            )
        )

    @property
    def token_url(self) -> str:
        """The OAuth2 token endpoint (client credentials)."""
        return f"{self.domain.base_url()}/oauth2/token"
