"""``LeaseFenceService``: the whole leasefence service as one L3 construct.

Drop it into any stack::

    LeaseFenceService(stack, "Jobs", jwt_issuer="https://idp.example.com/", jwt_audience=["leasefence"])

It composes one construct per concern (see ``infra/README.md`` for the why):

* ``Storage`` (:mod:`~leasefence_infra.storage`): the operations table (:class:`LeaseFenceTable`,
  from :mod:`leasefence.schema`) and the payload bucket - both created unless you bring your own -
  the log-hash secret and the optional customer-managed key;
* ``CoreLayer`` (``layers/leasefence`` + ``rfc8785`` + Powertools with pydantic, fastjsonschema
  and the X-Ray SDK at their locked versions, built locally without Docker); with
  ``powertools_layer="managed"`` Powertools comes from the AWS-managed layer instead (see
  :mod:`~leasefence_infra.powertools`);
* ``UserPool`` (:mod:`~leasefence_infra.user_pool`, ``create_user_pool=True`` only);
* ``Api`` (:mod:`~leasefence_infra.api`): the API function and the HTTP API with its JWT authorizer;
* ``Sweeper`` (:mod:`~leasefence_infra.sweeper`): the sweeper function and its schedule;
* ``Worker`` (:mod:`~leasefence_infra.worker`, ``worker=WorkerProps(...)`` only): your job
  handlers, run in process against the engine, drained on a schedule;
* ``StreamDispatch`` (:mod:`~leasefence_infra.dispatch`, with the worker): the table's stream
  invokes the worker as soon as work becomes claimable (by default through the one mapping it
  shares with the publisher: one reader of the stream);
* ``Publisher`` (:mod:`~leasefence_infra.publisher`): history and outcome events from the
  table's stream (its own function and mapping, or the worker's), its on-failure bucket, and
  the event bus (created unless you bring your own);
* ``Monitoring`` (:mod:`~leasefence_infra.monitoring`): dashboard, alarms and their SNS topic.
* ``InitialCatalogue`` (:mod:`~leasefence_infra.catalogue`, ``job_types={...}`` only): a custom
  resource that declares the deployment's initial job-type catalogue.

Every resource it creates is tagged ``leasefence:service=<construct path>``,
``leasefence:component=<concern>`` and with the ``tags`` you give.
"""

from __future__ import annotations

import re
from typing import Any

import jsii
from aws_cdk import IStableStringProducer, Lazy, Stack, Tags
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from constructs import Construct, IValidation

from .access import IamApi, ImportedLeaseFenceService, ServiceAccess
from .api import Api
from .assets import functions_code
from .bundling import (
    LAYER_REQUIREMENTS,
    SLIM_LAYER_REQUIREMENTS,
    core_layer_code,
    layer_description,
)
from .catalogue import InitialCatalogue
from .dispatch import StreamDispatch
from .environment import shared_environment
from .function import FunctionRuntime
from .monitoring import Monitoring, default_metrics_namespace
from .powertools import is_bundled, powertools_layer
from .props import LeaseFenceServiceProps
from .publisher import Publisher
from .storage import Storage
from .sweeper import Sweeper
from .user_pool import LeaseFenceUserPool
from .worker import Worker

#: Tag keys the service sets on everything it creates.
SERVICE_TAG = "leasefence:service"
COMPONENT_TAG = "leasefence:component"
_TAG_VALUE_UNSAFE = re.compile(r"[^\w\s.:/=+\-@]")


@jsii.implements(IValidation)
class _OwnNamespace:
    """At synth: no other service in the stack uses this service's metrics namespace (their
    metrics would mix, and each one's alarms would fire on the other's)."""

    def __init__(self, service: LeaseFenceService) -> None:
        self._service = service

    def validate(self) -> list[str]:
        service = self._service
        others = [
            c.node.path
            for c in Stack.of(service).node.find_all()
            if isinstance(c, LeaseFenceService)
            and c is not service
            and c.metrics_namespace == service.metrics_namespace
        ]
        if not others:
            return []
        return [
            f"{service.node.path} and {', '.join(others)} share the metrics namespace "
            f"{service.metrics_namespace!r}: give each service its own metrics_namespace"
        ]


class LeaseFenceService(Construct, ServiceAccess):
    """The leasefence service: table, bucket, functions, HTTP API, schedules, stream consumers,
    event bus, monitoring.

    ``LeaseFenceService(scope, id, props=None, **overrides)``: the options are the fields of
    :class:`~leasefence_infra.LeaseFenceServiceProps` (documented there and in
    ``infra/README.md``), given as keyword arguments, as a props object, or both (keywords win).
    Authentication is exactly one of ``jwt_issuer`` + ``jwt_audience``, ``create_user_pool=True``
    or ``authorizer``. Tokens must carry a ``tenant_id`` claim and a space-separated ``scope``
    claim (see ``infra/README.md``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: LeaseFenceServiceProps | None = None,
        **overrides: Any,
    ) -> None:
        props = LeaseFenceServiceProps.of(props, **overrides)  # before any construct is added
        super().__init__(scope, construct_id)
        self.props = props
        #: The EMF namespace of every function, alarm and dashboard widget of this service: by
        #: default ``LeaseFence/<stack name>/<path below the stack>``, one per service.
        self.metrics_namespace = props.metrics_namespace or default_metrics_namespace(self)
        self.node.add_validation(_OwnNamespace(self))
        self.log_level = props.log_level
        Tags.of(self).add(SERVICE_TAG, _TAG_VALUE_UNSAFE.sub("-", self.node.path))
        for key, value in props.tags.items():
            Tags.of(self).add(key, value)

        self.storage = Storage(self, "Storage", props=props)

        # ------------------------------------------------------------------ layers
        bundled = is_bundled(props.powertools_layer)
        requirements = LAYER_REQUIREMENTS if bundled else SLIM_LAYER_REQUIREMENTS
        self.core_layer = lambda_.LayerVersion(
            self,
            "CoreLayer",
            code=props.core_layer or core_layer_code(requirements=requirements),
            compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
            compatible_architectures=[lambda_.Architecture.ARM_64],
            description=layer_description(requirements)
            if props.core_layer is None
            else "leasefence core package, pre-built (python3.12, arm64)",
        )
        #: The AWS-managed (or given) Powertools layer; None when the core layer bundles it.
        self.powertools_layer = powertools_layer(self, props.powertools_layer)
        #: The worker's handler package (``WorkerProps.code``). CDK renders a function's layers
        #: sorted by construct path (flag recognizeLayerVersion), so its id sorts before
        #: "CoreLayer": it merges first and the core (and Powertools) layers win any clash.
        self.worker_handlers_layer: lambda_.LayerVersion | None = None
        if props.worker is not None and props.worker.code is not None:
            self.worker_handlers_layer = lambda_.LayerVersion(
                self,
                "AppHandlersLayer",
                code=props.worker.code,
                compatible_runtimes=[lambda_.Runtime.PYTHON_3_12],
                compatible_architectures=[lambda_.Architecture.ARM_64],
                description=f"leasefence worker handlers ({props.worker.module})",
            )
        runtime = FunctionRuntime(
            code=functions_code(),
            layers=(self.core_layer,)
            if self.powertools_layer is None
            else (self.core_layer, self.powertools_layer),
            log_level=props.log_level,
            log_retention=props.log_retention,
            removal_policy=props.removal_policy,
            snap_start=props.snap_start,
            tracing=props.tracing,
            system_log_level=props.system_log_level,
        )
        environment = shared_environment(
            table_name=self.storage.table.table_name,
            bucket_name=self.storage.payload_bucket.bucket_name,
            due_shards=props.due_shards,
            sweep_shards=props.sweep_shards,
            operation_shards=props.operation_shards,
            log_hash_secret_arn=self.storage.log_hash_key.secret_arn,
            identity_retention_days=props.identity_retention_days,
            payload_retention_days=props.payload_retention_days,
            fence_epoch=props.fence_epoch,
            pack_payloads=props.pack_payloads,
            metrics_namespace=self.metrics_namespace,
            powertools_log_level=runtime.powertools_log_level(),
        )

        # ------------------------------------------------------------------ authentication
        self.user_pool: LeaseFenceUserPool | None = None
        if props.create_user_pool:
            assert props.user_pool_domain_prefix is not None
            self.user_pool = LeaseFenceUserPool(
                self,
                "UserPool",
                domain_prefix=props.user_pool_domain_prefix,
                pre_token_generation=props.pre_token_generation,
                client_tenants=props.client_tenants,
                service_client_tenant=props.service_client_tenant,
                runtime=runtime,
                removal_policy=props.removal_policy,
                # The console signs people in through the pool: its callback is this API's
                # /console, known once the API exists (resolved at synth).
                console_callback_url=Lazy.string(_ConsoleUrl(self)) if props.console else None,
                console_scopes=props.console_scopes,
            )
            Tags.of(self.user_pool).add(COMPONENT_TAG, "user-pool")
        authorizer = props.authorizer or self._jwt_authorizer(props)

        # ------------------------------------------------------------------ concerns
        self.api = Api(
            self,
            "Api",
            runtime=runtime,
            storage=self.storage,
            environment=environment,
            authorizer=authorizer,
            tenant_isolation=props.tenant_isolation,
            memory_mb=props.api_memory_mb,
            throttling_rate_limit=props.throttling_rate_limit,
            throttling_burst_limit=props.throttling_burst_limit,
            console=props.console,
        )
        for name, value in self._console_sign_in(props).items():
            self.api.function.function.add_environment(name, value)
        #: The IAM-authorized API for callers inside AWS (``iam_tenant``), else None.
        self.iam_api: IamApi | None = None
        if props.iam_tenant is not None:
            self.iam_api = IamApi(
                self,
                "IamApi",
                api=self.api,
                tenant=props.iam_tenant,
                runtime=runtime,
                throttling_rate_limit=props.throttling_rate_limit,
                throttling_burst_limit=props.throttling_burst_limit,
            )
        self.sweeper = Sweeper(
            self,
            "Sweeper",
            runtime=runtime,
            storage=self.storage,
            environment=environment,
            memory_mb=props.sweeper_memory_mb,
        )
        self.worker: Worker | None = None
        if props.worker is not None:
            self.worker = Worker(
                self,
                "Worker",
                props=props.worker,
                runtime=runtime,
                storage=self.storage,
                environment=environment,
                handlers_layer=self.worker_handlers_layer,
            )
        # One reader of the stream by default: the worker's function also publishes.
        shared = self.worker is not None and self.worker.props.stream_readers == 1
        self.publisher = Publisher(
            self,
            "Publisher",
            runtime=runtime,
            storage=self.storage,
            environment=environment,
            events_on=props.events,
            event_bus=props.event_bus,
            access_logs=props.server_access_logs_bucket,
            removal_policy=props.removal_policy,
            function=self.worker.function if shared and self.worker is not None else None,
        )
        self.dispatch: StreamDispatch | None = None
        if self.worker is not None:
            self.dispatch = StreamDispatch(
                self,
                "StreamDispatch",
                worker=self.worker,
                table=self.storage.table,
                key=self.storage.encryption_key,
                publisher=self.publisher if shared else None,
            )
        #: The alarms, their topic and the dashboard (``alarms``, ``dashboard``); None: no alarms.
        self.monitoring: Monitoring | None = None
        if props.alarms:
            self.monitoring = self._monitoring(props)
            # The go/no-go report names the alarm topic as the alert route of every job type.
            self.api.function.function.add_environment(
                "LEASEFENCE_ALARM_TOPIC", self.monitoring.topic.topic_arn
            )
        self.catalogue: InitialCatalogue | None = None
        if props.job_types:
            self.catalogue = InitialCatalogue(
                self,
                "Catalogue",
                catalogues=props.job_types,
                runtime=runtime,
                storage=self.storage,
                environment=environment,
            )
        for component, construct in (
            ("storage", self.storage),
            ("api", self.api),
            ("api", self.iam_api),
            ("sweeper", self.sweeper),
            ("worker", self.worker),
            ("dispatch", self.dispatch),
            ("publisher", self.publisher),
            ("monitoring", self.monitoring),
            ("catalogue", self.catalogue),
        ):
            if construct is not None:
                Tags.of(construct).add(COMPONENT_TAG, component)

    def _monitoring(self, props: LeaseFenceServiceProps) -> Monitoring:
        return Monitoring(
            self,
            "Monitoring",
            metrics_namespace=self.metrics_namespace,
            topic=props.alarm_topic,
            service_key=self.storage.encryption_key,
            table=self.storage.table,
            api=self.api,
            sweeper=self.sweeper,
            worker=self.worker,
            dispatch=self.dispatch,
            publisher=self.publisher,
            oldest_unknown_alarm_age=props.oldest_unknown_alarm_age,
            oldest_due_alarm_age=props.oldest_due_alarm_age,
            quarantine_alarm_threshold=props.quarantine_alarm_threshold,
            takeover_alarm_percent=props.takeover_alarm_percent,
            stale_fence_alarm_threshold=props.stale_fence_alarm_threshold,
            api_5xx_alarm_threshold=props.api_5xx_alarm_threshold,
            stream_iterator_age_alarm_age=props.stream_iterator_age_alarm_age,
            dashboard=props.dashboard,
        )

    def _console_sign_in(self, props: LeaseFenceServiceProps) -> dict[str, str]:
        """How the console signs people in (``leasefence.console``): OpenID Connect with PKCE
        through the created user pool's console client, or the issuer's client you named
        (``console_client_id``); else nothing (the page takes a pasted token)."""
        prefix = "LEASEFENCE_CONSOLE_OIDC_"
        scopes = " ".join(props.console_scopes)
        if not props.console:
            return {}
        if self.user_pool is not None and self.user_pool.console_client is not None:
            base = self.user_pool.domain.base_url()
            return {
                f"{prefix}ISSUER": self.user_pool.issuer,
                f"{prefix}CLIENT_ID": self.user_pool.console_client.user_pool_client_id,
                f"{prefix}SCOPES": scopes,
                f"{prefix}AUTHORIZATION_ENDPOINT": f"{base}/oauth2/authorize",
                f"{prefix}TOKEN_ENDPOINT": f"{base}/oauth2/token",
                f"{prefix}LOGOUT_ENDPOINT": f"{base}/logout",
            }
        if props.console_client_id is not None and props.jwt_issuer is not None:
            return {
                f"{prefix}ISSUER": props.jwt_issuer,
                f"{prefix}CLIENT_ID": props.console_client_id,
                f"{prefix}SCOPES": scopes,
            }
        return {}

    def _jwt_authorizer(self, props: LeaseFenceServiceProps) -> authorizers.HttpJwtAuthorizer:
        if self.user_pool is not None:
            issuer, audience = (
                self.user_pool.issuer,
                [*self.user_pool.audience, *props.jwt_audience],
            )
        else:
            assert props.jwt_issuer is not None
            issuer, audience = props.jwt_issuer, list(props.jwt_audience)
        return authorizers.HttpJwtAuthorizer(
            "JwtAuthorizer",
            issuer,
            jwt_audience=audience,
            identity_source=["$request.header.Authorization"],
        )

    # ---------------------------------------------------------------------- what a stack uses

    @property
    def table(self) -> dynamodb.ITable:
        """The operations table (created, or the one you brought)."""
        return self.storage.table

    @property
    def payload_bucket(self) -> s3.IBucket:
        """The payload bucket (created, or the one you brought)."""
        return self.storage.payload_bucket

    @property
    def encryption_key(self) -> kms.IKey | None:
        """The service's customer-managed key, if any."""
        return self.storage.encryption_key

    @property
    def http_api(self) -> apigw.HttpApi:
        return self.api.http_api

    @property
    def api_url(self) -> str:
        """``https://<api-id>.execute-api.<region>.amazonaws.com`` (no trailing slash)."""
        return self.api.url

    @property
    def alarm_topic(self) -> sns.ITopic | None:
        """Every alarm publishes here (created, or the one you brought): subscribe to it. None
        with ``alarms=False``."""
        return self.monitoring.topic if self.monitoring is not None else None

    @property
    def dashboard(self) -> cw.Dashboard | None:
        """The dashboard (``dashboard=True``), else None."""
        return self.monitoring.dashboard if self.monitoring is not None else None

    @property
    def worker_function(self) -> lambda_.Function | None:
        """The worker function (``worker=WorkerProps(...)``), e.g. to grant it more."""
        return self.worker.function.function if self.worker is not None else None

    @property
    def event_bus(self) -> events.IEventBus | None:
        """The bus of the outcome events (created, or the one you brought): add your rules to it
        (``leasefence.streams.events.subscription_pattern`` builds their patterns). None with
        ``events=False`` (the default)."""
        return self.publisher.event_bus

    @property
    def publisher_function(self) -> lambda_.Function:
        """The function that publishes (history and outcome events), e.g. to grant it your bus's
        key: the worker's when it shares the stream's one mapping (``stream_readers=1``), else
        the publisher's own."""
        return self.publisher.function.function

    @property
    def iam_api_url(self) -> str | None:
        """The IAM API's base URL (``iam_tenant``), else None: callers sign with SigV4."""
        return self.iam_api.url if self.iam_api is not None else None

    def _access(self) -> dict[str, Any]:
        return {
            "scope": self,
            "iam_api_id": self.iam_api.http_api.api_id if self.iam_api is not None else None,
            "table": self.storage.table,
            "payload_bucket": self.storage.payload_bucket,
            "log_hash_key": self.storage.log_hash_key,
            "keys": list(self.storage.data_keys),
        }

    @staticmethod
    def from_attributes(
        scope: Construct,
        construct_id: str,
        *,
        payload_bucket_name: str,
        table_name: str | None = None,
        table_arn: str | None = None,
        table_stream_arn: str | None = None,
        log_hash_secret_arn: str | None = None,
        encryption_key_arn: str | None = None,
        api_url: str | None = None,
        iam_api_id: str | None = None,
        alarm_topic_arn: str | None = None,
        event_bus_arn: str | None = None,
        metrics_namespace: str | None = None,
    ) -> ImportedLeaseFenceService:
        """A service deployed elsewhere (another stack or app), for its ``grant_*`` and its
        resources: give its table (name or ARN) and payload bucket, and what you use of the rest
        (``iam_api_id`` for the ``grant_*`` of the IAM API, ``log_hash_secret_arn`` and
        ``encryption_key_arn`` for :meth:`grant_erase_tenant`). In one app,
        :meth:`attributes` of the service gives them all."""
        return ImportedLeaseFenceService(
            scope,
            construct_id,
            table_name=table_name,
            table_arn=table_arn,
            table_stream_arn=table_stream_arn,
            payload_bucket_name=payload_bucket_name,
            log_hash_secret_arn=log_hash_secret_arn,
            encryption_key_arn=encryption_key_arn,
            api_url=api_url,
            iam_api_id=iam_api_id,
            alarm_topic_arn=alarm_topic_arn,
            event_bus_arn=event_bus_arn,
            metrics_namespace=metrics_namespace,
        )

    def attributes(self) -> dict[str, str | None]:
        """The keyword arguments of :meth:`from_attributes` for this service (tokens: use them in
        another stack of this app, or put them in outputs)."""
        key = self.storage.encryption_key
        return {
            "table_arn": self.storage.table.table_arn,
            "table_stream_arn": self.storage.table.table_stream_arn,
            "payload_bucket_name": self.storage.payload_bucket.bucket_name,
            "log_hash_secret_arn": self.storage.log_hash_key.secret_arn,
            "encryption_key_arn": key.key_arn if key is not None else None,
            "api_url": self.api_url,
            "iam_api_id": self.iam_api.http_api.api_id if self.iam_api is not None else None,
            "alarm_topic_arn": self.alarm_topic.topic_arn if self.alarm_topic else None,
            "event_bus_arn": self.event_bus.event_bus_arn if self.event_bus else None,
            "metrics_namespace": self.metrics_namespace,
        }

    @property
    def token_url(self) -> str | None:
        """The Cognito OAuth2 token endpoint (client credentials), when the pool is created."""
        return self.user_pool.token_url if self.user_pool is not None else None


@jsii.implements(IStableStringProducer)
class _ConsoleUrl:
    """The console's URL (``<api url>/console``), produced at synth once the API exists."""

    def __init__(self, service: LeaseFenceService) -> None:
        self._service = service

    def produce(self) -> str:
        return f"{self._service.api.url}/console"
