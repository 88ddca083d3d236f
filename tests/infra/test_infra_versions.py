"""Reproducible builds: one lock (``requirements.lock``), tested and deployed alike.

* the lock pins everything ``pyproject.toml`` asks for, and this venv runs exactly those pins;
* the core layer bundles the locked versions of Powertools, pydantic, fastjsonschema, the X-Ray SDK
  and rfc8785 and of every dependency of theirs the Lambda runtime lacks (from the wheel cache,
  pip filling it when an index answers; offline with a warm cache; else the installed pure-Python
  wheels), and says in one sentence what is missing when nothing works;
* the managed Powertools layer (an option) is the one published for the locked aws-lambda-powertools.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import tomllib
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest
from leasefence_infra import function
from leasefence_infra.bundling import (
    LAMBDA_RUNTIME_DISTRIBUTIONS,
    LAYER_DISTRIBUTIONS,
    LAYER_REQUIREMENTS,
    SLIM_LAYER_DISTRIBUTIONS,
    LayerBundlingError,
    LocalLayerBundler,
)
from leasefence_infra.versions import (
    LAMBDA_ENVIRONMENT,
    LOCK_FILE,
    LockError,
    locked_version,
    locked_versions,
    powertools_layer_parameter,
)
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
HERE = default_environment()


def bundled_versions(site: Path) -> dict[str, str]:
    """``{canonical name: version}`` of every distribution in a layer's ``python/`` (dist-info METADATA)."""
    found = {}
    for metadata in site.glob("*.dist-info/METADATA"):
        headers = Parser().parsestr(metadata.read_text(), headersonly=True)
        found[canonicalize_name(headers["Name"])] = headers["Version"]
    return found


def assert_bundles_the_locked_versions(site: Path, distributions: tuple[str, ...] = LAYER_DISTRIBUTIONS) -> None:
    """The layer holds exactly the core layer's distributions, each at its locked version, and
    the compiled ones are built for Lambda (CPython 3.12 on aarch64), not for this machine."""
    assert bundled_versions(site) == {canonicalize_name(n): locked_version(n) for n in distributions}
    if "pydantic-core" in distributions:
        (binary,) = (site / "pydantic_core").glob("_pydantic_core.*.so")
        assert binary.name == "_pydantic_core.cpython-312-aarch64-linux-gnu.so"


def _project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    return [r for r in map(Requirement, texts) if canonicalize_name(r.name) != "leasefence"]


@pytest.mark.parametrize("target", ["this venv", "lambda"])
def test_lock_pins_every_project_requirement(target: str) -> None:
    """Every requirement of pyproject.toml (all extras) is locked at a version it accepts; fails
    when pyproject.toml changed without `make lock`."""
    environment = HERE if target == "this venv" else LAMBDA_ENVIRONMENT
    locked = locked_versions(environment)
    stale = [
        f"{r} (locked: {locked.get(canonicalize_name(r.name))})"
        for r in _project_requirements()
        if (r.marker is None or r.marker.evaluate(dict(environment)))
        and not r.specifier.contains(locked.get(canonicalize_name(r.name), "0.0.0.dev0"), prereleases=True)
    ]
    assert stale == [], "run make lock"


def test_this_venv_runs_the_locked_versions() -> None:
    """`make install` installs with the lock as constraints: what the tests run is what is locked."""
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    differ = {name: (version, installed.get(name)) for name, version in locked_versions(HERE).items()
              if installed.get(name) != version}
    assert differ == {}, "name: (locked, installed); run make install"


def test_core_layer_requirements_come_from_the_lock() -> None:
    assert LAYER_REQUIREMENTS == tuple(f"{n}=={locked_version(n)}" for n in LAYER_DISTRIBUTIONS)
    assert locked_version("RFC8785") == locked_version("rfc8785")  # any spelling of the name


def test_core_layer_bundles_the_locked_versions(tmp_path: Path) -> None:
    """The real bundler (pip for aarch64 / py3.12, through the wheel cache)."""
    site = LocalLayerBundler().build(tmp_path)
    assert_bundles_the_locked_versions(site)
    for package in ("rfc8785", "aws_lambda_powertools", "pydantic", "fastjsonschema", "aws_xray_sdk"):
        assert (site / package / "__init__.py").is_file(), package
    assert not (site / "boto3").exists() and not (site / "botocore").exists()  # the runtime's
    # Lambda allows 250 MB unzipped for a function and all its layers: this one leaves most of it
    # to the adopter's own layers (measured: 13.3 MB; 18.9 MB with cp312 bytecode).
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    assert size < 40 * 2**20, f"core layer {size / 2**20:.1f} MB unzipped"


def _requires(name: str) -> set[str]:
    """What a distribution needs in Lambda (no extras), by canonical name (this venv's metadata:
    the same locked versions)."""
    return {
        canonicalize_name(r.name)
        for r in map(Requirement, importlib.metadata.requires(name) or ())
        if r.marker is None or r.marker.evaluate({**LAMBDA_ENVIRONMENT, "extra": ""})
    }


def test_core_layer_ships_every_dependency_the_runtime_lacks() -> None:
    """pip installs the layer with --no-deps: its list must be closed under dependencies, the
    Lambda runtime's boto3 and its own dependencies aside. Fails when a lock update brings a new
    dependency that nobody added."""
    shipped = {canonicalize_name(n) for n in LAYER_DISTRIBUTIONS}
    provided = {canonicalize_name(n) for n in LAMBDA_RUNTIME_DISTRIBUTIONS}
    missing = {f"{name} needs {dep}" for name in shipped for dep in _requires(name) if dep not in shipped | provided}
    assert missing == set()
    assert not shipped & provided
    # The slim layer (Powertools from its own layer) is part of it.
    assert {canonicalize_name(n) for n in SLIM_LAYER_DISTRIBUTIONS} <= shipped


def test_core_layer_ships_every_runtime_dependency_of_the_project() -> None:
    """What pyproject.toml says the functions need at run time is in the layer (boto3 aside)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    assert needed - {canonicalize_name(n) for n in LAYER_DISTRIBUTIONS} == {"boto3"}


def test_powertools_layer_is_the_locked_release() -> None:
    version = locked_version("aws-lambda-powertools")
    assert version == importlib.metadata.version("aws-lambda-powertools")  # what the tests import
    assert function.POWERTOOLS_LAYER_PARAMETER == f"/aws/service/powertools/python/arm64/python3.12/{version}"
    assert powertools_layer_parameter("3.30.0") == "/aws/service/powertools/python/arm64/python3.12/3.30.0"


def test_lock_reader_evaluates_markers_and_refuses_ranges(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text(
        "# header\n"
        "Typing_Extensions==4.12.2 ; python_full_version < '3.12'\n"
        "typing-extensions==4.15.0 ; python_full_version >= '3.12'\n"
        "    # via pydantic\n"
        "pywin32==311 ; sys_platform == 'win32'\n"
    )
    assert locked_versions(LAMBDA_ENVIRONMENT, lock) == {"typing-extensions": "4.15.0"}
    assert locked_versions({**LAMBDA_ENVIRONMENT, "python_full_version": "3.11.7"}, lock) == {
        "typing-extensions": "4.12.2"}
    with pytest.raises(LockError, match="pywin32 is not pinned"):
        locked_version("pywin32", lock_file=lock)
    ranged = tmp_path / "ranged.lock"
    ranged.write_text("boto3>=1.35\n")
    with pytest.raises(LockError, match="not an exact pin"):
        locked_versions(lock_file=ranged)
    assert LOCK_FILE.parent.name == "leasefence_infra"  # ships inside the package


# ----------------------------------------------------------------------------- no package index


@pytest.fixture
def no_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """pip's only index is a localhost port that refuses connections (no config file, no retries)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{closed.getsockname()[1]}/simple")
        monkeypatch.setenv("PIP_RETRIES", "0")
        for name in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
            monkeypatch.delenv(name, raising=False)
        yield


def test_without_an_index_the_installed_pure_python_wheels_stand_in(
    no_index: None, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An empty wheel cache and no index: pure-Python pins are copied from this venv."""
    pure = ("rfc8785", "fastjsonschema")
    bundler = LocalLayerBundler(requirements=tuple(f"{n}=={locked_version(n)}" for n in pure),
                                wheel_cache=tmp_path / "empty-cache", bytecode_python="")
    site = bundler.build(tmp_path / "out")
    assert_bundles_the_locked_versions(site, pure)
    dist = importlib.metadata.distribution("rfc8785")
    copied = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file() and "rfc8785" in p.as_posix()}
    assert copied == {f.as_posix() for f in dist.files if "__pycache__" not in f.parts}
    assert (site / "leasefence" / "engine" / "_engine.py").is_file()
    assert "pip failed, so the installed pure-Python rfc8785==" in capfd.readouterr().err


def test_a_warm_wheel_cache_builds_the_whole_layer_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A first build with an index fills the cache; a second with no index at all still bundles
    every locked distribution, the compiled aarch64 ones too (nothing here could stand in)."""
    cache = tmp_path / "wheels"
    LocalLayerBundler(wheel_cache=cache, bytecode_python="").build(tmp_path / "online")
    assert len(list(cache.glob("*.whl"))) == len(LAYER_DISTRIBUTIONS)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{closed.getsockname()[1]}/simple")
        monkeypatch.setenv("PIP_RETRIES", "0")
        capfd.readouterr()
        site = LocalLayerBundler(wheel_cache=cache, bytecode_python="").build(tmp_path / "offline")
    assert_bundles_the_locked_versions(site)
    assert "pip failed" not in capfd.readouterr().err


def test_without_an_index_a_missing_stand_in_is_one_clear_sentence(no_index: None, tmp_path: Path) -> None:
    rfc8785 = importlib.metadata.version("rfc8785")
    pydantic_core = importlib.metadata.version("pydantic-core")  # compiled: cannot stand in for aarch64
    requirements = (f"rfc8785=={rfc8785}.post9", f"pydantic-core=={pydantic_core}", "leasefence-no-such-dist==1")
    with pytest.raises(LayerBundlingError) as excinfo:
        LocalLayerBundler(requirements=requirements, wheel_cache=tmp_path / "cache").build(tmp_path / "out")
    message = str(excinfo.value)
    assert message.startswith(f"leasefence layer: pip could not install {', '.join(requirements)}")
    assert f"rfc8785 {rfc8785} is installed, not {rfc8785}.post9" in message
    assert f"the installed pydantic-core {pydantic_core} is not pure Python (cp3" in message
    assert "leasefence-no-such-dist is not installed" in message
    assert "PIP_INDEX_URL" in message and "make install" in message
    assert message.endswith(".") and ". " not in message and "\n" not in message  # one sentence
    assert "pip exited" in excinfo.value.details  # pip's own words, printed before the sentence
    assert not (tmp_path / "out" / "python" / "rfc8785").exists()
