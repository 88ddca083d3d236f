"""Shadow mode over the HTTP API: :func:`api_store`, the SDK client fit for it, and the token
checks it makes before it hands one out (read without verifying: the API verifies the token).
:mod:`leasefence.shadow` re-exports these names."""

from __future__ import annotations

import base64
import json
from typing import Any

from leasefence.api.security import SHADOW, SHADOW_MODE_SCOPES
from leasefence.keys import SHADOW_PREFIX, is_shadow_tenant


def _token_claims(token: str) -> dict[str, Any]:
    """A JWT's claims, read without verifying them (the API verifies the token)."""
    try:
        body = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (IndexError, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def token_tenant(token: str) -> str | None:
    """The ``tenant_id`` claim of a JWT, read without verifying it (the API verifies it)."""
    tenant = _token_claims(token).get("tenant_id")
    return tenant if isinstance(tenant, str) else None


def token_scopes(token: str) -> frozenset[str]:
    """The scopes of a JWT (its ``scope`` claim), read without verifying it."""
    raw = _token_claims(token).get("scope")
    if isinstance(raw, str):
        return frozenset(raw.split())
    if isinstance(raw, list):
        return frozenset(str(s) for s in raw)
    return frozenset()


def api_store(base_url: str, token: str, timeout_s: float = 0.5) -> Any:
    """A :class:`~leasefence.client.LeaseFenceClient` fit for shadow mode: a short timeout, no
    retries (shadow mode never waits), and a token for a shadow tenant (checked here, so shadow
    operations cannot land among real ones)."""
    from leasefence.client import LeaseFenceClient

    tenant = token_tenant(token)
    if tenant is None or not is_shadow_tenant(tenant):
        raise ValueError(
            "shadow mode needs a token whose tenant_id is a shadow tenant "
            f"('{SHADOW_PREFIX}<tenant>'), so shadow operations never mix with real ones; "
            f"this token's tenant_id is {tenant!r}"
        )
    if SHADOW not in token_scopes(token):
        raise ValueError(
            f"shadow mode needs a shadow token: the API refuses a token for {tenant!r} unless it "
            f"carries the scope {SHADOW} (scopes: {' '.join(SHADOW_MODE_SCOPES)})"
        )
    return LeaseFenceClient(base_url, token, timeout=timeout_s, retries=0)
