"""The core package's table schema and key encodings, imported from ``layers/leasefence``.

``make install`` installs the project in editable mode; without it (a bare checkout) the source
tree is put on ``sys.path``. Either way the infra reads the same module as the engine.
"""

from __future__ import annotations

import sys

from .bundling import REPO_ROOT

try:
    from leasefence import engine, keys, payloads, schema, settings
except ImportError:  # pragma: no cover - only without `pip install -e .`
    sys.path.insert(0, str(REPO_ROOT / "layers"))
    from leasefence import engine, keys, payloads, schema, settings

#: Every object the service writes lives under this prefix (``leasefence.payloads``).
PAYLOAD_KEY_PREFIX: str = payloads.KEY_PREFIX
#: Longest tenant or operation id the engine accepts.
MAX_ID_LENGTH: int = engine.MAX_ID_LENGTH
#: A claim's own retry budget, and one store call's worst case (the functions' client settings).
CLAIM_RETRY_BUDGET_MS: int = engine.CLAIM_RETRY_BUDGET_MS
STORE_CALL_WORST_S: int = settings.STORE_CALL_WORST_S

__all__ = ["CLAIM_RETRY_BUDGET_MS", "MAX_ID_LENGTH", "PAYLOAD_KEY_PREFIX", "STORE_CALL_WORST_S", "keys", "schema"]
