"""Where the functions' Powertools comes from (``powertools_layer``), region by region.

By default it is bundled in the core layer at the locked versions: the template asks CloudFormation
for no SSM parameter, so it deploys in every region. ``"managed"`` uses the AWS-managed layer
through its per-release SSM parameter and is refused at synth where Powertools publishes none; a
region-agnostic stack gets a warning. A layer ARN of the stack's region is taken as given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_lambda as lambda_
from leasefence_infra import LeaseFenceService, LeaseFenceServiceProps, service
from leasefence_infra.bundling import LAYER_REQUIREMENTS, SLIM_LAYER_REQUIREMENTS
from leasefence_infra.powertools import MANAGED_LAYER_REGIONS
from leasefence_infra.versions import locked_version, powertools_layer_parameter

ISSUER = {"jwt_issuer": "https://idp.example.com/", "jwt_audience": ["leasefence"]}
#: The issue's regions: two where Powertools publishes its parameter, two where it does not.
PUBLISHED = ("us-east-1", "eu-west-1")
UNPUBLISHED = ("me-central-1", "ap-east-2")
LAYER_ARN = "arn:aws:lambda:{region}:111122223333:layer:powertools-copy:7"


def _synth(prebuilt_layer: Path, region: str | None, **props: Any) -> tuple[LeaseFenceService, dict, list]:
    app = App()
    env = Environment(account="111122223333", region=region) if region else None
    stack = Stack(app, "Jobs", env=env)
    svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, core_layer=lambda_.Code.from_asset(str(prebuilt_layer)),
                            **props)
    artifact = app.synth().get_stack_by_name("Jobs")
    warnings = [str(m.entry.data) for m in artifact.messages if m.level.name == "WARNING"]
    return svc, artifact.template, warnings


def _function_layers(template: dict) -> set[str]:
    return {json.dumps(r["Properties"].get("Layers"), sort_keys=True) for r in template["Resources"].values()
            if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Layers")}


def _powertools_parameters(template: dict) -> list[str]:
    return [p["Default"] for p in template.get("Parameters", {}).values()
            if str(p.get("Default", "")).startswith("/aws/service/powertools/")]


@pytest.mark.parametrize("region", [*PUBLISHED, *UNPUBLISHED, None])
def test_the_default_bundles_powertools_and_needs_no_parameter(prebuilt_layer: Path, region: str | None) -> None:
    svc, template, warnings = _synth(prebuilt_layer, region)
    assert _powertools_parameters(template) == []
    assert _function_layers(template) == {json.dumps([{"Ref": Stack.of(svc).resolve(
        Stack.of(svc).get_logical_id(svc.core_layer.node.default_child))}])}
    assert svc.powertools_layer is None
    assert not [w for w in warnings if "powertools" in w]


def test_the_default_core_layer_bundles_the_locked_powertools(prebuilt_layer: Path, monkeypatch) -> None:
    """Without a pre-built layer the service asks the bundler for Powertools and what it needs
    (LAYER_REQUIREMENTS: their locked versions); with the managed layer, for rfc8785 only."""
    asked: list[tuple[str, ...]] = []

    def recording(requirements: tuple[str, ...]) -> lambda_.Code:
        asked.append(tuple(requirements))
        return lambda_.Code.from_asset(str(prebuilt_layer))

    monkeypatch.setattr(service, "core_layer_code", recording)
    descriptions = []
    for choice in ("bundled", "managed"):
        stack = Stack(App(), "Jobs", env=Environment(account="111122223333", region="eu-west-1"))
        svc = LeaseFenceService(stack, "LeaseFence", **ISSUER, powertools_layer=choice)
        descriptions.append(svc.core_layer.node.default_child.description)  # type: ignore[union-attr]
    assert asked == [LAYER_REQUIREMENTS, SLIM_LAYER_REQUIREMENTS]
    powertools = f"aws-lambda-powertools {locked_version('aws-lambda-powertools')}"
    assert powertools in descriptions[0] and f"pydantic {locked_version('pydantic')}" in descriptions[0]
    assert descriptions[1] == f"leasefence core package + rfc8785 {locked_version('rfc8785')} (python3.12, arm64)"
    for name in ("aws-lambda-powertools", "pydantic", "pydantic-core", "fastjsonschema", "aws-xray-sdk"):
        assert f"{name}=={locked_version(name)}" in LAYER_REQUIREMENTS


@pytest.mark.parametrize("region", PUBLISHED)
def test_managed_layer_where_powertools_publishes_its_parameter(prebuilt_layer: Path, region: str) -> None:
    svc, template, warnings = _synth(prebuilt_layer, region, powertools_layer="managed")
    assert _powertools_parameters(template) == [powertools_layer_parameter(locked_version("aws-lambda-powertools"))]
    (parameter,) = [k for k, p in template["Parameters"].items() if p["Default"].startswith("/aws/service/powertools/")]
    assert template["Parameters"][parameter]["Type"] == "AWS::SSM::Parameter::Value<String>"
    core = Stack.of(svc).resolve(Stack.of(svc).get_logical_id(svc.core_layer.node.default_child))
    # Core first, then Powertools (a later layer wins a file clash).
    assert _function_layers(template) == {json.dumps([{"Ref": core}, {"Ref": parameter}])}
    assert not [w for w in warnings if "powertools" in w]


@pytest.mark.parametrize("region", [*UNPUBLISHED, "me-south-1", "us-gov-west-1", "cn-north-1"])
def test_managed_layer_is_refused_where_its_parameter_is_missing(prebuilt_layer: Path, region: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        _synth(prebuilt_layer, region, powertools_layer="managed")
    message = str(excinfo.value)
    assert message.startswith(f"powertools_layer='managed' cannot deploy to {region}: Powertools publishes no SSM "
                              "parameter /aws/service/powertools/python/arm64/python3.12/")
    assert "powertools_layer='bundled'" in message and "us-east-1" in message


def test_managed_layer_in_a_region_agnostic_stack_is_a_warning(prebuilt_layer: Path) -> None:
    _, template, warnings = _synth(prebuilt_layer, None, powertools_layer="managed")
    assert len(_powertools_parameters(template)) == 1
    (warning,) = [w for w in warnings if "powertools_layer='managed'" in w]
    assert "region-agnostic" in warning and "me-central-1" not in warning and "eu-west-1" in warning


def test_a_layer_arn_of_the_stacks_region(prebuilt_layer: Path) -> None:
    arn = LAYER_ARN.format(region="me-central-1")
    svc, template, _ = _synth(prebuilt_layer, "me-central-1", powertools_layer=arn)
    core = Stack.of(svc).resolve(Stack.of(svc).get_logical_id(svc.core_layer.node.default_child))
    assert _function_layers(template) == {json.dumps([{"Ref": core}, arn])}
    assert _powertools_parameters(template) == []
    with pytest.raises(ValueError, match="is in eu-west-1, the stack in me-central-1"):
        _synth(prebuilt_layer, "me-central-1", powertools_layer=LAYER_ARN.format(region="eu-west-1"))


@pytest.mark.parametrize("choice", ["Managed", "", "arn:aws:lambda:eu-west-1:1111:layer:x:1", "layer:x", 3])
def test_other_choices_are_refused(choice: object) -> None:
    with pytest.raises((ValueError, TypeError), match="powertools_layer must be"):
        LeaseFenceServiceProps(**ISSUER, powertools_layer=choice)  # type: ignore[arg-type]


def test_the_region_table_leaves_out_the_regions_without_the_parameter() -> None:
    assert set(PUBLISHED) <= MANAGED_LAYER_REGIONS
    assert not {*UNPUBLISHED, "me-south-1", "us-gov-west-1", "us-gov-east-1", "cn-north-1",
                "cn-northwest-1"} & MANAGED_LAYER_REGIONS
    assert len(MANAGED_LAYER_REGIONS) == 30
