"""Every shell and Python block of the README and of the guides runs, in order, as written.

Each Markdown file with runnable blocks gets a fresh ``leasefence local`` (free ports, its own
state folder) and a fresh working folder that looks like a clone: every top-level entry of the
repository linked into it, so ``source .venv/bin/activate`` and ``events/...`` work, and files a
block writes (``catalogue.yaml``) land there, never in the repository. The blocks then run in
document order: the ``bash``/``sh`` blocks in one bash (``set -euo pipefail``: a failing command
or a variable used before it is defined fails its block), the ``python`` blocks in one
interpreter (one namespace, as a reader pasting them into one session would), each asserted to
succeed. ``LEASEFENCE_BASE_URL`` names the stack's API (the documented override of the default
``http://127.0.0.1:8765``).

A block that must not run says why in an HTML comment on the line right before its fence, e.g.
``<!-- skip-test: needs AWS credentials -->``; those are few, and listed by
``test_skipped_blocks_are_few_and_say_why``. Blocks in other languages (yaml, json, text) are
not run. ``--8<-- "path"`` lines (pymdownx.snippets, as the docs site renders them) are
replaced by the file they name before a block runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHELLS = {"bash", "sh", "shell"}
PYTHONS = {"python", "py", "python3"}
SKIP = re.compile(r"^<!--\s*skip-test:\s*(?P<why>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
SNIPPET = re.compile(r'^(?P<indent>\s*)--8<--\s+"(?P<path>[^"]+)"\s*$')
#: Seconds a block may take (a stack's request, a worker's run, a CDK synth are well under it).
BLOCK_TIMEOUT = 90.0
DONE = "__leasefence_doc_block_done__"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip: str | None  # the reason given in its skip-test comment, or None

    @property
    def kind(self) -> str | None:
        if self.language in SHELLS:
            return "bash"
        if self.language in PYTHONS:
            return "python"
        return None

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of one Markdown file, in order (nested fences are not used here)."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        language = (match["info"].strip().split() or [""])[0].lower()
        before = lines[i - 1].strip() if i else ""
        skip = SKIP.match(before)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            line = lines[j]
            body.append(line[indent:] if line[:indent].strip() == "" else line.lstrip())
            j += 1
        found.append(
            Block(path, i + 1, language, "\n".join(body) + "\n", skip["why"] if skip else None)
        )
        i = j + 1
    return found


def expand_snippets(code: str) -> str:
    """``--8<-- "path"`` lines replaced by the file they name (relative to the repository)."""

    def one(line: str) -> str:
        match = SNIPPET.match(line)
        return (ROOT / match["path"]).read_text(encoding="utf-8") if match else line + "\n"

    return "".join(one(line) for line in code.splitlines())


def documents() -> list[Path]:
    """The README and every guide: docs/**/*.md but the generated reference pages."""
    pages = sorted(
        p
        for p in (ROOT / "docs").rglob("*.md")
        if "reference" not in p.relative_to(ROOT / "docs").parts
    )
    return [ROOT / "README.md", *pages]


def runnable(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.kind and not b.skip]


# ------------------------------------------------------------------------------------ sessions

_PYTHON_DRIVER = textwrap.dedent(
    f"""
    import sys, traceback
    namespace = {{"__name__": "__main__"}}
    for line in sys.stdin:
        path = line.strip()
        try:
            with open(path, encoding="utf-8") as handle:
                exec(compile(handle.read(), path, "exec"), namespace)
            status = 0
        except SystemExit as stop:
            status = 0 if stop.code in (None, 0) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        print("{DONE}", status, flush=True)
    """
)


class Session:
    """One long-lived interpreter (bash or python) fed block files, answering a done marker."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        self.pending = b""
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its background jobs end with it (killpg)
        )

    def run(self, command: str, timeout: float = BLOCK_TIMEOUT) -> tuple[int, str]:
        """Send one command; its output up to the done marker, and the status the marker gives
        (the interpreter's exit status when it ended instead: ``set -e``)."""
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(command.encode() + b"\n")
        self.process.stdin.flush()
        fd = self.process.stdout.fileno()
        output: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.pending:
                raw, self.pending = self.pending.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if line.startswith(DONE):
                    return int(line.split()[1]), "".join(output)
                output.append(line + "\n")
                with self.log.open("a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return -1, "".join(output) + f"\n(timed out after {timeout:g} s)"
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:  # the interpreter ended: set -e stopped the shell
                code = self.process.wait(timeout=10)
                return code or 1, "".join(output) + self.pending.decode(errors="replace")
            self.pending += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clone_like(folder: Path) -> None:
    """A working folder that looks like a clone of the repository (links, nothing copied)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in {".git", ".leasefence", "site", "cdk.out"}:
            continue
        (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def _environment(state: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "LEASEFENCE_STATE_DIR": str(state),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "160",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    for name in (
        "LEASEFENCE_BASE_URL",
        "LEASEFENCE_TOKEN",
        "LEASEFENCE_LOCAL_JWT_SECRET",
        "VIRTUAL_ENV",
    ):
        env.pop(name, None)
    return env


#: A page needs a running stack when one of its blocks talks to one.
NEEDS_STACK = re.compile(
    r"LEASEFENCE_BASE_URL|LEASEFENCE_DYNAMODB_ENDPOINT|\$API\b|"
    r"leasefence (token|ops|job-types|controls|events|invoke|shadow|erase-tenant|publisher)\b"
)


def needs_stack(path: Path) -> bool:
    return any(NEEDS_STACK.search(expand_snippets(b.code)) for b in runnable(path))


@dataclass
class LocalStack:
    """Where a page's blocks run: a clone-like folder, its environment and (when the page needs
    one) a ``leasefence local`` of its own."""

    cwd: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    base_url: str = ""

    def wait_ready(self) -> bool:
        """True once it serves; False when it could not start (a port taken meanwhile by
        another process on this shared machine: another one is started instead)."""
        assert self.process and self.log
        deadline = time.monotonic() + 90
        while "Press Ctrl-C to stop." not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None:
                output = self.log.read_text(errors="replace")
                assert "cannot start" in output, output
                self.process = None  # nothing to stop or reap
                return False
            assert time.monotonic() < deadline, "leasefence local never became ready"
            time.sleep(0.1)
        return True

    def stop(self) -> None:
        if self.process:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGTERM)

    def reap(self) -> str | None:
        """None when it stopped cleanly (exit 0), else what went wrong."""
        if not self.process or not self.log:
            return None
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait()
        return None if code == 0 else f"exit {code}:\n" + self.log.read_text(errors="replace")


class Stacks:
    """Fresh stacks, one per page that needs one, each started while the page before runs (a
    stack takes seconds to start and to stop; neither is waited for in line)."""

    def __init__(self, folder: Path, needed: int) -> None:
        self.folder = folder
        self.needed = needed
        self.count = 0
        self.spare: LocalStack | None = None
        self.started: list[LocalStack] = []

    def _folder(self) -> Path:
        self.count += 1
        return self.folder / f"page-{self.count}"

    def plain(self) -> LocalStack:
        folder = self._folder()
        _clone_like(folder / "clone")
        return LocalStack(folder / "clone", _environment(folder / "state"))

    def _start(self) -> LocalStack:
        folder = self._folder()
        _clone_like(folder / "clone")
        env = _environment(folder / "state")
        api_port, ddb_port = _free_port(), _free_port()
        log = folder / "stack.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["leasefence", "local", "--port", str(api_port), "--dynamodb-port", str(ddb_port)],
                cwd=folder / "clone",
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        base_url = f"http://127.0.0.1:{api_port}"
        endpoint = f"http://127.0.0.1:{ddb_port}"
        env = {**env, "LEASEFENCE_BASE_URL": base_url, "LEASEFENCE_DYNAMODB_ENDPOINT": endpoint}
        stack = LocalStack(folder / "clone", env, process, log, base_url)
        self.started.append(stack)
        self.needed -= 1
        return stack

    def take(self) -> LocalStack:
        for _ in range(3):
            stack = self.spare or self._start()
            self.spare = self._start() if self.needed > 0 else None
            if stack.wait_ready():
                return stack
            self.needed += 1  # its replacement
        raise AssertionError("leasefence local could not start three times in a row")

    def close(self) -> list[str]:
        for stack in self.started:
            stack.stop()
        return [problem for stack in self.started if (problem := stack.reap())]


# --------------------------------------------------------------------------------------- tests

RUNNABLE = [p for p in documents() if runnable(p)]


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory):
    pool = Stacks(tmp_path_factory.mktemp("stacks"), needed=sum(map(needs_stack, RUNNABLE)))
    yield pool
    problems = pool.close()
    assert not problems, "leasefence local did not stop cleanly: " + "\n".join(problems)


@pytest.fixture
def local_stack(stacks: Stacks, document: Path):
    """A fresh ``leasefence local`` on free ports with its own state folder (for a page that
    talks to one), the environment and the clone-like folder the page's blocks run in."""
    stack = stacks.take() if needs_stack(document) else stacks.plain()
    yield stack
    stack.stop()


@pytest.mark.parametrize("document", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_every_block_runs_as_written(
    document: Path, local_stack: LocalStack, tmp_path: Path
) -> None:
    log = tmp_path / "blocks.log"
    sessions: dict[str, Session] = {}
    try:
        for number, block in enumerate(runnable(document)):
            code = expand_snippets(block.code)
            source = tmp_path / f"block-{number:02d}.{'sh' if block.kind == 'bash' else 'py'}"
            source.write_text(code, encoding="utf-8")
            if block.kind not in sessions:
                argv = (
                    ["bash", "--noprofile", "--norc"]
                    if block.kind == "bash"
                    else [sys.executable, "-u", "-c", _PYTHON_DRIVER]
                )
                sessions[block.kind] = Session(argv, local_stack.cwd, local_stack.env, log)
                if block.kind == "bash":
                    sessions["bash"].run(f"set -euo pipefail; echo {DONE} 0")
            command = f"source {source}; echo {DONE} 0" if block.kind == "bash" else str(source)
            status, output = sessions[block.kind].run(command)
            assert status == 0, (
                f"{block.where()} ({block.language}) failed with {status}:\n{code}\n--- output\n{output}"
            )
    finally:
        for session in sessions.values():
            session.close()


def test_skipped_blocks_are_few_and_say_why() -> None:
    skipped = [b for p in documents() for b in blocks(p) if b.skip and b.kind]
    assert all(len(b.skip or "") >= 10 for b in skipped), [b.where() for b in skipped]
    ran = sum(len(runnable(p)) for p in documents())
    assert len(skipped) <= max(10, ran // 4), f"{len(skipped)} skipped of {ran}: " + ", ".join(
        f"{b.where()} ({b.skip})" for b in skipped
    )


def test_the_readme_starts_in_five_minutes() -> None:
    """At most about 250 lines, the two commands first, and a quickstart that the test above runs."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 260
    first_block = blocks(ROOT / "README.md")[0]
    assert first_block.skip
    assert "make run" in first_block.code and "make test" in first_block.code
    assert len(runnable(ROOT / "README.md")) >= 2
    assert "sha256:..." not in text
