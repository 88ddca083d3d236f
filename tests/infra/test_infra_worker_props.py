"""The worker's props (``worker_props.py``): what is refused, and that the construct's idea
of the handler is the handler's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Duration, Stack
from aws_cdk import aws_lambda as lambda_

from leasefence_infra import LeaseFenceService


def _worker_props(**overrides: Any):
    from leasefence_infra import WorkerProps

    base: dict[str, Any] = {"handlers": "worker.demo_handlers:HANDLERS", "tenants": ["demo"]}
    return WorkerProps(**{**base, **overrides})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"tenants": []}, "at least one tenant"),
        ({"tenants": "demo"}, "at least one tenant"),
        ({"tenants": ["a,b"]}, "comma"),
        ({"tenants": ["a", "a"]}, "twice"),
        ({"tenants": [" a"]}, "whitespace"),
        ({"tenants": [""]}, "not a tenant id"),
        ({"tenants": ["x" * 257]}, "not a tenant id"),
        ({"tenants": [f"tenant-{i:04d}" for i in range(200)]}, "split the tenants"),
        ({"handlers": "worker.demo_handlers"}, "package.module:ATTRIBUTE"),
        ({"handlers": "worker/demo:HANDLERS"}, "package.module:ATTRIBUTE"),
        ({"handlers": "acme.jobs:HANDLERS"}, "not in"),  # no code: must be in functions/
        ({"handlers": "worker.jobs:HANDLERS", "code": lambda_.Code.from_inline("x")}, "shadowed"),
        ({"handlers": "leasefence.jobs:HANDLERS", "code": lambda_.Code.from_inline("x")}, "core layer"),
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"timeout": Duration.seconds(65)}, "must exceed one lease"),
        ({"lease_seconds": 300, "timeout": Duration.minutes(5)}, "must exceed one lease"),
        ({"timeout": Duration.minutes(16)}, "at most 900"),
        ({"memory_mb": 64}, "memory_mb"),
        ({"environment": {"LEASEFENCE_TABLE": "x"}}, "may not replace"),
        ({"environment": {"LEASEFENCE_WORKER_TENANTS": "x"}}, "may not replace"),
        ({"lost_ownership_alarm_threshold": 0}, "lost_ownership_alarm_threshold"),
    ],
)
def test_invalid_worker_props_are_refused(overrides: dict[str, Any], message: str) -> None:
    from aws_cdk import App

    stack = Stack(App(), "InvalidWorker")
    with pytest.raises(ValueError, match=message):
        LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://x/", jwt_audience=["a"],
                          core_layer=lambda_.Code.from_inline("x"), worker=_worker_props(**overrides))


def test_worker_timeout_just_above_one_lease_is_accepted() -> None:
    from leasefence_infra.worker_props import WORKER_MARGIN_SECONDS, validate_worker

    validate_worker(_worker_props(lease_seconds=60, timeout=Duration.seconds(60 + WORKER_MARGIN_SECONDS + 1)),
                    reserved_env=[])


def test_worker_settings_match_the_handler() -> None:
    """The construct's idea of the handler (entry point, margin, variables) is the handler's."""
    import ast

    from leasefence_infra.assets import functions_dir
    from leasefence_infra.environment import WORKER_ENV
    from leasefence_infra.worker_props import WORKER_HANDLER, WORKER_MARGIN_SECONDS

    module, _, function = WORKER_HANDLER.rpartition(".")
    source = (functions_dir() / Path(*module.split("."))).with_suffix(".py").read_text()
    tree = ast.parse(source)
    assert any(isinstance(n, ast.FunctionDef) and n.name == function for n in tree.body)
    (margin,) = [n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and [t.id for t in n.targets if isinstance(t, ast.Name)] == ["MARGIN_MS"]]
    assert margin == WORKER_MARGIN_SECONDS * 1000
    read = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.startswith("LEASEFENCE_WORKER_")}
    assert set(WORKER_ENV) <= read
