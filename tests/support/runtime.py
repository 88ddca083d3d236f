"""The process's runtime (``leasefence.settings.runtime()``) for a test that installs its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from leasefence import settings


@contextlib.contextmanager
def installed(config: settings.Settings) -> Iterator[settings.Runtime]:
    """``settings.install(config)`` for the block, and the runtime installed before it restored
    after. A ``settings.reset()`` instead would drop the session stack's runtime (it installs
    its own when it starts): a later test that reads ``runtime()`` outside an invocation would get
    one built from the environment, with no endpoint (the real AWS), depending on test order."""
    before = settings._runtime
    try:
        yield settings.install(config)
    finally:
        with settings._runtime_lock:
            settings._runtime = before


def local_environment(spec: Any, endpoint: str, **more: str) -> dict[str, str]:
    """The environment a deployed function reads, for a table ``spec`` on one local ``endpoint``
    (DynamoDB and S3), with ``more`` (``LEASEFENCE_...`` names without the prefix)."""
    return {
        "LEASEFENCE_TABLE": spec.table_name,
        "LEASEFENCE_DUE_SHARDS": str(spec.due_shards),
        "LEASEFENCE_SWEEP_SHARDS": str(spec.sweep_shards),
        "LEASEFENCE_DYNAMODB_ENDPOINT": endpoint,
        "LEASEFENCE_S3_ENDPOINT": endpoint,
        "AWS_REGION": "us-east-1",
        **{f"LEASEFENCE_{name}": value for name, value in more.items()},
    }
