"""What the commands that talk to a running API share: the running local stack as its state
folder describes it (:mod:`leasefence_tools.local.state`), its JWT secret, the dev token's
scopes, and an SDK client of the API (``--base-url``/``--token``, else the local stack's)."""

from __future__ import annotations

import os
from typing import Any

import typer

DEV_TENANT = "dev"


def found_stack(state_dir: str | None) -> Any:
    """What the commands know of the running local stack (leasefence_tools.local.state)."""
    from leasefence_tools.local import state

    return state.find(state_dir)


def jwt_secret(found: Any) -> str | None:
    from leasefence_tools.local.tokens import secret_from_env

    return secret_from_env() or found.get("secret")


def default_scopes(tenant: str) -> tuple[str, ...]:
    """A minted dev token's scopes: all four; for a shadow tenant (``shadow:``, a reserved
    namespace) a shadow token's, the only token the API accepts for one."""
    from leasefence.api.security import ALL_SCOPES, SHADOW_MODE_SCOPES
    from leasefence.keys import is_shadow_tenant

    return SHADOW_MODE_SCOPES if is_shadow_tenant(tenant) else ALL_SCOPES


def api_client(
    base_url: str | None,
    token_value: str | None,
    tenant: str | None,
    sub: str | None = None,
    state_dir: str | None = None,
) -> Any:
    """A client of the API named by --base-url or LEASEFENCE_BASE_URL, else of the running local
    stack (found in its state folder; none there: say so, never guess a port)."""
    from leasefence.client import LeaseFenceClient

    url = base_url or os.environ.get("LEASEFENCE_BASE_URL")
    bearer = token_value or os.environ.get("LEASEFENCE_TOKEN")
    state = found_stack(state_dir) if not (url and bearer) else None
    if not url:
        assert state is not None
        url = state.get("base_url")
        if not url:
            typer.echo(state.advice("--base-url (or LEASEFENCE_BASE_URL)"), err=True)
            raise typer.Exit(1)
    if (
        not bearer
        and state is not None
        and tenant is None
        and sub is None
        and state.get("token")
        and state.get("base_url") == url
    ):
        bearer = state.get("token")
    if not bearer:
        assert state is not None
        secret = jwt_secret(state)
        if not secret:
            typer.echo(
                "no token: pass --token, set LEASEFENCE_TOKEN or LEASEFENCE_LOCAL_JWT_SECRET "
                f"({state.why_none()}).",
                err=True,
            )
            raise typer.Exit(2)
        from leasefence_tools.local.tokens import mint

        bearer = mint(
            tenant or DEV_TENANT,
            default_scopes(tenant or DEV_TENANT),
            ttl_seconds=600,
            secret=secret,
            subject=sub,
        )
    return LeaseFenceClient(url, bearer, retries=2)
