"""The tests are a package: any folders collect together, in any order (``pytest tests/api
tests/tools/kit`` failed at collection when helpers were found through ``sys.path``).

The checks are static, so they cover every pair of folders at once; ``make test`` also collects a
few pairs for real (the ``collect`` target).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

TESTS = ROOT / "tests"


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in _python_files()}
    assert TESTS in folders
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert missing == []


def test_helpers_are_imported_absolutely_never_through_sys_path() -> None:
    """No ``from conftest import``, no bare import of a sibling module (``api_helpers``,
    ``test_infra_app``): only ``tests.…``."""
    local_names = {p.stem for p in _python_files()} | {"conftest", "support"}
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{'.' * node.level}{node.module or ''}"]  # relative: not our style
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {names[0]}")
                continue
            else:
                continue
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno}: {n}"
                for n in names
                if n.split(".")[0] in local_names
            ]
    assert found == []


def test_plugins_are_declared_by_the_root_conftest_only() -> None:
    declaring = sorted(
        str(p.relative_to(ROOT))
        for p in TESTS.rglob("conftest.py")
        if "pytest_plugins" in p.read_text()
    )
    assert declaring == ["tests/conftest.py"]
