"""Tracing: the X-Ray SDK only when tracing is on, by Powertools' own rules; a no-op otherwise."""

from __future__ import annotations

import pytest
from aws_lambda_powertools import Tracer

from leasefence.tracing import NoTracing, tracing_enabled

ENVIRONMENTS = [
    {},
    {"LAMBDA_TASK_ROOT": "/var/task"},
    {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"},
    {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "1"},
    {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "false"},
    {"LAMBDA_TASK_ROOT": "/var/task", "AWS_SAM_LOCAL": "true"},
    {"LAMBDA_TASK_ROOT": "/var/task", "AWS_CHALICE_CLI_MODE": "true"},
    {"POWERTOOLS_TRACE_DISABLED": "false"},
]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_tracing_is_on_exactly_when_powertools_would_trace(monkeypatch, env):
    for name in ("LAMBDA_TASK_ROOT", "POWERTOOLS_TRACE_DISABLED", "AWS_SAM_LOCAL", "AWS_CHALICE_CLI_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The X-Ray SDK is installed here, so only the environment decides.
    assert tracing_enabled() is (not Tracer._is_tracer_disabled())
    assert tracing_enabled(env) is tracing_enabled()


def test_the_no_op_provider_runs_a_traced_handler_and_keeps_its_errors():
    tracer = Tracer(service="test", disabled=False, auto_patch=False, provider=NoTracing())

    @tracer.capture_lambda_handler(capture_response=False)
    def handler(event, context):  # noqa: ARG001 - the Lambda signature
        if event.get("fail"):
            raise ValueError("boom")
        return {"ok": event["n"]}

    assert handler({"n": 3}, None) == {"ok": 3}
    with pytest.raises(ValueError, match="boom"):
        handler({"fail": True}, None)
