"""Dev tokens for the local stack: HS256 JWTs signed with ``LEASEFENCE_LOCAL_JWT_SECRET``.

Not used in AWS, where the HTTP API's JWT authorizer checks tokens from your identity provider.
Locally, :mod:`leasefence_tools.local.server` verifies these tokens the way the authorizer would and
hands the handler the same request context. PyJWT is imported on use only.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from typing import Any

from leasefence.api.security import ALL_SCOPES

SECRET_ENV = "LEASEFENCE_LOCAL_JWT_SECRET"
ISSUER = "leasefence-local"
AUDIENCE = "leasefence"
ALGORITHM = "HS256"
DEFAULT_TTL_SECONDS = 12 * 3600


class TokenError(Exception):
    """The token is missing, malformed, badly signed, expired or lacks a tenant."""


def generate_secret() -> str:
    return secrets.token_urlsafe(32)


def secret_from_env(generate: bool = False) -> str | None:
    """The configured secret; with ``generate``, a new one (also put into the environment, so
    every later reader in this process agrees) when none is configured."""
    secret = os.environ.get(SECRET_ENV)
    if not secret and generate:
        secret = generate_secret()
        os.environ[SECRET_ENV] = secret
    return secret or None


def mint(
    tenant_id: str,
    scopes: Iterable[str] = ALL_SCOPES,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    secret: str | None = None,
    subject: str | None = None,
    now: float | None = None,
    extra_claims: dict[str, Any] | None = None,
) -> str:
    """A signed dev token for ``tenant_id`` with the given scopes."""
    import jwt

    secret = secret or secret_from_env()
    if not secret:
        raise TokenError(f"no signing secret: set {SECRET_ENV}")
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": subject or f"dev:{tenant_id}",
        "tenant_id": tenant_id,
        "scope": " ".join(dict.fromkeys(scopes)),
        "iat": issued,
        "exp": issued + int(ttl_seconds),
        "jti": secrets.token_hex(8),
    }
    claims.update(extra_claims or {})
    return jwt.encode(claims, secret, algorithm=ALGORITHM)


#: Tokens verified in the current whole second: ``(second, {(token, secret): claims})``.
_verified: tuple[int, dict[tuple[str, str], dict[str, Any]]] = (0, {})
_VERIFIED_MAX = 256
_TIME_CLAIMS = ("exp", "nbf", "iat")


def verify(token: str, secret: str, leeway_seconds: float = 0) -> dict[str, Any]:
    """:func:`verify_once`, remembered for the rest of the current whole second when the
    token's time claims are whole seconds and there is no leeway: its answer cannot change
    before the second does (PyJWT compares them with the clock, ``exp <= now`` and so on), so a
    worker sending the same token many times a second has its signature checked once a second.
    The claims come back as a copy."""
    global _verified
    second = int(time.time())
    if leeway_seconds:
        return verify_once(token, secret, leeway_seconds)
    cached_second, cache = _verified
    if cached_second != second:
        cache = {}
        _verified = (second, cache)
    claims = cache.get((token, secret))
    if claims is None:
        claims = verify_once(token, secret)
        if len(cache) < _VERIFIED_MAX and all(
            type(claims.get(name, 0)) is int for name in _TIME_CLAIMS
        ):
            cache[(token, secret)] = claims
    return dict(claims)


def verify_once(token: str, secret: str, leeway_seconds: float = 0) -> dict[str, Any]:
    """The token's claims if it is a well-formed HS256 token signed with ``secret``, not expired
    (nor not-yet-valid), and carrying a ``tenant_id``; else :class:`TokenError`.

    The contract asks the local stack for exactly that: issuer and audience are an identity
    provider's business (checked by the JWT authorizer in AWS), so a token minted elsewhere with
    the same secret is accepted whatever its ``iss``/``aud``.
    """
    import jwt

    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != ALGORITHM:
            raise TokenError("token must be signed with HS256")
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            leeway=leeway_seconds,
            options={"verify_aud": False, "verify_iss": False, "require": []},
        )
    except TokenError:
        raise
    except jwt.ExpiredSignatureError:
        raise TokenError("token expired") from None
    except jwt.PyJWTError as error:
        raise TokenError(f"invalid token ({type(error).__name__})") from None
    tenant = claims.get("tenant_id")
    if not isinstance(tenant, str) or not tenant:
        raise TokenError("token has no tenant_id claim")
    return claims
