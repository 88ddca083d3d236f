"""Every metric the runtime emits is a member of leasefence.metrics.Metric (the enum the alarms
are built from), named as a member at the call, and every member is emitted somewhere."""

from __future__ import annotations

import ast
from pathlib import Path

from leasefence.metrics import Metric

ROOT = Path(__file__).resolve().parents[2]
#: The runtime's emitting code: the layer's package (without the tools it still carries) and the
#: Lambda handlers.
TOOLS = {"cli.py", "local", "bench", "torture", "demo", "kit", "faults.py", "auth.py"}
SINKS = {"events", "_events", "record_event", "count"}


def _sources() -> list[Path]:
    package = ROOT / "layers" / "leasefence"
    found = [p for p in package.rglob("*.py") if p.relative_to(package).parts[0] not in TOOLS]
    return found + sorted((ROOT / "functions").rglob("*.py"))


def _calls():
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                yield path, node


def _named(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Metric":
        return node.attr
    return None


def test_no_sink_is_called_with_a_bare_string():
    bare = []
    for path, call in _calls():
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        arguments = [call.args[0]] if name in SINKS and call.args else []
        arguments += [k.value for k in call.keywords if k.arg == "event" or (name == "add_metric" and k.arg == "name")]
        bare += [f"{path.relative_to(ROOT)}:{a.lineno}" for a in arguments
                 if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    assert bare == [], "name the metric as a leasefence.metrics.Metric member"


def test_every_member_is_emitted_somewhere():
    named = set()
    for path in _sources():
        named |= {n for node in ast.walk(ast.parse(path.read_text())) if (n := _named(node))}
    # Shadow mode names its counters after its stats keys: Metric("Shadow" + key.title()).
    shadow = {m.name for m in Metric if m.value.startswith("Shadow")}
    assert {m.name for m in Metric} - shadow - named == set()
    assert all(Metric("Shadow" + key.title()) for key in
               ("gaps", "executions", "conflicts", "duplicates", "claims", "overtaken", "recorded"))


def test_a_member_is_its_name_wherever_a_string_is_expected():
    assert Metric.CLAIMS == "Claims" and f"{Metric.CLAIMS}" == "Claims"
    assert len({m.value for m in Metric}) == len(Metric)
