"""boto3 clients of the embedded endpoint that skip the network when they run in its process.

The local stack's handlers, stream mappings and sweeper run in the process that serves the
embedded endpoint. Over HTTP each of their calls crossed three threads of that process (the
client's, waitress's loop, a waitress worker) and was parsed four times (request and answer, on
each side): about two thirds of a call's time once 16 HTTP workers kept the stack busy, though
the endpoint held its lock for only a few milliseconds of it. :func:`serve_in_process` hands a
client's requests to the endpoint's WSGI application directly (botocore's ``before-send`` event,
as moto's own in-process mode and botocore's Stubber use it): the same application, so the same
lock around each whole request, the same fidelity behaviours and the same timings; only the
socket and the HTTP server are left out. Anything else (the CLI, a worker in another process)
reaches the endpoint over HTTP as before.

The endpoint's work then runs on the caller's thread: :func:`served_cpu_s` says how much of that
thread's CPU time it took, so that a caller measuring its own CPU (the bench's functions: on AWS
that work runs on DynamoDB's servers, not in the function) can leave it out.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from io import BytesIO
from typing import Any
from urllib.parse import urlsplit

_ledger = threading.local()


def served_cpu_s() -> float:
    """The CPU time (s, :func:`time.thread_time`) this thread spent so far in the endpoint, serving
    its own requests in process (:func:`relay`, :func:`call_json`)."""
    return float(getattr(_ledger, "cpu_s", 0.0))


@contextlib.contextmanager
def _serving() -> Iterator[None]:
    """Count the CPU time of what runs inside as the endpoint's (:func:`served_cpu_s`)."""
    started = time.thread_time()
    try:
        yield
    finally:
        _ledger.cpu_s = served_cpu_s() + time.thread_time() - started


class _Body(BytesIO):
    """An answer's body as botocore reads a raw HTTP response (``stream()``, ``read()``)."""

    def stream(self, **_: Any) -> Any:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


def wsgi_answer(
    app: Any, method: str, url: str, headers: list[tuple[str, str]], body: bytes | str
) -> tuple[int, dict[str, str], bytes]:
    """One request to the WSGI ``app``: ``(status, headers, body)`` of its answer."""
    from werkzeug.test import EnvironBuilder, run_wsgi_app

    parts = urlsplit(url)
    environ = EnvironBuilder(
        path=parts.path or "/",
        base_url=f"{parts.scheme}://{parts.netloc}",
        query_string=parts.query,
        method=method,
        headers=headers,
        data=body,
    ).get_environ()
    chunks, status, answer_headers = run_wsgi_app(app, environ, buffered=True)
    return int(status.split(" ", 1)[0]), dict(answer_headers.items()), b"".join(chunks)


def request_parts(request: Any) -> tuple[str, str, list[tuple[str, str]], bytes | str]:
    """A botocore request as ``(method, url, headers, body)`` (plain values: they may cross a
    pipe to the process that serves the endpoint)."""
    body = request.body
    if hasattr(body, "read"):
        body = body.read()
    headers = [(k, v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()]
    return request.method, request.url, headers, body if isinstance(body, (bytes, str)) else b""


def relay(client: Any, serve: Any, serving: Any = lambda _url: True) -> Any:
    """Answer ``client``'s requests whose URL ``serving(url)`` accepts with ``serve(method,
    url, headers, body) -> (status, headers, body)`` (botocore's ``before-send`` event, as moto's
    own in-process mode and botocore's Stubber use it); any other goes over HTTP. Returns
    ``client``."""
    from botocore.awsrequest import AWSResponse

    def send(request: Any, **_: Any) -> AWSResponse | None:
        if not serving(request.url):
            return None
        parts = request_parts(request)
        with _serving():
            status, headers, answer = serve(*parts)
        return AWSResponse(request.url, status, headers, _Body(answer))

    client.meta.events.register("before-send", send)
    return client


def serve_in_process(client: Any, app: Any, serving: Any = lambda: True) -> Any:
    """Send ``client``'s requests to the WSGI ``app`` in this process while ``serving()`` is
    true (after that, over HTTP: to an endpoint that stopped, as any other client). Returns
    ``client``."""
    return relay(client, lambda *parts: wsgi_answer(app, *parts), lambda _url: serving())


class InProcessError(Exception):
    """An error answer of :func:`call_json` (its HTTP status and the ``__type`` it names)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.status, self.code = status, code


def call_json(
    app: Any, endpoint_url: str, target: str, payload: dict[str, Any], signing_name: str
) -> dict[str, Any]:
    """One JSON-protocol request (``X-Amz-Target: target``) to the WSGI ``app``, answered as
    the wire JSON: the same application (lock, fidelity, timings) as :func:`serve_in_process`,
    without botocore's request building and model-driven parsing. For a hot reader whose answer
    is plain JSON anyway (the stream mappings' ``GetRecords``: botocore's parsing of its records
    was a tenth of the local stack's CPU). The ``Authorization`` header names only the service
    and region, which is all the endpoint reads of it (moto checks no signature)."""
    from leasefence_tools.local.embedded import LOCAL_REGION

    body = json.dumps(payload).encode()
    url = urlsplit(endpoint_url)
    environ = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "SERVER_NAME": url.hostname or "127.0.0.1",
        "SERVER_PORT": str(url.port or 80),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": url.netloc,
        "CONTENT_TYPE": "application/x-amz-json-1.0",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_X_AMZ_TARGET": target,
        "HTTP_AUTHORIZATION": (
            "AWS4-HMAC-SHA256 Credential=local/20200101/"
            f"{LOCAL_REGION}/{signing_name}/aws4_request, SignedHeaders=host, Signature=0"
        ),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url.scheme or "http",
        "wsgi.input": BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    started: list[str] = []

    def start_response(status: str, _headers: Any, _exc_info: Any = None) -> None:
        started.append(status)

    with _serving():
        answer = b"".join(app(environ, start_response))
    status = int(started[0].split(" ", 1)[0])
    parsed = json.loads(answer) if answer else {}
    if status >= 300:
        code = str(parsed.get("__type", status)).rpartition("#")[2]
        raise InProcessError(status, code, str(parsed.get("message", parsed.get("Message", ""))))
    return dict(parsed)
