"""Shared fixtures: one AWS endpoint per test session (``aws``: tests/support/target.py), a fresh
table per test."""

from __future__ import annotations

import itertools
import random

import pytest

from leasefence import Engine
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec

#: The local stack's fixtures (``stack``, ``api``, ``sdk``, ...), for every folder that needs them.
#: ``aws``: the DynamoDB the tests run on (the embedded endpoint, or
#: LEASEFENCE_TEST_DYNAMODB_ENDPOINT's), and the ``needs`` mark.
pytest_plugins = ["tests.support.stack", "tests.support.target"]

_tables = itertools.count()


@pytest.fixture
def ddb(aws):
    return aws.client()


@pytest.fixture
def spec(aws):
    # One write shard set: tests that read items by the bare tenant id. The default (each tenant's
    # counts recorded at its first enqueue) is tests/engine/test_tenant_layout.py's.
    spec = TableSpec(
        table_name=f"ops-{next(_tables)}", due_shards=4, sweep_shards=2, operation_shards=(1,)
    )
    return aws.create_tables(spec)


@pytest.fixture
def clock():
    return ManualClock()


class EventLog:
    def __init__(self):
        self.counts = {}

    def __call__(self, name, value):
        self.counts[name] = self.counts.get(name, 0) + value


@pytest.fixture
def events():
    return EventLog()


@pytest.fixture
def engine(ddb, spec, clock, events):
    return Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(7), events=events)


def pytest_collection_modifyitems(items):
    """Tests marked ``long_pole`` first. make test hands whole files to its two workers in
    collection order (``--dist loadfile --no-loadscope-reorder``): a file that takes several
    minutes must start at once, or it alone runs on after the other worker has finished."""
    items.sort(key=lambda item: item.get_closest_marker("long_pole") is None)  # stable
