"""``leasefence local`` as a real process (started as a user starts it, by the command or by
``make run``): its output in a file, ready once it prints :data:`READY`, stopped with a signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from leasefence_tools.local.state import STATE_FILE

LEASEFENCE = Path(sys.executable).with_name("leasefence")
#: The banner's last line: the stack serves and its commands find it.
READY = "Press Ctrl-C to stop."


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without its ``LEASEFENCE_`` and ``PYTEST`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEFENCE_", "PYTEST"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@dataclass
class Stack:
    process: subprocess.Popen[bytes]
    log: Path
    folder: Path  # its state folder

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def state(self) -> dict:
        return json.loads((self.folder / STATE_FILE).read_text())

    def wait_ready(self) -> Stack:
        """Once it serves, or has exited (refused)."""
        deadline = time.monotonic() + 90
        while READY not in self.output and self.process.poll() is None:
            assert time.monotonic() < deadline, "leasefence local never became ready"
            time.sleep(0.1)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """The signal to its process group when it leads one (``make run``: make and the stack
        it started), else to it."""
        if self.process.poll() is None:
            if os.getpgid(self.process.pid) == self.process.pid:
                os.killpg(self.process.pid, sig)
            else:
                self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=10)
