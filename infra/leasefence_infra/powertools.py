"""Where the functions' Powertools (with pydantic, fastjsonschema and the X-Ray SDK) comes from.

``powertools_layer`` (:class:`~leasefence_infra.LeaseFenceServiceProps`):

* ``"bundled"`` (default): in the core layer, at the locked versions (``bundling.LAYER_DISTRIBUTIONS``),
  so the run-time versions are the ones the tests ran with, in every region and partition, and no
  template parameter is needed;
* ``"managed"``: the AWS-managed Powertools layer of the locked ``aws-lambda-powertools``, resolved
  at deploy time from its public SSM parameter (``versions.powertools_layer_parameter``). Powertools
  publishes that parameter in :data:`MANAGED_LAYER_REGIONS` only: synthesis refuses a stack whose
  region is another one. A region-agnostic stack (no ``env``) cannot be checked at synth: it gets a
  warning naming the regions, and a deploy elsewhere fails on the missing parameter
  (``cdk synth --strict`` turns the warning into an error);
* a layer version ARN (``arn:aws:lambda:<region>:<account>:layer:<name>:<version>``): that layer,
  e.g. your own copy of the Powertools layer where AWS publishes none. It must hold Powertools,
  pydantic, fastjsonschema and the X-Ray SDK for python3.12 on arm64.

With ``"managed"`` or an ARN the core layer ships only ``leasefence`` and ``rfc8785``.
"""

from __future__ import annotations

import re

from aws_cdk import Annotations, Stack, Token
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from .versions import powertools_layer_parameter

BUNDLED = "bundled"
MANAGED = "managed"

#: The regions where Powertools for AWS Lambda (Python) writes its per-release SSM parameters
#: (``/aws/service/powertools/python/arm64/python3.12/<version>``): the region matrix of the
#: ``update_ssm.yml`` workflow of aws-powertools/powertools-lambda-python, read 2026-12-01. Not
#: there: me-central-1, me-south-1, ap-east-2, AWS GovCloud (US), China, the European Sovereign
#: Cloud. Update it when Powertools adds a region.
MANAGED_LAYER_REGIONS: frozenset[str] = frozenset(
    {
        "af-south-1",
        "ap-east-1",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-northeast-3",
        "ap-south-1",
        "ap-south-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-southeast-3",
        "ap-southeast-4",
        "ap-southeast-5",
        "ap-southeast-7",
        "ca-central-1",
        "ca-west-1",
        "eu-central-1",
        "eu-central-2",
        "eu-north-1",
        "eu-south-1",
        "eu-south-2",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "il-central-1",
        "mx-central-1",
        "sa-east-1",
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
    }
)

_LAYER_ARN = re.compile(
    r"^arn:aws[a-z-]*:lambda:([a-z0-9-]+):\d{12}:layer:[A-Za-z0-9_-]{1,140}:\d+$"
)

#: The construct id of the Powertools layer reference (``"managed"`` or an ARN).
POWERTOOLS_LAYER_ID = "PowertoolsLayer"


def check_choice(choice: object) -> None:
    """``powertools_layer`` is ``"bundled"``, ``"managed"``, a layer version ARN or a token."""
    if not isinstance(choice, str):
        raise TypeError("powertools_layer must be a string: 'bundled', 'managed' or a layer ARN")
    if choice in (BUNDLED, MANAGED) or Token.is_unresolved(choice) or _LAYER_ARN.match(choice):
        return
    raise ValueError(
        f"powertools_layer must be 'bundled', 'managed' or a layer version ARN "
        f"(arn:aws:lambda:<region>:<account>:layer:<name>:<version>), got {choice!r}"
    )


def is_bundled(choice: str) -> bool:
    return choice == BUNDLED


def unsupported_region_message(region: str) -> str:
    return (
        f"powertools_layer='managed' cannot deploy to {region}: Powertools publishes no SSM "
        f"parameter {powertools_layer_parameter()} there (only in "
        f"{', '.join(sorted(MANAGED_LAYER_REGIONS))}); use powertools_layer='bundled' (the "
        "default) or the ARN of a Powertools layer in that region."
    )


def powertools_layer(scope: Construct, choice: str) -> lambda_.ILayerVersion | None:
    """The layer that brings Powertools for ``choice``, or None when the core layer bundles it.

    Raises ``ValueError`` at synth for ``"managed"`` in a region without the parameter, or an ARN
    of another region than the stack's (Lambda only attaches layers of the function's region).
    """
    check_choice(choice)
    if is_bundled(choice):
        return None
    region = Stack.of(scope).region
    concrete = not Token.is_unresolved(region)
    if choice == MANAGED:
        if concrete and region not in MANAGED_LAYER_REGIONS:
            raise ValueError(unsupported_region_message(region))
        if not concrete:
            Annotations.of(scope).add_warning_v2(
                "leasefence:powertoolsLayerRegion",
                f"powertools_layer='managed' in a region-agnostic stack: the SSM parameter "
                f"{powertools_layer_parameter()} exists only in "
                f"{', '.join(sorted(MANAGED_LAYER_REGIONS))}; a deploy to another region fails. "
                "Give the stack an env (then synthesis checks the region) or keep the default "
                "powertools_layer='bundled'.",
            )
        arn = ssm.StringParameter.value_for_string_parameter(scope, powertools_layer_parameter())
        return lambda_.LayerVersion.from_layer_version_arn(scope, POWERTOOLS_LAYER_ID, arn)
    match = _LAYER_ARN.match(choice)
    if match and concrete and match.group(1) != region:
        raise ValueError(
            f"powertools_layer {choice} is in {match.group(1)}, the stack in {region}: Lambda "
            "attaches layers of the function's own region only."
        )
    return lambda_.LayerVersion.from_layer_version_arn(scope, POWERTOOLS_LAYER_ID, choice)
