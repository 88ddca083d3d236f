"""Every shell and Python block of the README and of the guides runs, in order, as written, and
prints what its comments say (the convention: ``tests/docs/doc_claims.py``).

The five-minute path (the README, then docs/getting-started.md) runs on one stack started as
``make run`` starts it (the options of the Makefile's ``run`` recipe, samples included, on free
ports and a state folder of the test's), in one bash and one Python session. Each other Markdown
file with runnable blocks gets a fresh ``leasefence local`` (free ports, its own state folder).
Each gets a fresh working folder that looks like a clone: every top-level entry of the
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
import json
import os
import re
import select
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.doc_claims import (
    MARKS,
    PRINT_RECORDER,
    instrumented_shell,
    python_problems,
    shell_problems,
)

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

    @property
    def page(self) -> str:
        return str(self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path)

    def where(self) -> str:
        return f"{self.page}:{self.line}"


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
    import json, sys, traceback
    namespace = {{"__name__": "__main__"}}
    exec({PRINT_RECORDER!r}, namespace)
    for line in sys.stdin:
        path = line.strip()
        namespace["__printed__"].clear()
        try:
            with open(path, encoding="utf-8") as handle:
                exec(compile(handle.read(), path, "exec"), namespace)
            status = 0
        except SystemExit as stop:
            status = 0 if stop.code in (None, 0) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        with open(path + ".printed.json", "w", encoding="utf-8") as handle:
            json.dump(namespace["__printed__"], handle)
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
                if MARKS.sub("", line).startswith(DONE):  # after the block's last mark
                    done = line.index(DONE)
                    return int(line[done:].split()[1]), "".join(output) + line[:done]
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


def make_run_options() -> list[str]:
    """The options ``make run`` gives ``leasefence local`` (read from the Makefile's ``run``
    recipe, so that the stack the five-minute path is tested on cannot drift from it)."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    recipe = re.search(r"^run:[^\n]*\n((?:\t[^\n]*\n?)+)", text, re.M)
    assert recipe, "the Makefile has no `run` target with a recipe"
    for line in recipe[1].splitlines():
        found = re.search(r"leasefence local\b(?P<options>.*)$", line)
        if found:
            # $(ARGS) is empty unless a person passes more options (`make run ARGS=...`).
            options = shlex.split(found["options"].replace("$(ARGS)", ""))
            assert not any("$" in option for option in options), (
                f"`make run` passes make variables to leasefence local ({line.strip()}): "
                "teach make_run_options to expand them"
            )
            return options
    raise AssertionError("the `run` recipe starts no `leasefence local`:\n" + recipe[1])


def _clone_like(folder: Path) -> None:
    """A working folder that looks like a clone of the repository (links, nothing copied)."""
    folder.mkdir(parents=True, exist_ok=True)
    for entry in ROOT.iterdir():
        if entry.name in {".git", ".leasefence", "site", "cdk.out"}:
            continue
        (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def _environment() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "160",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    for name in (
        "LEASEFENCE_BASE_URL",
        "LEASEFENCE_TOKEN",
        "LEASEFENCE_LOCAL_JWT_SECRET",
        "LEASEFENCE_STATE_DIR",
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
    """Where blocks run: a clone-like folder, its environment and (when they need one) a
    ``leasefence local`` of its own."""

    cwd: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    state: Path | None = None  # its state folder
    base_url: str = ""

    def wait_ready(self) -> bool:
        """True once it serves (its banner ends with "Press Ctrl-C to stop.": printed after the
        samples, once the commands can find it, and right before it handles SIGTERM); False when
        it could not start (a port taken meanwhile by another process on this shared machine:
        another one is started instead)."""
        assert self.process and self.log
        deadline = time.monotonic() + 120
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


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


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
        return LocalStack(folder / "clone", {**_environment(), "LEASEFENCE_STATE_DIR": str(folder)})

    def start(self, options: Sequence[str] = (), state_in_clone: bool = False) -> LocalStack:
        """``leasefence local OPTIONS`` on free ports in a clone-like folder of its own. Its state
        folder is the clone's ``.leasefence`` (``state_in_clone``: found from the clone as
        ``make run``'s is), else a folder beside it that ``LEASEFENCE_STATE_DIR`` names."""
        folder = self._folder()
        clone = folder / "clone"
        _clone_like(clone)
        state = clone / ".leasefence" if state_in_clone else folder / "state"
        env = (
            _environment()
            if state_in_clone
            else {**_environment(), "LEASEFENCE_STATE_DIR": str(state)}
        )
        api_port, ddb_port = _free_port(), _free_port()
        log = folder / "stack.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    "leasefence",
                    "local",
                    *options,
                    "--port",
                    str(api_port),
                    "--dynamodb-port",
                    str(ddb_port),
                    "--state-dir",
                    str(state),
                ],
                cwd=clone,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        base_url = f"http://127.0.0.1:{api_port}"
        endpoint = f"http://127.0.0.1:{ddb_port}"
        env = {**env, "LEASEFENCE_BASE_URL": base_url, "LEASEFENCE_DYNAMODB_ENDPOINT": endpoint}
        stack = LocalStack(clone, env, process, log, state, base_url)
        self.started.append(stack)
        return stack

    def take(self) -> LocalStack:
        for _ in range(3):
            if self.spare:
                stack = self.spare
            else:
                stack = self.start()
                self.needed -= 1
            self.spare = None
            if self.needed > 0:
                self.spare = self.start()
                self.needed -= 1
            if stack.wait_ready():
                return stack
            self.needed += 1  # its replacement
        raise AssertionError("leasefence local could not start three times in a row")

    def close(self) -> list[str]:
        for stack in self.started:
            stack.stop()
        return [problem for stack in self.started if (problem := stack.reap())]


class Reader:
    """One reader's terminal and Python session: the blocks of one page, or of several pages in
    order, run in one bash and one interpreter, each block's comments checked against what it
    printed (:mod:`tests.docs.doc_claims`)."""

    def __init__(self, stack: LocalStack, folder: Path) -> None:
        self.stack = stack
        self.folder = folder
        self.log = folder / "blocks.log"
        self.sessions: dict[str, Session] = {}
        self.count = 0

    def _session(self, kind: str) -> Session:
        if kind not in self.sessions:
            argv = (
                ["bash", "--noprofile", "--norc"]
                if kind == "bash"
                else [sys.executable, "-u", "-c", _PYTHON_DRIVER]
            )
            self.sessions[kind] = Session(argv, self.stack.cwd, self.stack.env, self.log)
            if kind == "bash":
                self.sessions["bash"].run(f"set -euo pipefail; echo {DONE} 0")
        return self.sessions[kind]

    def run(self, block: Block) -> None:
        """Run one block; fail when it fails or prints other than its comments say."""
        assert block.kind
        self.count += 1
        code = expand_snippets(block.code)
        source = self.folder / f"block-{self.count:02d}.{'sh' if block.kind == 'bash' else 'py'}"
        if block.kind == "bash":
            source.write_text(instrumented_shell(code), encoding="utf-8")
            status, output = self._session("bash").run(f"source {source}; echo {DONE} 0")
            problems = shell_problems(code, output, block.page, block.line)
        else:
            source.write_text(code, encoding="utf-8")
            status, output = self._session("python").run(str(source))
            printed = json.loads(_read(Path(f"{source}.printed.json")) or "[]")
            problems = python_problems(code, printed, str(source), block.page, block.line)
        shown = MARKS.sub("", output)
        assert status == 0, (
            f"{block.where()} ({block.language}) failed with {status}:\n{code}\n--- output\n{shown}"
        )
        assert not problems, "\n".join(problems) + f"\n--- output\n{shown}"

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()


# --------------------------------------------------------------------------------------- tests

#: The five-minute path: the README's quickstart, then the getting-started guide, in one
#: reader's terminal on the stack ``make run`` starts.
FIVE_MINUTES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
RUNNABLE = [p for p in documents() if runnable(p) and p not in FIVE_MINUTES]


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory):
    pool = Stacks(tmp_path_factory.mktemp("stacks"), needed=sum(map(needs_stack, RUNNABLE)))
    yield pool
    problems = pool.close()
    assert not problems, "leasefence local did not stop cleanly: " + "\n".join(problems)


def test_the_five_minute_path_runs_on_make_runs_stack(stacks: Stacks, tmp_path: Path) -> None:
    """``make run``'s stack (its very options, samples included; only the ports and the state
    folder are the test's), then every block of the README, then every block of
    docs/getting-started.md, in one bash and one Python session, as a reader pastes them."""
    options = make_run_options()
    for _ in range(3):
        stack = stacks.start(options, state_in_clone=True)
        if stack.wait_ready():
            break
    else:
        raise AssertionError("leasefence local could not start three times in a row")
    reader = Reader(stack, tmp_path)
    try:
        for page in FIVE_MINUTES:
            for block in runnable(page):
                reader.run(block)
    finally:
        reader.close()
        stack.stop()


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
    reader = Reader(local_stack, tmp_path)
    try:
        for block in runnable(document):
            reader.run(block)
    finally:
        reader.close()


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


def test_make_run_options_are_read_from_the_makefile() -> None:
    """The five-minute path's stack gets what ``make run`` passes (today: the samples)."""
    options = make_run_options()
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").split("\nrun:", 1)[1]
    assert "--samples" in options and "--samples" in recipe.split("\n\n", 1)[0]


HONEST = """
```bash
ANSWER='{"operation":{"state":"queued","fence":0},"created":false}'
printf '%s  HTTP 200\\n' "$ANSWER"   # 200 created=false queued: a replay
printf '%s  HTTP 409\\n' \\
       '{"error":{"code":"payload_conflict","message":"m"}}'   # 409 payload_conflict
for n in 1 2; do
  printf '  HTTP 204\\n'   # 204: nothing claimable
done
echo "no status here"   # prose that names a 200 later is not a claim
```

```python
state = "succeeded"
print(state)  # succeeded
print({"order": "A-2"}, 1)  # {'order': 'A-2'} 1
```
"""

LIES = {
    "another status": ("printf '{}  HTTP 422\\n'   # 201: created", "comment says 201"),
    "another code": (
        """printf '{"error":{"code":"stale_fence"}}  HTTP 409\\n'   # 409 payload_conflict""",
        "holds no ['payload_conflict']",
    ),
    "another value": (
        """printf '{"created":true}  HTTP 200\\n'   # 200 created=false: a replay""",
        "holds no ['created=false']",
    ),
    "a status unsaid": ("printf '{}  HTTP 404\\n'", "prints HTTP 404; say it"),
    "a status never printed": ("echo '{}'   # 200", "it printed no status"),
}


def _reader_of(tmp_path: Path, markdown: str) -> tuple[Reader, list[Block]]:
    page = tmp_path / "page.md"
    page.write_text(markdown, encoding="utf-8")
    stack = LocalStack(tmp_path, _environment())
    return Reader(stack, tmp_path), runnable(page)


def test_comments_that_tell_the_truth_pass(tmp_path: Path) -> None:
    reader, found = _reader_of(tmp_path, HONEST)
    try:
        for block in found:
            reader.run(block)
    finally:
        reader.close()


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_comment_that_lies_fails_its_block(tmp_path: Path, lie: str) -> None:
    """The checker of the convention (tests/docs/doc_claims.py) over a real bash session: a
    block whose comment states what it did not print fails, naming the line."""
    line, complaint = LIES[lie]
    reader, found = _reader_of(tmp_path, f"text\n\n```bash\necho first\n{line}\n```\n")
    try:
        with pytest.raises(AssertionError, match=re.escape(complaint)) as failure:
            reader.run(found[0])
    finally:
        reader.close()
    assert "page.md:5" in str(failure.value)  # the fence is line 3, the lying command line 5


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ('print("failed")  # succeeded', "says 'succeeded', printed ['failed']"),
        ("x = 1\nif x > 1:\n    print(x)  # 2", "says it prints '2', printed nothing"),
    ],
)
def test_a_python_print_that_lies_fails_its_block(
    tmp_path: Path, line: str, complaint: str
) -> None:
    reader, found = _reader_of(tmp_path, f"```python\n{line}\n```\n")
    try:
        with pytest.raises(AssertionError, match=re.escape(complaint)):
            reader.run(found[0])
    finally:
        reader.close()
