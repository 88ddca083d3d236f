"""Helpers shared by the test folders, imported absolutely (``from tests.support.api import ...``)."""
