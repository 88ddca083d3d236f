"""The ``leasefence`` command line: ``app`` (the Typer app) and ``main`` (the console script).

One module per group of commands, each registering on the app of :mod:`._app`:

- ``_local_stack``: ``local``, ``events tail``;
- ``_dev``: ``token``, ``openapi``, ``invoke``;
- ``_operations``: ``ops ...`` (operations and approvals, through the HTTP API);
- ``_job_types``: ``job-types ...``, ``controls`` (the catalogue, through the HTTP API);
- ``_table_admin``: ``erase-tenant``, ``publisher redrive`` (against the table, not the API);
- ``_kit``: ``verify``, ``shadow report``;
- ``_maintainer``: ``demo``, ``torture``, ``bench``.

Shared: ``_client`` (the local stack's state, dev tokens, the SDK client), ``_options`` (the
options several commands take), ``_errors`` (``api_errors()``: an API or SDK error as one line and
exit 1). Every command imports what it runs inside its body, so ``leasefence --help`` starts
without the runtime.
"""

from __future__ import annotations

# Each module registers its commands when it is imported (hence names unused here), and
# ``leasefence --help`` lists the commands in the order they were registered: keep this order
# (tests/tools/cli/test_cli_package.py pins it).
# isort: off
from . import _local_stack  # noqa: F401 - local
from . import _dev  # noqa: F401 - token, openapi, invoke
from . import _operations  # noqa: F401 - ops ...
from . import _job_types  # noqa: F401 - job-types ..., controls
from . import _table_admin  # noqa: F401 - erase-tenant, publisher redrive
from . import _kit  # noqa: F401 - verify, shadow report
from . import _maintainer  # noqa: F401 - demo, torture, bench

# isort: on
from ._app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
