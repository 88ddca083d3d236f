#!/usr/bin/env python3
"""Example CDK app: one stack with ``LeaseFenceService``.

    make synth                      # offline, no account, no Docker: cdk.out/
    cdk deploy -c jwtIssuer=https://idp.example.com/ -c jwtAudience=leasefence
    cdk deploy ... -c workerTenants=acme,globex     # the demo worker's tenants (-c worker=false: none)

Context values: see ``infra/README.md`` (and ``leasefence_infra.stack.service_props_from_context``).
Every stack is checked with cdk-nag (AwsSolutions); the app exits non-zero on any finding that is
not acknowledged with a reason (``-c nag=false`` skips the checks).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

INFRA_DIR = Path(__file__).resolve().parent
REPO_ROOT = INFRA_DIR.parent
sys.path.insert(0, str(INFRA_DIR))

from aws_cdk import App, Aspects, Environment  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from leasefence_infra.stack import LeaseFenceStack, _bool  # noqa: E402


def _cdk_json_context() -> dict:
    """cdk.json's context (feature flags), so `python infra/app.py` synthesizes exactly what
    `cdk synth` would. Under the CDK CLI the CLI passes it itself."""
    if "CDK_CONTEXT_JSON" in os.environ:
        return {}
    try:
        return dict(json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {}))
    except FileNotFoundError:
        return {}


def build_app() -> App:
    app = App(
        outdir=os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"),
        context=_cdk_json_context(),
    )
    env = None
    if os.environ.get("CDK_DEFAULT_ACCOUNT") or os.environ.get("CDK_DEFAULT_REGION"):
        env = Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
                          region=os.environ.get("CDK_DEFAULT_REGION"))
    LeaseFenceStack(
        app,
        app.node.try_get_context("stackName") or "LeaseFence",
        env=env,
        description="leasefence: job claims with leases and fencing tokens (DynamoDB, Lambda, HTTP API)",
    )
    if _bool(app.node.try_get_context("nag"), True):
        Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app


def main() -> int:
    app = build_app()
    assembly = app.synth()
    findings = [
        (stack.stack_name, message.id, message.entry.data)
        for stack in assembly.stacks
        for message in stack.messages
        if str(message.entry.data).startswith("AwsSolutions-")
        and message.level.value in ("error", "warning")
    ]
    for stack_name, path, data in findings:
        print(f"cdk-nag: {stack_name} {path}: {data}", file=sys.stderr)
    if findings:
        print(f"cdk-nag: {len(findings)} unacknowledged finding(s)", file=sys.stderr)
        return 1
    print(f"synthesized {', '.join(s.stack_name for s in assembly.stacks)} into {assembly.directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
