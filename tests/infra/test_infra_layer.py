"""The core layer ships the runtime package as it is, no tool is in it, and everything the functions
import is in it.

``prebuilt_layer`` (conftest) is ``LocalLayerBundler(requirements=()).build(...)``: the real
bundler's copy of ``layers/leasefence`` (pip only adds ``rfc8785``, checked by
``test_infra_app.py`` on the real bundle).
"""

from __future__ import annotations

import ast
import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from leasefence_infra import bundling
from leasefence_infra.bundling import (
    BYTECODE_PYTHON_ENV,
    PACKAGE_DIR,
    LocalLayerBundler,
    compile_bytecode,
    find_bytecode_python,
    is_cache,
    source_fingerprint,
)
from leasefence_infra.versions import locked_version
from tests.support.layer import MUST_NOT_SHIP, TOOLS_DIR, assert_runtime_package_only

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"

def _package(prebuilt_layer: Path) -> Path:
    return prebuilt_layer / "python" / "leasefence"


def test_layer_ships_the_runtime_package_only(prebuilt_layer: Path) -> None:
    assert_runtime_package_only(_package(prebuilt_layer))


def test_only_caches_and_compiled_files_are_left_out() -> None:
    """No exclude list: whatever is in the runtime package ships, caches and bytecode aside."""
    left_out = [Path(p) for p in ("api/__pycache__/x.pyc", "engine.pyc", ".mypy_cache/x.json",
                                  "__pycache__/engine.cpython-312.pyc", "x.pyo")]
    kept = [Path(p) for p in ("engine.py", "client.py", "worker/runtime.py", "targets/fenced_table.py",
                              "cli.py", "local/server.py", "kit/checks.py", "torture.py", "py.typed")]
    for rel in left_out:
        assert is_cache(rel), rel
    for rel in kept:
        assert not is_cache(rel), rel


def _leasefence_imports(path: Path) -> set[tuple[str, str | None]]:
    """(module, name) for every import of ``leasefence...`` in a file, at any depth (lazy ones too)."""
    found: set[tuple[str, str | None]] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {(a.name, None) for a in node.names if a.name.split(".")[0] == "leasefence"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "leasefence":
            found |= {(node.module, a.name) for a in node.names}
    return found


def _is_module(root: Path, dotted: str) -> bool:
    rel = Path(*dotted.split("."))
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def test_every_runtime_import_resolves_inside_the_layer(prebuilt_layer: Path) -> None:
    """Functions and shipped modules import nothing that the layer leaves out (lazy imports too)."""
    site = prebuilt_layer / "python"
    files = [*FUNCTIONS.rglob("*.py"), *(site / "leasefence").rglob("*.py")]
    files = [f for f in files if "tests" not in f.parts and "__pycache__" not in f.parts]
    assert len(files) > 20
    missing = []
    for path in files:
        for module, name in _leasefence_imports(path):
            if not _is_module(site, module):
                missing.append(f"{path.relative_to(ROOT) if ROOT in path.parents else path}: {module}")
            # `from leasefence.x import y`: y is an attribute, or a submodule that must be shipped.
            elif name and _is_module(PACKAGE_DIR.parent, f"{module}.{name}") and not _is_module(site, f"{module}.{name}"):
                missing.append(f"{path}: {module}.{name}")
    assert missing == []


def test_functions_import_from_the_layer_alone(prebuilt_layer: Path) -> None:
    """Import every handler (and the worker's runtime) with the layer first on sys.path, as in
    Lambda: each leasefence module comes from the layer, none is missing."""
    site = prebuilt_layer / "python"
    script = f"""
import sys
sys.path[:0] = [{str(FUNCTIONS)!r}, {str(site)!r}]
import api.handler, sweeper.handler, worker.handler, worker.demo_handlers, publisher.handler
import leasefence.worker, leasefence.worker.dispatch, leasefence.streams.publisher, leasefence.targets.fenced_table, leasefence.targets.same_table, leasefence.settings
outside = sorted(n for n, m in sys.modules.items() if n.split(".")[0] == "leasefence"
                 and not (getattr(m, "__file__", "") or "").startswith({str(site)!r}))
assert not outside, outside
print("ok", len([n for n in sys.modules if n.startswith("leasefence")]))
"""
    env = {**os.environ, "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "LeaseFence",
           "AWS_DEFAULT_REGION": "eu-west-1"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=prebuilt_layer, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")


def test_fingerprint_covers_every_file_but_caches(tmp_path: Path) -> None:
    pkg = tmp_path / "leasefence"
    (pkg / "local" / "__pycache__").mkdir(parents=True)
    (pkg / "engine.py").write_text("x = 1\n")
    (pkg / "local" / "server.py").write_text("z = 1\n")
    first = source_fingerprint(pkg, requirements=())
    (pkg / "local" / "__pycache__" / "server.cpython-312.pyc").write_bytes(b"\0")
    (pkg / "engine.pyc").write_bytes(b"\0")
    assert source_fingerprint(pkg, requirements=()) == first  # caches: same layer
    (pkg / "local" / "server.py").write_text("z = 2\n")
    second = source_fingerprint(pkg, requirements=())
    assert second != first  # any shipped file, in any folder
    (pkg / "torture.py").write_text("t = 1\n")
    assert source_fingerprint(pkg, requirements=()) != second  # a new file too


@pytest.mark.parametrize("rel", sorted(MUST_NOT_SHIP))
def test_the_tools_live_in_their_own_package(rel: str) -> None:
    """What used to be excluded from the layer is not in the runtime package at all."""
    assert not (PACKAGE_DIR / rel).exists()
    assert (TOOLS_DIR / MUST_NOT_SHIP[rel]).exists()


def test_bundling_accepts_manylinux_2_28_wheels() -> None:
    """Issue 12: a dependency published only for manylinux_2_28 (glibc 2.28+, which Lambda's
    Amazon Linux 2023 python3.12 runtime has) must not be refused by the layer build."""
    from leasefence_infra.bundling import PIP_PLATFORM_ARGS

    platforms = [PIP_PLATFORM_ARGS[i + 1] for i, arg in enumerate(PIP_PLATFORM_ARGS) if arg == "--platform"]
    assert platforms == ["manylinux2014_aarch64", "manylinux_2_28_aarch64"]


# ----------------------------------------------------------------------------- bytecode

TAG = sys.implementation.cache_tag


def _pyc_flags(pyc: Path) -> int:
    """The PEP 552 flags of a pyc: bit 0 hash-based, bit 1 check the source."""
    return int.from_bytes(pyc.read_bytes()[4:8], "little")


def test_bytecode_is_reproducible_unchecked_and_names_the_lambda_path(tmp_path: Path) -> None:
    """/opt is read-only in Lambda: a module without a pyc there is compiled at every cold start.
    The layer's pycs are hash-based and unchecked (no timestamp, no source read at import), the
    same bytes on every build, and their code names the file where Lambda mounts it."""
    site = tmp_path / "python"
    (site / "dep").mkdir(parents=True)
    (site / "dep" / "__init__.py").write_text("def f():\n    return 1\n")
    (site / "single.py").write_text("Y = 2\n")
    compile_bytecode(site, sys.executable)
    pyc = site / "dep" / "__pycache__" / f"__init__.{TAG}.pyc"
    assert (site / "__pycache__" / f"single.{TAG}.pyc").is_file()
    assert _pyc_flags(pyc) == 0b01
    assert marshal.loads(pyc.read_bytes()[16:]).co_filename == "/opt/python/dep/__init__.py"
    first = pyc.read_bytes()
    shutil.rmtree(pyc.parent)
    os.utime(site / "dep" / "__init__.py", (1, 1))  # another mtime: the same pyc
    compile_bytecode(site, sys.executable)
    assert pyc.read_bytes() == first


def test_the_layer_compiles_its_dependencies_not_leasefence(tmp_path: Path) -> None:
    """With a bytecode interpreter (here this one; the real target is CPython 3.12), every
    installed distribution ships its pycs; the leasefence package ships as source, as before."""
    pin = f"rfc8785=={locked_version('rfc8785')}"
    site = LocalLayerBundler(requirements=(pin,), bytecode_python=sys.executable).build(tmp_path)
    assert (site / "rfc8785" / "__pycache__" / f"__init__.{TAG}.pyc").is_file()
    assert not list((site / "leasefence").rglob("*.pyc"))
    assert_runtime_package_only(site / "leasefence")


def test_without_a_python_312_the_layer_ships_sources_and_says_so(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    pin = f"rfc8785=={locked_version('rfc8785')}"
    bundler = LocalLayerBundler(requirements=(pin,), bytecode_python="")
    assert bundler.bytecode is None
    site = bundler.build(tmp_path)
    assert (site / "rfc8785" / "__init__.py").is_file()
    assert not list(site.rglob("*.pyc"))
    assert "no CPython 3.12 found to compile" in capfd.readouterr().err


def test_bytecode_python_must_make_lambdas_bytecode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only an interpreter whose bytecode is CPython 3.12's is used (pycs of another version are
    ignored by Lambda's Python: they would cost size and save nothing)."""
    monkeypatch.setenv(BYTECODE_PYTHON_ENV, sys.executable)
    assert find_bytecode_python() == (sys.executable if TAG == "cpython-312" else None)
    monkeypatch.setenv(BYTECODE_PYTHON_ENV, str(tmp_path / "no-such-python"))
    assert find_bytecode_python() is None
    monkeypatch.setattr(bundling, "LAMBDA_CACHE_TAG", TAG)  # as if this interpreter were 3.12
    monkeypatch.setenv(BYTECODE_PYTHON_ENV, sys.executable)
    assert find_bytecode_python() == sys.executable
    assert LocalLayerBundler(requirements=()).bytecode == TAG


def test_fingerprint_tracks_the_bytecode_and_the_pip_arguments(tmp_path: Path) -> None:
    pkg = tmp_path / "leasefence"
    pkg.mkdir()
    (pkg / "engine.py").write_text("x = 1\n")
    reqs = ("rfc8785==0.1.4",)
    sources = source_fingerprint(pkg, reqs)
    assert source_fingerprint(pkg, reqs, bytecode="cpython-312") != sources
    assert source_fingerprint(pkg, reqs, ("--no-deps",)) != sources
    assert source_fingerprint(pkg, (), bytecode="cpython-312") == source_fingerprint(pkg, ())  # nothing compiled


def test_the_core_layer_installs_exactly_its_list() -> None:
    """The core layer lists every dependency itself (--no-deps, from the cache only); a worker's
    package layer lets pip resolve its requirements' dependencies."""
    core = LocalLayerBundler(bytecode_python="").pip_command(Path("/out"))
    assert "--no-deps" in core and "--no-index" in core and "--find-links" in core
    package = LocalLayerBundler(requirements=("httpx==0.28.1",), resolve_dependencies=True, bytecode_python="")
    assert "--no-deps" not in package.pip_command(Path("/out"))
    assert "--no-deps" not in package.download_command()


def test_layer_requirements_are_pinned() -> None:
    from leasefence_infra.bundling import LAYER_REQUIREMENTS

    assert LAYER_REQUIREMENTS and all("==" in r for r in LAYER_REQUIREMENTS)
