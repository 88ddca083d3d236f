"""``snap_start=True`` (the full stack): SnapStart on published versions, one ``live`` alias per
function, and every invoker (API integration, stream mappings, schedules, asynchronous settings)
on the alias; without it (the default stack) none of that exists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import logical_id, props, resources
from leasefence_infra import LeaseFenceService
from leasefence_infra.function import LIVE_ALIAS, layers_fingerprint


def _service_functions(synth, name):
    """The engine's functions of one stack, by concern: ServiceFunction constructs."""
    service = synth.stacks[name].service
    functions = {
        "api": service.api.function,
        "sweeper": service.sweeper.function,
        "publisher": service.publisher.function,
    }
    if service.worker is not None:
        functions["worker"] = service.worker.function
    return functions


def _ref(stack, construct):
    return {"Ref": logical_id(stack, construct)}


def _names(value, lid):
    """Whether a template value is built from ``Ref lid`` (the alias ARN, or a name cut from it)."""
    return f'{{"Ref": "{lid}"}}' in json.dumps(value)


def test_every_engine_function_runs_snapstart_behind_its_live_alias(synth):
    stack = synth.stacks["full"]
    template = synth.template_json("full")
    functions = _service_functions(synth, "full")
    assert set(functions) == {"api", "sweeper", "publisher", "worker"}
    aliases = resources(template, "AWS::Lambda::Alias")
    versions = resources(template, "AWS::Lambda::Version")
    assert len(aliases) == len(versions) == len(functions)
    for concern, fn in functions.items():
        function_props = props(template, logical_id(stack, fn.function))
        assert function_props["SnapStart"] == {"ApplyOn": "PublishedVersions"}, concern
        alias_props = props(template, logical_id(stack, fn.alias))
        assert alias_props["Name"] == LIVE_ALIAS
        version_lid = alias_props["FunctionVersion"]["Fn::GetAtt"][0]
        assert versions[version_lid]["Properties"]["FunctionName"] == _ref(stack, fn.function)
        assert fn.target is fn.alias


def test_invokers_target_the_alias_not_latest(synth):
    stack = synth.stacks["full"]
    template = synth.template_json("full")
    functions = _service_functions(synth, "full")
    alias_refs = {concern: _ref(stack, fn.alias) for concern, fn in functions.items()}

    integrations = resources(template, "AWS::ApiGatewayV2::Integration").values()
    assert len(integrations) == 2  # the JWT API's and the IAM API's, into one function
    assert all(i["Properties"]["IntegrationUri"] == alias_refs["api"] for i in integrations)
    # API Gateway may invoke the alias (the permission names it, not the unqualified function).
    api_permissions = [
        p["Properties"] for p in resources(template, "AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
    ]
    assert api_permissions and all(p["FunctionName"] == alias_refs["api"] for p in api_permissions)

    mappings = [
        m["Properties"]["FunctionName"] for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
    ]
    assert len(mappings) == 2
    assert any(_names(m, alias_refs["publisher"]["Ref"]) for m in mappings)
    assert any(_names(m, alias_refs["worker"]["Ref"]) for m in mappings)
    assert all(m["Fn::Join"][1][-1] == f":{LIVE_ALIAS}" for m in mappings)  # function:live

    schedules = [s["Properties"]["Target"]["Arn"] for s in resources(template, "AWS::Scheduler::Schedule").values()]
    assert sorted(s["Ref"] for s in schedules) == sorted([alias_refs["sweeper"]["Ref"], alias_refs["worker"]["Ref"]])

    # Retries and on-failure queues of the scheduled (asynchronous) invocations are the alias's.
    invoke_configs = [c["Properties"] for c in resources(template, "AWS::Lambda::EventInvokeConfig").values()]
    assert sorted(c["FunctionName"]["Ref"] for c in invoke_configs) == sorted(
        logical_id(stack, functions[c].function) for c in ("sweeper", "worker")
    )
    for config in invoke_configs:
        owner = next(c for c in ("sweeper", "worker") if config["FunctionName"] == _ref(stack, functions[c].function))
        assert _names(config["Qualifier"], alias_refs[owner]["Ref"]), config["Qualifier"]


def test_without_snap_start_nothing_is_published(synth):
    template = synth.template_json("default")
    assert resources(template, "AWS::Lambda::Alias") == {}
    assert resources(template, "AWS::Lambda::Version") == {}
    assert all("SnapStart" not in f["Properties"] for f in resources(template, "AWS::Lambda::Function").values())
    for fn in _service_functions(synth, "default").values():
        assert fn.alias is None and fn.target is fn.function


# ----------------------------------------------------------------------------- upgrades reach the functions

#: The feature flag an adopter's cdk.json may lack (this repository's has it on).
RECOGNIZE_LAYER_VERSION = "@aws-cdk/aws-lambda:recognizeLayerVersion"


def _published_versions(layer_dir: Path, flag: bool) -> dict[str, str]:
    """Logical id of the version each `live` alias points at, by function, in an app whose
    recognizeLayerVersion flag is ``flag``."""
    app = App(context={RECOGNIZE_LAYER_VERSION: flag})
    stack = Stack(app, "SnapAdopter")
    svc = LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://issuer.example.com/",
                            jwt_audience=["a"], snap_start=True,
                            core_layer=lambda_.Code.from_asset(str(layer_dir)))
    template = Template.from_stack(stack).to_json()
    functions = {"api": svc.api.function, "sweeper": svc.sweeper.function, "publisher": svc.publisher.function}
    return {
        concern: props(template, logical_id(stack, fn.alias))["FunctionVersion"]["Fn::GetAtt"][0]
        for concern, fn in functions.items()
    }


@pytest.fixture(scope="module")
def changed_layer(prebuilt_layer: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core layer with one module changed (a new engine release)."""
    out = tmp_path_factory.mktemp("core-layer-changed") / "layer"
    shutil.copytree(prebuilt_layer, out)
    (engine,) = out.rglob("leasefence/engine/_engine.py")
    engine.write_text(engine.read_text() + "\n# the next release\n")
    return out


def test_a_core_layer_change_publishes_new_versions_without_the_feature_flag(prebuilt_layer, changed_layer):
    """Without recognizeLayerVersion (an adopter's cdk.json), CDK alone would keep the version's
    logical id when only a layer changed: no new version, `live` keeps the old engine."""
    before = _published_versions(prebuilt_layer, flag=False)
    after = _published_versions(changed_layer, flag=False)
    assert set(before) == set(after) == {"api", "sweeper", "publisher"}
    for concern in before:
        assert before[concern] != after[concern], f"{concern}: a layer change published no new version"


def test_layers_fingerprint_follows_content_and_imported_arns() -> None:
    app = App()
    stack = Stack(app, "Fingerprints")
    root = Path(__file__).resolve().parents[2]
    one = lambda_.LayerVersion(stack, "One", code=lambda_.Code.from_asset(str(root / "events")))
    same = lambda_.LayerVersion(stack, "Same", code=lambda_.Code.from_asset(str(root / "events")))
    other = lambda_.LayerVersion(stack, "Other", code=lambda_.Code.from_asset(str(root / "docs")))
    imported = lambda_.LayerVersion.from_layer_version_arn(stack, "Imp", "arn:aws:lambda:eu-west-1:1:layer:x:3")
    newer = lambda_.LayerVersion.from_layer_version_arn(stack, "Newer", "arn:aws:lambda:eu-west-1:1:layer:x:4")
    assert layers_fingerprint([one]) == layers_fingerprint([same])  # the same content, not the id
    assert layers_fingerprint([one]) != layers_fingerprint([other])
    assert layers_fingerprint([one, imported]) != layers_fingerprint([one, newer])
