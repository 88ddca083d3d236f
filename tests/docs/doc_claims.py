"""What a doc block's comments say it prints, and whether it did.

The convention (docs/contributing.md, "The documentation"), which a reader takes for plain
comments:

- **Shell.** A command that shows an HTTP status prints it with ``curl ... -w '  HTTP
  %{http_code}\\n'`` (the body, then ``  HTTP 409`` on the same line), and the comment at the end
  of that command (its last line, when it continues over several) starts with that status:
  ``# 201``, ``# 409 payload_conflict``, ``# 200 created=false: a replay``. The words after the
  status and before the first colon are values the body holds: a bare word is a string value
  somewhere in the body (an error code, a state), ``key=value`` a field of that name with that
  value (JSON: ``false``, ``1``, ``"x"``). After the colon the comment is prose. Every printed
  ``HTTP nnn`` needs such a comment, and such a comment needs a printed status.
- **Python.** A ``print(...)`` with a comment on its line prints exactly what the comment says:
  ``print(op.state)  # succeeded`` (prose goes on the line above).

The test runs each shell block with a DEBUG trap that marks, before each command of the block,
the line it starts on (:func:`instrumented_shell`), so that what each command printed is known
(:func:`shell_outputs`); the Python session records each ``print`` with its line
(:data:`PRINT_RECORDER`). :func:`shell_problems` and :func:`python_problems` compare.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

#: Printed before each command of a shell block: ``\x1e<line>\x1e`` (no newline, so that it
#: never splits the line a body and its ``HTTP nnn`` share).
MARK = "\x1e"
MARKS = re.compile(MARK + r"(\d+)" + MARK)
#: What ``-w '  HTTP %{http_code}\n'`` prints after the body.
HTTP = re.compile(r"^(?P<body>.*?)\s*HTTP (?P<status>\d{3})\s*$")
STATUS_COMMENT = re.compile(r"^#\s*(?P<status>\d{3})\b(?P<rest>.*)$")


def comment_of(line: str) -> str | None:
    """The comment at the end of a shell line (``# ...``, outside quotes), or None."""
    quote: str | None = None
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i:].strip()
    return None


def claims(comment: str) -> list[str]:
    """The checked words of a comment: up to its first colon (a colon inside ``key=value``'s
    value is kept: ``note="a:b"`` is not a thing these docs write)."""
    head = re.split(r":(?:\s|$)", comment, maxsplit=1)[0]
    return [word for word in re.split(r"[\s,]+", head) if word]


@dataclass(frozen=True)
class Command:
    """One command of a shell block as written: its lines (1-based, the continuation lines
    joined) and the comment on its last line."""

    first: int
    last: int
    comment: str | None


def commands(code: str) -> list[Command]:
    """Every logical line of a block (lines ending in a backslash continue), with its comment."""
    found: list[Command] = []
    lines = code.splitlines()
    i = 0
    while i < len(lines):
        j = i
        while lines[j].endswith("\\") and j + 1 < len(lines):
            j += 1
        found.append(Command(i + 1, j + 1, comment_of(lines[j])))
        i = j + 1
    return found


def instrumented_shell(code: str) -> str:
    """The block as it runs: a DEBUG trap that marks each command's line first (bash reports a
    command continued over lines by its first line), removed at the end. Functions and command
    substitutions inherit no DEBUG trap, so only the block's own commands are marked."""
    trap = 'trap \'printf "\\036%s\\036" "$((LINENO - 1))"\' DEBUG'
    return f"{trap}\n{code}\ntrap - DEBUG\n"


def shell_outputs(output: str) -> dict[int, str]:
    """What each marked line printed (by the first line of its command), in order."""
    parts = MARKS.split(output)
    printed: dict[int, str] = {}
    for line, text in zip(parts[1::2], parts[2::2], strict=True):
        printed[int(line)] = printed.get(int(line), "") + text
    return printed


def _values(body: Any) -> Iterator[tuple[str | None, Any]]:
    """Every (key, value) pair of a JSON document, nested ones too (key None: a list item)."""
    if isinstance(body, dict):
        for key, value in body.items():
            yield key, value
            yield from _values(value)
    elif isinstance(body, list):
        for item in body:
            yield None, item
            yield from _values(item)


def _holds(body: Any, word: str) -> bool:
    if "=" in word:
        key, _, raw = word.partition("=")
        try:
            wanted = json.loads(raw)
        except ValueError:
            wanted = raw
        return any(k == key and v == wanted for k, v in _values(body))
    return any(isinstance(v, str) and v == word for _, v in _values(body))


def shell_problems(code: str, output: str, where: str, fence: int = 0) -> list[str]:
    """Each command whose printed status or body disagrees with its comment, or that prints a
    status its comment does not state (or states one it does not print). ``where`` and
    ``fence`` (the file and the line of the block's opening fence) place each problem."""
    printed = shell_outputs(output)
    problems: list[str] = []
    for command in commands(code):
        text = "".join(printed.get(line, "") for line in range(command.first, command.last + 1))
        statuses = [m for m in map(HTTP.match, text.splitlines()) if m]
        stated = STATUS_COMMENT.match(command.comment or "")
        at = f"{where}:{fence + command.first}"
        if not stated:
            if statuses:
                problems.append(f"{at}: prints HTTP {statuses[0]['status']}; say it: `# nnn`")
            continue
        if not statuses:
            problems.append(
                f"{at}: its comment says {stated['status']}, it printed no status "
                f"(curl ... -w '  HTTP %{{http_code}}\\n'):\n{text}"
            )
            continue
        words = claims(stated["rest"])
        for got in statuses:  # one, or one per turn of a loop
            if got["status"] != stated["status"]:
                problems.append(f"{at}: comment says {stated['status']}, printed {got.group(0)}")
                continue
            if not words:
                continue
            try:
                body = json.loads(got["body"])
            except ValueError:
                problems.append(
                    f"{at}: comment names {words}, the body is no JSON: {got['body']!r}"
                )
                continue
            missing = [word for word in words if not _holds(body, word)]
            if missing:
                problems.append(f"{at}: the body holds no {missing}: {got['body']}")
    return problems


#: Set as ``print`` in the Python session's namespace: prints as ``print`` does and records
#: (file, line, text) of each call made from a block's own code in ``__printed__``.
PRINT_RECORDER = """
import builtins as _b, io as _io, sys as _sys

__printed__ = []

def print(*args, sep=" ", end="\\n", file=None, flush=False):
    caller = _sys._getframe(1)
    text = _io.StringIO()
    _b.print(*args, sep=sep, end="", file=text)
    __printed__.append((caller.f_code.co_filename, caller.f_lineno, text.getvalue()))
    _b.print(*args, sep=sep, end=end, file=file, flush=flush)
"""


def _comments(code: str) -> dict[int, str]:
    """The comment of each line of Python code, by line number (1-based)."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def python_problems(
    code: str, printed: list[tuple[str, int, str]], path: str, where: str, fence: int = 0
) -> list[str]:
    """Each ``print(...)  # value`` line that printed something else (or nothing). The whole
    comment is the value (a payload's repr has colons of its own)."""
    problems: list[str] = []
    lines = code.splitlines()
    for number, comment in _comments(code).items():
        if not lines[number - 1].lstrip().startswith("print("):
            continue
        wanted = comment.lstrip("#").strip()
        got = [text for file, at, text in printed if file == path and at == number]
        if not got:
            problems.append(f"{where}:{fence + number}: says it prints {wanted!r}, printed nothing")
        elif any(text.strip() != wanted for text in got):
            problems.append(f"{where}:{fence + number}: says {wanted!r}, printed {got}")
    return problems
