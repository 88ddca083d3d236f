"""The kit's tests use the plugin's fixtures (the package registers the plugin) on the suite's
own embedded endpoint: one per test process."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def leasefence_aws(aws):
    return aws
