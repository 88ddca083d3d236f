"""Where the local stack's time goes: durations per name (a route, a DynamoDB operation).

The embedded endpoint keeps one :class:`Timings` of the time each request waited for its turn
and the time it held the endpoint (``GET /__leasefence/timings`` on the endpoint); the local
stack keeps one of each function invocation (per route for the API: ``GET
/__leasefence/timings`` on the API). ``POST /__leasefence/timings/reset`` on either starts
afresh. ``leasefence bench --only local-stack`` reads both.
"""

from __future__ import annotations

import json
import threading
from collections import deque

#: The paths both servers answer (never passed to moto or to a handler).
TIMINGS_PATH = "/__leasefence/timings"
RESET_PATH = TIMINGS_PATH + "/reset"


class Timings:
    """Per name: how many, the total, and the last ``keep`` durations (for percentiles)."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._samples: dict[str, deque[float]] = {}
        self._totals: dict[str, list[float]] = {}  # [count, seconds]

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            samples = self._samples.get(name)
            if samples is None:
                samples = self._samples[name] = deque(maxlen=self.keep)
                self._totals[name] = [0, 0.0]
            samples.append(seconds)
            total = self._totals[name]
            total[0] += 1
            total[1] += seconds

    def reset(self) -> None:
        with self._lock:
            self._samples.clear()
            self._totals.clear()

    def snapshot(self) -> dict[str, dict[str, float]]:
        """``{name: {count, total_ms, mean_ms, p50_ms, p90_ms, max_ms}}`` (percentiles of the
        last ``keep``), names sorted."""
        with self._lock:
            copies = {
                name: (sorted(s), int(self._totals[name][0]), self._totals[name][1])
                for name, s in self._samples.items()
            }
        out: dict[str, dict[str, float]] = {}
        for name in sorted(copies):
            ordered, count, total = copies[name]
            out[name] = {
                "count": count,
                "total_ms": round(total * 1000, 1),
                "mean_ms": round(total * 1000 / count, 2),
                "p50_ms": round(_percentile(ordered, 0.5) * 1000, 2),
                "p90_ms": round(_percentile(ordered, 0.9) * 1000, 2),
                "max_ms": round(ordered[-1] * 1000, 2),
            }
        return out


def _percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def answer(method: str, path: str, sections: dict[str, Timings]) -> tuple[int, bytes] | None:
    """The answer of the timing paths (``None``: not one of them): GET ``{section: snapshot}``,
    POST ``.../reset`` resets every section."""
    if path == TIMINGS_PATH and method == "GET":
        return 200, json.dumps({name: t.snapshot() for name, t in sections.items()}).encode()
    if path == RESET_PATH and method == "POST":
        for t in sections.values():
            t.reset()
        return 200, b"{}"
    if path in (TIMINGS_PATH, RESET_PATH):
        return 405, json.dumps({"error": f"{method} {path}: GET timings, POST reset"}).encode()
    return None
