"""The runtime (``layers/leasefence``, exactly what the Lambda layer ships) imports nothing from the
tools (``leasefence_tools``: the CLI, the local stack, the bench, the torture run, the demo, the kit,
the fakes), statically and when every runtime module is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import leasefence
from tests.support.boundary import tool_imports

RUNTIME = Path(leasefence.__file__).resolve().parent
ROOT = RUNTIME.parents[1]


def test_no_runtime_module_imports_the_tools() -> None:
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) > 40
    assert tool_imports(files) == []


def test_the_handlers_import_no_tools() -> None:
    files = sorted((ROOT / "functions").rglob("*.py"))
    assert files
    assert tool_imports(files) == []


def test_the_scan_finds_each_kind_of_import(tmp_path: Path) -> None:
    """The static check could fail: each way of importing a tool module is found."""
    source = tmp_path / "m.py"
    source.write_text(
        textwrap.dedent(
            '''
        """Docstrings may name leasefence_tools.cli."""
        import importlib
        import leasefence_tools
        import leasefence_tools.cli as cli
        from leasefence_tools.local import tokens
        def lazy():
            from leasefence_tools.testing.faults import FaultyClient
            return importlib.import_module("leasefence_tools.kit"), __import__("leasefence_tools")
        import leasefence_toolsmith  # another package
        '''
        )
    )
    found = [line.split(": ", 1)[1] for line in tool_imports([source])]
    assert found == [
        "leasefence_tools",
        "leasefence_tools.cli",
        "leasefence_tools.local",
        "leasefence_tools.testing.faults",
        "leasefence_tools.kit",
        "leasefence_tools",
    ]


def test_importing_every_runtime_module_loads_no_tool() -> None:
    """In a fresh interpreter (no test plugin loaded): import each module of ``leasefence``, then
    look in ``sys.modules``."""
    modules = sorted(
        ".".join(("leasefence", *p.relative_to(RUNTIME).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for p in RUNTIME.rglob("*.py")
        if "__pycache__" not in p.parts
    )
    assert {"leasefence.settings", "leasefence.worker", "leasefence.api.app"} <= set(modules)
    script = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {modules!r}:
            importlib.import_module(name)
        print(json.dumps({{
            "loaded": sorted(n for n in sys.modules if n.startswith("leasefence.")),
            "tools": sorted(n for n in sys.modules if n.split(".")[0] == "leasefence_tools"),
        }}))
        """
    )
    env = {
        **os.environ,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "POWERTOOLS_METRICS_NAMESPACE": "LeaseFence",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(modules) - {"leasefence"} <= set(result["loaded"])
    assert result["tools"] == []


def test_the_tools_package_is_not_inside_the_runtime() -> None:
    import leasefence_tools

    tools = Path(leasefence_tools.__file__).resolve().parent
    assert RUNTIME not in tools.parents and tools.name == "leasefence_tools"
    assert not (RUNTIME / "leasefence_tools").exists()
