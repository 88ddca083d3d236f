"""Keyed hashes for logs and metrics: never a raw tenant id, operation id or payload.

The key comes from ``LEASEFENCE_LOG_HASH_KEY`` (in AWS: a secret the functions read at cold
start). Without it a random per-process key is used, so hashes still hide the ids but do not
correlate across processes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

_KEY: bytes | None = None


def _key() -> bytes:
    global _KEY
    if _KEY is None:
        configured = os.environ.get("LEASEFENCE_LOG_HASH_KEY")
        _KEY = configured.encode() if configured else secrets.token_bytes(32)
    return _KEY


def current_key() -> bytes:
    """The key in use (the local stack hands it to the API function's other execution
    environments, so that their logs' hashes match its own)."""
    return _key()


def set_key(key: bytes) -> None:
    global _KEY
    _KEY = key


def keyed_hash(*parts: str) -> str:
    """A short, stable, non-reversible tag for ids (length-prefixed so parts cannot run together)."""
    mac = hmac.new(_key(), digestmod=hashlib.sha256)
    for part in parts:
        data = part.encode()
        mac.update(len(data).to_bytes(4, "big"))
        mac.update(data)
    return mac.hexdigest()[:16]
