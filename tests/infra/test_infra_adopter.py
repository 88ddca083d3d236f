"""Issue 12's acceptance: a platform team installs the wheel and deploys from its own CDK app.

Builds the project's wheel from a copy of its sources, installs ``leasefence[cdk]`` (plus the
``[nag]`` pins: cdk-nag, cfn-lint) into a fresh virtual environment, and synthesizes two apps in a
folder outside the repository, with nothing of the checkout on the path:

* the issue's minimal adopter app, exactly as written;
* an app that brings its own table (``LeaseFenceTable``) and payload bucket, runs cdk-nag
  (AwsSolutions) and cfn-lint: zero unacknowledged findings, no cfn-lint errors.

With ``uv`` (a dev dependency) the venv is ready in seconds from uv's cache; without it the test
falls back to venv + pip (about two minutes on 2 cores, cold). Timings are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: The issue's minimal adopter app, verbatim.
MINIMAL_APP = '''\
from aws_cdk import App, Stack
from leasefence_infra import LeaseFenceService

app = App(outdir="cdk.out")
stack = Stack(app, "Adopter")
LeaseFenceService(stack, "Jobs", jwt_issuer="https://idp.example.com/", jwt_audience=["leasefence"])
app.synth()
'''

#: An adopter that brings its own table and bucket and checks the result like a platform team.
BYO_APP = '''\
import importlib.util
import json
from pathlib import Path

from aws_cdk import App, Aspects, Stack
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import ManualArgs, lint_file

import leasefence_infra
from leasefence_infra import LeaseFenceService, LeaseFenceTable

app = App(outdir="cdk.out")
stack = Stack(app, "Jobs")
table = LeaseFenceTable(stack, "Operations")
bucket = s3.Bucket.from_bucket_name(stack, "Payloads", "acme-leasefence-payloads")
LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://idp.example.com/", jwt_audience=["leasefence"],
                  table=table, payload_bucket=bucket, tags={"team": "platform"})
Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
assembly = app.synth()

findings = [f"{message.id}: {message.entry.data}" for artifact in assembly.stacks for message in artifact.messages
            if str(message.entry.data).startswith("AwsSolutions-") and message.level.value in ("error", "warning")]
lint = {}
for name in ("Jobs", "Adopter"):
    template = Path("cdk.out") / f"{name}.template.json"
    matches = lint_file(template, config=ManualArgs(regions=["us-east-1", "eu-west-1", "ap-southeast-2"]))
    lint[name] = [f"{m.rule.id} {m.message}" for m in matches]
print(json.dumps({
    "nag_findings": findings,
    "cfn_lint": lint,
    "leasefence_infra": leasefence_infra.__file__,
    "leasefence": importlib.util.find_spec("leasefence").origin,
    "functions": importlib.util.find_spec("leasefence_infra._functions").submodule_search_locations[0],
}))
'''

#: Where an installed environment finds the two packages (without importing them: no aws_cdk).
FIND_SPECS = """\
import importlib.util, json
print(json.dumps({name: importlib.util.find_spec(name).origin for name in ("leasefence", "leasefence_infra")}))
"""

#: cfn-lint warnings accepted with a reason (as in test_infra_compliance): CDK adds DependsOn from
#: each function to its role although Role: GetAtt already orders them.
ACCEPTED_CFN_LINT = ("W3005",)


def _uv() -> str | None:
    try:
        from uv import find_uv_bin
    except ImportError:
        return shutil.which("uv")
    return find_uv_bin()


def _clean_env() -> dict[str, str]:
    """The machine's environment without anything that points back into this checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CDK_CONTEXT_JSON", "CDK_OUTDIR"}}
    env.update(JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION="1",
               CDK_DISABLE_CLI_TELEMETRY="true", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


def _copy_sources(dest: Path) -> Path:
    """What the wheel is built from (the link infra/leasefence_infra/_functions -> functions/ kept)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "layers" / "leasefence", dest / "layers" / "leasefence", ignore=ignore)
    shutil.copytree(ROOT / "infra" / "leasefence_infra", dest / "infra" / "leasefence_infra", symlinks=True,
                    ignore=ignore)
    shutil.copytree(ROOT / "functions", dest / "functions", ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def adopter(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    timings: dict[str, float] = {}
    env = _clean_env()
    work = tmp_path_factory.mktemp("adopter")
    assert ROOT not in work.parents
    uv = _uv()
    nag_pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["nag"]

    started = time.monotonic()
    src = _copy_sources(work / "src")
    dist = work / "dist"
    if uv:
        _run([uv, "build", "--wheel", "--out-dir", str(dist), str(src)], work, env, 300)
    else:
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(src)], work, env, 300)
    (wheel,) = dist.glob("leasefence-*.whl")
    timings["build wheel"] = time.monotonic() - started

    started = time.monotonic()
    venv = work / "venv"
    python = venv / "bin" / "python"
    requirements = [f"{wheel}[cdk]", *nag_pins]
    if uv:
        # --seed: the core layer is bundled with `python -m pip` at synth (no Docker).
        _run([uv, "venv", "--seed", "--quiet", "--python", sys.executable, str(venv)], work, env, 120)
        _run([uv, "pip", "install", "--quiet", "--python", str(python), *requirements], work, env, 600)
    else:
        _run([sys.executable, "-m", "venv", str(venv)], work, env, 120)
        _run([str(python), "-m", "pip", "install", "--quiet", *requirements], work, env, 900)
    timings[f"venv + install ({'uv' if uv else 'pip'})"] = time.monotonic() - started

    app_dir = work / "app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(MINIMAL_APP)
    (app_dir / "byo_app.py").write_text(BYO_APP)
    started = time.monotonic()
    minimal = _run([str(python), "app.py"], app_dir, env, 300)
    timings["synth minimal app"] = time.monotonic() - started
    started = time.monotonic()
    byo = _run([str(python), "byo_app.py"], app_dir, env, 300)
    timings["synth byo app + cdk-nag + cfn-lint"] = time.monotonic() - started

    # The same sources installed in editable mode (what `make install` does with this repo).
    started = time.monotonic()
    editable = work / "editable-venv"
    if uv:
        _run([uv, "venv", "--quiet", "--python", sys.executable, str(editable)], work, env, 120)
        _run([uv, "pip", "install", "--quiet", "--no-deps", "--python", str(editable / "bin" / "python"),
              "-e", str(src)], work, env, 300)
    else:
        _run([sys.executable, "-m", "venv", str(editable)], work, env, 120)
        _run([str(editable / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "-e", str(src)],
             work, env, 300)
    found = _run([str(editable / "bin" / "python"), "-c", FIND_SPECS], app_dir, env, 60)
    timings["editable install"] = time.monotonic() - started

    print("\nadopter timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
          + f"; total {sum(timings.values()):.1f} s")
    return {
        "venv": venv,
        "out": app_dir / "cdk.out",
        "minimal": minimal,
        "report": json.loads(byo.stdout.strip().splitlines()[-1]),
        "timings": timings,
        "src": src,
        "editable": json.loads(found.stdout),
    }


def test_code_comes_from_the_installed_wheel(adopter) -> None:
    report, venv = adopter["report"], adopter["venv"].resolve()
    for key in ("leasefence_infra", "leasefence", "functions"):
        path = Path(report[key]).resolve()
        assert venv in path.parents and ROOT not in path.parents, (key, path)
    for handler in ("api", "sweeper", "worker", "publisher"):
        assert (Path(report["functions"]) / handler / "handler.py").is_file(), handler


def test_minimal_adopter_app_synthesizes(adopter) -> None:
    template = json.loads((adopter["out"] / "Adopter.template.json").read_text())
    types = [r["Type"] for r in template["Resources"].values()]
    # Payloads, and the publisher's failed batches.
    assert types.count("AWS::DynamoDB::Table") == 1 and types.count("AWS::S3::Bucket") == 2
    assert types.count("AWS::Lambda::Function") == 3  # API, sweeper, publisher: no worker unless asked
    # The publisher's handler ships in the wheel and its stream mapping is there.
    assert types.count("AWS::Lambda::EventSourceMapping") == 1 and types.count("AWS::Events::EventBus") == 1
    (authorizer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Authorizer"]
    assert authorizer["Properties"]["JwtConfiguration"] == {"Issuer": "https://idp.example.com/",
                                                            "Audience": ["leasefence"]}
    # The core layer was bundled from the installed package, with rfc8785 from PyPI.
    (layer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    asset = adopter["out"] / f"asset.{layer['Properties']['Content']['S3Key'].removesuffix('.zip')}"
    assert (asset / "python" / "leasefence" / "engine.py").is_file()
    assert (asset / "python" / "rfc8785").is_dir()
    assert not (asset / "python" / "leasefence" / "local").exists()


def test_brought_in_table_and_bucket_with_no_unacknowledged_findings(adopter) -> None:
    report = adopter["report"]
    assert report["nag_findings"] == []
    for name, matches in report["cfn_lint"].items():
        assert [m for m in matches if not m.startswith(ACCEPTED_CFN_LINT)] == [], name
    template = json.loads((adopter["out"] / "Jobs.template.json").read_text())
    resources = template["Resources"]
    (table_lid,) = [k for k, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"]
    assert table_lid.startswith("Operations")  # the adopter's table, not one of the service's
    # Only the publisher's failed batches: the payload bucket is the adopter's.
    (failed_batches,) = [k for k, r in resources.items() if r["Type"] == "AWS::S3::Bucket"]
    assert "FailedBatches" in failed_batches
    env = [r["Properties"]["Environment"]["Variables"] for r in resources.values()
           if r["Type"] == "AWS::Lambda::Function"]
    assert {json.dumps(e["LEASEFENCE_TABLE"]) for e in env} == {json.dumps({"Ref": table_lid})}
    assert {e["LEASEFENCE_PAYLOAD_BUCKET"] for e in env} == {"acme-leasefence-payloads"}


def test_an_editable_install_finds_the_checkouts_code(adopter) -> None:
    """``pip install -e .``: both packages resolve to the checkout, and the handlers are beside
    ``leasefence_infra`` through its ``_functions`` link to ``functions/``."""
    src = adopter["src"].resolve()
    origins = {name: Path(origin).resolve() for name, origin in adopter["editable"].items()}
    assert origins["leasefence"] == src / "layers" / "leasefence" / "__init__.py"
    package = src / "infra" / "leasefence_infra"
    assert origins["leasefence_infra"] == package / "__init__.py"
    assert (package / "_functions").resolve() == src / "functions"
    assert (package / "_functions" / "worker" / "handler.py").is_file()
