"""Stable, collision-free derivations of an operation's identity for targets."""

from __future__ import annotations

import hashlib


def identity_digest(tenant_id: str, operation_id: str) -> str:
    """SHA-256 over the length-prefixed pair: ``("a#", "b")`` and ``("a", "#b")`` differ."""
    t, o = tenant_id.encode(), operation_id.encode()
    return hashlib.sha256(len(t).to_bytes(4, "big") + t + len(o).to_bytes(4, "big") + o).hexdigest()
