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
"""

from __future__ import annotations

from io import BytesIO
from typing import Any
from urllib.parse import urlsplit


class _Body(BytesIO):
    """An answer's body as botocore reads a raw HTTP response (``stream()``, ``read()``)."""

    def stream(self, **_: Any) -> Any:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


def serve_in_process(client: Any, app: Any, serving: Any = lambda: True) -> Any:
    """Send ``client``'s requests to the WSGI ``app`` in this process while ``serving()`` is
    true (after that, over HTTP: to an endpoint that stopped, as any other client). Returns
    ``client``."""
    from botocore.awsrequest import AWSResponse
    from werkzeug.test import EnvironBuilder, run_wsgi_app

    def send(request: Any, **_: Any) -> AWSResponse | None:
        if not serving():
            return None
        url = urlsplit(request.url)
        body = request.body
        if hasattr(body, "read"):
            body = body.read()
        environ = EnvironBuilder(
            path=url.path or "/",
            base_url=f"{url.scheme}://{url.netloc}",
            query_string=url.query,
            method=request.method,
            headers=[
                (k, v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()
            ],
            data=body if isinstance(body, (bytes, str)) else b"",
        ).get_environ()
        chunks, status, headers = run_wsgi_app(app, environ, buffered=True)
        answer = b"".join(chunks)
        return AWSResponse(
            request.url,
            int(status.split(" ", 1)[0]),
            dict(headers.items()),
            _Body(answer),
        )

    client.meta.events.register("before-send", send)
    return client
