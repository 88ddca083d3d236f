#!/usr/bin/env python3
"""The refund worker's CDK app: ``python refund_worker_app.py`` (or ``npx cdk synth`` in this
folder) synthesizes it offline into ``cdk.out/``; ``npx cdk deploy -c jwtIssuer=<your IdP's
issuer> -c jwtAudience=<its audience>`` deploys it."""

from __future__ import annotations

import os

from aws_cdk import App
from refund_worker_stack import RefundWorkerStack


def build_app(outdir: str | None = None) -> App:
    app = App(outdir=outdir or os.environ.get("CDK_OUTDIR") or "cdk.out")
    RefundWorkerStack(
        app,
        "RefundWorker",
        # An issuer that signs nothing: the API refuses every token until you name yours.
        jwt_issuer=app.node.try_get_context("jwtIssuer") or "https://idp.example.com/",
        jwt_audience=[app.node.try_get_context("jwtAudience") or "leasefence"],
    )
    return app


if __name__ == "__main__":
    build_app().synth()
