"""The kit is registered, dev-only, and what the docs show is what the tests verify."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

import leasefence_tools.kit
from leasefence_infra.bundling import PACKAGE_DIR
from leasefence_tools.kit import examples
from tests.support import ROOT

PLUGIN = "leasefence_tools.kit.pytest_plugin"


def test_the_package_declares_the_pytest_plugin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {"leasefence": PLUGIN}


def test_the_installed_package_registers_the_plugin_in_this_session(pytestconfig) -> None:
    """What `make install` put in .venv: the entry point, loaded by pytest itself (this very
    session found the plugin's fixtures that way; no conftest imports it)."""
    found = [ep for ep in entry_points(group="pytest11") if ep.value == PLUGIN]
    assert [ep.dist.name for ep in found if ep.dist is not None] == ["leasefence"]
    assert pytestconfig.pluginmanager.get_plugin(found[0].name) is not None


def test_the_kit_stays_out_of_the_lambda_layer_and_shadow_mode_ships() -> None:
    """The layer ships the runtime package as it is: the kit is outside it, shadow mode inside."""
    kit = Path(leasefence_tools.kit.__file__).resolve().parent
    assert PACKAGE_DIR.resolve() not in kit.parents
    assert not (PACKAGE_DIR / "kit").exists()
    assert (PACKAGE_DIR / "shadow.py").is_file()
    assert not [p for p in PACKAGE_DIR.rglob("*.py") if "leasefence_tools.kit" in p.read_text()]


def test_the_guides_show_the_handlers_verify_says_go_for() -> None:
    # The per-class handlers are shown in the guides (SDK and workers, Target classes).
    readme = "".join((ROOT / "docs" / page).read_text() for page in ("sdk.md", "target-classes.md"))
    for function in (examples.refund, examples.reconcile_refund, examples.account,
                     examples.raise_ledger_fence, examples.post, examples.reconcile_post,
                     examples.send_receipt, examples.reconcile_receipt, examples.send_sms):
        assert inspect.getsource(function) in readme, function.__name__
    source = inspect.getsource(examples)
    handlers = source[source.index("HANDLERS = {"):source.index("}\n", source.index("HANDLERS = {")) + 2]
    assert handlers in readme


def test_the_guide_shows_the_plugin_example_as_it_runs() -> None:
    # The site includes the example file itself (pymdownx.snippets, base path: the repository),
    # so the page shows exactly the code this suite runs.
    guide = (ROOT / "docs" / "adopting.md").read_text()
    example = Path(__file__).parent / "test_plugin_example.py"
    assert f'--8<-- "{example.relative_to(ROOT).as_posix()}"' in guide
    assert example.is_file()
