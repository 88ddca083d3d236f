"""Run a coroutine function with ``anyio.run`` on a thread of its own.

A test process is shared by many test files (pytest-xdist's workers): one that leaves an event
loop marked running in the main thread (a library's portal, a fixture) makes a later
``anyio.run`` there refuse with "Already running asyncio in this thread". A fresh thread has no
loop of its own, so the call behaves the same whatever ran before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def run(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="anyio-run") as pool:
        return pool.submit(anyio.run, func, *args).result()
