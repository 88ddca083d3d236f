"""``leasefence verify``: a team's handler, its target built by its own fixture, the fault tests.

::

    leasefence verify acme_jobs.jobs:HANDLERS --job-type refund --target-class B \\
        --fixture acme_jobs.verify_fixture:build --report verify-report.json

The handler mapping is the one the worker function loads (``package.module:ATTRIBUTE``, a mapping
of job type to handler). The fixture is ``package.module[:function]`` (default ``build``):
``build(env) -> Target`` (see :mod:`leasefence_tools.kit.rig`). Everything runs in this process on the
embedded stack; nothing needs AWS.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from leasefence.model import TargetClass
from leasefence.worker import Handler
from leasefence_tools.kit.checks import CHECKS, Check, check_named
from leasefence_tools.kit.report import ActionRecord, CheckResult, VerifyReport
from leasefence_tools.kit.rig import DEFAULT_LEASE_MS, Fixture, Rig, load_handlers
from leasefence_tools.local.capabilities import TRANSACTIONS


class SetupError(Exception):
    """The handlers, the job type or the fixture could not be loaded (one sentence)."""


def load_object(spec: str, default_attribute: str) -> Any:
    """``package.module:ATTRIBUTE`` (or ``package.module``: the default attribute), imported with
    the current directory importable, as ``python -m`` would."""
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    from leasefence_tools.local.embedded import use_local_credentials

    use_local_credentials()  # a module may build boto3 clients at import: never real credentials
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SetupError(f"cannot import {module_name!r}: {error}") from error
    name = attribute or default_attribute
    if not hasattr(module, name):
        raise SetupError(f"{module_name} has no attribute {name!r}")
    return getattr(module, name)


def _describe(thing: Any) -> str:
    if isinstance(thing, str):
        return thing
    if isinstance(thing, Mapping):
        return f"<handlers: {', '.join(sorted(thing))}>"
    module = getattr(thing, "__module__", None)
    name = getattr(thing, "__qualname__", None) or type(thing).__name__
    return f"{module}:{name}" if module else name


def run_checks(rig: Rig, checks: Iterable[Check]) -> list[CheckResult]:
    results = []
    for check in checks:
        rig.fresh_engine()
        started = time.monotonic()
        try:
            outcome = check.run(rig)
            problems, evidence, tenants = outcome.problems, outcome.evidence, outcome.tenants
        except Exception as error:  # noqa: BLE001 - a check that cannot run is a no-go
            problems = [f"the check could not run: {type(error).__name__}: {error}"]
            evidence, tenants = [], []
        actions = [
            ActionRecord.of(a)
            for a in rig.log.actions
            if a.execution is not None and a.execution.tenant_id in tenants
        ]
        results.append(
            CheckResult(
                name=check.name,
                title=check.title,
                verdict="no-go" if problems else "go",
                why=problems[0] if problems else check.go(rig.target_class),
                problems=problems,
                evidence=evidence,
                actions=actions,
                seconds=round(time.monotonic() - started, 3),
            )
        )
    return results


def verify(
    handlers: str | Mapping[str, Handler],
    job_type: str,
    target_class: TargetClass | str,
    fixture: str | Fixture,
    *,
    aws: Any = None,
    checks: Iterable[str] | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
) -> VerifyReport:
    """Run the checks (all, or those named) against one job type's handler.

    ``aws``: a running :class:`~leasefence_tools.local.embedded.EmbeddedAws` to use (default: the
    DynamoDB ``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names, else an embedded endpoint, started and
    stopped here; class A needs transactions there). Raises :class:`SetupError` when something cannot be loaded."""
    started = time.monotonic()
    mapping = load_object(handlers, "HANDLERS") if isinstance(handlers, str) else handlers
    if not isinstance(mapping, Mapping):
        raise SetupError(f"{_describe(handlers)} is not a mapping of job type to handler")
    try:
        handler = load_handlers(mapping, job_type)
        target = TargetClass(target_class)
    except (LookupError, ValueError) as error:
        raise SetupError(str(error)) from error
    build: Callable[..., Any] = (
        load_object(fixture, "build") if isinstance(fixture, str) else fixture
    )
    selected = [check_named(n) for n in checks] if checks is not None else list(CHECKS)
    own = aws is None
    if own:
        aws = endpoint()
    try:
        if target is TargetClass.A and TRANSACTIONS in getattr(aws, "lacking", {}):
            raise SetupError(
                f"class A commits in a transaction: the DynamoDB endpoint {aws.name} lacks "
                f"{TRANSACTIONS} ({aws.lacking[TRANSACTIONS]})"
            )
        try:
            rig = Rig(aws, handler, job_type, target, build, lease_ms=lease_ms)
        except Exception as error:
            raise SetupError(f"the fixture failed: {type(error).__name__}: {error}") from error
        results = run_checks(rig, selected)
    finally:
        if own:
            aws.stop()
    return VerifyReport(
        handlers=_describe(handlers),
        job_type=job_type,
        target_class=target.value,
        fixture=_describe(fixture),
        lease_ms=lease_ms,
        verdict="go" if all(r.go for r in results) else "no-go",
        checks=results,
        seconds=round(time.monotonic() - started, 3),
    )


def endpoint() -> Any:
    """The DynamoDB to verify on: the one ``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names, probed
    (:mod:`leasefence_tools.local.external`; its tables under a prefix, deleted after), else an
    embedded endpoint."""
    from leasefence_tools.local.capabilities import UnsuitableEndpoint
    from leasefence_tools.local.embedded import EmbeddedAws
    from leasefence_tools.local.external import ExternalDynamoDB

    external = ExternalDynamoDB.from_env()
    if external is None:
        return EmbeddedAws(fidelity=False).start()
    try:
        return external.start()
    except UnsuitableEndpoint as error:
        raise SetupError(str(error)) from error


def main(
    handlers: str,
    job_type: str,
    target_class: str,
    fixture: str,
    report_path: str | None,
    checks: list[str] | None = None,
    lease_ms: int = DEFAULT_LEASE_MS,
    quiet: bool = False,
) -> int:
    """The command: print the lines, write the JSON report; 0 go, 1 no-go, 2 setup error."""
    # The refusals and abandoned claims are the point; the report says what happened.
    logger = logging.getLogger("leasefence")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        report = verify(handlers, job_type, target_class, fixture, checks=checks, lease_ms=lease_ms)
    except (SetupError, LookupError) as error:
        print(f"leasefence verify: {error}", file=sys.stderr)
        return 2
    finally:
        logger.setLevel(level)
    print(report.text(evidence=not quiet))
    if report_path:
        with open(report_path, "w", encoding="utf-8") as handle:
            handle.write(report.model_dump_json(indent=2))
        print(f"report: {report_path}")
    return 0 if report.go else 1
