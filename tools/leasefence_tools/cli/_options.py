"""The options several commands share (one definition each, so their help reads the same)."""

from __future__ import annotations

import typer

STATE_DIR = typer.Option(
    None,
    "--state-dir",
    help="The local stack's state folder (default: LEASEFENCE_STATE_DIR, else the nearest "
    ".leasefence/ from the current folder up).",
)
BASE_URL = typer.Option(None, "--base-url", help="API base URL (default: the local stack).")
TOKEN = typer.Option(
    None, "--token", help="Bearer token (default: LEASEFENCE_TOKEN or a local dev token)."
)
TENANT = typer.Option(
    None, "--tenant", help="Mint a local dev token for this tenant (needs the JWT secret)."
)
SUB = typer.Option(
    None,
    "--sub",
    help="With a minted local dev token: its sub (who you are; default dev:<tenant>).",
)
