"""The process's runtime (``leasefence.settings.runtime()``) for a test that installs its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from leasefence import settings


@contextlib.contextmanager
def installed(config: settings.Settings) -> Iterator[settings.Runtime]:
    """``settings.install(config)`` for the block, and the runtime installed before it restored
    after. A ``settings.reset()`` instead would drop the session stack's runtime (it installs
    its own when it starts): a later test that reads ``runtime()`` outside an invocation would get
    one built from the environment, with no endpoint (the real AWS), depending on test order."""
    before = settings._runtime
    try:
        yield settings.install(config)
    finally:
        with settings._runtime_lock:
            settings._runtime = before
