"""The installed wheel, as a platform team and a developer use it, outside the repository.

Builds the project's wheel once with ``make dist`` in a copy of its sources (``built_wheel``), then,
each in a fresh virtual environment and a folder outside the repository, with nothing of the
checkout on the path:

* ``pip install '<wheel>[cdk]'``, exactly that extra (the lock only as constraints: it pins
  versions, it adds nothing): ``leasefence_infra`` imports and the issue's minimal adopter app
  synthesizes; then, with the ``[nag]`` pins added (cdk-nag, cfn-lint), an app that brings its own
  table (``LeaseFenceTable``) and payload bucket, runs cdk-nag (AwsSolutions) and cfn-lint: zero
  unacknowledged findings, no cfn-lint errors;
* ``[cdk]`` beside the oldest ``aws-cdk-lib`` its range accepts (an adopter on an older CDK):
  the minimal app synthesizes;
* ``pip install '<wheel>[local]'`` in an empty folder: ``leasefence local`` in the background and
  the README walkthrough's basic commands against it (token, enqueue through the SDK, the stream
  worker running the demo job, ``ops list``/``show``, ``invoke``, the OpenAPI route and Swagger
  UI, ``leasefence openapi``), then SIGTERM;
* every ``pip install`` line of the install guide (docs/installing.md) and of the construct
  library's Install section, as written but for its placeholders (``tests.support.pip_installs``),
  with ``--no-deps``: this version, from the place the line names, with its extras.

With ``uv`` (a dev dependency) a venv is ready in seconds from uv's cache; without it the test
falls back to venv + pip (about two minutes on 2 cores, cold). Timings are printed (``-s``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.support.pip_installs import PLACEHOLDERS, run_by_adopter_test

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "infra" / "leasefence_infra" / "requirements.lock"

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
    "leasefence_tools": importlib.util.find_spec("leasefence_tools").origin,
    "functions": importlib.util.find_spec("leasefence_infra._functions").submodule_search_locations[0],
}))
'''

#: Where an installed environment finds the three packages (without importing them: no aws_cdk).
FIND_SPECS = """\
import importlib.util, json
print(json.dumps({name: importlib.util.find_spec(name).origin
                  for name in ("leasefence", "leasefence_tools", "leasefence_infra")}))
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
    for name in ("pyproject.toml", "README.md", "Makefile"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(ROOT / "layers" / "leasefence", dest / "layers" / "leasefence", ignore=ignore)
    shutil.copytree(ROOT / "tools" / "leasefence_tools", dest / "tools" / "leasefence_tools", ignore=ignore)
    shutil.copytree(ROOT / "infra" / "leasefence_infra", dest / "infra" / "leasefence_infra", symlinks=True,
                    ignore=ignore)
    shutil.copytree(ROOT / "functions", dest / "functions", ignore=ignore)
    return dest


def _locked() -> dict[str, str]:
    """``{name: ==version}`` of the lock."""
    lines = (line.split(" #")[0].strip() for line in LOCK.read_text().splitlines())
    return {r.name: str(r.specifier) for r in map(Requirement, (x for x in lines if x and not x.startswith(("#", "-"))))}


def _cdk_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (cdk_lib,) = [r for r in map(Requirement, project["optional-dependencies"]["cdk"]) if r.name == "aws-cdk-lib"]
    return cdk_lib


def _oldest(requirement: Requirement) -> str:
    (floor,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return floor


def _make_venv(uv: str | None, venv: Path, work: Path, env: dict[str, str], requirements: list[str],
               constraints: Path | None = LOCK) -> Path:
    """A fresh venv with exactly ``requirements`` (``constraints`` pin versions, add nothing)."""
    python = venv / "bin" / "python"
    pinned = ["-c", str(constraints)] if constraints else []
    if uv:
        # pip (what `python3.12 -m venv` seeds): the core layer is bundled with `python -m pip` at
        # synth. Not uv's --seed: its `wheel` brings `packaging`, which would hide a missing one.
        _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], work, env, 120)
        _run([uv, "pip", "install", "--quiet", "--python", str(python), *pinned, "pip", *requirements],
             work, env, 600)
    else:
        _run([sys.executable, "-m", "venv", str(venv)], work, env, 120)
        _run([str(python), "-m", "pip", "install", "--quiet", *pinned, *requirements], work, env, 900)
    return python


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The wheel, built once for the module from a copy of the sources."""
    env = _clean_env()
    work = tmp_path_factory.mktemp("adopter")
    assert ROOT not in work.parents
    uv = _uv()
    started = time.monotonic()
    src = _copy_sources(work / "src")
    # `make dist` as a reader runs it, with this checkout's venv (its uv) standing for the copy's.
    venv = Path(sys.executable).parents[1]
    _run(["make", "--no-print-directory", "-o", str(venv / ".installed"), "dist", f"VENV={venv}"], src, env, 300)
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert sorted(p.name for p in (src / "dist").glob("leasefence-*")) == [
        f"leasefence-{version}-py3-none-any.whl", f"leasefence-{version}.tar.gz"]
    wheel = src / "dist" / f"leasefence-{version}-py3-none-any.whl"
    return {"wheel": wheel, "work": work, "env": env, "uv": uv, "src": src, "version": version,
            "timings": {"make dist": time.monotonic() - started}}


@pytest.fixture(scope="module")
def cdk_venv(built_wheel: dict[str, Any]) -> Path:
    """A fresh venv with exactly ``<wheel>[cdk]`` (the lock as constraints): its python."""
    work, env, uv = built_wheel["work"], built_wheel["env"], built_wheel["uv"]
    started = time.monotonic()
    python = _make_venv(uv, work / "venv", work, env, [f"{built_wheel['wheel']}[cdk]"])
    built_wheel["timings"][f"venv + [cdk] ({'uv' if uv else 'pip'})"] = time.monotonic() - started
    return python


@pytest.fixture(scope="module")
def adopter(built_wheel: dict[str, Any], cdk_venv: Path) -> dict[str, Any]:
    timings: dict[str, float] = built_wheel["timings"]
    work, env, uv, src = built_wheel["work"], built_wheel["env"], built_wheel["uv"], built_wheel["src"]
    venv, python = cdk_venv.parents[1], cdk_venv
    app_dir = work / "app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(MINIMAL_APP)
    (app_dir / "byo_app.py").write_text(BYO_APP)
    started = time.monotonic()
    minimal = _run([str(python), "app.py"], app_dir, env, 300)
    timings["synth minimal app ([cdk] only)"] = time.monotonic() - started

    # The checks a platform team adds: the [nag] pins, into the same venv.
    started = time.monotonic()
    nag_pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["nag"]
    if uv:
        _run([uv, "pip", "install", "--quiet", "--python", str(python), "-c", str(LOCK), *nag_pins], work, env, 600)
    else:
        _run([str(python), "-m", "pip", "install", "--quiet", "-c", str(LOCK), *nag_pins], work, env, 900)
    byo = _run([str(python), "byo_app.py"], app_dir, env, 300)
    timings["[nag] + synth byo app + cdk-nag + cfn-lint"] = time.monotonic() - started

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


#: What exactly ``[cdk]`` installed, and whether the constructs import.
CDK_ONLY = """\
import importlib.metadata, json
names = sorted(d.metadata["Name"].lower() for d in importlib.metadata.distributions())
try:
    import leasefence_infra
    imported = leasefence_infra.__file__
except Exception as error:
    imported = f"{type(error).__name__}: {error}"
print(json.dumps({"names": names, "imported": imported, "aws-cdk-lib": importlib.metadata.version("aws-cdk-lib")}))
"""


def test_cdk_extra_alone_imports_the_constructs(built_wheel: dict[str, Any], cdk_venv: Path) -> None:
    """``pip install 'leasefence[cdk]'`` and nothing else: ``import leasefence_infra`` works (it
    needs ``packaging``, which only ``[nag]`` brought before)."""
    proc = _run([str(cdk_venv), "-c", CDK_ONLY], built_wheel["work"], built_wheel["env"], 120)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(found["imported"]).resolve().is_relative_to(cdk_venv.parents[1].resolve()), found["imported"]
    assert "packaging" in found["names"]
    assert not {"cdk-nag", "cfn-lint", "moto", "typer"} & set(found["names"])  # nothing but [cdk]
    assert f"=={found['aws-cdk-lib']}" == _locked()["aws-cdk-lib"]  # this repository's build: the lock's


def test_cdk_extra_is_a_compatible_range() -> None:
    """``[cdk]`` accepts the adopter's CDK 2 version (from the oldest that synthesizes every
    option), not one exact release; the lock keeps this repository's builds exact."""
    requirement = _cdk_requirement()
    assert {s.operator for s in requirement.specifier} == {">=", "<"}
    assert requirement.specifier.contains(_oldest(requirement)) and not requirement.specifier.contains("3.0.0")
    assert requirement.specifier.contains(_locked()["aws-cdk-lib"].removeprefix("=="))


def test_cdk_extra_synthesizes_with_the_oldest_cdk_it_accepts(built_wheel: dict[str, Any]) -> None:
    """An adopter whose app is on the oldest aws-cdk-lib of the range: the install resolves and
    the minimal app synthesizes (the CDK packages are left out of the lock's constraints)."""
    work, env, uv = built_wheel["work"], built_wheel["env"], built_wheel["uv"]
    oldest = _oldest(_cdk_requirement())
    constraints = work / "constraints-without-cdk.txt"
    constraints.write_text("".join(line + "\n" for line in LOCK.read_text().splitlines()
                                   if not line.startswith(("aws-cdk", "constructs", "jsii", "typeguard",
                                                           "publication", "cattrs"))))
    started = time.monotonic()
    python = _make_venv(uv, work / "oldest-cdk-venv", work, env,
                        [f"{built_wheel['wheel']}[cdk]", f"aws-cdk-lib=={oldest}"], constraints)
    app_dir = work / "oldest-cdk-app"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(MINIMAL_APP)
    _run([str(python), "app.py"], app_dir, env, 300)
    print(f"\noldest aws-cdk-lib {oldest}: venv + synth {time.monotonic() - started:.1f} s")
    template = json.loads((app_dir / "cdk.out" / "Adopter.template.json").read_text())
    types = [r["Type"] for r in template["Resources"].values()]
    assert types.count("AWS::Lambda::Function") == 3 and types.count("AWS::ApiGatewayV2::Stage") == 1
    version = _run([str(python), "-c", "import importlib.metadata as m; print(m.version('aws-cdk-lib'))"],
                   app_dir, env, 60).stdout.strip()
    assert version == oldest


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
    # Outcome events are off by default: no bus.
    assert types.count("AWS::Lambda::EventSourceMapping") == 1 and types.count("AWS::Events::EventBus") == 0
    (authorizer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGatewayV2::Authorizer"]
    assert authorizer["Properties"]["JwtConfiguration"] == {"Issuer": "https://idp.example.com/",
                                                            "Audience": ["leasefence"]}
    # The core layer was bundled from the installed package, with the locked rfc8785, Powertools
    # and pydantic (aarch64) from PyPI: no Powertools layer parameter to resolve at deploy.
    (layer,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    asset = adopter["out"] / f"asset.{layer['Properties']['Content']['S3Key'].removesuffix('.zip')}"
    assert (asset / "python" / "leasefence" / "engine" / "_engine.py").is_file()
    for package in ("rfc8785", "aws_lambda_powertools", "pydantic", "fastjsonschema", "aws_xray_sdk"):
        assert (asset / "python" / package).is_dir(), package
    assert list((asset / "python" / "pydantic_core").glob("*aarch64-linux-gnu.so"))
    assert not (asset / "python" / "leasefence" / "local").exists()
    assert not [p for p in template.get("Parameters", {}).values()
                if str(p.get("Default", "")).startswith("/aws/service/powertools/")]


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
    assert origins["leasefence_tools"] == src / "tools" / "leasefence_tools" / "__init__.py"
    package = src / "infra" / "leasefence_infra"
    assert origins["leasefence_infra"] == package / "__init__.py"
    assert (package / "_functions").resolve() == src / "functions"
    assert (package / "_functions" / "worker" / "handler.py").is_file()


# ----------------------------------------------------------------------------- leasefence[local]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The README's Python walkthrough, against the running stack: enqueue, then wait for the stream
#: worker to run the demo job (``demo-receipt``).
SDK_WALKTHROUGH = """\
import json, sys, time
from leasefence.client import LeaseFenceClient

client = LeaseFenceClient(sys.argv[1], sys.argv[2])
first = client.enqueue("receipt-1", "demo-receipt", {"order": "A-1"})
replay = client.enqueue("receipt-1", "demo-receipt", {"order": "A-1"})
deadline = time.monotonic() + 60
while (operation := client.get("receipt-1")).state != "succeeded" and time.monotonic() < deadline:
    time.sleep(0.2)
print(json.dumps({"created": [first.created, first.operation.state], "replay": replay.created,
                  "state": operation.state, "fence": operation.fence, "outcome": operation.outcome_code}))
"""

#: `leasefence bench` finds the installed handlers too (no checkout around).
COLDSTART_ROOT = """\
from leasefence_tools.bench.coldstart import first_event_imports, repo_root
print(first_event_imports("functions.api.handler", repo_root()))
"""


def test_local_stack_and_cli_from_the_installed_wheel_in_an_empty_folder(
    built_wheel: dict[str, Any], tmp_path: Path
) -> None:
    """``pip install '<wheel>[local]'`` into a fresh venv, then from an empty folder:
    ``leasefence local`` serves the API with the installed handlers (it said ``unknown function
    'api'`` when it looked for ``functions/`` beside the sources), the stream worker runs the demo
    job, and the walkthrough's commands work against it."""
    work, uv = built_wheel["work"], built_wheel["uv"]
    started = time.monotonic()
    python = _make_venv(uv, work / "local-venv", work, built_wheel["env"], [f"{built_wheel['wheel']}[local]"])
    installed = time.monotonic() - started
    leasefence = str(python.with_name("leasefence"))
    folder = tmp_path / "empty"
    folder.mkdir()
    api_port, ddb_port = _free_port(), _free_port()
    env = {**built_wheel["env"], "LEASEFENCE_STATE_DIR": str(tmp_path / "state"),
           "LEASEFENCE_LOCAL_JWT_SECRET": "a-secret-for-the-installed-wheel-test"}
    base = f"http://127.0.0.1:{api_port}"
    log = (tmp_path / "local.txt").open("w+")
    process = subprocess.Popen(
        [leasefence, "local", "--port", str(api_port), "--dynamodb-port", str(ddb_port)],
        cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while "Press Ctrl-C to stop." not in (tmp_path / "local.txt").read_text():
            assert process.poll() is None, (tmp_path / "local.txt").read_text()[-3000:]
            assert time.monotonic() < deadline, "leasefence local never became ready"
            time.sleep(0.2)
        up = time.monotonic() - started - installed

        token = _run([leasefence, "token", "--tenant", "dev"], folder, env, 60).stdout.strip()
        assert token.count(".") == 2
        sdk = _run([str(python), "-c", SDK_WALKTHROUGH, base, token], folder, env, 120)
        walkthrough = json.loads(sdk.stdout.strip().splitlines()[-1])
        assert walkthrough == {"created": [True, "queued"], "replay": False, "state": "succeeded", "fence": 1,
                               "outcome": walkthrough["outcome"]} and walkthrough["outcome"].startswith("sent:")

        listed = _run([leasefence, "ops", "list", "--state", "succeeded", "--json"], folder, env, 60).stdout
        assert [json.loads(line)["operation_id"] for line in listed.splitlines() if line.strip()] == ["receipt-1"]
        assert "succeeded" in _run([leasefence, "ops", "show", "receipt-1"], folder, env, 60).stdout
        (folder / "sweep.json").write_text("{}")
        swept = _run([leasefence, "invoke", "sweeper", "--event", "sweep.json"], folder, env, 120).stdout
        assert '"stopped": "drained"' in swept

        with urllib.request.urlopen(f"{base}/openapi.json", timeout=30) as response:
            document = json.loads(response.read())
        assert response.status == 200 and "/v1/operations" in document["paths"]
        assert document["servers"] == [{"url": base, "description": "leasefence local"}]
        with urllib.request.urlopen(f"{base}/docs", timeout=30) as response:
            assert response.status == 200 and b"swagger" in response.read().lower()
        # `leasefence openapi` writes the document into the current folder (not beside the package).
        _run([leasefence, "openapi"], folder, env, 120)
        written = json.loads((folder / "openapi.json").read_text())
        assert written["paths"] == document["paths"]

        roots = _run([str(python), "-c", COLDSTART_ROOT], folder, env, 60).stdout
        assert "leasefence.api.routes" in roots
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    log.seek(0)
    output = log.read()
    assert code == 0, output[-3000:]
    assert "unknown function" not in output
    assert sorted(p.name for p in folder.iterdir()) == ["openapi.json", "sweep.json"]  # nothing else written
    print(f"\n[local] venv {installed:.1f} s, leasefence local ready in {up:.1f} s")


# ------------------------------------------------------------ every documented pip install line

#: What the distribution installed in a venv says about itself (nothing of it imported: the
#: lines run with --no-deps).
INSTALLED = """\
import importlib.metadata, importlib.util, json
found = importlib.metadata.distribution("leasefence")
print(json.dumps({"version": found.version, "extras": found.metadata.get_all("Provides-Extra") or [],
                  "requires": found.requires or [], "files": [str(f) for f in found.files or []],
                  "origins": {name: importlib.util.find_spec(name).origin
                              for name in ("leasefence", "leasefence_tools")}}))
"""


def _tagged_clone(src: Path, env: dict[str, str], version: str) -> str:
    """The copy of the sources made a git repository with a tag, as a reader's clone is."""
    git_env = {**env, "GIT_AUTHOR_NAME": "adopter", "GIT_AUTHOR_EMAIL": "adopter@example.com",
               "GIT_COMMITTER_NAME": "adopter", "GIT_COMMITTER_EMAIL": "adopter@example.com"}
    tag = f"v{version}"
    for command in (["init", "--quiet"], ["add", "pyproject.toml", "README.md", "Makefile", "layers", "tools",
                                          "infra", "functions"],
                    ["commit", "--quiet", "-m", "a release"], ["tag", tag]):
        _run(["git", *command], src, git_env, 60)
    return tag


def _documented(argument: str, src: Path, tag: str) -> str:
    """A documented argument with its placeholders replaced (tests.support.pip_installs)."""
    return (argument.replace(f"git+{PLACEHOLDERS['remote']}", f"git+file://{src}")
            .replace(PLACEHOLDERS["ref"], tag).replace(PLACEHOLDERS["clone"], str(src)))


def _extra_requirements(requirements: list[str], extra: str) -> set[tuple[str, str]]:
    parsed = map(Requirement, requirements)
    return {(r.name, str(r.specifier)) for r in parsed if r.marker is None or r.marker.evaluate({"extra": extra})}


def test_every_documented_pip_install_line_installs_this_version(built_wheel: dict[str, Any]) -> None:
    """Each ``pip install`` line of the install guide and the construct library's Install section,
    as written but for its placeholders (a clone: the copy of the sources, tagged; the git remote:
    that clone), run by pip from the clone's folder into a fresh venv: it installs this version,
    from the place it names, with the extras it asks for and their requirements. ``--no-deps``:
    the dependencies themselves are installed and used by the tests above, from the same wheel."""
    work, env, uv, src, version = (built_wheel[k] for k in ("work", "env", "uv", "src", "version"))
    tag = _tagged_clone(src, env, version)
    python = _make_venv(uv, work / "docs-venv", work, env, [])
    project_extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    lines = run_by_adopter_test()
    assert len(lines) >= 5, [line.where() for line in lines]
    started, ran = time.monotonic(), set()
    for line in lines:
        argv = shlex.split(line.text, comments=True)
        assert argv[:2] == ["pip", "install"], f"{line.where()}: a pip install line starts with it: {line.text}"
        arguments = tuple(_documented(a, src, tag) for a in argv[2:])
        assert not [a for a in arguments if "<" in a], f"{line.where()}: a placeholder the test does not know"
        if arguments in ran:
            continue
        ran.add(arguments)
        _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", *arguments],
             src, env, 600)
        found = json.loads(_run([str(python), "-c", INSTALLED], work, env, 60).stdout.strip().splitlines()[-1])
        assert found["version"] == version, line.where()
        (requested,) = [a for a in arguments if "[" in a]
        extras = requested.split("[", 1)[1].split("]", 1)[0].split(",")
        for extra in extras:
            assert extra in found["extras"], (line.where(), extra)
            assert _extra_requirements(found["requires"], extra) >= _extra_requirements(project_extras[extra], extra)
        origin = Path(found["origins"]["leasefence"]).resolve()
        if "-e" in arguments:
            assert origin == src / "layers" / "leasefence" / "__init__.py", line.where()
        else:
            assert origin.is_relative_to((work / "docs-venv").resolve()), (line.where(), origin)
            assert "leasefence_infra/_functions/worker/handler.py" in found["files"], line.where()
            assert "leasefence_infra/requirements.lock" in found["files"], line.where()
    print(f"\n{len(ran)} documented pip install lines in {time.monotonic() - started:.1f} s")
