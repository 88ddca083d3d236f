"""The examples/ folder as its tests use it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from leasefence_tools.local.embedded import LOCAL_REGION
from tests.support import ROOT

EXAMPLES = ROOT / "examples"


def example_on_path(name: str) -> Path:
    """``examples/<name>`` on ``sys.path``, as its README runs it (its package imports by its own
    name, as in a Lambda layer)."""
    folder = EXAMPLES / name
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return folder


def point_boto3_at(aws: Any, env: pytest.MonkeyPatch) -> None:
    """The environment an example's ``boto3.client("dynamodb")`` reads, set to the embedded
    DynamoDB (as Lambda's environment sets the region and credentials in AWS)."""
    env.setenv("AWS_ENDPOINT_URL_DYNAMODB", aws.endpoint)
    env.setenv("AWS_DEFAULT_REGION", LOCAL_REGION)
    env.setenv("AWS_ACCESS_KEY_ID", "local")
    env.setenv("AWS_SECRET_ACCESS_KEY", "local")
