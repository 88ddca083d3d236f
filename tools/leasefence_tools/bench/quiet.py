"""The functions' logs and metrics kept off stdout while a benchmark runs them in this process
(``leasefence bench --json`` prints its report there)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def functions_off_stdout() -> Iterator[None]:
    """The service's logger at ``WARNING`` (its handler writes to stdout) and what is printed
    (the metrics' EMF lines) sent to stderr; both as they were afterwards."""
    from leasefence.observability import logger

    level = logger.log_level
    logger.setLevel("WARNING")
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        logger.setLevel(level)
