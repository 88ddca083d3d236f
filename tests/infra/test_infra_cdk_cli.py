"""The pinned CDK CLI synthesizes the example app offline, the way README's deploy section runs it.

``make install`` runs ``npm ci``: the ``aws-cdk`` CLI of ``package-lock.json`` in ``node_modules``.
From the repository root, ``npx cdk synth`` reads ``cdk.json`` (the app: ``.venv/bin/python
infra/app.py``, the feature flags, notices off) and runs the app. Here nothing outside this machine
answers: the proxies and pip's only index are a closed localhost port, so the core layer is built
from the wheel cache (filled beforehand, as ``make install`` does), and the CLI must neither hang
nor fail on its own lookups.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from leasefence_infra.bundling import fetch_wheels
from tests.infra.test_infra_app import MAKE_SYNTH_ARGS, assert_the_example_app
from tests.infra.test_infra_versions import assert_bundles_the_locked_versions

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "node_modules" / ".bin" / "cdk"
APP_PYTHON = ROOT / ".venv" / "bin" / "python"  # cdk.json's "app"
#: The whole synth (Node CLI, jsii, the app, cdk-nag, the layer) takes about 25 s on a busy 2-core machine.
TIMEBOX_S = 240


def _offline_env(closed_port: int) -> dict[str, str]:
    dead = f"http://127.0.0.1:{closed_port}"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CDK_", "PIP_", "AWS_")) and k.lower() not in ("http_proxy", "https_proxy")}
    return {
        **env,
        "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
        "PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": f"{dead}/simple", "PIP_RETRIES": "0",
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_CLI_TELEMETRY": "true", "CDK_DISABLE_VERSION_CHECK": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    }


def test_cli_version_is_pinned_exactly() -> None:
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/aws-cdk"]["version"]
    assert package["devDependencies"]["aws-cdk"] == pinned  # a version, not a range


def test_pinned_cli_synthesizes_the_app_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = [str(p.relative_to(ROOT)) for p in (CLI, APP_PYTHON) if not p.exists()]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: run make install (npm ci installs the CDK CLI "
                    "pinned in package-lock.json; cdk.json runs the app with .venv/bin/python)")
    installed = json.loads((ROOT / "node_modules" / "aws-cdk" / "package.json").read_text())["version"]
    pinned = json.loads((ROOT / "package-lock.json").read_text())["packages"]["node_modules/aws-cdk"]["version"]
    assert installed == pinned, "node_modules is stale: run make install"

    fetch_wheels()  # online, before the offline synth (make install does it)
    outdir = tmp_path / "cdk.out"
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        start = time.monotonic()
        try:
            proc = subprocess.run(
                ["npx", "cdk", "synth", "--quiet", "-o", str(outdir), *MAKE_SYNTH_ARGS, "-c", "worker=demo"],
                cwd=ROOT, env=_offline_env(closed.getsockname()[1]),
                capture_output=True, text=True, timeout=TIMEBOX_S, check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"npx cdk synth did not finish within {TIMEBOX_S} s offline")
        took = time.monotonic() - start
    with capsys.disabled():
        print(f"\nnpx cdk synth (aws-cdk {installed}, offline) took {took:.1f} s")
    assert proc.returncode == 0, proc.stderr[-4000:]

    template = json.loads((outdir / "LeaseFence.template.json").read_text())
    (layer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    asset = outdir / f"asset.{layer['Properties']['Content']['S3Key'].removesuffix('.zip')}"
    # Every locked distribution, the aarch64 pydantic-core too: only the cache could give it here.
    assert_bundles_the_locked_versions(asset / "python")
    assert "pip failed" not in proc.stderr
    assert_the_example_app(template, outdir, proc.stderr)
