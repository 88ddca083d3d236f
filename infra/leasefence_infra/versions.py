"""The dependency versions leasefence is tested with, and the ones it deploys.

One lock, ``requirements.lock`` beside this module (inside the package, so that it ships in the
wheel), pins every distribution of every extra (runtime, local, CDK, dev). ``make lock`` writes it
with ``uv pip compile --universal``: one resolution valid for Python 3.11 (the dev venv) and 3.12
(Lambda) on any platform, with environment markers where they differ. ``make install`` installs
with it as constraints, so the tests run on the locked versions, and this module reads it by
distribution name for the Lambda target (:data:`LAMBDA_ENVIRONMENT`: CPython 3.12, Linux, arm64):

* the core layer bundles the locked versions of its distributions (``bundling.LAYER_REQUIREMENTS``:
  Powertools, pydantic, fastjsonschema, the X-Ray SDK, rfc8785 and what they need), so in Lambda
  they are the versions the tests ran with;
* with ``powertools_layer="managed"``, the AWS-managed Powertools layer is the one published for
  the locked ``aws-lambda-powertools`` (:func:`powertools_layer_parameter`); pydantic then comes
  from that layer, in the version that Powertools release was built with (it can differ from the
  lock's), and the core layer bundles ``rfc8785`` only (``bundling.SLIM_LAYER_REQUIREMENTS``).

Not pinned by the lock: **boto3 / botocore** come from the Lambda python3.12 runtime, whose
version AWS updates.
"""

from __future__ import annotations

import functools
import importlib.resources
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

#: The lock (``make lock``), shipped inside the package.
LOCK_FILE = Path(
    str(importlib.resources.files(__package__ or "leasefence_infra") / "requirements.lock")
)

#: Marker environment of the Lambda functions (python3.12 runtime on arm64, Amazon Linux 2023).
LAMBDA_ENVIRONMENT: Mapping[str, str] = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.0",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.12.0",
    "python_version": "3.12",
    "sys_platform": "linux",
}

POWERTOOLS_DISTRIBUTION = "aws-lambda-powertools"
#: Powertools publishes one public SSM parameter per release (and ``latest``) naming its layer ARN:
#: ``/aws/service/powertools/python/{arch}/{python}/{version}``.
POWERTOOLS_LAYER_PARAMETER_PREFIX = "/aws/service/powertools/python/arm64/python3.12/"


class LockError(RuntimeError):
    """The lock is missing, malformed, or does not pin a distribution that is asked for."""


@functools.cache
def _read_lock(lock_file: Path) -> tuple[Requirement, ...]:
    try:
        text = lock_file.read_text()
    except FileNotFoundError as exc:
        raise LockError(f"{lock_file} is missing: run make lock") from exc
    pins = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise LockError(f"{lock_file.name}:{number}: {exc}") from exc
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise LockError(
                f"{lock_file.name}:{number}: {line!r} is not an exact pin (name==version)"
            )
        pins.append(requirement)
    return tuple(pins)


def locked_versions(
    environment: Mapping[str, str] = LAMBDA_ENVIRONMENT, lock_file: Path = LOCK_FILE
) -> dict[str, str]:
    """``{canonical name: version}`` of every locked distribution that applies in ``environment``."""
    versions: dict[str, str] = {}
    for requirement in _read_lock(lock_file):
        if requirement.marker is not None and not requirement.marker.evaluate(dict(environment)):
            continue
        name = canonicalize_name(requirement.name)
        version = next(iter(requirement.specifier)).version
        if versions.setdefault(name, version) != version:
            raise LockError(f"{lock_file.name} pins {name} twice for one environment")
    return versions


def locked_version(
    name: str, environment: Mapping[str, str] = LAMBDA_ENVIRONMENT, lock_file: Path = LOCK_FILE
) -> str:
    """The locked version of one distribution (any spelling of its name)."""
    try:
        return locked_versions(environment, lock_file)[canonicalize_name(name)]
    except KeyError:
        raise LockError(
            f"{name} is not pinned in {lock_file.name} for this target: add it to pyproject.toml "
            "and run make lock"
        ) from None


def locked_requirements(names: Iterable[str], lock_file: Path = LOCK_FILE) -> tuple[str, ...]:
    """``name==version`` for each distribution, versions from the lock (Lambda target)."""
    return tuple(f"{name}=={locked_version(name, lock_file=lock_file)}" for name in names)


def powertools_layer_parameter(version: str | None = None) -> str:
    """The public SSM parameter naming the Powertools layer (arm64, python3.12) of ``version``,
    by default the locked ``aws-lambda-powertools``. CloudFormation resolves it at deploy time."""
    return POWERTOOLS_LAYER_PARAMETER_PREFIX + (version or locked_version(POWERTOOLS_DISTRIBUTION))
