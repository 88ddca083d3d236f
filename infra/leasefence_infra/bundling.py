"""The core Lambda layer, built on this machine without Docker.

``aws-lambda-python-alpha`` and CDK's default bundling both need Docker. The core layer only
needs pure-Python code plus ``rfc8785``, and pip can fetch genuine ``manylinux2014_aarch64`` /
``py3-none-any`` wheels for Lambda's Python 3.12 on any host. So the layer is built by
:class:`LocalLayerBundler`, an ``ILocalBundling`` that CDK calls at synth time:

* ``pip install --platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.12
  --implementation cp --target <out>/python <requirements>``, the requirements being the locked
  versions (``requirements.lock``, see :mod:`.versions`) of :data:`LAYER_DISTRIBUTIONS`;
* copy the installed ``leasefence`` package to ``<out>/python/leasefence``, without the dev-only
  parts (:data:`CORE_LAYER_EXCLUDES`: the local stack, the CLI, the demo, the benchmarks, fault
  injection, the torture harness, the rollout kit) and without ``__pycache__``.

:func:`package_layer_code` builds any other package the same way (a worker's handler module).

When pip fails (typically: no package index offline), the distributions installed in the Python
running the synth stand in if each is exactly the pinned version and pure Python (a
``py3-none-any`` wheel: the same files pip would have fetched); otherwise synthesis stops with
:class:`LayerBundlingError`, one sentence saying what is missing and what to do (pip's output is
printed before it). It never returns ``False``: that would make CDK fall back to Docker, which is
not what anybody on this project wants to debug.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from packaging import tags
from packaging.requirements import Requirement

from .versions import locked_requirements

#: Distributions shipped in the core layer, with every dependency of theirs that Lambda does not
#: provide (a test checks that pip adds nothing else). boto3 is in the Lambda runtime; Powertools
#: (with pydantic) comes from the AWS-managed Powertools layer (see :mod:`.versions`).
LAYER_DISTRIBUTIONS: tuple[str, ...] = ("rfc8785",)
#: Their locked versions, ``name==version``: exact pins keep the layer's content hash (and so
#: CDK's bundling cache) stable, and a lock update changes it.
LAYER_REQUIREMENTS: tuple[str, ...] = locked_requirements(LAYER_DISTRIBUTIONS)

#: Lambda target: Python 3.12 on Graviton (arm64). Lambda's python3.12 runtime is Amazon Linux
#: 2023 (glibc 2.34), so wheels published only for ``manylinux_2_28`` are accepted too.
PIP_PLATFORM_ARGS: tuple[str, ...] = (
    "--platform",
    "manylinux2014_aarch64",
    "--platform",
    "manylinux_2_28_aarch64",
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
)

#: The installed core package, found through its import spec (``layers/leasefence`` in a checkout
#: installed in editable mode, ``site-packages/leasefence`` from the wheel).
PACKAGE_DIR = Path(importlib.util.find_spec("leasefence").origin).parent  # type: ignore[union-attr,arg-type]

#: Dev-only parts of the core package that the Lambda layer does not ship, as glob patterns on
#: the path relative to the package (``leasefence/``); a directory pattern drops its whole tree.
#: Nothing a function imports may live here (``tests/infra`` checks the bundled tree's imports).
CORE_LAYER_EXCLUDES: tuple[str, ...] = (
    "local",  # the local stack (moto, in-process server)
    "cli.py",  # `leasefence` command line
    "demo",  # zombie demo and its instrumented kits
    "bench",  # benchmarks and request-unit meter
    "faults.py",  # fault-injecting client for tests
    "torture*",  # torture harness
    "kit",  # rollout kit: leasefence verify, the pytest plugin, the shadow report
)

_IGNORED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")

#: Wheel tags an installed distribution may carry to stand in for a Lambda (cp312) wheel offline.
_PURE_PYTHON_TAGS = frozenset(
    tags.compatible_tags(python_version=(3, 12), interpreter="cp312", platforms=["any"])
)


class LayerBundlingError(RuntimeError):
    """The core layer could not be built locally (never falls back to Docker).

    ``str()`` is one sentence; ``details`` holds pip's output, if pip ran.
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def is_excluded(rel: Path, excludes: Sequence[str] = ()) -> bool:
    """Whether a path relative to the package root stays out of the layer (and its hash).

    A pattern (``fnmatch``, anchored at the package root) excludes the path it matches and, for
    a directory, everything below it; caches and compiled files are always excluded.
    """
    if any(part in _IGNORED_DIRS for part in rel.parts) or rel.name.endswith(_IGNORED_SUFFIXES):
        return True
    prefixes = ["/".join(rel.parts[: i + 1]) for i in range(len(rel.parts))]
    return any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes for pattern in excludes)


def _ignore_for(root: Path, excludes: Sequence[str]):
    def ignore(directory: str, names: list[str]) -> set[str]:
        base = Path(directory).relative_to(root)
        return {n for n in names if is_excluded(base / n, excludes)}

    return ignore


def source_fingerprint(
    package_dir: Path = PACKAGE_DIR,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    extra_pip_args: Sequence[str] = (),
    excludes: Sequence[str] = CORE_LAYER_EXCLUDES,
) -> str:
    """SHA-256 over the shipped files (path + bytes), the requirements and the pip target.

    Used as the asset hash: the same sources give the same hash (CDK then reuses a bundle it
    already built in the same ``cdk.out``), any edit of a shipped file gives a new one; an edit of
    an excluded (dev-only) file does not.
    """
    h = hashlib.sha256()
    for item in (*requirements, *PIP_PLATFORM_ARGS, *extra_pip_args):
        h.update(item.encode() + b"\0")
    for pattern in excludes:
        h.update(b"exclude:" + pattern.encode() + b"\0")
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if is_excluded(rel, excludes):
            continue
        if path.is_file():
            h.update(str(rel.as_posix()).encode() + b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


@jsii.implements(ILocalBundling)
class LocalLayerBundler:
    """Builds ``<output_dir>/python/{<package>,<requirements>}`` with pip, no Docker.

    ``excludes`` (see :func:`is_excluded`) defaults to the core package's dev-only parts; give
    ``()`` for any other package.
    """

    def __init__(
        self,
        package_dir: Path = PACKAGE_DIR,
        requirements: Sequence[str] = LAYER_REQUIREMENTS,
        *,
        python: str = sys.executable,
        extra_pip_args: Sequence[str] = (),
        excludes: Sequence[str] = CORE_LAYER_EXCLUDES,
        timeout_s: float = 300.0,
    ) -> None:
        self.package_dir = Path(package_dir)
        self.requirements = tuple(requirements)
        self.python = python
        self.extra_pip_args = tuple(extra_pip_args)
        self.excludes = tuple(excludes)
        self.timeout_s = timeout_s

    def pip_command(self, target: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--no-compile",
            *PIP_PLATFORM_ARGS,
            *self.extra_pip_args,
            "--target",
            str(target),
            *self.requirements,
        ]

    def build(self, output_dir: str | os.PathLike[str]) -> Path:
        """Build the layer tree into ``output_dir``; raise :class:`LayerBundlingError` on failure."""
        if not (self.package_dir / "__init__.py").is_file() and not any(
            self.package_dir.glob("*.py")
        ):
            raise LayerBundlingError(f"no Python package at {self.package_dir}")
        site = Path(output_dir) / "python"
        site.mkdir(parents=True, exist_ok=True)
        if self.requirements:
            pip_output = self._pip_install(site)
            if pip_output is not None:
                self._install_from_environment(site, pip_output)
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts are useless in a layer
        dest = site / self.package_dir.name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.package_dir, dest, ignore=_ignore_for(self.package_dir, self.excludes))
        return site

    def _pip_install(self, site: Path) -> str | None:
        """Run pip; ``None`` when it succeeded, else what it (or the attempt to run it) said."""
        cmd = self.pip_command(site)
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"could not run pip ({exc}); command: {' '.join(cmd)}"
        if proc.returncode == 0:
            return None
        return (
            f"pip exited {proc.returncode}; command: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
        )

    def _install_from_environment(self, site: Path, pip_output: str) -> None:
        """Copy the installed distributions into ``site`` if every requirement is an exact pin met by
        an installed pure-Python distribution; else raise :class:`LayerBundlingError`."""
        found: list[importlib.metadata.Distribution] = []
        problems: list[str] = []
        for text in self.requirements:
            dist, problem = _installed_stand_in(Requirement(text))
            if dist is None:
                problems.append(problem or f"{text}: not installed")
            else:
                found.append(dist)
        if problems:
            raise LayerBundlingError(
                f"{self.package_dir.name} layer: pip could not install {', '.join(self.requirements)} "
                f"for Lambda (python3.12, arm64) and no installed copy can stand in "
                f"({'; '.join(problems)}): let pip reach a package index (PyPI, or PIP_INDEX_URL), "
                "or install exactly these pure-Python versions here (make install), and synthesize again.",
                details=pip_output,
            )
        for dist in found:
            _copy_distribution(dist, site)
        print(
            f"{self.package_dir.name} layer: pip failed, so the installed pure-Python "
            f"{', '.join(self.requirements)} were bundled instead (pip said: "
            f"{pip_output.strip().splitlines()[-1] if pip_output.strip() else 'nothing'})",
            file=sys.stderr,
        )

    # ILocalBundling
    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:  # noqa: ARG002
        try:
            self.build(output_dir)
        except Exception as exc:
            # jsii turns a Python exception raised in a callback into a failed synth; print it
            # too, because the wrapped message may be truncated.
            details = getattr(exc, "details", "")
            print(
                f"{details}\n{self.package_dir.name} layer bundling FAILED: {exc}".lstrip(),
                file=sys.stderr,
            )
            raise
        return True


def _installed_stand_in(
    requirement: Requirement,
) -> tuple[importlib.metadata.Distribution | None, str]:
    """The installed distribution that may replace the pinned wheel offline, or why there is none."""
    specs = list(requirement.specifier)
    if len(specs) != 1 or specs[0].operator != "==":
        return None, f"{requirement} is not an exact pin"
    name, version = requirement.name, specs[0].version
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None, f"{name} is not installed"
    if dist.version != version:
        return None, f"{name} {dist.version} is installed, not {version}"
    wheel = dist.read_text("WHEEL") or ""
    wheel_tags = {
        t
        for line in wheel.splitlines()
        if line.startswith("Tag:")
        for t in tags.parse_tag(line.split(":", 1)[1].strip())
    }
    if not wheel_tags or not wheel_tags <= _PURE_PYTHON_TAGS:
        found = ", ".join(sorted(map(str, wheel_tags))) or "no wheel tag"
        return None, f"the installed {name} {version} is not pure Python ({found})"
    if dist.files is None:
        return None, f"the installed {name} {version} has no RECORD of its files"
    return dist, ""


def _copy_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Copy an installed distribution's files (its RECORD) into ``site``, as pip --target would."""
    for file in dist.files or ():
        if file.parts[0] == ".." or is_excluded(Path(*file.parts)):
            continue  # console scripts outside site-packages; caches
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            dest = site.joinpath(*file.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)


def core_layer_code(
    package_dir: Path = PACKAGE_DIR,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    *,
    extra_pip_args: Sequence[str] = (),
    excludes: Sequence[str] = CORE_LAYER_EXCLUDES,
) -> lambda_.Code:
    """``Code`` for the core layer, bundled locally at synth time (see module docstring)."""
    bundler = LocalLayerBundler(
        package_dir, requirements, extra_pip_args=extra_pip_args, excludes=excludes
    )
    return lambda_.Code.from_asset(
        str(package_dir),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=source_fingerprint(package_dir, requirements, extra_pip_args, excludes),
        bundling=BundlingOptions(
            # Required by the API but never pulled: the local bundler either succeeds or raises.
            image=DockerImage.from_registry("leasefence-local-bundling-only"),
            local=bundler,
        ),
    )


def package_layer_code(
    package_dir: str | os.PathLike[str],
    requirements: Sequence[str] = (),
    *,
    extra_pip_args: Sequence[str] = (),
    excludes: Sequence[str] = (),
) -> lambda_.Code:
    """``Code`` for a layer holding one package of yours (``python/<package>``) and, optionally,
    its pinned requirements as aarch64 / Python 3.12 wheels; built like the core layer.

    Meant for :attr:`WorkerProps.code`: ``package_layer_code("src/acme_jobs")`` ships
    ``acme_jobs`` so that ``handlers="acme_jobs.jobs:HANDLERS"`` can import it.
    """
    return core_layer_code(
        Path(package_dir).resolve(),
        tuple(requirements),
        extra_pip_args=extra_pip_args,
        excludes=excludes,
    )
