"""Fixtures the engine tests share."""

from __future__ import annotations

import random

import pytest


@pytest.fixture
def bucket(aws):
    """A fresh payload bucket on the embedded endpoint."""
    name = f"payloads-{random.getrandbits(32):08x}"
    aws.client("s3").create_bucket(Bucket=name)
    return name
