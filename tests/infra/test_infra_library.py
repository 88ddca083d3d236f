"""The construct as a library: tags on everything it creates, no dependency on cdk-nag, code found
through the import system, no import cycle between its modules."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import CfnResource, Stack, TagManager
from tests.support.infra import logical_id

import leasefence_infra
from leasefence_infra.service import COMPONENT_TAG, SERVICE_TAG

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(leasefence_infra.__file__).parent


def _rendered_tags(resource: dict[str, Any]) -> dict[str, str]:
    """A resource's tags, in whichever of CloudFormation's shapes its type uses."""
    properties = resource.get("Properties", {})
    for key in ("Tags", "UserPoolTags"):
        tags = properties.get(key)
        if isinstance(tags, list):
            return {t["Key"]: t["Value"] for t in tags}
        if isinstance(tags, dict):
            return dict(tags)
    return {}


@pytest.mark.parametrize("name", ["default", "full"])
def test_every_taggable_resource_of_the_service_is_tagged(synth, name: str) -> None:
    stack: Stack = synth.stacks[name]
    svc = stack.service
    template = synth.template_json(name)
    expected = {SERVICE_TAG: svc.node.path, **svc.props.tags}
    checked: dict[str, str] = {}
    for construct in svc.node.find_all():
        if isinstance(construct, CfnResource) and TagManager.is_taggable(construct):
            lid = logical_id(stack, construct)
            tags = _rendered_tags(template["Resources"][lid])
            assert expected.items() <= tags.items(), (lid, tags)
            assert tags.get(COMPONENT_TAG) in {"storage", "api", "sweeper", "worker", "dispatch",
                                               "publisher", "monitoring", "user-pool", "catalogue"}, lid
            checked[lid] = template["Resources"][lid]["Type"]
    types = set(checked.values())
    assert {"AWS::Lambda::Function", "AWS::IAM::Role", "AWS::DynamoDB::Table", "AWS::S3::Bucket",
            "AWS::SQS::Queue", "AWS::SNS::Topic", "AWS::Logs::LogGroup", "AWS::SecretsManager::Secret",
            "AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Stage", "AWS::KMS::Key"} <= types
    if name == "full":
        assert svc.props.tags == {"team": "payments", "cost-center": "42"}
        assert "AWS::Cognito::UserPool" in types
    # The components are where they say they are.
    table = logical_id(stack, svc.table)
    assert _rendered_tags(template["Resources"][table])[COMPONENT_TAG] == "storage"
    api_fn = logical_id(stack, svc.api.function.function)
    assert _rendered_tags(template["Resources"][api_fn])[COMPONENT_TAG] == "api"
    # Event source mappings and the bus take tags through CDK's newer interface (ITaggableV2).
    own = [(svc.publisher.event_source_mapping, "publisher"), (svc.publisher.function.function, "publisher")]
    for construct, component in ((svc.dispatch.event_source_mapping, "dispatch"),
                                 # One stream reader (default): the worker's function and mapping.
                                 *(own if svc.publisher.event_source_mapping is not None else []),
                                 (svc.publisher.failure_bucket, "publisher"),
                                 *([(svc.event_bus, "publisher")] if svc.event_bus else [])):
        tags = _rendered_tags(template["Resources"][logical_id(stack, construct)])
        assert expected.items() <= tags.items() and tags[COMPONENT_TAG] == component, (construct, tags)


def test_the_library_imports_and_synthesizes_without_cdk_nag(tmp_path: Path, prebuilt_layer: Path) -> None:
    """cdk-nag is a [nag] extra: with it made unimportable, the library still imports, the
    service still synthesizes, and its template carries no cdk-nag metadata."""
    script = f"""
import importlib.abc, json, sys

class NoCdkNag(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "cdk_nag":
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, NoCdkNag())
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from leasefence_infra import LeaseFenceService
from leasefence_infra.nag import nag_installed

assert not nag_installed()
app = App(outdir={str(tmp_path)!r})
stack = Stack(app, "NoNag")
LeaseFenceService(stack, "Jobs", jwt_issuer="https://idp.example.com/", jwt_audience=["leasefence"],
                  create_encryption_key=True, tenant_isolation=True,
                  core_layer=lambda_.Code.from_asset({str(prebuilt_layer)!r}))
app.synth()
assert not [m for m in sys.modules if m.split(".")[0] == "cdk_nag"]
print(json.dumps({{"ok": True}}))
"""
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    template = json.loads((tmp_path / "NoNag.template.json").read_text())
    assert len(template["Resources"]) > 50
    assert "cdk_nag" not in json.dumps(template)


def test_functions_are_found_inside_the_package() -> None:
    """The handlers come from leasefence_infra._functions (the link to functions/ in a checkout,
    a copy in a wheel), never from a path relative to a repository."""
    from leasefence_infra.assets import functions_dir

    found = functions_dir()
    assert (found / "api" / "handler.py").is_file() and (found / "worker" / "demo_handlers.py").is_file()
    assert (PACKAGE / "_functions").resolve() == found
    assert found == (ROOT / "functions").resolve()  # this checkout's functions/, through the link


def _package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name below it (``monitoring.alarms``; a
    subpackage's ``__init__`` as the subpackage), without the link to functions/."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] == "_functions" or parts == ("__init__",):
            continue
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def test_no_module_reads_the_repository_layout() -> None:
    sources = {name: path.read_text() for name, path in _package_modules().items()}
    assert len(sources) > 15 and "monitoring.alarms" in sources
    for name, text in sources.items():
        assert not re.search(r"REPO_ROOT|parents\[|sys\.path\.(insert|append)|__file__", text), name


def _local_imports(name: str, path: Path) -> set[str]:
    """The package's modules that ``name`` imports relatively (``from .x`` / ``from ..x``)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            base = package[: len(package) - (node.level - 1)]
            found.add(".".join([*base, node.module]))
    return found


def test_module_imports_have_no_cycle() -> None:
    modules = _package_modules()
    graph = {name: _local_imports(name, path) for name, path in modules.items()}
    assert graph["monitoring.construct"] >= {"api", "sweeper", "monitoring.alarms"}
    assert set().union(*graph.values()) <= set(modules), "an import the graph cannot place"
    # Nothing the service is made of imports it back (only the example stack uses it).
    assert [m for m, deps in graph.items() if "service" in deps] == ["stack"]
    visiting: set[str] = set()
    done: set[str] = set()

    def visit(module: str, trail: tuple[str, ...]) -> None:
        assert module not in visiting, f"import cycle: {' -> '.join((*trail, module))}"
        if module in done:
            return
        visiting.add(module)
        for dependency in graph.get(module, ()):
            visit(dependency, (*trail, module))
        visiting.discard(module)
        done.add(module)

    for module in graph:
        visit(module, ())


def test_the_constructs_take_limits_and_validation_never_the_engine() -> None:
    """The CDK imports the contract's limits and validation (``leasefence.limits``,
    ``leasefence.validation``), never the engine: synthesis loads no transition code."""
    import ast

    root = Path(__file__).resolve().parents[2] / "infra" / "leasefence_infra"
    found = []
    for path in root.rglob("*.py"):
        if "_functions" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{path.name}: {n}" for n in names if n.startswith("leasefence.engine")]
    assert found == []
