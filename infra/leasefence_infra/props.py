"""``LeaseFenceServiceProps``: every option of :class:`~leasefence_infra.LeaseFenceService`, typed,
documented field by field, with defaults checked when the object is built.

``LeaseFenceService(stack, "Jobs", jwt_issuer=..., jwt_audience=[...])`` builds one from keyword
arguments; ``LeaseFenceService(stack, "Jobs", props, log_level="DEBUG")`` overrides fields of a
props object. The table of fields in ``infra/README.md`` is generated from the docstrings below
(:mod:`leasefence_infra.props_doc`; a test keeps the two equal).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Token, aws_events
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from leasefence import observability_defaults, schema
from leasefence.keys import is_shadow_tenant
from leasefence.limits import MAX_FENCE_EPOCH

from . import prop_checks
from .alarm_topic import refuse_unusable_topic
from .function import LOG_LEVELS
from .powertools import check_choice as check_powertools_layer
from .stream import NO_STREAM_MESSAGE
from .worker_props import WorkerProps, validate_worker

_NAMESPACE_RE = re.compile(r"^[0-9A-Za-z._/#: -]{1,255}$")
_DOMAIN_PREFIX_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_TAG_RE = re.compile(r"^[\w\s.:/=+\-@]*$")
_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
MAX_SHARDS = 100


@dataclass(frozen=True, kw_only=True)
class LeaseFenceServiceProps:
    """Options of a ``LeaseFenceService``. Authentication is exactly one of: ``jwt_issuer`` +
    ``jwt_audience``, ``create_user_pool=True``, or ``authorizer``."""

    # ------------------------------------------------------------------ authentication
    jwt_issuer: str | None = None
    """Issuer URL of your identity provider, exactly as in the tokens' `iss` (a trailing slash
    counts; API Gateway accepts RS256 tokens only). Needs `jwt_audience`."""
    jwt_audience: Sequence[str] = ()
    """Accepted `aud` values (or `client_id` for tokens without `aud`). With `create_user_pool`:
    audiences accepted besides the pool's own app client."""
    authorizer: apigw.IHttpRouteAuthorizer | None = None
    """Bring your own HTTP API authorizer instead of `jwt_issuer` (an `HttpJwtAuthorizer` or
    `HttpUserPoolAuthorizer`: the API function reads `tenant_id` and `scope` from the JWT claims;
    synthesis refuses any other kind)."""
    create_user_pool: bool = False
    """Create a Cognito user pool (resource server `leasefence`, scopes `produce`, `work`,
    `operate`, `approve`, `shadow`, one client-credentials app client with `produce`, `work`,
    `operate`) and use it as the issuer."""
    user_pool_domain_prefix: str | None = None
    """Cognito domain prefix of the created pool (its token endpoint); required with
    `create_user_pool`, globally unique per region."""
    pre_token_generation: lambda_.IFunction | None = None
    """Your own Cognito V3 pre token generation trigger (adds `tenant_id`); default: the shipped
    `functions/pretoken`. Only with `create_user_pool`."""
    client_tenants: Mapping[str, str] = field(default_factory=dict)
    """Shipped trigger only: app client id -> tenant for client-credentials tokens
    (`LEASEFENCE_CLIENT_TENANTS`)."""
    service_client_tenant: str | None = None
    """Shipped trigger only: the tenant of the pool's own app client (its client-credentials
    tokens get this `tenant_id`; its id is handed to the trigger through an SSM parameter).
    Without it that client's tokens carry no tenant and the API answers 401 (synth warns)."""

    iam_tenant: str | None = None
    """Also deploy an HTTP API for callers inside AWS, authorized by IAM (SigV4): every route
    under its scope's name (`/produce/v1/operations`, `/work/v1/claims`, ...), each request
    acting for this one tenant with the scope its prefix names. Grant callers with
    `grant_enqueue`, `grant_work`, `grant_operate`, `grant_approve` (see IAM callers)."""

    # ------------------------------------------------------------------ data
    table: dynamodb.ITable | None = None
    """Bring your own operations table (e.g. a `LeaseFenceTable` in your stack); default: the
    service creates one. A table defined in this app is checked against `leasefence.schema` at
    synth (its stream included: new and old images); an imported one must have been created with
    it and be imported with its `table_stream_arn`."""
    table_name: str | None = None
    """Fixed name of the created table (default: generated, so two stacks never collide). Set it
    at the first deploy only: changing it later (or setting it on a deployed stack) replaces the
    table with a new, empty one (the stack policy of `leasefence_infra.stateful` refuses that)."""
    deletion_protection: bool = True
    """DynamoDB deletion protection of the created table."""
    payload_bucket: s3.IBucket | None = None
    """Bring your own payload bucket (the service writes only under `payloads/`); default: the
    service creates a private, TLS-only, encrypted one."""
    server_access_logs_bucket: s3.IBucket | None = None
    """S3 server access logging of the created payload bucket (its owner must let
    `logging.s3.amazonaws.com` write)."""
    encryption_key: kms.IKey | None = None
    """One customer-managed key for what the service creates (table, bucket, secret, queues,
    schedules). The alarm topic uses it too if this app owns the key; an imported key cannot be
    given to CloudWatch here, so the topic then gets its own key."""
    create_encryption_key: bool = False
    """Create that customer-managed key (rotating) instead of giving one."""
    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
    """Of the created table, bucket, key, secret, user pool and log groups."""
    due_shards: int = schema.DEFAULT_DUE_SHARDS
    """Shards of the `due` index per tenant and job type (1-100): more spread claims wider."""
    sweep_shards: int = schema.DEFAULT_SWEEP_SHARDS
    """Shards of the `sweep`, `parked` and `purge` indexes (1-100)."""
    operation_shards: tuple[int, ...] | None = schema.DEFAULT_OPERATION_SHARDS
    """Write shards of the table per tenant (each 1-256). None (the default): each tenant's
    counts are recorded at its first enqueue, 64 for a new tenant and 1 for a tenant whose
    operations are at the bare tenant id already (a deployment from before the record), so an
    upgrade moves nothing (see the scale page, "Write shards"). A tuple sets them for every
    tenant: the first count is where new operations go, any others are counts this deployment
    wrote with before (keep them listed: their operations are found there); `(1,)`: the bare
    tenant id. Grow it only, e.g. `(16, 1)` after `(1,)`."""
    identity_retention_days: int | None = 400
    """How long an ended operation's identity is kept (item TTL); `None`: forever. Replays and
    "fences never repeat" hold within it. At least `payload_retention_days` and 1."""
    payload_retention_days: int = 30
    """How long a stored payload is kept after its operation ended (the sweeper deletes it)."""
    fence_epoch: int = 0
    """The fence epoch (`LEASEFENCE_FENCE_EPOCH`): raise it by one, in the same deploy that points
    the service at a table restored to a point in time, so that every fence handed out after the
    restore is above every fence handed out before it (README, "Recovery")."""
    pack_payloads: bool = True
    """Payload items keep a payload of 256 bytes to 1 KiB packed (raw DEFLATE) where that is shorter, so
    a 1 KB JSON payload costs 1 write unit instead of 2. `False` while readers from before
    packing (in-process workers or functions of main b4a2cfb or earlier) still read the table:
    they would take a packed payload for a missing one (deploying page, "Packed payloads")."""

    # ------------------------------------------------------------------ compute
    tenant_isolation: bool = False
    """Per-tenant role with `dynamodb:LeadingKeys` that the API function assumes (see Auth and
    tenancy); the API function's own role then has no DynamoDB access."""
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    """Retention of the function and access log groups."""
    log_level: str = observability_defaults.DEFAULT_LOG_LEVEL
    """`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`: `POWERTOOLS_LOG_LEVEL` of every
    function, and Lambda's application log level (JSON log format) up to `INFO` (the metrics' EMF
    lines carry no level and Lambda files them as `INFO`: a higher filter would drop them). At
    `WARNING` an ordinary request writes no log line at all; `INFO` adds about 0.8 KB per API
    request (see the performance page)."""
    system_log_level: str | None = None
    """Lambda's system log level, `DEBUG`, `INFO` or `WARN` (its `platform.start` and
    `platform.report` lines, about 0.5 KB per invocation, are `INFO`). Default: `INFO` with a
    `log_level` of `DEBUG` or `INFO`, else `WARN`."""
    tracing: bool = observability_defaults.DEFAULT_TRACING
    """Active X-Ray tracing on every function (Lambda records the first invocation each second
    and 5% of the rest; each recorded trace is billed). Off by default: the metrics, alarms and
    dashboard cover operation; turn it on to follow requests through the functions."""
    metrics_namespace: str | None = None
    """EMF namespace of the functions, alarms and dashboard; default `LeaseFence/<stack
    name>/<the service's path below the stack>` (e.g. `LeaseFence/LeaseFence/LeaseFence` for the
    example app), so two services, in one stack or one account, never share alarms; two services
    of one stack given the same one are refused at synth."""
    api_memory_mb: int = 1024
    """Memory of the API function (128-10240)."""
    sweeper_memory_mb: int = 512
    """Memory of the sweeper function (128-10240)."""
    snap_start: bool = False
    """Lambda SnapStart for the functions that run the engine (API, sweeper, worker, publisher;
    not the Cognito trigger): each deploy publishes a version, snapshots it once initialized, and
    points the alias `live` at it; the API integration, the stream mappings and the schedules
    invoke the alias. Restored instances re-seed their random generators (runtime hooks). Costs
    the snapshot's cache and each restore (Lambda pricing)."""
    core_layer: lambda_.Code | None = None
    """A pre-built core layer `Code` (default: `core_layer_code()`, built locally with pip at
    synth, no Docker). With `powertools_layer="bundled"` it must hold Powertools and what it needs
    too (`bundling.LAYER_DISTRIBUTIONS`)."""
    powertools_layer: str = "bundled"
    """Where Powertools (with pydantic, fastjsonschema and the X-Ray SDK) comes from: `bundled`
    in the core layer at the locked versions, in every region; `managed`: the AWS-managed
    Powertools layer of the locked release, from its public SSM parameter (synthesis refuses a
    region where Powertools publishes none, e.g. me-central-1, me-south-1, ap-east-2, GovCloud,
    China; a region-agnostic stack gets a warning); or a layer version ARN in the stack's region."""
    worker: WorkerProps | None = None
    """`WorkerProps(...)`: deploy the worker function that runs your job handlers (see Worker);
    default: no worker."""

    job_types: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The deployment's initial job-type catalogue, per tenant: `{tenant: {"job_types": {name:
    entry}, "strict_job_types": bool}}` (the format of `leasefence job-types apply`, checked at
    synth). A custom resource declares every listed entry on each deploy (idempotently; entries
    it does not list, and entries removed from the prop, are left alone)."""

    # ------------------------------------------------------------------ events
    events: bool = False
    """Publish an outcome event to EventBridge for each transition an upstream service cares
    about (one custom event per lifecycle: $1.00 per million). Default off: the publisher still
    keeps and compacts each operation's history, publishes nothing, and no bus is created or
    granted (your services learn an outcome by reading the operation). `True`: the service
    creates a bus unless you bring `event_bus`."""
    event_bus: aws_events.IEventBus | None = None
    """Bring your own EventBridge bus for the outcome events (needs `events=True`; the publisher
    may only `events:PutEvents` on it; a bus under a customer-managed key also needs that key
    granted to `publisher_function`); default with `events=True`: the service creates one."""

    # ------------------------------------------------------------------ API
    throttling_rate_limit: float = 100
    """Steady requests per second of the `$default` stage."""
    throttling_burst_limit: int = 200
    """Burst of the `$default` stage."""
    console: bool = True
    """Serve the operator console at `GET /console` (`GET /` redirects there): static files from
    the API function, every call the page makes an API call with the signed-in person's token.
    With `create_user_pool` it signs in through the pool (an app client for it is created);
    `False`: no console routes."""
    console_client_id: str | None = None
    """With `jwt_issuer`: the console's OpenID Connect client at your identity provider (public,
    authorization code with PKCE, redirect URI `<api url>/console`; its access tokens must be
    accepted by `jwt_audience`). Without it the deployed console signs in with a pasted token."""
    console_scopes: Sequence[str] = ("openid",)
    """OAuth scopes the console asks for at sign-in (its access token must carry `tenant_id` and
    the leasefence scopes; with the created user pool the groups grant them)."""

    # ------------------------------------------------------------------ operations
    alarms: bool = True
    """The alarms (about 30 at $0.10 a month each) and their SNS topic. Default on. `False`: no
    alarm and no topic (`alarm_topic` and `dashboard` need them); nobody is told of an operation
    left `unknown`, due work nobody claims, a stream that falls behind or a failing function, and
    the go/no-go report names the missing alert route."""
    dashboard: bool = False
    """The CloudWatch dashboard: the alarms' states and a graph of every metric ($3 a month
    beyond an account's three free dashboards). Default off (opt in; needs `alarms`): the metrics
    and the alarms are the same without it."""
    alarm_topic: sns.ITopic | None = None
    """Bring your own SNS topic for every alarm (needs `alarms`; its policy, and its key's, must
    let `cloudwatch.amazonaws.com` publish); default: an encrypted topic the service creates."""
    oldest_unknown_alarm_age: Duration = Duration.hours(1)
    """`OldestUnknown` alarm: an operation waited in state unknown this long."""
    oldest_due_alarm_age: Duration = Duration.minutes(15)
    """`OldestDue` alarm: due work nobody claims (an unserved job type, a fleet that is down)."""
    quarantine_alarm_threshold: int = 5
    """`QuarantineRate` alarm: quarantined operations in 15 minutes."""
    takeover_alarm_percent: float = 20
    """`TakeoverRate` alarm: percent of claims that were takeovers in 15 minutes."""
    stale_fence_alarm_threshold: int = 25
    """`StaleFenceRejections` alarm: rejections in 5 minutes."""
    api_5xx_alarm_threshold: int = 5
    """`Api5xx` alarm: API Gateway 5xx answers in 5 minutes."""
    stream_iterator_age_alarm_age: Duration = Duration.minutes(5)
    """`PublisherIteratorAge` and `WorkerIteratorAge` alarms: the stream records a function
    receives are this old (history and events late; stream dispatch so far behind that the drain
    does its work)."""
    tags: Mapping[str, str] = field(default_factory=dict)
    """Tags for every resource the service creates (besides its own `leasefence:service` and
    `leasefence:component`)."""

    # ---------------------------------------------------------------------- building

    @classmethod
    def of(
        cls, props: LeaseFenceServiceProps | None = None, /, **overrides: Any
    ) -> LeaseFenceServiceProps:
        """``props`` with ``overrides`` (or the defaults with them); an unknown keyword is a
        ``TypeError`` that names it."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            hints = [
                f"{u!r} (did you mean {m[0]!r}?)"
                if (m := difflib.get_close_matches(u, names, 1))
                else repr(u)
                for u in unknown
            ]
            raise TypeError(
                f"LeaseFenceService got unknown keyword argument(s) {', '.join(hints)}; "
                f"the options are the fields of LeaseFenceServiceProps: {', '.join(names)}"
            )
        if props is None:
            return cls(**overrides)
        if not isinstance(props, cls):
            raise TypeError(f"props must be a LeaseFenceServiceProps, got {type(props).__name__}")
        return replace(props, **overrides) if overrides else props

    # ---------------------------------------------------------------------- checks

    def __post_init__(self) -> None:
        self._normalize()
        self._check_auth()
        self._check_data()
        self._check_compute()
        self._check_operations()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: normalized once, here

    def _normalize(self) -> None:
        if isinstance(self.jwt_audience, str):
            raise TypeError("jwt_audience must be a list of audiences, not one string")
        self._set("jwt_audience", tuple(self.jwt_audience or ()))
        self._set("client_tenants", dict(self.client_tenants or {}))
        if isinstance(self.console_scopes, str):
            raise TypeError("console_scopes must be a list of scopes, not one string")
        self._set("console_scopes", tuple(self.console_scopes or ()))
        self._set("tags", dict(self.tags or {}))
        self._set("job_types", {k: dict(v) for k, v in (self.job_types or {}).items()})
        if not isinstance(self.log_level, str):
            raise TypeError(f"log_level must be a string, got {self.log_level!r}")
        self._set("log_level", self.log_level.upper())
        if self.system_log_level is not None:
            if not isinstance(self.system_log_level, str):
                raise TypeError(f"system_log_level must be a string, got {self.system_log_level!r}")
            self._set("system_log_level", self.system_log_level.upper())

    def _check_auth(self) -> None:
        modes = [
            name
            for name, on in (
                ("jwt_issuer", self.jwt_issuer),
                ("create_user_pool", self.create_user_pool),
                ("authorizer", self.authorizer is not None),
            )
            if on
        ]
        if len(modes) != 1:
            raise ValueError(
                "authentication needs exactly one of jwt_issuer (with jwt_audience), "
                f"create_user_pool=True or authorizer; got {', '.join(modes) if modes else 'none'}"
            )
        for audience in self.jwt_audience:
            if not isinstance(audience, str) or not audience:
                raise ValueError(
                    f"jwt_audience: {audience!r} is not an audience (a non-empty string)"
                )
        if self.jwt_issuer:
            if not self.jwt_audience:
                raise ValueError(
                    "jwt_issuer needs jwt_audience (the accepted aud or client_id values)"
                )
            if not Token.is_unresolved(self.jwt_issuer) and not self.jwt_issuer.startswith(
                "https://"
            ):
                raise ValueError(
                    f"jwt_issuer must be an https:// URL (API Gateway fetches its JWKS), "
                    f"got {self.jwt_issuer!r}"
                )
        if self.authorizer is not None:
            prop_checks.require(
                self.authorizer, "bind", "authorizer", "an aws_apigatewayv2.IHttpRouteAuthorizer"
            )
            if self.jwt_audience:
                raise ValueError(
                    "jwt_audience belongs to your authorizer: leave it unset with authorizer"
                )
        if self.create_user_pool:
            prefix = self.user_pool_domain_prefix
            if not prefix:
                raise ValueError(
                    "create_user_pool=True needs user_pool_domain_prefix "
                    "(the Cognito token endpoint for client credentials)"
                )
            if not Token.is_unresolved(prefix) and not _DOMAIN_PREFIX_RE.match(prefix):
                raise ValueError(
                    f"user_pool_domain_prefix {prefix!r}: 1-63 lowercase letters, digits and "
                    "hyphens, not starting or ending with a hyphen"
                )
        else:
            for name in ("user_pool_domain_prefix", "pre_token_generation"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs create_user_pool=True")
        if self.service_client_tenant is not None:
            if not self.create_user_pool or self.pre_token_generation is not None:
                raise ValueError(
                    "service_client_tenant configures the shipped pre token generation trigger: "
                    "it needs create_user_pool=True and no pre_token_generation of your own"
                )
            prop_checks.tenant_id("service_client_tenant", self.service_client_tenant)
        if self.console_client_id is not None:
            if not self.console or not self.jwt_issuer:
                raise ValueError(
                    "console_client_id is the console's client at your jwt_issuer: it needs "
                    "jwt_issuer and console=True (with create_user_pool the service makes one)"
                )
            if not isinstance(self.console_client_id, str) or not self.console_client_id.strip():
                raise ValueError("console_client_id must be a client id (a non-empty string)")
        for console_scope in self.console_scopes:
            if not isinstance(console_scope, str) or not console_scope or " " in console_scope:
                raise ValueError(f"console_scopes: {console_scope!r} is not one OAuth scope")
        if self.iam_tenant is not None:
            prop_checks.tenant_id("iam_tenant", self.iam_tenant)
            if is_shadow_tenant(self.iam_tenant):
                raise ValueError(
                    f"iam_tenant {self.iam_tenant!r} is a shadow tenant: shadow mode needs the "
                    "shadow scope, which the IAM API never grants"
                )
        if self.client_tenants:
            if not self.create_user_pool or self.pre_token_generation is not None:
                raise ValueError(
                    "client_tenants configures the shipped pre token generation trigger: it "
                    "needs create_user_pool=True and no pre_token_generation of your own"
                )
            for client, tenant in self.client_tenants.items():
                if (
                    not isinstance(client, str)
                    or not isinstance(tenant, str)
                    or not client
                    or not tenant
                ):
                    raise ValueError(
                        "client_tenants must map app client ids to tenant ids (non-empty strings)"
                    )

    def _check_data(self) -> None:
        if self.table is not None:
            prop_checks.require(
                self.table, "table_arn", "table", "an aws_dynamodb.ITable (e.g. LeaseFenceTable)"
            )
            if getattr(self.table, "table_stream_arn", None) is None:
                raise ValueError(NO_STREAM_MESSAGE)
            if self.table_name is not None or self.deletion_protection is not True:
                raise ValueError(
                    "table_name and deletion_protection configure the table the service "
                    "creates; set them on the table you bring"
                )
        name = self.table_name
        if name is not None and not Token.is_unresolved(name) and not _TABLE_NAME_RE.match(name):
            raise ValueError(
                f"table_name {name!r} is not a DynamoDB table name (3-255 of A-Z a-z 0-9 _ . -)"
            )
        if self.payload_bucket is not None:
            prop_checks.require(
                self.payload_bucket, "bucket_arn", "payload_bucket", "an aws_s3.IBucket"
            )
            if self.server_access_logs_bucket is not None:
                raise ValueError(
                    "server_access_logs_bucket configures the bucket the service creates; "
                    "set up logging on the bucket you bring"
                )
        if self.server_access_logs_bucket is not None:
            prop_checks.require(
                self.server_access_logs_bucket,
                "bucket_arn",
                "server_access_logs_bucket",
                "an aws_s3.IBucket",
            )
        if self.encryption_key is not None:
            prop_checks.require(self.encryption_key, "key_arn", "encryption_key", "an aws_kms.IKey")
            if self.create_encryption_key:
                raise ValueError(
                    "give either encryption_key or create_encryption_key=True, not both"
                )
        if not isinstance(self.removal_policy, RemovalPolicy):
            raise TypeError("removal_policy must be an aws_cdk.RemovalPolicy")
        for name in ("due_shards", "sweep_shards"):
            prop_checks.int_in(self, name, 1, MAX_SHARDS)
        counts = self.operation_shards
        if counts is not None and (
            not isinstance(counts, tuple)
            or not counts
            or any(
                isinstance(n, bool)
                or not isinstance(n, int)
                or not 1 <= n <= schema.MAX_OPERATION_SHARDS
                for n in counts
            )
            or len(set(counts)) != len(counts)
        ):
            raise ValueError(
                "operation_shards must be a tuple of distinct counts from 1 to "
                f"{schema.MAX_OPERATION_SHARDS}, the one new operations go to first"
            )
        prop_checks.int_in(self, "payload_retention_days", 0, None)
        prop_checks.int_in(self, "fence_epoch", 0, MAX_FENCE_EPOCH)
        if self.identity_retention_days is not None:
            prop_checks.int_in(self, "identity_retention_days", 1, None)
            if self.identity_retention_days < self.payload_retention_days:
                raise ValueError(
                    "identity_retention_days must be at least payload_retention_days "
                    "(or None: forever)"
                )

    def _check_compute(self) -> None:
        if self.log_level not in LOG_LEVELS:
            raise ValueError(
                f"log_level must be one of {sorted(LOG_LEVELS)}, got {self.log_level!r}"
            )
        if (
            self.system_log_level is not None
            and self.system_log_level not in observability_defaults.SYSTEM_LOG_LEVELS
        ):
            raise ValueError(
                f"system_log_level must be one of {list(observability_defaults.SYSTEM_LOG_LEVELS)}, "
                f"got {self.system_log_level!r}"
            )
        if not isinstance(self.tracing, bool):
            raise TypeError(f"tracing must be True or False, got {self.tracing!r}")
        if not isinstance(self.log_retention, logs.RetentionDays):
            raise TypeError("log_retention must be an aws_logs.RetentionDays")
        namespace = self.metrics_namespace
        if namespace is not None and (
            not isinstance(namespace, str)
            or not _NAMESPACE_RE.match(namespace)
            or namespace.startswith("AWS/")
        ):
            raise ValueError(
                f"metrics_namespace {namespace!r} is not a CloudWatch namespace "
                "(1-255 of A-Z a-z 0-9 . - _ / # : space, not starting with AWS/)"
            )
        for name in ("api_memory_mb", "sweeper_memory_mb"):
            prop_checks.int_in(self, name, 128, 10240)
        if self.core_layer is not None and not isinstance(self.core_layer, lambda_.Code):
            raise TypeError("core_layer must be an aws_lambda.Code (e.g. core_layer_code(...))")
        check_powertools_layer(self.powertools_layer)
        if self.worker is not None:
            validate_worker(self.worker)
        from leasefence.catalogue import parse_document
        from leasefence.errors import InvalidInput
        from leasefence.validation import validate_id

        for tenant, document in self.job_types.items():
            try:
                validate_id("tenant_id", tenant)
                parse_document(document)
            except InvalidInput as error:
                raise ValueError(f"job_types[{tenant!r}]: {error.message}") from None
        if (
            not isinstance(self.throttling_rate_limit, (int, float))
            or isinstance(self.throttling_rate_limit, bool)
            or self.throttling_rate_limit <= 0
        ):
            raise ValueError(
                "throttling_rate_limit must be a positive number of requests per second"
            )
        prop_checks.int_in(self, "throttling_burst_limit", 1, None)

    def _check_operations(self) -> None:
        for name in ("events", "alarms", "dashboard"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False")
        if self.alarm_topic is not None:
            prop_checks.require(self.alarm_topic, "topic_arn", "alarm_topic", "an aws_sns.ITopic")
            if not self.alarms:
                raise ValueError(
                    "alarm_topic needs alarms=True (the alarms are what publish to it)"
                )
            refuse_unusable_topic(self.alarm_topic)
        if self.dashboard and not self.alarms:
            raise ValueError("dashboard needs alarms=True (it shows the alarms' states)")
        if self.event_bus is not None:
            prop_checks.require(
                self.event_bus, "event_bus_arn", "event_bus", "an aws_events.IEventBus"
            )
            if not self.events:
                raise ValueError(
                    "event_bus needs events=True (outcome events are off by default: "
                    "LeaseFenceServiceProps.events)"
                )
        for name in (
            "oldest_unknown_alarm_age",
            "oldest_due_alarm_age",
            "stream_iterator_age_alarm_age",
        ):
            value = getattr(self, name)
            if not isinstance(value, Duration) or value.to_seconds() < 60:
                raise ValueError(f"{name} must be a Duration of at least one minute")
        for name in (
            "quarantine_alarm_threshold",
            "stale_fence_alarm_threshold",
            "api_5xx_alarm_threshold",
        ):
            prop_checks.int_in(self, name, 1, None)
        percent = self.takeover_alarm_percent
        if (
            isinstance(percent, bool)
            or not isinstance(percent, (int, float))
            or not 0 < percent <= 100
        ):
            raise ValueError("takeover_alarm_percent must be a percentage above 0, at most 100")
        for key, value in self.tags.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError("tags must map str to str")
            if (
                not 1 <= len(key) <= 128
                or len(value) > 256
                or key.lower().startswith("aws:")
                or not _TAG_RE.match(key)
                or not _TAG_RE.match(value)
            ):
                raise ValueError(
                    f"tag {key!r}={value!r}: keys 1-128 and values up to 256 characters of "
                    "letters, digits, spaces and _ . : / = + - @; keys may not start with aws:"
                )
