"""More than one execution environment for a function of the local stack, as Lambda runs them.

Lambda runs one invocation at a time in an execution environment and starts another
environment, a sandbox of its own, when a request finds every started one busy. The local stack
ran the API function in its own process, one invocation at a time: a lifecycle's three calls held
that one environment about 40 ms, which capped 16 HTTP workers near 24 lifecycles a second
whatever the machine had to spare. Running invocations side by side in one interpreter is not an
option: Powertools' resolver keeps the current event and Lambda context in class attributes
(``BaseRouter.current_event``), its Logger keeps the correlation id and the appended keys in one
formatter, and its Metrics share one metric set per namespace, so two invocations in one process
would log, measure and route with each other's state.

:class:`Environments` gives a function up to ``count`` environments, each a process of its own
(a fresh interpreter, never a fork of the stack's threads and locks) with the stack's
settings installed and the handler loaded from its file, as a cold start would. An invocation
takes an idle environment, or waits for one; when none is idle and fewer than ``count`` run, a new
one starts in the background (a cold start) and serves whichever request is waiting first. What an
environment's handler writes (the Powertools JSON log lines, the EMF metric lines, anything it
prints) comes back with its answer and is written by the invoking thread inside
:func:`~leasefence_tools.local.lambda_log.invocation`, so it lands where an in-process handler's
output does (``lambda.log`` under ``leasefence local``). An invocation past its timeout, or an
environment that dies, ends that environment (Lambda discards it too) and fails the invocation.

The environments reach the embedded endpoint over HTTP (its one lock around each request stays
the only point of linearization: nothing about the store is decided here).
"""

from __future__ import annotations

import contextlib
import io
import queue
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from leasefence import privacy
from leasefence_tools.local import lambda_log
from leasefence_tools.local.timings import Timings

#: How long a cold start may take before the invocation that waits for it fails.
START_TIMEOUT_S = 120.0
#: How long :meth:`Environments.stop` lets an environment finish before ending it.
STOP_GRACE_S = 5.0


#: The services whose clients the handlers get from their runtime (the stack attaches the same).
RELAYED_SERVICES = ("dynamodb", "s3", "events")


class EnvironmentLost(RuntimeError):
    """An invocation ended its environment: past its timeout, or the process died."""


class InvocationFailed(RuntimeError):
    """The handler raised (its traceback went to the function's log, as Lambda writes it)."""


@dataclass(frozen=True)
class Answer:
    """What one invocation returned, the seconds it spent in the handler (in its environment)
    and which environment served it (1, 2, ...)."""

    result: Any
    seconds: float
    environment: int


def _serve(connection: Any) -> None:
    """An execution environment: install the settings and load the function that the first
    message names (as a cold start would, from its file), then run each event sent on
    ``connection`` until told to stop (``None``) or the stack goes away."""
    output = io.StringIO()
    sys.stdout = sys.stderr = output  # what the handler writes goes back with its answer
    try:
        function, config, paths, hash_key, endpoint = connection.recv()
        for path in paths:
            if path not in sys.path:
                sys.path.append(path)
        from leasefence import privacy, settings, snapstart

        privacy.set_key(hash_key)  # the stack's: its logs' keyed hashes match across functions
        from leasefence.observability import logger
        from leasefence_tools.local.server import LambdaContext, load_function

        powertools = logger.logger_handler
        if hasattr(powertools, "setStream"):
            powertools.setStream(output)
        runtime = settings.install(config)
        if endpoint:
            _relay_to_stack(runtime, connection, endpoint)
        handler = load_function(function).lambda_handler
        # What SnapStart's before-snapshot hooks do: the first event's imports (the validated
        # resolver, the engine), before this environment is handed a request.
        snapstart.run_before_snapshot()
    except BaseException:  # noqa: BLE001 - the cold start failed: say why, and end
        traceback.print_exc(file=output)
        connection.send(("failed", output.getvalue()))
        return
    connection.send(("ready", _taken(output)))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        _, event, timeout_ms = message
        context = LambdaContext(f"leasefence-{function}", timeout_ms)
        started = time.perf_counter()
        failed: str | None = None
        result: Any = None
        try:
            result = handler(event, context)
        except Exception as error:  # noqa: BLE001 - reported to the invoker, as Lambda does
            traceback.print_exc(file=output)
            failed = type(error).__name__
        seconds = time.perf_counter() - started
        connection.send(("done", result, failed, _taken(output), seconds))


def _relay_to_stack(runtime: Any, connection: Any, endpoint: str) -> None:
    """The handlers' clients of the stack's embedded endpoint send each request to the stack on
    ``connection``, which serves it in the endpoint's application while this invocation waits
    (the same lock, fidelity and timings as an HTTP request; without the HTTP)."""
    from leasefence_tools.local.in_process import relay

    lock = threading.Lock()  # one request at a time on the pipe, whatever threads a handler runs

    def ask(*parts: Any) -> Any:
        with lock:
            connection.send(("aws", parts))
            return connection.recv()

    for service in RELAYED_SERVICES:
        relay(runtime.client(service), ask, lambda url: url.startswith(endpoint))


def _taken(output: io.StringIO) -> str:
    """What ``output`` holds, which it then forgets."""
    text = output.getvalue()
    output.seek(0)
    output.truncate()
    return text


class _Environment:
    """One environment's process and the parent's end of its pipe."""

    def __init__(self, number: int, process: Any, connection: Any) -> None:
        self.number = number
        self.process = process
        self.connection = connection

    def call(
        self, event: dict[str, Any], timeout_ms: int, serve: Any
    ) -> tuple[Any, str | None, str, float]:
        """Invoke; meanwhile answer the handler's requests to the endpoint with ``serve``."""
        deadline = time.monotonic() + timeout_ms / 1000 + 1
        try:
            self.connection.send(("invoke", event, timeout_ms))
            while True:
                if not self.connection.poll(max(0.0, deadline - time.monotonic())):
                    raise EnvironmentLost(
                        f"environment {self.number} did not answer within {timeout_ms} ms"
                    )
                message = self.connection.recv()
                if message[0] == "done":
                    return tuple(message[1:])
                self.connection.send(serve(*message[1]))
        except (EOFError, OSError) as error:
            raise EnvironmentLost(f"environment {self.number} ended ({error!r})") from None

    def end(self, grace_s: float = 0.0) -> None:
        if grace_s:
            with contextlib.suppress(OSError):
                self.connection.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace_s)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)
        self.connection.close()


class Environments:
    """Up to ``count`` execution environments of ``function`` (see the module docstring), each
    with ``config`` (a :class:`~leasefence.settings.Settings`) installed. ``paths``: folders the
    handlers import from (the handlers' folder, as ``/var/task``). ``timings``: each
    invocation's time in its handler, per environment (``<function> environment <n>``)."""

    def __init__(
        self,
        function: str,
        count: int,
        config: Any,
        paths: list[str] | None = None,
        timings: Timings | None = None,
        endpoint: str | None = None,
        serve: Any = None,
    ) -> None:
        if count < 1:
            raise ValueError("count must be at least 1")
        self.function = function
        self.count = count
        self.config = config
        self.paths = list(paths or ())
        self.timings = timings
        #: With ``serve(method, url, headers, body) -> (status, headers, body)``: the
        #: environments' requests to ``endpoint`` come to this process and are answered by it
        #: (the embedded endpoint's application, when it runs here); else they go over HTTP.
        self.endpoint = endpoint if serve is not None else None
        self._serve = serve
        #: Requests of the environments to the endpoint that this process answered.
        self.relayed = 0
        self._idle: queue.SimpleQueue[_Environment | BaseException] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live: dict[int, _Environment | None] = {}  # None: starting
        self._numbers = 0
        self._stopped = False
        #: Environments started so far (cold starts, replacements included).
        self.started = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Environments:
        """Start the first environment now (the stack's cold start, before its first request)."""
        number = self._reserve()
        assert number is not None
        self._idle.put(self._start(number))
        return self

    def warm(self, count: int) -> None:
        """Start environments now until ``count`` run (at most :attr:`count`), as provisioned
        concurrency would: each then serves whichever request comes for it."""
        while (number := self._reserve() if self.running < count else None) is not None:
            self._idle.put(self._start(number))

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            running = [env for env in self._live.values() if env is not None]
            self._live.clear()
        for env in running:
            env.end(STOP_GRACE_S)

    @property
    def pids(self) -> dict[int, int]:
        """The process id of each started environment, by number."""
        with self._lock:
            return {n: env.process.pid for n, env in self._live.items() if env is not None}

    @property
    def running(self) -> int:
        """Environments started and not ended (starting ones included)."""
        with self._lock:
            return len(self._live)

    def _reserve(self) -> int | None:
        """A number for a new environment, or None when ``count`` already run."""
        with self._lock:
            if self._stopped or len(self._live) >= self.count:
                return None
            self._numbers += 1
            self._live[self._numbers] = None
            return self._numbers

    def _start(self, number: int) -> _Environment:
        # A fresh interpreter (``python -m`` this module), never a fork of the stack's threads
        # and locks; not multiprocessing's spawn either, which imports the caller's main module
        # again. The pipe is a socket pair read with multiprocessing's Connection.
        ours, theirs = socket.socketpair()
        process: subprocess.Popen[bytes] | None = None
        parent = Connection(ours.detach())
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
            theirs.close()
            parent.send(
                (self.function, self.config, self.paths, privacy.current_key(), self.endpoint)
            )
            if not parent.poll(START_TIMEOUT_S):
                raise EnvironmentLost(f"environment {number} did not start")
            state, text = parent.recv()
            if state != "ready":
                raise EnvironmentLost(f"environment {number} could not start:\n{text}")
        except BaseException:
            with self._lock:
                self._live.pop(number, None)
            theirs.close()
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(5)
            parent.close()
            raise
        self._write(text)
        env = _Environment(number, process, parent)
        with self._lock:
            self.started += 1
            if self._stopped:
                stopped = True
            else:
                stopped = False
                self._live[number] = env
        if stopped:
            env.end()
            raise EnvironmentLost("the stack stopped")
        return env

    def _start_in_background(self) -> None:
        number = self._reserve()
        if number is None:
            return

        def run() -> None:
            try:
                self._idle.put(self._start(number))
            except BaseException as error:  # noqa: BLE001 - handed to a waiting invocation
                self._idle.put(error)

        threading.Thread(
            target=run, name=f"leasefence-{self.function}-cold-start", daemon=True
        ).start()

    # ------------------------------------------------------------------ invocations

    def _take(self) -> _Environment:
        try:
            found = self._idle.get_nowait()
        except queue.Empty:
            self._start_in_background()  # every started one is busy: one more, if allowed
            try:
                found = self._idle.get(timeout=START_TIMEOUT_S)
            except queue.Empty:
                raise EnvironmentLost(
                    f"no environment of {self.function} was free within {START_TIMEOUT_S:g} s"
                ) from None
        if isinstance(found, BaseException):
            raise EnvironmentLost(f"an environment could not start: {found!r}") from found
        return found

    def invoke(self, event: dict[str, Any], timeout_ms: int) -> Answer:
        """Run ``event`` in an idle environment (:class:`EnvironmentLost`,
        :class:`InvocationFailed` when it cannot answer)."""
        env = self._take()
        try:
            result, failed, text, seconds = env.call(event, timeout_ms, self._relayed)
        except EnvironmentLost:
            with self._lock:
                self._live.pop(env.number, None)
            env.end()
            self._start_in_background()  # its replacement, for whoever waits
            raise
        self._idle.put(env)
        self._write(text)
        if self.timings is not None:
            self.timings.add(f"{self.function} environment {env.number}", seconds)
        if failed is not None:
            raise InvocationFailed(f"{self.function}: the handler raised {failed}")
        return Answer(result, seconds, env.number)

    def _relayed(self, *parts: Any) -> Any:
        with self._lock:
            self.relayed += 1
        return self._serve(*parts)

    @staticmethod
    def _write(text: str) -> None:
        if text:
            with lambda_log.invocation():
                sys.stdout.write(text)
                sys.stdout.flush()


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1])))
