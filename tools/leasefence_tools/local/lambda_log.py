"""Where a local stack sends what its Lambda functions write: a size-bounded file.

On AWS a function's output goes to its CloudWatch log group: the Powertools Logger's JSON lines
(its handler writes to ``sys.stdout``), the EMF metric lines (``Metrics`` prints them at the end
of each invocation) and anything a handler prints. ``leasefence local`` runs those handlers in
its own process, so the same lines would land in the terminal that shows its banner and scroll
it away. :class:`LambdaLog` sends them to ``lambda.log`` in the stack's state folder instead,
rotated by :class:`logging.handlers.RotatingFileHandler` (at most :data:`MAX_BYTES` a file and
:data:`BACKUPS` older file: :data:`BOUND_BYTES` in all), and with ``echo`` to the terminal too.

Nothing changes in the handlers: the Logger's handler gets another stream, and ``sys.stdout`` /
``sys.stderr`` become streams that send what a thread running a handler writes (marked by
:func:`invocation`, which the local invoker enters) to the file and every other thread's writes
(the banner, the stack's own short lines) to the terminal as before.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any, TextIO, cast

FILE = "lambda.log"
#: The size of ``lambda.log`` before it rotates to ``lambda.log.1``.
MAX_BYTES = 5 * 1024 * 1024
#: Rotated files kept (``lambda.log.1``).
BACKUPS = 1
#: What the Lambda log takes on disk at most.
BOUND_BYTES = MAX_BYTES * (1 + BACKUPS)

_running = threading.local()


@contextlib.contextmanager
def invocation() -> Iterator[None]:
    """This thread runs a Lambda handler meanwhile: what it prints goes to the Lambda log (when
    one is open; otherwise this changes nothing)."""
    outer = getattr(_running, "handler", False)
    _running.handler = True
    try:
        yield
    finally:
        _running.handler = outer


def _in_handler() -> bool:
    return getattr(_running, "handler", False)


class _Lines:
    """A text stream whose complete lines go to handlers as records (a partial line waits, per
    thread, for its end: ``print`` writes the text and the newline separately)."""

    def __init__(self, handlers: list[logging.Handler]) -> None:
        self.handlers = handlers
        self._partial = threading.local()

    def write(self, text: str) -> int:
        pending = getattr(self._partial, "text", "") + text
        *lines, self._partial.text = pending.split("\n")
        for line in lines:
            record = logging.makeLogRecord({"msg": line, "levelno": logging.INFO})
            for handler in self.handlers:
                handler.handle(record)
        return len(text)

    def flush(self) -> None:
        for handler in self.handlers:
            handler.flush()


class _ByThread:
    """``sys.stdout`` or ``sys.stderr`` while a Lambda log is open: a handler's thread writes to
    the log, every other thread to the stream it replaced."""

    def __init__(self, terminal: TextIO, log: _Lines) -> None:
        self.terminal = terminal
        self.log = log

    def write(self, text: str) -> int:
        return (self.log if _in_handler() else self.terminal).write(text)

    def flush(self) -> None:
        (self.log if _in_handler() else self.terminal).flush()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, isatty, buffer...
        return getattr(self.terminal, name)


class LambdaLog:
    """The Lambda functions' output in ``path`` (rotated, bounded), and with ``echo`` in this
    process's standard output too. :meth:`open` takes over the output, :meth:`close` gives it
    back (a context manager does both)."""

    def __init__(
        self,
        path: Path,
        echo: bool = False,
        max_bytes: int = MAX_BYTES,
        backups: int = BACKUPS,
    ) -> None:
        self.path = Path(path)
        self.echo = echo
        self.max_bytes = max_bytes
        self.backups = backups
        self._restore: list[Any] = []

    @property
    def bound_bytes(self) -> int:
        return self.max_bytes * (1 + self.backups)

    def open(self) -> LambdaLog:
        from leasefence.observability import logger

        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = RotatingFileHandler(
            self.path, maxBytes=self.max_bytes, backupCount=self.backups, encoding="utf-8"
        )
        self._restore.append(file.close)  # the last thing given back
        handlers: list[logging.Handler] = [file]
        if self.echo:
            handlers.append(logging.StreamHandler(sys.stdout))
        lines = _Lines(handlers)
        powertools = logger.logger_handler
        if isinstance(powertools, logging.StreamHandler):
            # Every thread's records (a worker's heartbeat thread too), not only a handler's.
            previous = powertools.setStream(cast(TextIO, lines))
            self._restore.append(lambda: powertools.setStream(previous))
        for name in ("stdout", "stderr"):
            terminal = getattr(sys, name)
            setattr(sys, name, _ByThread(terminal, lines))
            self._restore.append(lambda name=name, terminal=terminal: setattr(sys, name, terminal))
        return self

    def close(self) -> None:
        while self._restore:
            self._restore.pop()()

    def __enter__(self) -> LambdaLog:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
