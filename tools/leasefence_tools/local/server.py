"""The service on one machine, served by the same Lambda handlers that AWS runs.

:class:`LocalApi` plays API Gateway (HTTP API, payload format 2.0) in front of
``functions/api/handler.py``: it checks the bearer token as the JWT authorizer would (401 for a
missing, malformed, badly signed or expired token; the handler itself checks route scopes, 403),
turns each HTTP request into the event API Gateway would send (``requestContext.authorizer.jwt``
with string claims and the token's scopes), invokes the handler and writes its answer back. It
also serves the OpenAPI document and a self-contained Swagger UI.

:class:`LocalStack` puts it together: embedded DynamoDB + S3 (moto, serialized), the table and
the payload bucket, the environment the handlers read, the HTTP API, and the sweeper on a timer.
With ``streams`` it also reads the table's stream as Lambda's event source mappings would
(:mod:`leasefence_tools.local.streams`) and runs the worker function (stream dispatch) and the
publisher function (history, outcome events to a bus on the embedded endpoint) with the same
handler code and event shapes as on AWS.

Each function runs one invocation at a time in an execution environment (Lambda runs one event
per environment, and the Powertools resolver keeps per-request state in class attributes). The
API function runs in this process (one environment), or with ``api_environments`` in up to that
many processes, as Lambda runs concurrent invocations
(:mod:`leasefence_tools.local.environments`; ``leasefence local`` runs up to
:data:`~leasefence_tools.local.API_ENVIRONMENTS`).
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from leasefence.api import errors as api_errors
from leasefence.api.security import match_route
from leasefence_tools.local import LISTEN_BACKLOG, lambda_log
from leasefence_tools.local import tokens as auth
from leasefence_tools.local.environments import Environments
from leasefence_tools.local.timings import TIMINGS_PATH, Timings
from leasefence_tools.local.timings import answer as timings_answer

REPO_ROOT = Path(__file__).resolve().parents[3]
#: The package the Lambda handlers ship in (``functions/`` of the repository, inside the wheel).
FUNCTIONS_PACKAGE_DIR = "_functions"


def find_functions_dir() -> Path | None:
    """The folder of the Lambda handlers (``api/handler.py``, ``worker/``, ...): the installed
    ``leasefence_infra/_functions`` (found without importing ``leasefence_infra``, which needs
    aws-cdk-lib: ``leasefence[local]`` runs without it), else ``functions/`` of a checkout."""
    candidates = []
    spec = importlib.util.find_spec("leasefence_infra")
    if spec is not None:
        candidates += [
            Path(p) / FUNCTIONS_PACKAGE_DIR for p in spec.submodule_search_locations or ()
        ]
    candidates.append(REPO_ROOT / "functions")
    for candidate in candidates:
        if (candidate / "api" / "handler.py").is_file():
            return candidate.resolve()
    return None


#: Where the handlers are loaded from (None: not installed, every load says so).
FUNCTIONS_DIR = find_functions_dir()


def function_names() -> tuple[str, ...]:
    """The functions in the handlers' folder (each a directory with a ``handler.py``)."""
    if FUNCTIONS_DIR is None:
        return ()
    return tuple(sorted(p.parent.name for p in FUNCTIONS_DIR.glob("*/handler.py")))


#: API Gateway HTTP API's own limit on a request body.
MAX_REQUEST_BYTES = 10 * 1024 * 1024
API_TIMEOUT_MS = 30_000
SWEEPER_TIMEOUT_MS = 60_000

_load_lock = threading.Lock()


def load_function(name: str) -> ModuleType:
    """``functions/<name>/handler.py``, loaded once per process (as Lambda would, from its file)."""
    if FUNCTIONS_DIR is None:
        raise FileNotFoundError(
            "the Lambda handlers are not installed (leasefence_infra/_functions): reinstall "
            "leasefence with its [local] extra (docs/installing.md), or run make install in a checkout"
        )
    if name not in function_names():
        raise ValueError(f"unknown function {name!r}; choose from {', '.join(function_names())}")
    module_name = f"leasefence_function_{name}"
    with _load_lock:
        module = sys.modules.get(module_name)
        if module is not None:
            return module
        path = FUNCTIONS_DIR / name / "handler.py"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module


class LambdaContext:
    """The parts of the Lambda context object that the handlers and Powertools use."""

    def __init__(self, function_name: str, timeout_ms: int, memory_mb: int = 512) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.invoked_function_arn = (
            f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        )
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class Invoker:
    """Invokes the functions one at a time, as a single execution environment would; with a
    ``runtime`` (a local stack's), each invocation runs with it whatever the process installs.
    ``timings``: where each invocation's time in the handler goes (per API route).
    ``environments``: a function's own execution environments (processes) instead, which run
    its invocations side by side."""

    def __init__(
        self,
        runtime: Any = None,
        timings: Timings | None = None,
        environments: Environments | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.runtime = runtime
        self.timings = timings
        self.environments = environments

    def invoke(self, name: str, event: dict[str, Any], timeout_ms: int | None = None) -> Any:
        from leasefence import settings

        timeout = timeout_ms or (API_TIMEOUT_MS if name == "api" else SWEEPER_TIMEOUT_MS)
        if self.environments is not None and self.environments.function == name:
            answer = self.environments.invoke(event, timeout)
            self._record(name, event, answer.seconds)
            return answer.result
        handler: Callable[..., Any] = load_function(name).lambda_handler
        context = LambdaContext(f"leasefence-{name}", timeout)
        with self.lock, lambda_log.invocation():
            started = time.perf_counter()
            try:
                if self.runtime is None:
                    return handler(event, context)
                with settings.using(self.runtime):
                    return handler(event, context)
            finally:
                self._record(name, event, time.perf_counter() - started)

    def _record(self, name: str, event: dict[str, Any], seconds: float) -> None:
        if self.timings is not None:
            route = event.get("routeKey") if name == "api" else None
            self.timings.add(f"{name} {route}" if route else name, seconds)


def scheduled_event(now: datetime | None = None) -> dict[str, Any]:
    """An EventBridge Scheduler / scheduled-rule event, as the sweeper receives it."""
    now = now or datetime.now(UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:000000000000:rule/leasefence-sweeper"],
        "detail": {},
    }


# ---------------------------------------------------------------------------------- events


def _claim_string(value: Any) -> str:
    """API Gateway hands every JWT claim to the integration as a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, list):
        return "[" + " ".join(_claim_string(v) for v in value) + "]"
    return json.dumps(value, separators=(",", ":"))


def _canonical_path(raw_path: str) -> str:
    """Each segment percent-encoded exactly once (unreserved characters left as they are)."""
    return "/".join(
        quote(unquote(segment, errors="surrogateescape"), safe="", errors="surrogateescape")
        for segment in raw_path.split("/")
    )


def http_api_event(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    claims: dict[str, Any] | None,
    source_ip: str = "127.0.0.1",
    host: str = "localhost",
) -> dict[str, Any]:
    """The API Gateway HTTP API payload-v2 event for one request (``target`` as in the request
    line: path and query string, still percent-encoded)."""
    raw_path, _, raw_query = target.partition("?")
    raw_path = _canonical_path(raw_path or "/")
    lowered: dict[str, str] = {}
    cookies: list[str] = []
    for name, value in headers:
        key = name.lower()
        if key == "cookie":
            cookies.extend(c.strip() for c in value.split(";") if c.strip())
            continue
        lowered[key] = f"{lowered[key]},{value}" if key in lowered else value
    query: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True, errors="replace"):
        query[name] = f"{query[name]},{value}" if name in query else value
    matched = match_route(method, raw_path)
    route_key = matched[0].key if matched else "$default"
    now = datetime.now(UTC)
    context: dict[str, Any] = {
        "accountId": "000000000000",
        "apiId": "local",
        "domainName": host,
        "domainPrefix": host.split(".", maxsplit=1)[0],
        "http": {
            "method": method,
            "path": raw_path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": lowered.get("user-agent", ""),
        },
        "requestId": uuid.uuid4().hex[:16],
        "routeKey": route_key,
        "stage": "$default",
        "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "timeEpoch": int(now.timestamp() * 1000),
    }
    if claims is not None:
        scope = claims.get("scope")
        scopes = scope.split() if isinstance(scope, str) else [str(s) for s in scope or []]
        context["authorizer"] = {
            "jwt": {
                "claims": {k: _claim_string(v) for k, v in claims.items()},
                "scopes": scopes or None,
            }
        }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": raw_path,
        "rawQueryString": raw_query,
        "headers": lowered,
        "requestContext": context,
        "isBase64Encoded": False,
    }
    if cookies:
        event["cookies"] = cookies
    if query:
        event["queryStringParameters"] = query
    if matched and matched[1]:
        event["pathParameters"] = {k: unquote(v) for k, v in matched[1].items()}
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            event["body"], event["isBase64Encoded"] = base64.b64encode(body).decode(), True
    return event


# ---------------------------------------------------------------------------------- HTTP API


class _Server(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog sized for many workers connecting at once
    (``socketserver``'s default of 5 dropped or reset connections in a burst of 16)."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True


class LocalApi:
    """The HTTP API on ``host:port`` (port 0: any free port)."""

    def __init__(
        self,
        secret: str,
        host: str = "127.0.0.1",
        port: int = 0,
        invoker: Invoker | None = None,
        quiet: bool = True,
    ) -> None:
        self.secret = secret
        self.host = host
        self.invoker = invoker or Invoker()
        self.quiet = quiet
        self._server = _Server((host, port), self._handler_class())
        self.port = self._server.server_address[1]
        self._thread: threading.Thread | None = None
        self._docs_html: bytes | None = None
        self._spec: dict[str, Any] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def docs_url(self) -> str:
        return f"{self.base_url}/docs"

    def start(self) -> LocalApi:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="leasefence-api",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------ docs

    def openapi(self) -> dict[str, Any]:
        if self._spec is None:
            from leasefence.api.openapi import build_spec

            spec = build_spec()
            spec["servers"] = [{"url": self.base_url, "description": "leasefence local"}]
            self._spec = spec
        return self._spec

    def docs_html(self) -> bytes:
        if self._docs_html is None:
            from aws_lambda_powertools import event_handler
            from aws_lambda_powertools.event_handler.openapi.swagger_ui import generate_swagger_html

            assets = Path(event_handler.__file__).parent / "openapi" / "swagger_ui"
            spec = json.dumps(self.openapi()).replace("</", "<\\/")
            self._docs_html = generate_swagger_html(
                spec,
                (assets / "swagger-ui-bundle.min.js").read_text(encoding="utf-8"),
                (assets / "swagger-ui.min.css").read_text(encoding="utf-8"),
                "",  # no base URL: the script and styles above are inlined
                None,
                True,
            ).encode()
        return self._docs_html

    # ------------------------------------------------------------------ requests

    def authorize(self, headers: list[tuple[str, str]]) -> dict[str, Any]:
        """The JWT authorizer: the token's claims, or :class:`auth.TokenError`."""
        values = [v for k, v in headers if k.lower() == "authorization"]
        if len(values) != 1:
            raise auth.TokenError("a bearer token is required")
        scheme, _, token = values[0].strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise auth.TokenError("a bearer token is required")
        return auth.verify(token.strip(), self.secret)

    def respond(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes | None,
        source_ip: str = "127.0.0.1",
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request through authorizer and handler: ``(status, headers, body)``."""
        path = target.partition("?")[0]
        if path.startswith(TIMINGS_PATH) and self.invoker.timings is not None:
            sections = {"handler": self.invoker.timings}
            environments = self.invoker.environments
            if environments is not None and environments.timings is not None:
                sections["environments"] = environments.timings
            found = timings_answer(method, path, sections)
            if found is not None:
                return found[0], [("Content-Type", "application/json")], found[1]
        if method == "GET" and path == "/openapi.json":
            return (
                200,
                [("Content-Type", "application/json")],
                json.dumps(self.openapi(), indent=2).encode(),
            )
        if method == "GET" and path in ("/docs", "/docs/"):
            return 200, [("Content-Type", "text/html; charset=utf-8")], self.docs_html()
        claims = None
        matched = match_route(method, _canonical_path(path or "/"))
        # As in AWS: the authorizer guards the routes that have one; an unmatched route is the
        # handler's 404 whatever the token.
        if matched is not None and matched[0].scope is not None:
            try:
                claims = self.authorize(headers)
            except auth.TokenError as error:
                return _error(
                    401,
                    "unauthorized",
                    str(error),
                    [("WWW-Authenticate", 'Bearer realm="leasefence"')],
                )
        event = http_api_event(
            method, target, headers, body, claims, source_ip=source_ip, host=self.host
        )
        try:
            result = self.invoker.invoke("api", event)
        except Exception:  # noqa: BLE001 - the function failed: a 500, in the contract's shape
            return _error(500, "internal_error", "internal error")
        return _from_result(result)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Keep-alive clients would otherwise wait on delayed ACKs between header and body writes.
            disable_nagle_algorithm = True
            server_version = "leasefence-local"
            sys_version = ""

            def _serve(self) -> None:
                length = self.headers.get("Content-Length")
                body: bytes | None = None
                try:
                    size = int(length) if length else 0
                except ValueError:
                    self._write(*_error(400, "invalid_request", "bad Content-Length"))
                    return
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    self._write(
                        *_error(
                            411,
                            "invalid_request",
                            "chunked bodies are not supported; send Content-Length",
                        )
                    )
                    return
                if size > MAX_REQUEST_BYTES:
                    self.close_connection = True
                    self._write(
                        *_error(413, "payload_too_large", "request body is larger than 10 MiB")
                    )
                    return
                if size:
                    body = self.rfile.read(size)
                status, headers, payload = api.respond(
                    self.command,
                    self.path,
                    list(self.headers.items()),
                    body,
                    source_ip=self.client_address[0],
                )
                self._write(status, headers, payload)

            def _write(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD" and payload:
                    self.wfile.write(payload)

            def send_error(
                self, code: int, message: str | None = None, explain: str | None = None
            ) -> None:
                # http.server's own refusals (a malformed request line, a URI too long, headers
                # too large) in the contract's shape rather than its HTML page.
                del explain
                self.close_connection = True
                reason = message or self.responses.get(code, ("error",))[0]
                self._write(*_error(code, _SERVER_ERROR_CODES.get(code, "invalid_request"), reason))

            def __getattr__(self, name: str) -> Any:
                # Every method reaches the gateway's routing (unmatched ones get 404, as in AWS).
                if name.startswith("do_"):
                    return self._serve
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: ARG002 - stdlib signature
                if not api.quiet:
                    # Method and status only: the path holds operation ids.
                    sys.stderr.write(f"{self.command} -> {args[1] if len(args) > 1 else ''}\n")

        return Handler


#: The error code of each status http.server may answer itself (any other 4xx: invalid_request).
_SERVER_ERROR_CODES = {404: "not_found", 413: "payload_too_large", 500: "internal_error"}


def _error(status: int, code: str, message: str, extra: list[tuple[str, str]] | None = None):
    """An answer of the stack itself, in the contract's error shape (the handler's bytes)."""
    body = api_errors.encoded(code, message)
    return status, [("Content-Type", "application/json"), *(extra or [])], body


def _from_result(result: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """API Gateway's mapping of a payload-v2 Lambda result to the HTTP response."""
    import base64

    if not isinstance(result, dict) or "statusCode" not in result:
        body = result if isinstance(result, str) else json.dumps(result)
        return 200, [("Content-Type", "application/json")], body.encode()
    headers: list[tuple[str, str]] = [(k, str(v)) for k, v in (result.get("headers") or {}).items()]
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers.extend((name, str(v)) for v in values)
    headers.extend(("Set-Cookie", c) for c in result.get("cookies") or [])
    raw = result.get("body") or ""
    payload = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode()
    return int(result["statusCode"]), headers, payload


# ---------------------------------------------------------------------------------- the stack


#: The demo handlers (``functions/worker/demo_handlers.py``: job type ``demo-receipt``), which
#: ``leasefence local`` runs for its dev tenant; named as on AWS, where the handlers' folder is the
#: function's root (``/var/task``).
DEMO_HANDLERS = "worker.demo_handlers:HANDLERS"


class PortUnavailable(OSError):
    """A port the stack was to listen on cannot be had: which service's, and which of the
    stack's settings chose it (``port``, ``dynamodb_port``)."""

    def __init__(self, service: str, host: str, port: int, setting: str, reason: OSError) -> None:
        self.service, self.host, self.port, self.setting = service, host, port, setting
        if reason.errno == errno.EADDRINUSE:
            text = f"port {port} of the {service} is already in use on {host}"
        else:
            text = f"the {service} cannot listen on {host}:{port}: {reason.strerror or reason}"
        super().__init__(text)


@contextlib.contextmanager
def _listening(service: str, host: str, port: int, setting: str) -> Iterator[None]:
    """A failure to listen, as a :class:`PortUnavailable` that names the service and setting."""
    try:
        yield
    except OSError as error:
        raise PortUnavailable(service, host, port, setting, error) from error


#: The local event source mappings read a shard at most 20 times a second (Lambda's poll a
#: DynamoDB stream shard about four times a second): records written within one interval come
#: in one read and one batch.
STREAM_POLL_INTERVAL_S = 0.05


#: The publisher's on-failure bucket on the embedded endpoint (its mapping's, or the shared
#: mapping's, where the worker also keeps what it could not publish).
PUBLISHER_FAILURES = "leasefence-publisher-stream-failures"


class LocalStack:
    """Embedded DynamoDB + S3, table and bucket, the HTTP API, the sweeper on a timer, and with
    ``streams`` the stream-driven worker and publisher."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        dynamodb_port: int = 8766,
        sweep_interval: float | None = 60.0,
        secret: str | None = None,
        aws: Any = None,
        table_name: str | None = None,
        bucket: str | None = None,
        quiet: bool = True,
        streams: bool = False,
        worker_handlers: str | None = None,
        worker_tenants: Sequence[str] = (),
        worker_lease_seconds: int = 60,
        event_bus: str | None = None,
        stream_poll_interval: float = STREAM_POLL_INTERVAL_S,
        stream_starting_position: str | None = None,
        dynamodb_endpoint: str | None = None,
        table_prefix: str | None = None,
        api_environments: int = 0,
        worker_dispatch: str = "run",
        stream_readers: int = 1,
    ) -> None:
        """``api_environments``: 0 runs the API function in this process (one environment, one
        invocation at a time; what a test that reaches into the handlers' runtime needs), N in
        up to N processes of its own (:mod:`leasefence_tools.local.environments`).
        ``worker_dispatch``, ``stream_readers``: as ``WorkerProps``' ``stream_dispatch`` and
        ``stream_readers`` (with handlers: one mapping for the worker and the publisher, or two).
        ``streams``: start the event source mappings with the stack (or later:
        :meth:`start_streams`). ``worker_handlers`` (``module:NAME``) and ``worker_tenants``:
        what the worker function runs, for whom (no handlers: no stream worker, the publisher
        only). ``event_bus``: the bus on the embedded endpoint (default ``leasefence-local``).
        ``stream_poll_interval``: the mappings read the stream at most this often (on the
        embedded endpoint they read when records are written; on an external one they poll).
        ``stream_starting_position``: where the mappings start instead of their own (the
        publisher's ``TRIM_HORIZON``), e.g. ``LATEST`` on a table that already holds another
        stack's records (embedded endpoints in one process share their tables).
        ``dynamodb_endpoint``: an external DynamoDB-compatible endpoint for the table, probed at
        :meth:`start` (:mod:`leasefence_tools.local.capabilities`: refused when it lacks what the
        engine needs; without streams the stream worker and publisher stay off, without TTL
        ended operations stay); S3, EventBridge and SQS stay on the embedded endpoint. Its table
        is ``<table_prefix>-operations`` (default prefix ``leasefence``), created or completed,
        never deleted."""
        self.host = host
        self.port = port
        self.dynamodb_port = dynamodb_port
        self.sweep_interval = sweep_interval
        self.secret = secret
        self.aws = aws
        self._own_aws = aws is None
        self.table_name = table_name
        self.bucket = bucket
        self.quiet = quiet
        #: Time in each function's handler, per API route (``GET /__leasefence/timings``).
        self.timings = Timings()
        #: Time in the API function's handler per execution environment (with
        #: ``api_environments``): how the invocations spread.
        self.environment_timings = Timings()
        self.invoker = Invoker(timings=self.timings)
        #: The sweeper's own execution environment (a function of its own, as on AWS: a sweep
        #: no longer holds the API's invocations back).
        self.sweeper_invoker = Invoker(timings=self.timings)
        #: This stack's runtime (settings, clients, engine): every invocation runs with it.
        self.runtime: Any = None
        self.api: LocalApi | None = None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self.generated_secret = False
        self.sweeps = 0
        self.last_sweep: dict[str, Any] | None = None
        self.streams = streams
        self.worker_handlers = worker_handlers
        self.worker_tenants = tuple(worker_tenants)
        self.worker_lease_seconds = worker_lease_seconds
        self.worker_dispatch = worker_dispatch
        self.stream_readers = stream_readers
        #: The asynchronous invocations of the ``invoke`` dispatch mode (None: ``run``).
        self.async_lambda: Any = None
        self.event_bus = event_bus
        self.stream_poll_interval = stream_poll_interval
        self.stream_starting_position = stream_starting_position
        #: The running event source mappings by function name (``worker``, ``publisher``).
        self.mappings: dict[str, Any] = {}
        #: The on-failure destination of each mapping whose destination is a queue (an SQS queue
        #: URL on the embedded endpoint: the worker's).
        self.failure_queues: dict[str, str] = {}
        #: The on-failure destination of each mapping whose destination is a bucket (a bucket on
        #: the embedded endpoint: the publisher's, which ``leasefence publisher redrive`` reads).
        self.failure_buckets: dict[str, str] = {}
        #: The external DynamoDB endpoint (None: the embedded one), what it supports, and why
        #: the streams are off when they were asked for but the endpoint has none.
        self.external_dynamodb = dynamodb_endpoint
        self.table_prefix = table_prefix
        self.api_environments = api_environments
        #: The API function's environments (None: in this process).
        self.environments: Environments | None = None
        self.capabilities: Any = None
        self.streams_off_reason: str | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> LocalStack:
        import dataclasses

        from leasefence import settings
        from leasefence.schema import create_table
        from leasefence_tools.local.embedded import EmbeddedAws, use_local_credentials
        from leasefence_tools.local.events import LOCAL_BUS

        use_local_credentials()
        if self.external_dynamodb:
            self._probe_external()  # before any port is taken: a refusal leaves nothing running
        if self.aws is None:
            with _listening(
                "embedded DynamoDB endpoint", "127.0.0.1", self.dynamodb_port, "dynamodb_port"
            ):
                self.aws = EmbeddedAws(host="127.0.0.1", port=self.dynamodb_port).start()
        endpoint = self.aws.endpoint
        current = settings.Settings.from_env()
        table = self.table_name or (
            f"{self.table_prefix or 'leasefence'}-operations"
            if self.external_dynamodb or self.table_prefix
            else current.table_name
        )
        bucket = self.bucket or current.payload_bucket
        if not self.secret:
            self.secret = auth.secret_from_env()
        if not self.secret:
            self.secret, self.generated_secret = auth.generate_secret(), True
        # The handlers run in this process: give them this stack's endpoints directly (the
        # environment stays as it was, so nothing leaks into whatever else runs here).
        config = dataclasses.replace(
            current,
            table_name=table,
            payload_bucket=bucket,
            dynamodb_endpoint=self.external_dynamodb or endpoint,
            s3_endpoint=endpoint,
            events_endpoint=endpoint,
            event_bus=self.event_bus or LOCAL_BUS,
            worker_handlers=self.worker_handlers,
            worker_tenants=self.worker_tenants,
            worker_lease_seconds=self.worker_lease_seconds,
            worker_dispatch=self.worker_dispatch,
            publisher_failures=(
                PUBLISHER_FAILURES if self.worker_handlers and self.stream_readers == 1 else None
            ),
            region=current.region or "us-east-1",
        )
        self.event_bus = config.event_bus
        if FUNCTIONS_DIR is not None and str(FUNCTIONS_DIR) not in sys.path:
            # As on AWS (/var/task): handlers named from the handlers' folder (worker.demo_...).
            sys.path.append(str(FUNCTIONS_DIR))
        if (REPO_ROOT / "functions").is_dir() and str(REPO_ROOT) not in sys.path:
            # In a checkout, also from its root (functions.worker....).
            sys.path.append(str(REPO_ROOT))
        # Installed for this process (the CLI's `leasefence local` serves nothing else), and
        # given to every invocation, so that whatever else this process installs or resets later
        # (another stack, a test) does not move this stack's handlers to other endpoints.
        self.runtime = settings.install(config)
        self.invoker.runtime = self.sweeper_invoker.runtime = self.runtime
        for service in ("dynamodb", "s3", "events"):  # the handlers' calls skip the network
            self._attach(self.runtime.client(service))
        if self.worker_dispatch == "invoke":
            from leasefence_tools.local.async_invoke import AsyncLambda

            self.async_lambda = AsyncLambda(lambda: Invoker(self.runtime, self.timings))
            self.runtime.install_client("lambda", self.async_lambda)
        spec = config.table_spec
        create_table(self.client("dynamodb"), spec, stream=self.streams, ttl=self._has("TTL"))
        s3 = self.aws.client("s3")
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
        self.table_name, self.bucket = table, bucket
        # Load the functions now (as a cold start would), so the first request is not the one to pay.
        if self.api_environments:
            paths = [str(p) for p in (FUNCTIONS_DIR, REPO_ROOT) if p is not None]
            self.environments = self.invoker.environments = Environments(
                "api",
                self.api_environments,
                config,
                paths=paths,
                timings=self.environment_timings,
                **self._relay(),
            ).start()
        else:
            load_function("api")
        load_function("sweeper")
        try:
            with _listening("HTTP API", self.host, self.port, "port"):
                self.api = LocalApi(
                    self.secret,
                    host=self.host,
                    port=self.port,
                    invoker=self.invoker,
                    quiet=self.quiet,
                )
        except PortUnavailable:
            self.stop()
            raise
        self.api.start()
        if self.sweep_interval:
            self._sweeper = threading.Thread(
                target=self._sweep_loop, name="leasefence-sweeper", daemon=True
            )
            self._sweeper.start()
        if self.streams:
            self.start_streams()
        return self

    def start_streams(self, starting_position: str | None = None) -> None:
        """Turn the table's stream on (if it is not) and start the event source mappings: the
        publisher's, and the worker's when handlers were given (one shared mapping, or with
        ``stream_readers=2`` two). Created now, each starts at its own starting position (the
        publisher's ``TRIM_HORIZON``: everything the stream holds; the worker's and the shared
        one's ``LATEST``), or at ``starting_position``; stopped by :meth:`stop_streams`, they
        resume where they stopped."""
        from leasefence.schema import create_table
        from leasefence.streams import mappings
        from leasefence_tools.local.streams import EventSourceMapping

        if self.mappings:
            for running in self.mappings.values():
                if not running.running:
                    running.start()
            return
        if self.table_name is None:
            raise RuntimeError("start the local stack before its streams")
        if not self._has("Streams"):
            raise RuntimeError(self.streams_off_reason or "the DynamoDB endpoint has no streams")
        create_table(self.client("dynamodb"), self._spec(), stream=True, ttl=self._has("TTL"))
        events = self.aws.client("events")
        with contextlib.suppress(events.exceptions.ResourceAlreadyExistsException):
            events.create_event_bus(Name=self.event_bus)
        if self.worker_handlers and self.stream_readers == 1:
            wanted = [mappings.shared()]  # one reader: the worker also publishes
        else:
            wanted = [mappings.publisher()]
            if self.worker_handlers:
                wanted.append(mappings.worker(self.worker_tenants))
            load_function("publisher")
        if self.worker_handlers:
            load_function("worker")
        sqs, s3 = self.aws.client("sqs"), self.aws.client("s3")
        for mapping in wanted:
            name = f"leasefence-{mapping.function}-stream-failures"
            if mapping.failure_destination == "s3":  # the publisher's bucket, shared or not
                name = PUBLISHER_FAILURES
                self.failure_buckets["publisher"] = name
            queue: str | None = None
            bucket: str | None = None
            if mapping.failure_destination == "s3":
                with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                    s3.create_bucket(Bucket=name)
                bucket = self.failure_buckets[mapping.function] = name
            else:
                queue = sqs.create_queue(QueueName=name)["QueueUrl"]
                self.failure_queues[mapping.function] = queue
            self.mappings[mapping.function] = EventSourceMapping(
                mapping.function,
                mapping,
                self.table_name,
                lambda service: self._attach(self.client(service)),
                Invoker(self.runtime, self.timings),
                queue,
                poll_interval_s=self.stream_poll_interval,
                failure_bucket=bucket,
                starting_position=starting_position or self.stream_starting_position,
                reader=self._records_reader(),
            ).start()
        self.streams = True

    def stop_streams(self) -> None:
        """Stop the event source mappings (as disabled mappings): :meth:`start_streams` resumes
        them where they stopped."""
        for mapping in self.mappings.values():
            mapping.stop()

    def _attach(self, client: Any) -> Any:
        """``client`` served in this process when the endpoint runs here (EmbeddedAws.attach); a
        client of another endpoint (an external DynamoDB) goes over the network as it is."""
        attach = getattr(self.aws, "attach", None)
        ours = client.meta.endpoint_url.rstrip("/") == self.aws.endpoint.rstrip("/")
        return attach(client) if attach is not None and ours else client

    def _relay(self) -> dict[str, Any]:
        """How the API function's environments reach the embedded endpoint: when it runs in this
        process, through their pipe to this process, which serves each request in the endpoint's
        application (lock, fidelity and timings as over HTTP, without the HTTP); else over
        HTTP."""
        from leasefence_tools.local.in_process import wsgi_answer

        app = getattr(self.aws, "app", None)
        if app is None or getattr(self.aws, "process", False):
            return {}
        return {"endpoint": self.aws.endpoint, "serve": lambda *parts: wsgi_answer(app, *parts)}

    def _records_reader(self) -> Any:
        """The embedded endpoint's in-process ``GetRecords`` for the mappings, or None (an
        external DynamoDB, or an endpoint in another process: the streams client then)."""
        reader = getattr(self.aws, "records_reader", None)
        return None if self.external_dynamodb or reader is None else reader()

    def _spec(self) -> Any:
        return self.runtime.settings.table_spec

    def _probe_external(self) -> None:
        """What the external endpoint supports; :class:`~leasefence_tools.local.capabilities.
        UnsuitableEndpoint` when it lacks what the engine needs. Streams asked for but lacking:
        off, with the reason kept for the banner."""
        from leasefence_tools.local import capabilities

        found = capabilities.probe(
            self.client("dynamodb"),
            self.client("dynamodbstreams"),
            self.table_prefix or "leasefence",
        )
        if found.left_behind:
            sys.stderr.write(f"the probe could not delete its table {found.left_behind}: do it\n")
        self.capabilities = found.require()
        if self.streams and not found.supports(capabilities.STREAMS):
            self.streams = False
            self.streams_off_reason = (
                f"the DynamoDB endpoint lacks {found.describe((capabilities.STREAMS,))}"
            )

    def _has(self, capability: str) -> bool:
        return self.capabilities is None or self.capabilities.supports(capability)

    def client(self, service: str) -> Any:
        """A boto3 client of this stack's endpoint for ``service``: DynamoDB and its streams at
        the external endpoint when there is one, everything else (and else everything) at the
        embedded one."""
        if self.external_dynamodb and service in ("dynamodb", "dynamodbstreams"):
            import boto3

            from leasefence.settings import Settings
            from leasefence_tools.local.capabilities import client_config

            return boto3.client(
                service,
                endpoint_url=self.external_dynamodb,
                region_name=Settings.from_env().region or "us-east-1",  # the handlers' region
                config=client_config(),
            )
        return self.aws.client(service)

    def stop(self) -> None:
        from leasefence import settings

        self.stop_streams()
        if self.async_lambda is not None:
            self.async_lambda.wait()
        self.mappings.clear()
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
        if self.api is not None:
            self.api.stop()
        if self.environments is not None:
            self.environments.stop()
        if self._own_aws and self.aws is not None:
            self.aws.stop()
        if self.runtime is not None:
            settings.reset(only=self.runtime)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the sweeper

    def sweep_now(self) -> dict[str, Any]:
        """One run of the sweeper function, as the schedule would invoke it."""
        result = self.sweeper_invoker.invoke("sweeper", scheduled_event())
        self.sweeps += 1
        self.last_sweep = result
        return result

    def _sweep_loop(self) -> None:
        assert self.sweep_interval
        while not self._stop.wait(self.sweep_interval):
            try:
                self.sweep_now()
            except Exception as error:  # noqa: BLE001 - a failed run is retried at the next tick
                sys.stderr.write(f"sweeper run failed: {type(error).__name__}\n")

    # ------------------------------------------------------------------ facts for people

    @property
    def base_url(self) -> str:
        assert self.api is not None
        return self.api.base_url

    @property
    def docs_url(self) -> str:
        assert self.api is not None
        return self.api.docs_url

    @property
    def dynamodb_endpoint(self) -> str:
        return self.external_dynamodb or self.aws.endpoint

    @property
    def aws_endpoint(self) -> str:
        """The embedded endpoint: S3, EventBridge and SQS (and DynamoDB unless external)."""
        return str(self.aws.endpoint)

    def token(
        self,
        tenant_id: str,
        scopes: Any = None,
        ttl_seconds: int = auth.DEFAULT_TTL_SECONDS,
        subject: str | None = None,
    ) -> str:
        return auth.mint(
            tenant_id,
            auth.ALL_SCOPES if scopes is None else scopes,
            ttl_seconds=ttl_seconds,
            secret=self.secret,
            subject=subject,
        )
