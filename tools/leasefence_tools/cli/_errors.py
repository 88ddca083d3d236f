"""How a command reports an error of the API or the SDK: one line on stderr, exit 1.

``api_errors()`` is the one place that maps a :class:`leasefence.errors.LeaseFenceError` (what
the SDK raises for an API refusal, and the engine for a refused step) to that line and exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer


def fail(error: Exception) -> NoReturn:
    """``error <status> <code>: <message>`` on stderr, then exit 1."""
    code = getattr(error, "code", type(error).__name__)
    status = getattr(error, "status", "")
    typer.echo(f"error {status} {code}: {getattr(error, 'message', error)}", err=True)
    raise typer.Exit(1)


@contextmanager
def api_errors(before: Callable[[], None] | None = None) -> Iterator[None]:
    """Report a ``LeaseFenceError`` raised in the block with :func:`fail` (exit 1); ``before``
    runs first (to say how far the command got). Anything else goes through unchanged."""
    from leasefence.errors import LeaseFenceError  # lazily: the CLI starts without the runtime

    try:
        yield
    except LeaseFenceError as error:
        if before is not None:
            before()
        fail(error)
