"""The operator console: static files (one page, one style sheet, and native ES modules: an entry
``console.js``, shared ``core``/``render``/``live``/``router``/``signin`` helpers and one module per
view; no framework, no CDN, no build step) that the API function serves itself at ``GET /console``
and ``GET /console/{asset}``, and ``GET /`` redirecting there.

The files are open (like ``GET /v1/health``): they hold no data. Every piece of data the page
shows, and every action it takes, is a call to the same HTTP API with the signed-in person's
bearer token, so the page can do nothing the API would refuse to that token.

How a person signs in is the deployment's (``config.json``, from the API function's environment):

* ``oidc``: OpenID Connect authorization code with PKCE against the configured issuer
  (``LEASEFENCE_CONSOLE_OIDC_ISSUER``, ``..._CLIENT_ID``, ``..._SCOPES``, and the endpoints
  ``..._AUTHORIZATION_ENDPOINT``, ``..._TOKEN_ENDPOINT``, ``..._LOGOUT_ENDPOINT`` when the issuer's
  discovery document should not be read; the construct sets them for its Cognito user pool);
* ``token``: a bearer token handed to the page in the URL's fragment (``/console#token=...``, what
  ``leasefence local`` prints: the fragment never reaches a server) or pasted into the page.

``LEASEFENCE_CONSOLE=off`` turns the console off: its routes answer 404 like an unknown route.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
#: The console's files (every file of ``static/``, flat): name -> content type.
ASSETS = {
    entry.name: _TYPES[PurePosixPath(entry.name).suffix]
    for entry in resources.files(__package__).joinpath("static").iterdir()
    if PurePosixPath(entry.name).suffix in _TYPES
}
CONFIG_ASSET = "config.json"
PATH = "/console"

_ENV_PREFIX = "LEASEFENCE_CONSOLE_OIDC_"
_OIDC_FIELDS = (
    "issuer",
    "client_id",
    "scopes",
    "authorization_endpoint",
    "token_endpoint",
    "logout_endpoint",
)
_cache: dict[str, bytes] = {}


def enabled() -> bool:
    return os.environ.get("LEASEFENCE_CONSOLE", "on").strip().lower() not in ("off", "false", "0")


def config() -> dict[str, Any]:
    """How the page signs a person in (served as ``/console/config.json``)."""
    oidc = {
        name: os.environ.get(_ENV_PREFIX + name.upper(), "").strip() or None
        for name in _OIDC_FIELDS
    }
    if oidc["client_id"] and (oidc["issuer"] or oidc["authorization_endpoint"]):
        oidc["scopes"] = oidc["scopes"] or "openid"
        return {"sign_in": "oidc", "oidc": oidc}
    return {"sign_in": "token", "oidc": None}


def asset(name: str) -> bytes | None:
    """The bytes of one of the console's files (None: no such file)."""
    if name not in ASSETS:
        return None
    if name not in _cache:
        _cache[name] = resources.files(__package__).joinpath("static", name).read_bytes()
    return _cache[name]


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def security_headers() -> dict[str, str]:
    """Headers of every console answer: the page may load only its own files and talk only to
    this API (and, signing in with OIDC, the issuer's discovery document and token endpoint)."""
    oidc = config()["oidc"] or {}
    connect = ["'self'"]
    for url in (oidc.get("issuer"), oidc.get("token_endpoint")):
        origin = _origin(url)
        if origin and origin not in connect:
            connect.append(origin)
    policy = (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {' '.join(connect)}; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    return {
        "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-cache",
    }


def answer(name: str) -> tuple[str, bytes] | None:
    """``(content type, body)`` of ``/console/<name>`` (``index.html`` for the page); None for a
    name the console does not serve (the API answers it 404 ``not_found``)."""
    if name == CONFIG_ASSET:
        return "application/json", json.dumps(config()).encode()
    body = asset(name)
    return None if body is None else (ASSETS[name], body)
