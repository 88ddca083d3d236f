"""The wall between the runtime (``leasefence``, what the Lambda layer ships) and the tools
(``leasefence_tools``): found from the source, not from a list."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

TOOLS = "leasefence_tools"


def _names_tools(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] == TOOLS  # type: ignore[union-attr]


def tool_imports(files: Iterable[Path]) -> list[str]:
    """``file:line: module`` for every import of the tools in ``files``, at any depth (lazy ones,
    ``TYPE_CHECKING`` ones, ``importlib.import_module("leasefence_tools...")`` and
    ``__import__`` with a literal name included). Docstrings and comments may name the tools."""
    found = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            modules: list[str | None] = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module]
            elif (
                isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            ):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                    modules = [node.args[0].value]
            found += [f"{path}:{node.lineno}: {m}" for m in modules if _names_tools(m)]
    return found
