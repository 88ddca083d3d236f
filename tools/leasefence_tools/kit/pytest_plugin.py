"""The pytest plugin: leasefence's checks and bench as fixtures in a team's own test suite.

Registered by the package (entry point ``pytest11``), so installing ``leasefence[local]`` next to
pytest is enough; nothing to import in a conftest. Imports nothing heavy until a fixture is used.

Fixtures (all names start with ``leasefence_``):

- ``leasefence_aws`` (session): the embedded DynamoDB/S3 endpoint (no AWS, no Docker), or the
  DynamoDB ``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names (a URL, or ``aws``; its tables under a
  prefix, deleted at the end; S3 stays embedded).
- ``leasefence_clock``: a manual clock (ms); ``leasefence_engine``: an engine on it, over a
  fresh operations table.
- ``leasefence_idempotent_api``, ``leasefence_gateway``: the class C and D fakes.
- ``leasefence_verify``: ``leasefence_verify(handlers, job_type, target_class, fixture,
  checks=None) -> VerifyReport``: what ``leasefence verify`` runs (``report.go``,
  ``report.check("stale-write")``, ``report.text()``).
- ``leasefence_rig``: ``leasefence_rig(handlers, job_type, target_class, fixture) -> Rig``, to run
  one zombie scenario (``rig.run("stale-write")``) and look at what the target recorded
  (``rig.effects(tenant, operation_id)``).

``handlers`` is a mapping of job type to handler or its ``package.module:ATTRIBUTE``; ``fixture``
is ``build(env) -> Target`` or its ``package.module[:function]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def leasefence_aws() -> Iterator[Any]:
    from leasefence_tools.kit.verify import endpoint

    aws = endpoint()
    try:
        yield aws
    finally:
        aws.stop()


@pytest.fixture
def leasefence_clock() -> Any:
    from leasefence.clock import ManualClock

    return ManualClock()


@pytest.fixture
def leasefence_engine(leasefence_aws: Any, leasefence_clock: Any) -> Any:
    import uuid

    from leasefence.engine import Engine
    from leasefence.schema import TableSpec

    spec = leasefence_aws.create_tables(TableSpec(table_name=f"lf-test-{uuid.uuid4().hex[:12]}"))
    return Engine(client=leasefence_aws.client(), spec=spec, clock=leasefence_clock)


@pytest.fixture
def leasefence_idempotent_api() -> Any:
    from leasefence_tools.testing.recording import RecordingIdempotentApi

    return RecordingIdempotentApi()


@pytest.fixture
def leasefence_gateway() -> Any:
    from leasefence_tools.testing.recording import SingleCallGateway

    return SingleCallGateway()


@pytest.fixture
def leasefence_verify(leasefence_aws: Any) -> Callable[..., Any]:
    from leasefence_tools.kit.verify import verify

    def run(
        handlers: Any,
        job_type: str,
        target_class: str,
        fixture: Any,
        checks: list[str] | None = None,
    ) -> Any:
        return verify(handlers, job_type, target_class, fixture, aws=leasefence_aws, checks=checks)

    return run


@pytest.fixture
def leasefence_rig(leasefence_aws: Any) -> Callable[..., Any]:
    from leasefence_tools.kit.rig import Rig, load_handlers
    from leasefence_tools.kit.verify import load_object

    def build(handlers: Any, job_type: str, target_class: str, fixture: Any) -> Rig:
        mapping = load_object(handlers, "HANDLERS") if isinstance(handlers, str) else handlers
        builder = load_object(fixture, "build") if isinstance(fixture, str) else fixture
        return Rig(
            leasefence_aws, load_handlers(mapping, job_type), job_type, target_class, builder
        )

    return build
