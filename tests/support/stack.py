"""The local stack's fixtures (a pytest plugin: tests/conftest.py loads it, so that every test
folder has them): the session's embedded AWS endpoint (tests/conftest.py), a table and a bucket of
their own, and the HTTP API on a free port, served in-process by the real handlers.

The sweeper timer is off: tests run the sweeper function explicitly (``stack.sweep_now()``).
The table's stream and the stream-driven functions are off too, until a test module asks for
them (the ``streams`` fixture of tests/api/test_stream_e2e.py): the stream worker then serves
:data:`STREAM_TENANTS` with :data:`tests.support.stream_jobs.HANDLERS`, and no other tenant.

The session's stack sets one write shard; ``default_stack`` is a stack of its own with the default
layout (each tenant's write shard counts recorded at its first enqueue), as the construct deploys
it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from leasefence import settings
from leasefence.client import LeaseFenceClient
from leasefence_tools.local.server import LocalStack
from leasefence_tools.local.tokens import ALL_SCOPES
from tests.support.api import Api, new_tenant

SECRET = "api-tests-secret-0123456789abcdef"
#: The only tenants the local stream worker serves (the other API tests' tenants are random).
STREAM_TENANTS = ("stream-a", "stream-b")


@pytest.fixture(scope="session")
def stack(aws):
    # One write shard set, for the session (the stack's runtime and the engines these tests make
    # from the environment must agree): these tests read items and cursors at the bare tenant id.
    # The default (each tenant's counts recorded at its first enqueue: 64 for a new one) is
    # tests/engine/test_tenant_layout.py's and tests/api/test_api_tenant_layout.py's.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LEASEFENCE_OPERATION_SHARDS", "1")
        with LocalStack(
            host="127.0.0.1",
            port=0,
            aws=aws,
            table_name="api-operations",
            bucket="api-payloads",
            sweep_interval=None,
            secret=SECRET,
            worker_handlers="tests.support.stream_jobs:HANDLERS",
            worker_tenants=STREAM_TENANTS,
            worker_lease_seconds=1,
        ) as running:
            yield running


@pytest.fixture
def tenant() -> str:
    return new_tenant()


@pytest.fixture
def token(stack, tenant) -> str:
    return stack.token(tenant, ALL_SCOPES)


@pytest.fixture
def api(stack, token) -> Api:
    return Api(stack.base_url, token)


@pytest.fixture
def make_api(stack):
    def make(tenant_id: str, scopes: Any = ALL_SCOPES) -> Api:
        return Api(stack.base_url, stack.token(tenant_id, scopes))

    return make


@pytest.fixture
def sdk(stack, token) -> LeaseFenceClient:
    return LeaseFenceClient(stack.base_url, token, retries=2, backoff=0.01)


@pytest.fixture
def default_stack(aws: Any, stack: LocalStack) -> Iterator[LocalStack]:
    """A stack of its own; the session's stack is the process's runtime again afterwards (a
    stack installs its runtime for the process when it starts, and forgets it when it stops)."""
    try:
        yield from _default_stack(aws)
    finally:
        settings.install(stack.runtime.settings)


def _default_stack(aws: Any) -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as env:
        env.delenv("LEASEFENCE_OPERATION_SHARDS", raising=False)
        with LocalStack(
            host="127.0.0.1",
            port=0,
            aws=aws,
            table_name=f"layout-{uuid.uuid4().hex[:10]}",
            bucket="layout-payloads",
            sweep_interval=None,
            secret="layout-tests-secret-0123456789abcdef",
        ) as running:
            yield running
