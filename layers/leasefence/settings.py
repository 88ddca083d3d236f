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
``LEASEFENCE_DYNAMODB_ENDPOINT``   DynamoDB endpoint override (local stacks)
``LEASEFENCE_S3_ENDPOINT``         S3 endpoint override (local stacks)
``LEASEFENCE_PAYLOAD_KEY_SECRET``  secret for payload object keys (falls back to ``LEASEFENCE_LOG_HASH_KEY``)
``LEASEFENCE_SWEEP_BATCH``         operations one ``Engine.sweep`` call examines (default 100)
``LEASEFENCE_SWEEP_MAX_BATCHES``   sweep calls per sweeper invocation at most (default 50)
``LEASEFENCE_MAX_BODY_BYTES``      request bodies larger than this are refused with 413 (default 6 MiB)
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from leasefence.schema import DEFAULT_DUE_SHARDS, DEFAULT_SWEEP_SHARDS, DEFAULT_TABLE_NAME, TableSpec

if TYPE_CHECKING:
    from leasefence.engine import Engine
    from leasefence.payloads import PayloadStore

DEFAULT_PAYLOAD_BUCKET = "leasefence-payloads"


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


@dataclass(frozen=True)
class Settings:
    table_name: str = DEFAULT_TABLE_NAME
    payload_bucket: str = DEFAULT_PAYLOAD_BUCKET
    due_shards: int = DEFAULT_DUE_SHARDS
    sweep_shards: int = DEFAULT_SWEEP_SHARDS
    dynamodb_endpoint: str | None = None
    s3_endpoint: str | None = None
    region: str | None = None
    payload_key_secret: str | None = None
    sweep_batch: int = 100
    sweep_max_batches: int = 50
    max_body_bytes: int = 6 * 1024 * 1024

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        env = dict(os.environ if env is None else env)
        return cls(
            table_name=env.get("LEASEFENCE_TABLE") or DEFAULT_TABLE_NAME,
            payload_bucket=env.get("LEASEFENCE_PAYLOAD_BUCKET") or DEFAULT_PAYLOAD_BUCKET,
            due_shards=_int_env(env, "LEASEFENCE_DUE_SHARDS", DEFAULT_DUE_SHARDS),
            sweep_shards=_int_env(env, "LEASEFENCE_SWEEP_SHARDS", DEFAULT_SWEEP_SHARDS),
            dynamodb_endpoint=env.get("LEASEFENCE_DYNAMODB_ENDPOINT") or None,
            s3_endpoint=env.get("LEASEFENCE_S3_ENDPOINT") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            payload_key_secret=env.get("LEASEFENCE_PAYLOAD_KEY_SECRET") or env.get("LEASEFENCE_LOG_HASH_KEY") or None,
            sweep_batch=_int_env(env, "LEASEFENCE_SWEEP_BATCH", 100),
            sweep_max_batches=_int_env(env, "LEASEFENCE_SWEEP_MAX_BATCHES", 50),
            max_body_bytes=_int_env(env, "LEASEFENCE_MAX_BODY_BYTES", 6 * 1024 * 1024),
        )

    @property
    def table_spec(self) -> TableSpec:
        return TableSpec(table_name=self.table_name, due_shards=self.due_shards, sweep_shards=self.sweep_shards)


class Runtime:
    """Clients, engine and payload store for one configuration; each created on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.RLock()
        self._clients: dict[str, Any] = {}
        self._engine: Engine | None = None
        self._payloads: PayloadStore | None = None

    def client(self, service: str) -> Any:
        with self._lock:
            client = self._clients.get(service)
            if client is None:
                import boto3
                from botocore.config import Config

                endpoint = self.settings.dynamodb_endpoint if service == "dynamodb" else self.settings.s3_endpoint
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
                        retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=5
                    )
                client = boto3.client(service, endpoint_url=endpoint, region_name=self.settings.region, **kwargs)
                self._clients[service] = client
            return client

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
                )
            return self._engine

    @property
    def payloads(self) -> PayloadStore:
        with self._lock:
            if self._payloads is None:
                from leasefence.payloads import PayloadStore

                self._payloads = PayloadStore(
                    bucket=self.settings.payload_bucket,
                    secret=self.settings.payload_key_secret,
                    client_factory=lambda: self.client("s3"),
                )
            return self._payloads


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> Runtime:
    """The process-wide runtime (built from the environment on first call)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = Runtime(Settings.from_env())
        return _runtime


def reset() -> None:
    """Forget the cached runtime, so the next call re-reads the environment (local stacks, tests)."""
    global _runtime
    with _runtime_lock:
        _runtime = None
