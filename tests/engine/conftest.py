"""Fixtures the engine tests share."""

from __future__ import annotations

import random

import pytest

from leasefence_tools.local.embedded import EmbeddedAws, Fidelity

DAY = 86_400_000


@pytest.fixture
def bucket(aws):
    """A fresh payload bucket on the embedded endpoint."""
    name = f"payloads-{random.getrandbits(32):08x}"
    aws.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def ttl_aws():
    """DynamoDB's TTL on an embedded endpoint of the module's own: an expired item is deleted
    one to three days after its TTL time."""
    fidelity = Fidelity(ttl_lag_ms=3 * DAY, ttl_lag_min_ms=DAY, index_lag_ms=0)
    with EmbeddedAws(fidelity=fidelity) as aws:
        yield aws
