"""Helpers shared by the test folders, imported absolutely (``from tests.support.api import ...``)."""

from pathlib import Path

#: The repository's root (the checkout).
ROOT = Path(__file__).resolve().parents[2]
