"""The table the model check drives: moto in this process (no HTTP), one fresh engine per step.

A state of the protocol is what the table holds (every item, canonically) plus what the actors
remember; :meth:`World.snapshot` and :meth:`World.restore` copy moto's own item map, so going back
to a state costs a deep copy of a few items, not a request. Every step builds a new
:class:`~leasefence.engine.Engine` (an engine keeps nothing between calls that the protocol relies
on: its caches of held claims and catalogue entries only save requests) with a seeded ``rng`` and
a :class:`~leasefence.clock.ManualClock` at the state's time, so the same state and the same step
always give the same successor: what a visited set needs.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from typing import Any

import boto3

from leasefence import Engine, schema
from leasefence.clock import ManualClock
from leasefence.schema import TableSpec
from leasefence_tools.local.embedded import (
    LOCAL_REGION,
    install_fast_json_responses,
    install_fast_update_expressions,
    use_local_credentials,
)

TABLE = "modelcheck"
START_MS = 1_800_000_000_000


class World:
    """One operations table on an in-process moto backend (``mock_aws``), started on entry."""

    def __init__(self) -> None:
        from moto import mock_aws

        use_local_credentials()
        install_fast_json_responses()
        install_fast_update_expressions()
        self._mock = mock_aws()
        self._mock.start()
        self.client = boto3.client("dynamodb", region_name=LOCAL_REGION)
        self.spec = TableSpec(table_name=TABLE, due_shards=1, sweep_shards=1)
        schema.create_table(self.client, self.spec)
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        self._table = dynamodb_backends[DEFAULT_ACCOUNT_ID][LOCAL_REGION].tables[TABLE]
        self.requests = 0

    def close(self) -> None:
        self._mock.stop()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def engine(self, now_ms: int) -> Engine:
        """A fresh engine at this time (nothing carried over from an earlier step)."""
        return Engine(
            client=self.client, spec=self.spec, clock=ManualClock(now_ms), rng=random.Random(0)
        )

    def snapshot(self) -> bytes:
        return pickle.dumps(self._table.items, protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, saved: bytes | None) -> None:
        """Back to a snapshot (None: the empty table)."""
        if saved is None:
            self._table.items.clear()
        else:
            self._table.items = pickle.loads(saved)

    def items(self) -> list[dict[str, Any]]:
        """Every item, as DynamoDB JSON, in key order."""
        out = []
        for hash_key in sorted(self._table.items, key=str):
            for range_key in sorted(self._table.items[hash_key], key=str):
                out.append(self._table.items[hash_key][range_key].to_json()["Attributes"])
        return out

    def digest(self, extra: Any, items: list[dict[str, Any]] | None = None) -> str:
        """A canonical digest of the table's items and ``extra`` (the actors' local states)."""
        items = self.items() if items is None else items
        text = json.dumps([items, extra], sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
