"""The ``pip install`` lines of the README and the docs, and which of them a test runs.

leasefence is on no package index yet, so a ``pip install`` line in the docs either is run by a
test or says what it assumes. The convention (checked by ``tests/docs/test_pip_install_lines.py``):

* **Run by a test.** Every ``pip install`` line inside a ``bash`` block of an ``INSTALL_PAGES``
  page (the install guide and the construct library's Install section) is run by
  ``tests/infra/test_infra_adopter.py`` against the wheel ``make dist`` built, in a fresh venv,
  with its placeholders (``PLACEHOLDERS``) replaced by a copy of the sources.
* **Says what it assumes.** Anywhere else, the paragraph or block holding the line follows an HTML
  comment ``<!-- pip-install: what it assumes -->`` (at least ten characters), and its visible
  words say the same to the reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT

#: The pages whose bash blocks' ``pip install`` lines the adopter test runs.
INSTALL_PAGES = (ROOT / "docs" / "installing.md", ROOT / "infra" / "README.md")
#: What the docs write for what a reader has, and what stands for it in the test.
PLACEHOLDERS = {
    "clone": "/path/to/clone",  # a clone of this repository (the test: a copy of its sources)
    "remote": "https://github.com/<org>/leasefence",  # where the reader's copy is hosted
    "ref": "<ref>",  # a tag or commit of it
}

PIP_INSTALL = re.compile(r"\bpip3? install\b")
ANNOTATION = re.compile(r"^\s*<!--\s*pip-install:\s*(?P<why>\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class PipInstall:
    path: Path
    line: int  # 1-based
    text: str  # the line, stripped
    language: str | None  # the fenced block's language, or None in prose
    assumes: str | None  # the reason of the pip-install comment it follows, or None

    @property
    def run_by_adopter_test(self) -> bool:
        return self.path in INSTALL_PAGES and self.language in {"bash", "sh", "shell"}

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The README, every page of docs/ (the generated reference too) and the construct library's
    README (docs/constructs.md includes it)."""
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        ROOT / "infra" / "README.md",
    ]


def pip_installs(path: Path) -> list[PipInstall]:
    """Every line of ``path`` that says ``pip install``, with its block's language and the
    ``pip-install`` comment it follows (the comment covers the next paragraph or block: up to a
    blank line outside a block, or to the end of the block right after it)."""
    found: list[PipInstall] = []
    fence: str | None = None
    language: str | None = None
    assumes: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence, language = match["fence"], (match["info"].strip().split() or [""])[0].lower()
            continue
        if fence is not None and line.strip().startswith(fence):
            fence, language, assumes = None, None, None
            continue
        if fence is None and (annotation := ANNOTATION.match(line)):
            assumes = annotation["why"]
            continue
        if fence is None and not line.strip():
            assumes = None
            continue
        if PIP_INSTALL.search(line):
            found.append(PipInstall(path, number, line.strip(), language, assumes))
    return found


def run_by_adopter_test() -> list[PipInstall]:
    """The lines the adopter test runs (in page order)."""
    return [i for page in INSTALL_PAGES for i in pip_installs(page) if i.run_by_adopter_test]
