"""The local stack's sockets under a burst of new connections: workers starting together (16 or
more) open their connections at once, and every one is served, none reset, dropped or stalled."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

#: New connections opened at the same instant (behind a barrier), each one fresh.
BURST = 64
#: A served connection answers in milliseconds; one dropped by a full accept queue waits for
#: SYN retransmissions (1 s, 3 s, 7 s, ...) or is reset.
ANSWER_WITHIN_S = 15.0


def _burst(port: int, request: bytes) -> list[str]:
    """Open ``BURST`` fresh connections at once, send ``request`` on each, read until the server
    closes: each connection's status line, or the error it met."""
    barrier = threading.Barrier(BURST)
    results: list[str] = [""] * BURST

    def connect(i: int) -> None:
        barrier.wait()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as sock:
                sock.sendall(request)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            results[i] = answer.split(b"\r\n", 1)[0].decode("latin-1")
        except OSError as error:  # reset, refused, broken pipe, timed out
            results[i] = f"{type(error).__name__}: {error}"

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_the_api_serves_64_simultaneous_new_connections(stack) -> None:
    port = urlsplit(stack.base_url).port
    assert port is not None
    request = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    for _round in range(2):
        results = _burst(port, request)
        failed = [r for r in results if r != "HTTP/1.1 200 OK"]
        assert not failed, f"{len(failed)} of {BURST} connections failed: {sorted(set(failed))}"


def test_the_embedded_endpoint_serves_64_simultaneous_new_connections(aws) -> None:
    body = b"{}"
    request = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"X-Amz-Target: DynamoDB_20120810.ListTables\r\n"
        b"Content-Type: application/x-amz-json-1.0\r\n"
        b"Authorization: AWS4-HMAC-SHA256 Credential=any/20260101/us-east-1/dynamodb/aws4_request, "
        b"SignedHeaders=host, Signature=0\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    results = _burst(aws.port, request)
    failed = [r for r in results if r != "HTTP/1.1 200 OK"]
    assert not failed, f"{len(failed)} of {BURST} connections failed: {sorted(set(failed))}"
