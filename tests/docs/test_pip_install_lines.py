"""No ``pip install`` line in the README or the docs promises what does not work: each one is run
by a test or says what it assumes (the convention: ``tests/support/pip_installs.py``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.pip_installs import (
    INSTALL_PAGES,
    PLACEHOLDERS,
    pages,
    pip_installs,
    run_by_adopter_test,
)


def test_every_pip_install_line_is_run_by_a_test_or_says_what_it_assumes() -> None:
    found = [i for page in pages() for i in pip_installs(page)]
    assert found, "the scan found no pip install line at all: is it still reading the docs?"
    unaccounted = [
        f"{i.where()}: {i.text}" for i in found if not i.run_by_adopter_test and not i.assumes
    ]
    assert unaccounted == [], (
        "pip install lines neither run by tests/infra/test_infra_adopter.py (a bash block of "
        + ", ".join(str(p.relative_to(ROOT)) for p in INSTALL_PAGES)
        + ") nor after a <!-- pip-install: what it assumes --> comment:\n"
        + "\n".join(unaccounted)
    )
    short = [f"{i.where()}: {i.assumes!r}" for i in found if i.assumes and len(i.assumes) < 10]
    assert short == [], "a pip-install comment says what the line assumes, in words"


def test_no_line_installs_leasefence_from_an_index() -> None:
    """``pip install 'leasefence[...]'`` with nothing after the name answers "No matching
    distribution" today, even after a comment: a reader copies the line, not the comment."""
    from_index = [
        f"{i.where()}: {i.text}"
        for page in pages()
        for i in pip_installs(page)
        if "leasefence[" in i.text and not any(s in i.text for s in (" @ ", ".whl", "/"))
    ]
    assert from_index == []


def test_the_adopter_test_has_every_form_to_run() -> None:
    """The install guide shows a wheel, a git URL and a clone, with the placeholders the adopter
    test replaces, and the wheel's name is the one ``make dist`` writes for this version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    lines = [i.text for i in run_by_adopter_test() if i.path == ROOT / "docs" / "installing.md"]
    wheel = f"dist/leasefence-{version}-py3-none-any.whl["
    assert any(wheel in line for line in lines), lines
    assert any(f"git+{PLACEHOLDERS['remote']}@{PLACEHOLDERS['ref']}" in line for line in lines)
    assert any(f"'{PLACEHOLDERS['clone']}[" in line for line in lines), lines
    for page in INSTALL_PAGES:
        named = [i for i in pip_installs(page) if "leasefence-" in i.text and ".whl" in i.text]
        stale = [i.where() for i in named if wheel not in i.text]
        assert stale == [], f"a wheel of another version than {version}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("```bash\npip install 'leasefence[cdk]'\n```\n", [("bash", None)]),
        (
            "<!-- pip-install: a uv venv and PyPI -->\nneeds pip (`uv pip install pip`)\n\n"
            "and then `pip install x`\n",
            [(None, "a uv venv and PyPI"), (None, None)],
        ),
        (
            "<!-- pip-install: your own index serves it -->\n```sh\npip install a\npip install b\n"
            "```\npip install c\n",
            [("sh", "your own index serves it")] * 2 + [(None, None)],
        ),
        ("No install here: pipx installs, pip-installed\n", []),
    ],
)
def test_the_scan_sees_blocks_prose_and_comments(
    tmp_path: Path, text: str, expected: list[tuple[str | None, str | None]]
) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    assert [(i.language, i.assumes) for i in pip_installs(page)] == expected
