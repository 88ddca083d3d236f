"""A proxy in front of the local stack that loses answers and connections where a test says."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class FaultyProxy:
    """Forwards to the stack, except where ``plan(method, path, n)`` says otherwise:

    * ``"drop"``: forward the request (so it takes effect), then close the connection without
      answering: the answer is lost;
    * ``"hold"``: forward the request (so it takes effect), then keep the connection open without
      answering until the proxy closes: the answer is lost, and the client waits for it;
    * an ``int`` status: answer that status (with ``Retry-After: 0``) without forwarding;
    * a ``(status, body, headers)`` tuple: answer exactly that without forwarding (what API
      Gateway writes itself, say).
    """

    def __init__(self, target: str, plan) -> None:
        self.target = urlsplit(target)
        self.plan = plan
        self.seen: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    n = sum(1 for m, p, _ in proxy.seen if (m, p) == (self.command, self.path))
                    action = proxy.plan(self.command, self.path, n)
                    proxy.seen.append((self.command, self.path, action if isinstance(action, str) else None))
                if isinstance(action, int):
                    payload = json.dumps({"error": {"code": "unavailable", "message": "injected"}}).encode()
                    action = (action, payload, {"Retry-After": "0", "Content-Type": "application/json"})
                if isinstance(action, tuple):
                    status, payload, canned = action
                    self.send_response(status)
                    for name, value in canned.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.target.hostname, proxy.target.port, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                payload = answer.read()
                conn.close()
                if action == "hold":
                    proxy._closing.wait()
                if action in ("drop", "hold"):
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.seen if (m, p) == (method, path))

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
