"""Where a local stack keeps what its command line needs: one stack per state folder.

``leasefence local`` writes where it listens, its JWT secret and its dev token to ``local.json``
in a state folder, and the commands that talk to it (``token``, ``ops``, ``job-types``,
``controls``, ``shadow report``, ``events tail``, ``invoke``) read it from there. The folder is,
in this order:

1. ``--state-dir DIR`` (on ``leasefence local`` and on every command that reads the state);
2. ``LEASEFENCE_STATE_DIR``;
3. ``.leasefence/`` of the current folder; a reading command looks in the folders above too, as
   git does (so a command run from a subfolder of where ``make run`` started finds its stack).

A stack holds its folder for as long as it runs: an exclusive ``flock`` on ``local.lock``, which
the operating system lets go of when the process ends, also when it is killed. A second stack on
the same folder refuses to start, naming the one that holds it, instead of taking over its
command line; a state left by a stack that died (its lock free) is replaced. On exit the stack
removes its state and leaves the folder (and the lock file: removing it would let two stacks lock
two different files of one name).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "LEASEFENCE_STATE_DIR"
FOLDER = ".leasefence"
STATE_FILE = "local.json"
LOCK_FILE = "local.lock"
#: How long a starting stack tries for a lock that is held only for a moment (a reading command
#: checking whether the stack that wrote a state still runs holds a shared lock that briefly).
_ACQUIRE_S = 1.0

#: How to run a second stack beside one that holds a folder.
HOW_TO_SECOND = (
    "To run a second stack, give it a state folder of its own: start it from another folder (it "
    f"uses ./{FOLDER} there), or with --state-dir DIR (or {ENV}=DIR) and run its commands with "
    "the same --state-dir."
)


class StateFolderInUse(RuntimeError):
    """Another running stack holds this state folder."""


def chosen(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder named by ``--state-dir`` or ``LEASEFENCE_STATE_DIR`` (absolute), or None."""
    named = explicit or os.environ.get(ENV)
    return Path(named).expanduser().resolve() if named else None


def own_folder(explicit: str | os.PathLike[str] | None = None, cwd: Path | None = None) -> Path:
    """The folder a starting stack uses: ``--state-dir``, ``LEASEFENCE_STATE_DIR``, else
    ``./.leasefence`` (absolute, so that what the stack prints can be used from anywhere)."""
    return chosen(explicit) or (cwd or Path.cwd()).resolve() / FOLDER


def table_prefix(folder: Path) -> str:
    """The prefix of a stack's own tables on a shared (external) endpoint, derived from its
    state folder: two stacks there never share a table, a stack started again on its folder
    finds its table again."""
    import hashlib

    return f"leasefence-{hashlib.sha256(str(folder).encode()).hexdigest()[:10]}"


def _holds_lock(folder: Path) -> bool:
    """Whether a running process holds the folder's lock (a free lock, or none: no stack)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing the only descriptor of this open file lets the probe's lock go
    return False


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Found:
    """What a reading command found: the running stack's state, or why there is none."""

    folder: Path | None  # the state folder it read (None: no .leasefence/ from here up)
    looked_from: Path  # the folder the search started in (the current one)
    state: dict[str, Any] = field(default_factory=dict)  # empty unless a stack runs there
    stale: dict[str, Any] = field(default_factory=dict)  # a dead stack's state, if one was left

    @property
    def running(self) -> bool:
        return bool(self.state)

    def get(self, key: str) -> Any:
        return self.state.get(key)

    def why_none(self) -> str:
        """Why no stack was found, naming where this looked (for the commands' error messages)."""
        if self.folder is None:
            return (
                f"no running local stack: no {FOLDER}/{STATE_FILE} in {self.looked_from} or a "
                "folder above it"
            )
        if self.stale:
            return (
                f"no running local stack in the state folder {self.folder}: the stack that wrote "
                f"its {STATE_FILE} (pid {self.stale.get('pid')}, {self.stale.get('base_url')}) is "
                "no longer running"
            )
        return f"no running local stack in the state folder {self.folder} (no {STATE_FILE} there)"

    def advice(self, other: str) -> str:
        """:meth:`why_none` and what to do instead; ``other``: the command's explicit option."""
        return (
            f"{self.why_none()}. Start `leasefence local` (it prints its state folder), name the "
            f"folder of a running one with --state-dir DIR or {ENV}, or pass {other}."
        )


def find(explicit: str | os.PathLike[str] | None = None, cwd: Path | None = None) -> Found:
    """The state a reading command uses: the folder named by ``--state-dir`` or
    ``LEASEFENCE_STATE_DIR``, else the nearest ``.leasefence/`` holding a state, from the current
    folder up. Its state only when the stack that wrote it still holds the folder."""
    here = (cwd or Path.cwd()).resolve()
    folder = chosen(explicit)
    if folder is None:
        folder = next(
            (f / FOLDER for f in (here, *here.parents) if (f / FOLDER / STATE_FILE).is_file()),
            None,
        )
    if folder is None:
        return Found(None, here)
    state = _read_json(folder / STATE_FILE)
    if state and not _holds_lock(folder):
        return Found(folder, here, stale=state)
    return Found(folder, here, state=state)


class StateFolder:
    """A running stack's hold on its folder: taken before it starts, let go when it stopped."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None

    @property
    def state_file(self) -> Path:
        return self.folder / STATE_FILE

    def acquire(self) -> None:
        """Hold the folder (replacing a dead stack's state), or raise :class:`StateFolderInUse`
        naming the folder and the stack that holds it."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        ignore = self.folder / ".gitignore"
        if not ignore.exists():
            with contextlib.suppress(OSError):
                ignore.write_text(
                    "# written by `leasefence local`: its state, never committed\n*\n"
                )
        fd = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + _ACQUIRE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                os.close(fd)
                raise StateFolderInUse(self._in_use()) from None
            except OSError:
                os.close(fd)
                raise
        self._fd = fd
        # Ours now: whatever state is there was left by a stack that died.
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def _in_use(self) -> str:
        state = _read_json(self.state_file)
        pid: Any = state.get("pid")
        if pid is None:
            with contextlib.suppress(OSError, ValueError):
                pid = int((self.folder / LOCK_FILE).read_text().strip())
        holder = f"pid {pid if pid is not None else '?'}"
        holder += f", API at {state['base_url']}" if state.get("base_url") else ", still starting"
        return (
            f"the state folder {self.folder} is in use by another local stack ({holder}); one "
            f"stack per state folder, so this one does not start. {HOW_TO_SECOND}"
        )

    def write(self, state: dict[str, Any]) -> Path:
        """The state file, readable by its owner only (it holds the JWT secret), replaced in one
        rename so that a reader never sees half of it."""
        partial = self.folder / f".{STATE_FILE}.{os.getpid()}"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(state, handle)
        os.replace(partial, self.state_file)
        return self.state_file

    def release(self) -> None:
        """Remove the state and let the folder go (the folder and its lock file stay)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.state_file.unlink()
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # lets the lock go
        self._fd = None
