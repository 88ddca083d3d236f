"""Settings from the environment, and the clients and engine built from them, lazily.

Importing this module reads nothing and connects to nothing. The first call to
:func:`runtime` reads the environment once (a Lambda container's configuration does not change)
and returns a cached :class:`Runtime`, whose boto3 clients, engine and payload store are created
on first use and then reused across invocations.

Environment:

``LEASEFENCE_TABLE``               operations table name (default ``leasefence-operations``)
``LEASEFENCE_PAYLOAD_BUCKET``      S3 bucket for inline payloads (default ``leasefence-payloads``)
``LEASEFENCE_DUE_SHARDS``          shards of the ``due`` index (default 4)
``LEASEFENCE_SWEEP_SHARDS``        shards of the ``sweep`` index (default 4)
``LEASEFENCE_OPERATION_SHARDS``    write shards of the base table per tenant (default 1): a count, or
                                   counts separated by commas, the first where new operations go,
                                   the others counts the deployment wrote with (docs/scale.md)
``LEASEFENCE_DYNAMODB_ENDPOINT``   DynamoDB endpoint override (local stacks)
``LEASEFENCE_S3_ENDPOINT``         S3 endpoint override (local stacks)
``LEASEFENCE_LOG_HASH_KEY``        key for the keyed hashes in logs (see :mod:`leasefence.privacy`)
``LEASEFENCE_LOG_HASH_KEY_PARAM``  or: a Secrets Manager secret holding it, read once per cold start
``LEASEFENCE_PAYLOAD_KEY_SECRET``  naming secret for payload object keys (optional; never the log hash key)
``LEASEFENCE_IDENTITY_RETENTION_DAYS``  how long an ended operation's identity is kept (TTL; default
                                   400; ``forever``: no TTL). Within it a replay is a replay.
``LEASEFENCE_PAYLOAD_RETENTION_DAYS``   how long an ended operation's stored payload is kept (default
                                   30; 0 allowed). ``LEASEFENCE_RETENTION_DAYS`` is an older name for it.
``LEASEFENCE_PACK_PAYLOADS``       ``false`` (or ``0``): payload items keep payloads as text, never packed (default
                                   ``true``: packed where shorter), while readers from before packing
                                   (in-process workers, functions of main b4a2cfb or earlier) still
                                   read the table (docs/deploying.md)
``LEASEFENCE_FENCE_EPOCH``         the fence epoch (default 0): raise it by one with every point-in-time
                                   restore, so every fence handed out after the restore is above every
                                   fence handed out before it (see ``Engine.fence_floor``)
``LEASEFENCE_SWEEP_BATCH``         operations one ``Engine.sweep`` call examines (default 100)
``LEASEFENCE_SWEEP_MAX_BATCHES``   sweep calls per sweeper invocation at most (default 50)
``LEASEFENCE_MAX_BODY_BYTES``      request bodies larger than this are refused with 413 (default 6 MiB)
``LEASEFENCE_TENANT_ROLE_ARN``     tenant isolation: the API reaches DynamoDB only through this role,
                                   assumed per tenant with a session tag naming the tenant (the role's
                                   policy limits ``dynamodb:LeadingKeys`` to that tag)
``LEASEFENCE_TENANT_SESSION_TAG``  that session tag's key (default ``tenant_id``)
``LEASEFENCE_EVENT_BUS``           the EventBridge bus (name or ARN) the publisher sends outcome
                                   events to (unset: it records history only)
``LEASEFENCE_EVENTS_ENDPOINT``     EventBridge endpoint override (local stacks)
``LEASEFENCE_WORKER_HANDLERS``     the worker function's handlers: ``package.module:NAME``, a
                                   mapping of job type to handler
``LEASEFENCE_WORKER_TENANTS``      the tenants the worker function serves (comma separated)
``LEASEFENCE_WORKER_LEASE_SECONDS`` the worker's lease (default 60)
``LEASEFENCE_WORKER_IDLE_MS``      how long an idle worker loop waits before polling again
                                   (default 1000)
``LEASEFENCE_ALARM_TOPIC``         the deployment's alarm topic (ARN): the alert route that the
                                   go/no-go report names (unset: control 7 is no-go)
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leasefence import snapstart
from leasefence.limits import (
    DEFAULT_IDENTITY_RETENTION_DAYS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PAYLOAD_RETENTION_DAYS,
)
from leasefence.schema import (
    DEFAULT_DUE_SHARDS,
    DEFAULT_OPERATION_SHARDS,
    DEFAULT_SWEEP_SHARDS,
    DEFAULT_TABLE_NAME,
    MAX_OPERATION_SHARDS,
    TableSpec,
)

if TYPE_CHECKING:
    from leasefence.engine import Engine
    from leasefence.payloads import PayloadStore

DEFAULT_PAYLOAD_BUCKET = "leasefence-payloads"
#: How stream dispatch starts a claimed job (``LEASEFENCE_WORKER_DISPATCH``,
#: ``WorkerProps.stream_dispatch``).
WORKER_DISPATCH_MODES = ("run", "invoke")

#: The DynamoDB client of the functions: each call gives up within about
#: ``STORE_ATTEMPTS * (CONNECT + READ) + backoff`` seconds (:data:`STORE_CALL_WORST_S`), so the
#: API function's timeout (see the CDK construct) covers a claim's whole retry budget.
STORE_CONNECT_TIMEOUT_S = 1
STORE_READ_TIMEOUT_S = 3
STORE_ATTEMPTS = 3
STORE_CALL_WORST_S = STORE_ATTEMPTS * (STORE_CONNECT_TIMEOUT_S + STORE_READ_TIMEOUT_S) + 2


def _retention_days(env: dict[str, str], name: str, default: int | None) -> int | None:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw == "forever":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{name} must be a whole number of days or 'forever', got {raw!r}"
        ) from None
    if value < 0:
        raise ValueError(f"{name} must be at least 0")
    return value


def _counts_env(env: dict[str, str], name: str) -> tuple[int, ...] | None:
    """Write shard counts: ``16`` or ``16,4,1`` (the first is where new operations go)."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return DEFAULT_OPERATION_SHARDS
    try:
        counts = tuple(dict.fromkeys(int(part) for part in raw.split(",")))
    except ValueError:
        raise ValueError(f"{name} must be counts separated by commas, got {raw!r}") from None
    if any(not 1 <= n <= MAX_OPERATION_SHARDS for n in counts):
        raise ValueError(f"{name}: each count must be from 1 to {MAX_OPERATION_SHARDS}")
    return counts


def _int_env(env: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}")
    return value


def _bool_env(env: dict[str, str], name: str, default: bool) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("true", "1"):
        return True
    if raw in ("false", "0"):
        return False
    raise ValueError(f"{name} must be true or false, got {raw!r}")


def _payload_days(env: dict[str, str]) -> int:
    legacy = _retention_days(env, "LEASEFENCE_RETENTION_DAYS", DEFAULT_PAYLOAD_RETENTION_DAYS)
    days = _retention_days(env, "LEASEFENCE_PAYLOAD_RETENTION_DAYS", legacy)
    if days is None:
        raise ValueError(
            "LEASEFENCE_PAYLOAD_RETENTION_DAYS must be a whole number of days (a payload is not kept forever)"
        )
    return days


@dataclass(frozen=True)
class Settings:
    table_name: str = DEFAULT_TABLE_NAME
    payload_bucket: str = DEFAULT_PAYLOAD_BUCKET
    due_shards: int = DEFAULT_DUE_SHARDS
    sweep_shards: int = DEFAULT_SWEEP_SHARDS
    operation_shards: tuple[int, ...] | None = DEFAULT_OPERATION_SHARDS
    dynamodb_endpoint: str | None = None
    s3_endpoint: str | None = None
    region: str | None = None
    payload_key_secret: str | None = None
    log_hash_key: str | None = None
    log_hash_key_param: str | None = None
    identity_retention_days: int | None = DEFAULT_IDENTITY_RETENTION_DAYS
    payload_retention_days: int = DEFAULT_PAYLOAD_RETENTION_DAYS
    fence_epoch: int = 0
    pack_payloads: bool = True
    sweep_batch: int = 100
    sweep_max_batches: int = 50
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    tenant_role_arn: str | None = None
    tenant_session_tag: str = "tenant_id"
    event_bus: str | None = None
    events_endpoint: str | None = None
    worker_handlers: str | None = None
    worker_tenants: tuple[str, ...] = ()
    worker_lease_seconds: int = 60
    worker_idle_ms: int = 1_000
    #: The worker's stream batches also publish (one stream reader): the publisher's on-failure
    #: bucket, where records it could not publish are kept (None: the worker only dispatches).
    publisher_failures: str | None = None
    #: How stream dispatch starts a claimed job: ``run`` (inside the stream batch) or ``invoke``
    #: (an asynchronous invocation of the worker function: :mod:`leasefence.worker.handoff`).
    worker_dispatch: str = "run"
    #: The deployment's alarm topic: the alert route the go/no-go report names (control 7).
    alarm_topic: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        return cls(
            table_name=env.get("LEASEFENCE_TABLE") or DEFAULT_TABLE_NAME,
            payload_bucket=env.get("LEASEFENCE_PAYLOAD_BUCKET") or DEFAULT_PAYLOAD_BUCKET,
            due_shards=_int_env(env, "LEASEFENCE_DUE_SHARDS", DEFAULT_DUE_SHARDS),
            sweep_shards=_int_env(env, "LEASEFENCE_SWEEP_SHARDS", DEFAULT_SWEEP_SHARDS),
            operation_shards=_counts_env(env, "LEASEFENCE_OPERATION_SHARDS"),
            dynamodb_endpoint=env.get("LEASEFENCE_DYNAMODB_ENDPOINT") or None,
            s3_endpoint=env.get("LEASEFENCE_S3_ENDPOINT") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            payload_key_secret=env.get("LEASEFENCE_PAYLOAD_KEY_SECRET") or None,
            log_hash_key=env.get("LEASEFENCE_LOG_HASH_KEY") or None,
            log_hash_key_param=env.get("LEASEFENCE_LOG_HASH_KEY_PARAM") or None,
            identity_retention_days=_retention_days(
                env, "LEASEFENCE_IDENTITY_RETENTION_DAYS", DEFAULT_IDENTITY_RETENTION_DAYS
            ),
            payload_retention_days=_payload_days(env),
            fence_epoch=_int_env(env, "LEASEFENCE_FENCE_EPOCH", 0, minimum=0),
            pack_payloads=_bool_env(env, "LEASEFENCE_PACK_PAYLOADS", True),
            sweep_batch=_int_env(env, "LEASEFENCE_SWEEP_BATCH", 100),
            sweep_max_batches=_int_env(env, "LEASEFENCE_SWEEP_MAX_BATCHES", 50),
            max_body_bytes=_int_env(env, "LEASEFENCE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            tenant_role_arn=env.get("LEASEFENCE_TENANT_ROLE_ARN") or None,
            tenant_session_tag=env.get("LEASEFENCE_TENANT_SESSION_TAG") or "tenant_id",
            event_bus=env.get("LEASEFENCE_EVENT_BUS") or None,
            events_endpoint=env.get("LEASEFENCE_EVENTS_ENDPOINT") or None,
            worker_handlers=env.get("LEASEFENCE_WORKER_HANDLERS") or None,
            worker_tenants=tuple(
                t for t in (env.get("LEASEFENCE_WORKER_TENANTS") or "").split(",") if t
            ),
            worker_lease_seconds=_int_env(env, "LEASEFENCE_WORKER_LEASE_SECONDS", 60),
            worker_idle_ms=_int_env(env, "LEASEFENCE_WORKER_IDLE_MS", 1_000),
            publisher_failures=env.get("LEASEFENCE_PUBLISHER_FAILURES") or None,
            worker_dispatch=env.get("LEASEFENCE_WORKER_DISPATCH") or "run",
            alarm_topic=env.get("LEASEFENCE_ALARM_TOPIC") or None,
        )

    def __post_init__(self) -> None:
        if (
            self.identity_retention_days is not None
            and self.identity_retention_days < self.payload_retention_days
        ):
            raise ValueError("the identity retention must be at least the payload retention")
        if self.worker_dispatch not in WORKER_DISPATCH_MODES:
            raise ValueError(
                f"LEASEFENCE_WORKER_DISPATCH must be one of {', '.join(WORKER_DISPATCH_MODES)}"
            )

    @property
    def engine_options(self) -> dict[str, Any]:
        """Retention for :class:`~leasefence.engine.Engine` (milliseconds; None: forever)."""
        days = self.identity_retention_days
        return {
            "identity_retention_ms": None if days is None else days * 86_400_000,
            "payload_retention_ms": self.payload_retention_days * 86_400_000,
            "fence_epoch": self.fence_epoch,
            "pack_payloads": self.pack_payloads,
        }

    @property
    def table_spec(self) -> TableSpec:
        return TableSpec(
            table_name=self.table_name,
            due_shards=self.due_shards,
            sweep_shards=self.sweep_shards,
            operation_shards=self.operation_shards,
        )


#: What STS accepts as a session tag value (and so as a tenant id under tenant isolation).
_TAG_VALUE_RE = re.compile(r"^[\w\s.:/=+\-@]{1,256}$")
#: Tenants whose engines (and role sessions) one container keeps.
TENANT_CACHE_SIZE = 256
#: Role session length; credentials are refreshed before they expire.
TENANT_SESSION_SECONDS = 900


class Runtime:
    """Clients, engine and payload store for one configuration; each created on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()
        self._clients: dict[str, Any] = {}
        self._engine: Engine | None = None
        self._shadow_engine: Engine | None = None
        self._payloads: PayloadStore | None = None
        # Payload object names never depend on the log-hash key (rotating it must orphan nothing).
        self._payload_secret: str | None = settings.payload_key_secret
        self._prepared = False
        self._tenant_engines: OrderedDict[str, Engine] = OrderedDict()

    def prepare(self) -> None:
        """Once per container, at the first invocation (never at import): load the log hash key
        from Secrets Manager when it is configured that way. Later calls return at once."""
        if self._prepared:
            return
        with self._lock:
            if self._prepared:
                return
            arn = self.settings.log_hash_key_param
            if arn and not self.settings.log_hash_key:
                from leasefence import privacy

                secret = (
                    self.client("secretsmanager")
                    .get_secret_value(SecretId=arn)["SecretString"]
                    .encode()
                )
                privacy.set_key(secret)
            self._prepared = True

    def client(self, service: str) -> Any:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                import boto3
                from botocore.config import Config

                endpoint = {
                    "dynamodb": self.settings.dynamodb_endpoint,
                    "s3": self.settings.s3_endpoint,
                    "events": self.settings.events_endpoint,
                }.get(service)
                kwargs: dict[str, Any] = {}
                if service == "s3" and endpoint:
                    kwargs["config"] = Config(
                        retries={"mode": "standard", "max_attempts": 3},
                        connect_timeout=2,
                        read_timeout=10,
                        s3={"addressing_style": "path"},
                    )
                else:
                    kwargs["config"] = Config(
                        retries={"mode": "standard", "max_attempts": STORE_ATTEMPTS},
                        connect_timeout=STORE_CONNECT_TIMEOUT_S,
                        read_timeout=STORE_READ_TIMEOUT_S,
                    )
                client = boto3.client(
                    service, endpoint_url=endpoint, region_name=self.settings.region, **kwargs
                )
                self._clients[service] = client
            return client

    def install_client(self, service: str, client: Any) -> None:
        """Use ``client`` for ``service`` from now on (the bench's metering clients); call it
        before the first request, as the engine keeps the DynamoDB client it was given."""
        with self._lock:
            self._clients[service] = client

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                from leasefence.engine import Engine
                from leasefence.observability import record_event

                self._engine = Engine(
                    spec=self.settings.table_spec,
                    events=record_event,
                    client_factory=lambda: self.client("dynamodb"),
                    payloads=self.payloads,
                    **self.settings.engine_options,
                )
            return self._engine

    @property
    def shadow_engine(self) -> Engine:
        """:attr:`engine` for shadow tenants: the same table and payloads, no fleet events."""
        with self._lock:
            if self._shadow_engine is None:
                from leasefence.engine import Engine

                self._shadow_engine = Engine(
                    spec=self.settings.table_spec,
                    events=_no_fleet_event,
                    client_factory=lambda: self.client("dynamodb"),
                    payloads=self.payloads,
                    **self.settings.engine_options,
                )
            return self._shadow_engine

    def after_restore(self) -> None:
        """Re-seed the random generator of every engine built so far (SnapStart: an engine built
        before the snapshot would otherwise order shards and candidates identically in every
        restored instance). Seeding with no argument draws from ``os.urandom``."""
        with self._lock:
            engines = [
                e
                for e in (self._engine, self._shadow_engine, *self._tenant_engines.values())
                if e is not None
            ]
        for engine in engines:
            engine.rng.seed()

    def engine_for(self, tenant_id: str) -> Engine:
        """The engine to use for one tenant's request.

        Without tenant isolation that is :attr:`engine`. With it (``LEASEFENCE_TENANT_ROLE_ARN``),
        an engine whose DynamoDB client holds credentials of the tenant role assumed with a
        session tag naming this tenant, so IAM itself refuses any key of another tenant.

        A shadow tenant's engine (``shadow:<tenant>``, :mod:`leasefence.shadow`) counts no events:
        shadow claims, takeovers and stale fences describe an existing consumer, not the fleet,
        so they stay out of the fleet's metrics and alarms.
        """
        from leasefence.keys import is_shadow_tenant

        shadow = is_shadow_tenant(tenant_id)
        if not self.settings.tenant_role_arn:
            return self.shadow_engine if shadow else self.engine
        with self._lock:
            engine = self._tenant_engines.get(tenant_id)
            if engine is not None:
                self._tenant_engines.move_to_end(tenant_id)
                return engine
        from leasefence.engine import Engine
        from leasefence.observability import record_event

        client = self._tenant_client(tenant_id)
        engine = Engine(
            client=client,
            spec=self.settings.table_spec,
            events=_no_fleet_event if shadow else record_event,
            payloads=self.payloads,
            **self.settings.engine_options,
        )
        with self._lock:
            self._tenant_engines[tenant_id] = engine
            while len(self._tenant_engines) > TENANT_CACHE_SIZE:
                self._tenant_engines.popitem(last=False)
        return engine

    def _tenant_client(self, tenant_id: str) -> Any:
        import boto3
        from botocore.config import Config
        from botocore.credentials import RefreshableCredentials
        from botocore.session import get_session

        from leasefence.errors import Forbidden
        from leasefence.privacy import keyed_hash

        if not _TAG_VALUE_RE.match(tenant_id):
            raise Forbidden(
                "this tenant_id cannot be used with tenant isolation (not a valid session tag value)"
            )
        sts = self.client("sts")
        arn, tag = self.settings.tenant_role_arn, self.settings.tenant_session_tag

        def assume() -> dict[str, str]:
            answer = sts.assume_role(
                RoleArn=arn,
                RoleSessionName=f"leasefence-{keyed_hash(tenant_id)}",
                Tags=[{"Key": tag, "Value": tenant_id}],
                DurationSeconds=TENANT_SESSION_SECONDS,
            )["Credentials"]
            return {
                "access_key": answer["AccessKeyId"],
                "secret_key": answer["SecretAccessKey"],
                "token": answer["SessionToken"],
                "expiry_time": answer["Expiration"].isoformat(),
            }

        credentials = RefreshableCredentials.create_from_metadata(
            metadata=assume(), refresh_using=assume, method="sts-assume-role"
        )
        session = get_session()
        # botocore's documented way to use refreshable credentials
        session._credentials = credentials
        if self.settings.region:
            session.set_config_variable("region", self.settings.region)
        return boto3.Session(botocore_session=session).client(
            "dynamodb",
            endpoint_url=self.settings.dynamodb_endpoint,
            config=Config(
                retries={"mode": "standard", "max_attempts": STORE_ATTEMPTS},
                connect_timeout=STORE_CONNECT_TIMEOUT_S,
                read_timeout=STORE_READ_TIMEOUT_S,
            ),
        )

    @property
    def payloads(self) -> PayloadStore:
        with self._lock:
            if self._payloads is None:
                from leasefence.observability import record_event
                from leasefence.payloads import PayloadStore

                self._payloads = PayloadStore(
                    bucket=self.settings.payload_bucket,
                    secret=self._payload_secret,
                    client_factory=lambda: self.client("s3"),
                    events=record_event,
                )
            return self._payloads


def _no_fleet_event(_name: str, _value: float) -> None:
    """The event sink of shadow tenants' engines: their counts are not the fleet's."""


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()
#: The runtime of the invocation running in this context (:func:`using`), before the process's.
_scoped: ContextVar[Runtime | None] = ContextVar("leasefence_scoped_runtime", default=None)


def runtime() -> Runtime:
    """The runtime of the invocation in progress (:func:`using`), else the process-wide one
    (built from the environment on first call)."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(Settings.from_env())
        return _runtime


@snapstart.after_restore
def _after_restore() -> None:
    current = _runtime
    if current is not None:
        current.after_restore()


def install(settings: Settings) -> Runtime:
    """Use these settings instead of the environment's (the local stack runs the handlers
    in-process against its own endpoints without touching ``os.environ``)."""
    global _runtime
    with _runtime_lock:
        _runtime = Runtime(settings)
        return _runtime


def reset(only: Runtime | None = None) -> None:
    """Forget the cached runtime, so the next call re-reads the environment (local stacks, tests);
    with ``only``, forget it only if it is that one (a stack stopping leaves another's alone)."""
    global _runtime
    with _runtime_lock:
        if only is None or _runtime is only:
            _runtime = None


@contextmanager
def using(scoped: Runtime) -> Iterator[Runtime]:
    """Run the block (one invocation) with ``scoped`` as :func:`runtime`, whatever the process's
    is: a local stack's handlers keep their own endpoints and table while other code in the same
    process installs or resets its own (several stacks, tests)."""
    token = _scoped.set(scoped)
    try:
        yield scoped
    finally:
        _scoped.reset(token)
