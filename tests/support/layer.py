"""What the core layer must hold, and must not: shared by the layer's tests and the example app's."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from leasefence_infra.bundling import PACKAGE_DIR, LocalLayerBundler, is_cache
from tests.support import ROOT
from tests.support.boundary import tool_imports

#: What the worker (and the other functions) need, spelled out.
MUST_SHIP = (
    "engine/_engine.py",
    "worker/_runtime.py",
    "worker/handler.py",
    "worker/backend.py",
    "targets/fenced_table.py",
    "targets/same_table.py",
    "settings.py",
    "observability.py",
    "api/app.py",
)
#: The tools (leasefence_tools) as they were named inside the runtime package before they moved out
#: of it: none of these may come back (old name -> where it lives now, under tools/leasefence_tools).
MUST_NOT_SHIP = {
    "local": "local",
    "cli.py": "cli",
    "demo": "demo",
    "bench": "bench",
    "faults.py": "testing/faults.py",
    "kit": "kit",
    "torture": "torture",
    "auth.py": "local/tokens.py",
}
TOOLS_DIR = ROOT / "tools" / "leasefence_tools"


def assert_runtime_package_only(package: Path) -> None:
    """The layer's ``leasefence`` tree: the runtime modules, every one of them, and no tool."""
    for rel in MUST_SHIP:
        assert (package / rel).is_file(), rel
    for rel in MUST_NOT_SHIP:
        assert not (package / rel).exists(), rel
    assert not list(package.glob("torture*"))
    assert not list(package.rglob("__pycache__")) and not list(package.rglob("*.pyc"))
    # The source package is shipped as it is: every file of it, nothing else.
    source = {
        p.relative_to(PACKAGE_DIR)
        for p in PACKAGE_DIR.rglob("*")
        if p.is_file() and not is_cache(p.relative_to(PACKAGE_DIR))
    }
    assert {p.relative_to(package) for p in package.rglob("*") if p.is_file()} == source
    # And nothing in it imports the tools.
    assert tool_imports(sorted(package.rglob("*.py"))) == []


def prebuilt_layer(out: Path) -> Path:
    """The core layer tree in ``out`` without pip: the real bundler's copy of the package (same
    exclusions), plus the venv's rfc8785 where pip would have put the wheel. A synth that takes
    it (``core_layer=lambda_.Code.from_asset(str(out))``) needs no network and no wheel cache."""
    site = LocalLayerBundler(requirements=()).build(out)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    spec = importlib.util.find_spec("rfc8785")
    assert spec is not None and spec.origin, "rfc8785 must be installed in the venv"
    shutil.copytree(Path(spec.origin).parent, site / "rfc8785", ignore=ignore)
    return out
