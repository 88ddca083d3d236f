"""Lambda's asynchronous invocations (``InvocationType=Event``) of the local stack's functions: the
``invoke`` dispatch mode hands each claim to one (:mod:`leasefence.worker.handoff`).

:class:`AsyncLambda` stands in for the functions' ``lambda`` client: ``invoke`` queues the event and
answers 202 at once, as Lambda does; each event then runs in an execution environment of its own
(its own :class:`~leasefence_tools.local.server.Invoker`, so handed-off jobs run side by side, as
concurrent Lambda environments do). Not modelled: Lambda's retries of a failed asynchronous
invocation (the worker function has none: ``retry_attempts=0``) and its event queue's age limit.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any


class AsyncLambda:
    """``invoke(FunctionName=..., InvocationType="Event", Payload=...)`` for the local stack's
    functions (``FunctionName``: ``leasefence-<function>`` or ``<function>``)."""

    def __init__(self, invoker: Callable[[], Any]) -> None:
        """``invoker()``: a new execution environment (an ``Invoker`` with the stack's runtime)."""
        self._invoker = invoker
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        #: Events accepted, and invocations that raised (their error's type).
        self.accepted = 0
        self.errors: list[str] = []

    def invoke(
        self, FunctionName: str, Payload: bytes | str, InvocationType: str = "Event", **_: Any
    ) -> dict[str, Any]:
        if InvocationType != "Event":
            raise ValueError("the local stack's functions are invoked asynchronously only")
        name = FunctionName.rsplit(":", 1)[-1].removeprefix("leasefence-")
        event = json.loads(Payload)
        thread = threading.Thread(
            target=self._run, args=(name, event), name=f"async-{name}", daemon=True
        )
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            self.accepted += 1
        thread.start()
        return {"StatusCode": 202}

    def _run(self, name: str, event: dict[str, Any]) -> None:
        try:
            self._invoker().invoke(name, event)
        except Exception as error:  # noqa: BLE001 - as Lambda: the invocation failed, logged
            self.errors.append(type(error).__name__)
            sys.stderr.write(f"asynchronous invocation of {name} failed: {type(error).__name__}\n")

    def wait(self, timeout_s: float = 30.0) -> None:
        """Wait for the invocations queued so far (a stack stopping)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=timeout_s)
