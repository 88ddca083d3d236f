"""One time unit everywhere: integer milliseconds since the Unix epoch.

Leases are computed from the caller's clock (DynamoDB has no server clock in expressions). Skew
changes who may take over (liveness), never whose write counts (the fence decides that).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], int]


def system_clock() -> int:
    return time.time_ns() // 1_000_000


def to_rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (
        datetime.fromtimestamp(ms / 1000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


class ManualClock:
    """A clock for tests and simulations: time moves only when told to."""

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms
