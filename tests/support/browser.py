"""A real ``leasefence local`` and Debian's Chromium driven by Playwright, for the console's browser
tests and its screenshots (``make screenshots``).

Chromium is the system's (``/usr/bin/chromium``, Debian's package ``chromium``; ``.ci/run`` installs
it where missing): Playwright for Python drives it through ``executable_path`` and never downloads
a browser of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from leasefence_tools.local.tokens import mint

SECRET = "console-browser-secret-0123456789abcdef"
#: How long a browser test waits for the page (a refresh is 5 s; the machine may be busy).
WAIT_MS = 15_000
#: How Chromium starts here: headless, and nothing that reaches out to the network on its own.
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium_path() -> str:
    """The system's Chromium (``LEASEFENCE_CHROMIUM`` overrides); an error saying how to get it."""
    found = os.environ.get("LEASEFENCE_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser"
    )
    if not found:
        raise RuntimeError(
            "Chromium is not installed: apt-get install -y chromium (the console's browser tests "
            "drive the system's Chromium; no browser is downloaded)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Local:
    """A running ``leasefence local``: its API, the console link it printed, and tokens."""

    process: subprocess.Popen[bytes]
    base_url: str
    console_link: str
    output: Path

    def token(self, sub: str, scopes: str = "produce work operate approve", tenant: str = "dev") -> str:
        return mint(tenant, [f"leasefence/{s}" for s in scopes.split()], secret=SECRET, subject=sub)

    def link(self, sub: str, scopes: str = "produce work operate approve", view: str = "") -> str:
        """A console link that signs in as ``sub`` (the token in the fragment, as local prints it)."""
        fragment = f"token={self.token(sub, scopes)}" + (f"&view={quote(view, safe='/')}" if view else "")
        return f"{self.base_url}/console#{fragment}"


@contextlib.contextmanager
def local_stack(workdir: Path, samples: bool = True, timeout_s: float = 120.0) -> Iterator[Local]:
    """``leasefence local --samples`` on free ports, until the block ends (SIGTERM)."""
    api_port, ddb_port = _free_port(), _free_port()
    output = workdir / "local.out"
    leasefence = Path(sys.executable).with_name("leasefence")
    command = [
        str(leasefence), "local", "--port", str(api_port), "--dynamodb-port", str(ddb_port),
        "--sweep-interval", "0",
    ]
    if samples:
        command.append("--samples")
    env = {**os.environ, "LEASEFENCE_LOCAL_JWT_SECRET": SECRET, "LEASEFENCE_STATE_DIR": str(workdir / "state")}
    with output.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + timeout_s
        link = None
        while link is None:
            text = output.read_text(errors="replace")
            found = re.search(r"^\s+(http://\S+/console#token=\S+)\s*$", text, re.MULTILINE)
            if found:
                link = found.group(1)
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"leasefence local did not print its console link:\n{text[-3000:]}")
            time.sleep(0.2)
        yield Local(process, f"http://127.0.0.1:{api_port}", link, output)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """Chromium (the system's) under Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_ARGS))
        try:
            yield launched
        finally:
            launched.close()


def client_of(local: Local, sub: str, scopes: str = "produce work operate approve", tenant: str = "dev") -> Any:
    """An SDK client of the local stack as ``sub`` (space-separated scopes, without the prefix)."""
    from leasefence.client import LeaseFenceClient

    return LeaseFenceClient(local.base_url, local.token(sub, scopes, tenant), retries=2, backoff=0.05)


def wait_state(client: Any, op_id: str, state: str, timeout_s: float = 10.0) -> None:
    """Until ``op_id`` is in ``state`` (the page's click reached the API), or fail saying so."""
    deadline = time.monotonic() + timeout_s
    while client.get(op_id).state != state:
        assert time.monotonic() < deadline, f"{op_id} never became {state}: {client.get(op_id)}"
        time.sleep(0.1)
