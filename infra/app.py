#!/usr/bin/env python3
"""Example CDK app: one stack with ``LeaseFenceService``.

    make synth                      # offline, no account, no Docker: cdk.out/ (placeholder issuer)
    cdk deploy -c jwtIssuer=https://idp.example.com/ -c jwtAudience=leasefence
    cdk deploy ... -c worker=demo -c workerTenants=acme,globex    # the demo worker (default: none)
    python infra/app.py -c allowPlaceholderIssuer=true             # -c key=value, as with cdk

Without ``jwtIssuer`` or ``createUserPool=true`` synthesis stops with one sentence, unless
``allowPlaceholderIssuer=true`` (offline synth: the API then refuses every token).

Context values: see ``infra/README.md`` (and ``leasefence_infra.service_props_from_context``).
It uses the library exactly as another app would: ``from leasefence_infra import ...``.
Every stack is checked with cdk-nag (AwsSolutions); the app exits non-zero on any finding that is
not acknowledged with a reason (``-c nag=false`` skips the checks).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from aws_cdk import App, Aspects, Environment

from leasefence_infra import ContextError, LeaseFenceStack, context_bool

#: This example app's project: its cdk.json (feature flags) and its default cdk.out/.
PROJECT_DIR = Path(__file__).resolve().parent.parent


def _cdk_json_context() -> dict:
    """cdk.json's context (feature flags), so `python infra/app.py` synthesizes exactly what
    `cdk synth` would. Under the CDK CLI the CLI passes it itself."""
    if "CDK_CONTEXT_JSON" in os.environ:
        return {}
    try:
        return dict(json.loads((PROJECT_DIR / "cdk.json").read_text()).get("context", {}))
    except FileNotFoundError:
        return {}


def _argv_context(argv: list[str]) -> dict:
    """``-c key=value`` / ``--context key=value`` arguments (``python infra/app.py`` only; the
    CDK CLI passes its own ``-c`` values in ``CDK_CONTEXT_JSON``)."""
    context: dict = {}
    args = iter(argv)
    for arg in args:
        if arg in ("-c", "--context"):
            pair = next(args, "")
        elif arg.startswith("--context="):
            pair = arg.split("=", 1)[1]
        else:
            raise ContextError(f"unexpected argument {arg!r}: only -c key=value is accepted")
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ContextError(f"-c needs key=value, got {pair!r}")
        context[key] = value
    return context


def build_app(argv: list[str] | None = None) -> App:
    app = App(
        outdir=os.environ.get("CDK_OUTDIR") or str(PROJECT_DIR / "cdk.out"),
        context={**_cdk_json_context(), **_argv_context(list(argv or []))},
    )
    env = None
    if os.environ.get("CDK_DEFAULT_ACCOUNT") or os.environ.get("CDK_DEFAULT_REGION"):
        env = Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"),
            region=os.environ.get("CDK_DEFAULT_REGION"),
        )
    LeaseFenceStack(
        app,
        app.node.try_get_context("stackName") or "LeaseFence",
        env=env,
        description="leasefence: job claims with leases and fencing tokens (DynamoDB, Lambda, HTTP API)",
    )
    if context_bool(app.node.try_get_context("nag"), True):
        from cdk_nag import AwsSolutionsChecks  # the [nag] extra (in dev); -c nag=false skips it

        Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return app


def main(argv: list[str] | None = None) -> int:
    try:
        app = build_app(sys.argv[1:] if argv is None else argv)
    except ContextError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
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
    print(
        f"synthesized {', '.join(s.stack_name for s in assembly.stacks)} into {assembly.directory}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
