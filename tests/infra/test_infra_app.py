"""The example app as `make synth` runs it (real local bundling), and the bundler's failure mode.

``test_app_synthesizes_offline_with_local_bundling`` is the one infra test that needs the
network: pip fetches the core layer's wheels (manylinux2014_aarch64 / py3-none-any) from PyPI
into the wheel cache, unless they are there already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aws_cdk import App, RemovalPolicy, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from leasefence_infra.bundling import LocalLayerBundler, core_layer_code, source_fingerprint
from aws_cdk.assertions import Match, Template
from leasefence_infra import WorkerProps
from leasefence_infra.stack import (
    DEMO_WORKER_HANDLERS,
    MISSING_ISSUER_MESSAGE,
    PLACEHOLDER_ISSUER,
    ContextError,
    service_props_from_context,
)
from tests.support.layer import assert_runtime_package_only

ROOT = Path(__file__).resolve().parents[2]


def _run_app(outdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "CDK_OUTDIR": str(outdir),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    }
    env.pop("CDK_CONTEXT_JSON", None)
    return subprocess.run(
        [sys.executable, str(ROOT / "infra" / "app.py"), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )


#: What `make synth` passes (Makefile), plus the demo worker so that its path is synthesized too.
MAKE_SYNTH_ARGS = ("-c", "allowPlaceholderIssuer=true")


def test_make_synth_passes_the_placeholder_opt_out() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert f"$(CDK) synth --quiet {' '.join(MAKE_SYNTH_ARGS)}" in makefile
    # cdk.json must not opt out: `cdk deploy` without an issuer has to refuse.
    assert "allowPlaceholderIssuer" not in (ROOT / "cdk.json").read_text()


def test_app_refuses_to_synthesize_without_an_issuer(tmp_path: Path) -> None:
    proc = _run_app(tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"error: {MISSING_ISSUER_MESSAGE}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("*.template.json"))


def assert_the_example_app(template: dict, outdir: Path, stderr: str) -> None:
    """What `make synth` (the pinned CLI on infra/app.py, plus ``-c worker=demo``) must produce;
    test_infra_cdk_cli runs that synthesis once and checks it with this."""
    assert "cdk-nag" not in stderr  # no unacknowledged finding was printed
    assert "placeholder" in stderr  # the offline placeholder issuer is called out
    (layer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    asset_key = layer["Properties"]["Content"]["S3Key"]
    asset_dir = outdir / f"asset.{asset_key.removesuffix('.zip')}"
    assert (asset_dir / "python" / "rfc8785" / "__init__.py").is_file()
    assert (asset_dir / "python" / "leasefence" / "schema.py").is_file()
    # Powertools (with pydantic) is bundled: the functions need no layer from an SSM parameter.
    assert (asset_dir / "python" / "aws_lambda_powertools" / "__init__.py").is_file()
    assert (asset_dir / "python" / "pydantic_core").is_dir()
    assert not [p for p in template.get("Parameters", {}).values()
                if str(p.get("Default", "")).startswith("/aws/service/powertools/")]
    assert not list((asset_dir / "python" / "leasefence").rglob("__pycache__"))
    assert_runtime_package_only(asset_dir / "python" / "leasefence")
    # -c worker=demo: the worker with the demo handlers for the tenant `demo`.
    Template.from_json(template).has_resource_properties("AWS::Lambda::Function", {
        "Handler": "worker.handler.lambda_handler",
        "Environment": {"Variables": Match.object_like({
            "LEASEFENCE_WORKER_HANDLERS": "worker.demo_handlers:HANDLERS",
            "LEASEFENCE_WORKER_TENANTS": "demo",
        })},
    })
    assert "WorkerFunctionName" in template["Outputs"]
    # The CLI read cdk.json (the app, the feature flags) and wrote one stack artifact.
    manifest = json.loads((outdir / "manifest.json").read_text())
    assert manifest["artifacts"]["LeaseFence"]["type"] == "aws:cloudformation:stack"
    (auth,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Authorizer"]
    assert auth["Properties"]["JwtConfiguration"]["Issuer"] == PLACEHOLDER_ISSUER
    assert list(outdir.glob("AwsSolutions-*LeaseFence-NagReport.csv"))


def test_bundling_failure_is_loud_and_never_docker(tmp_path: Path) -> None:
    stack = Stack(App(outdir=str(tmp_path)), "Broken")
    code = core_layer_code(requirements=("leasefence-no-such-package==0",), extra_pip_args=("--no-index",))
    with pytest.raises(RuntimeError, match="pip could not install") as excinfo:
        lambda_.LayerVersion(stack, "Layer", code=code)
    assert "docker" not in str(excinfo.value).lower()


def test_bundler_refuses_a_missing_package(tmp_path: Path) -> None:
    bundler = LocalLayerBundler(tmp_path / "nothing-here", requirements=())
    with pytest.raises(RuntimeError, match="no Python package"):
        bundler.build(tmp_path / "out")


def test_source_fingerprint_tracks_sources_and_requirements(tmp_path: Path) -> None:
    pkg = tmp_path / "leasefence"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    first = source_fingerprint(pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    assert source_fingerprint(pkg) == first
    assert source_fingerprint(pkg, requirements=("rfc8785==0.1.3",)) != first
    (pkg / "__init__.py").write_text("x = 2\n")
    assert source_fingerprint(pkg) != first


def test_context_without_an_issuer_is_refused() -> None:
    for context in ({}, {"jwtAudience": "leasefence"}, {"allowPlaceholderIssuer": "false"}):
        with pytest.raises(ContextError) as excinfo:
            service_props_from_context(context)
        assert str(excinfo.value) == MISSING_ISSUER_MESSAGE
    assert MISSING_ISSUER_MESSAGE.count(". ") == 0 and MISSING_ISSUER_MESSAGE.endswith(".")  # one sentence


PLACEHOLDER = {"allowPlaceholderIssuer": "true"}


def test_context_defaults_with_the_placeholder_opt_out() -> None:
    props = service_props_from_context(PLACEHOLDER)
    assert props["jwt_issuer"] == PLACEHOLDER_ISSUER
    assert props["jwt_audience"] == ["leasefence"]
    assert props["deletion_protection"] is True
    assert props["create_encryption_key"] is False
    assert props["tenant_isolation"] is False
    assert "removal_policy" not in props  # RETAIN, the construct's default
    assert "worker" not in props  # no worker unless handlers are named
    # A real issuer wins over the opt-out.
    assert service_props_from_context({**PLACEHOLDER, "jwtIssuer": "https://idp/"})["jwt_issuer"] == "https://idp/"


def test_context_demo_worker() -> None:
    worker = service_props_from_context({**PLACEHOLDER, "worker": "demo"})["worker"]
    assert isinstance(worker, WorkerProps)
    assert worker.handlers == DEMO_WORKER_HANDLERS == "worker.demo_handlers:HANDLERS"
    assert list(worker.tenants) == ["demo"]
    assert worker.code is None and worker.business_tables == () and worker.fenced_tables == ()


def test_context_worker_handlers_tenants_and_switch() -> None:
    ctx = {**PLACEHOLDER, "worker": "demo"}
    assert list(service_props_from_context({**ctx, "workerTenants": "acme, globex"})["worker"].tenants) == [
        "acme", "globex"]
    assert list(service_props_from_context({**ctx, "workerTenants": ["acme"]})["worker"].tenants) == ["acme"]
    own = service_props_from_context({**PLACEHOLDER, "workerHandlers": "jobs.acme:HANDLERS", "workerTenants": "acme"})
    assert own["worker"].handlers == "jobs.acme:HANDLERS" and list(own["worker"].tenants) == ["acme"]
    assert "worker" not in service_props_from_context({**PLACEHOLDER, "worker": "false"})
    assert "worker" not in service_props_from_context(
        {**PLACEHOLDER, "worker": "false", "workerHandlers": "jobs.acme:HANDLERS", "workerTenants": "acme"})
    for context, message in (
        ({**ctx, "workerTenants": " , "}, "workerTenants"),
        ({**PLACEHOLDER, "workerHandlers": "jobs.acme:HANDLERS"}, "workerTenants"),
        ({**PLACEHOLDER, "workerTenants": "acme"}, "no worker is deployed"),
        ({**PLACEHOLDER, "worker": "true"}, "workerHandlers"),
        ({**ctx, "workerHandlers": "jobs.acme:HANDLERS"}, "not both"),
    ):
        with pytest.raises(ContextError, match=message):
            service_props_from_context(context)


def test_app_reads_context_arguments() -> None:
    import app  # infra/app.py (infra/ is on sys.path)

    assert app._argv_context(["-c", "a=1", "--context", "b=x=y", "--context=c=3"]) == {
        "a": "1", "b": "x=y", "c": "3"}
    for argv in (["-c", "novalue"], ["synth"], ["-c"]):
        with pytest.raises(ContextError):
            app._argv_context(argv)


def test_context_values_are_parsed() -> None:
    props = service_props_from_context({
        "jwtIssuer": "https://idp.example.com/",
        "logLevel": "debug",
        "metricsNamespace": "Acme/LeaseFence-dev",
        "jwtAudience": "a, b",
        "payloadRetentionDays": "14",
        "identityRetentionDays": "forever",
        "deletionProtection": "false",
        "customerManagedKey": "true",
        "tenantIsolation": True,
        "destroyOnRemoval": "yes",
        "logRetentionDays": "90",
        "dueShards": "8",
        "tracing": "true",
        "systemLogLevel": "info",
    })
    assert props["jwt_issuer"] == "https://idp.example.com/"
    assert props["jwt_audience"] == ["a", "b"]
    assert props["payload_retention_days"] == 14 and props["due_shards"] == 8
    assert props["identity_retention_days"] is None
    assert props["deletion_protection"] is False
    assert props["create_encryption_key"] is True and props["tenant_isolation"] is True
    assert props["removal_policy"] == RemovalPolicy.DESTROY
    assert props["log_retention"] == logs.RetentionDays.THREE_MONTHS
    assert props["log_level"] == "DEBUG" and props["metrics_namespace"] == "Acme/LeaseFence-dev"
    assert props["tracing"] is True  # off unless asked for
    assert props["system_log_level"] == "INFO"
    assert "system_log_level" not in service_props_from_context({"jwtIssuer": "https://idp.example.com/"})
    assert "tracing" not in service_props_from_context({"jwtIssuer": "https://idp.example.com/"})
    pool = service_props_from_context({"createUserPool": "true", "userPoolDomainPrefix": "acme-lf"})
    assert pool["create_user_pool"] is True and "jwt_issuer" not in pool
    with pytest.raises(ValueError):
        service_props_from_context({"deletionProtection": "maybe"})
    with pytest.raises(ValueError):
        service_props_from_context({"logRetentionDays": "2"})
