"""An embedded, linearizable DynamoDB (and S3) endpoint on moto's server.

moto's backends hold no lock, so concurrent conditional writes to one item can both win (see the
design notes). :class:`SerializedApp` holds one lock around each whole request, response body
included, which makes every request atomic with respect to every other: the property DynamoDB
gives per item, and the one every concurrency test here relies on.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable

import boto3
from werkzeug.serving import BaseWSGIServer, make_server

from leasefence import schema

LOCAL_REGION = "us-east-1"


def use_local_credentials() -> None:
    """moto accepts any credentials; make sure boto3 finds some without touching real ones."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", LOCAL_REGION)


class SerializedApp:
    """WSGI middleware: one request at a time, start to last byte."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


class EmbeddedAws:
    """moto's server in a background thread, serialized, with the leasefence tables created."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> EmbeddedAws:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )

        use_local_credentials()
        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass

        app = SerializedApp(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self.host, self.port, app, threaded=True, request_handler=QuietHandler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="embedded-aws", daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str = "dynamodb", **kwargs: Any) -> Any:
        from botocore.config import Config

        config = kwargs.pop("config", None) or Config(
            retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64
        )
        return boto3.client(service, endpoint_url=self.endpoint, region_name=LOCAL_REGION, config=config, **kwargs)

    def create_tables(self, spec: schema.TableSpec | None = None) -> schema.TableSpec:
        spec = spec or schema.TableSpec()
        schema.create_table(self.client(), spec)
        return spec

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> EmbeddedAws:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
