"""The docs say one thing about the history, and what the code does (issue 34, finding 7): the
README and the guarantees page state it in the same words, with the bound and the retention the
code has, and every page that counts the newest entries kept counts what the code keeps."""

from __future__ import annotations

import re
from pathlib import Path

from leasefence import history
from leasefence.limits import DEFAULT_PAYLOAD_RETENTION_DAYS

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/guarantees.md")


def history_statement(page: str) -> str:
    """The history's part of the page's "History and events" bullet, as one line."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found = re.search(
        r"^- \*\*History and events\.\*\* (.*?) Events are delivered", text, re.M | re.S
    )
    assert found, f"{page} has no 'History and events' bullet"
    return " ".join(found.group(1).split())


def test_the_readme_and_the_guarantees_say_the_same_of_the_history():
    readme, guarantees = (history_statement(page) for page in PAGES)
    assert readme == guarantees
    assert f"the {history.MAX_ENTRIES - 1} newest; `dropped` counts the entries between" in readme
    assert (
        f"payload retention after it ends ({DEFAULT_PAYLOAD_RETENTION_DAYS} days by default)"
        in readme
    )
    # Only a purge slims the history away, and an operation by reference has none.
    assert (
        "by reference (`payload_ref`) has no purge: its history stays as long as its identity"
        in readme
    )
    assert "every transition" not in readme  # the bound drops the middle of a long history


def test_every_page_that_counts_the_newest_entries_counts_what_the_code_keeps():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    counts = {
        (page.relative_to(ROOT).as_posix(), int(n))
        for page in pages
        for n in re.findall(r"\b(\d+) newest\b", page.read_text(encoding="utf-8"))
    }
    assert counts and {n for _, n in counts} == {history.MAX_ENTRIES - 1}, counts
