"""Where the code the service deploys is found: in the installed packages, never in a checkout.

* The Lambda handlers (``functions/`` in this repository) ship inside this package as
  ``leasefence_infra._functions`` (``infra/leasefence_infra/_functions`` is a link to
  ``functions/``, and the wheel holds a copy), so an installed wheel and an editable install find
  them the same way: through the import system.
* The core package of the Lambda layer is the installed ``leasefence`` (see
  :data:`leasefence_infra.bundling.PACKAGE_DIR`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from aws_cdk import aws_lambda as lambda_

FUNCTIONS_PACKAGE = "leasefence_infra._functions"
#: Never uploaded with the handlers.
FUNCTIONS_EXCLUDE = ("**/__pycache__", "**/*.pyc", "**/tests")


def functions_dir() -> Path:
    """The folder of the shipped Lambda handlers (``api/``, ``sweeper/``, ``worker/``, ``pretoken/``)."""
    spec = importlib.util.find_spec(FUNCTIONS_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(
            f"{FUNCTIONS_PACKAGE} is not installed with leasefence_infra: reinstall the project "
            "(pip install 'leasefence[cdk]', or pip install -e '.[dev]' in a checkout)"
        )
    return Path(locations[0]).resolve()


def functions_code() -> lambda_.Code:
    """The one code asset of every function (the handler picks the package)."""
    return lambda_.Code.from_asset(str(functions_dir()), exclude=list(FUNCTIONS_EXCLUDE))


def has_module(root: Path, dotted: str) -> bool:
    """Whether ``package.module`` exists as a module or package under ``root``."""
    rel = Path(*dotted.split("."))
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()
