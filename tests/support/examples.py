"""The examples/ folder as its tests use it."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support import ROOT

EXAMPLES = ROOT / "examples"


def example_on_path(name: str) -> Path:
    """``examples/<name>`` on ``sys.path``, as its README runs it (its package imports by its own
    name, as in a Lambda layer)."""
    folder = EXAMPLES / name
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder
