"""The core Lambda layer, built on this machine without Docker.

``aws-lambda-python-alpha`` and CDK's default bundling both need Docker. The core layer only
needs pure-Python code plus ``rfc8785``, and pip can fetch genuine ``manylinux2014_aarch64`` /
``py3-none-any`` wheels for Lambda's Python 3.12 on any host. So the layer is built by
:class:`LocalLayerBundler`, an ``ILocalBundling`` that CDK calls at synth time:

* ``pip install --platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.12
  --implementation cp --target <out>/python <requirements>``
* copy the installed ``leasefence`` package to ``<out>/python/leasefence``, without the dev-only
  parts (:data:`CORE_LAYER_EXCLUDES`: the local stack, the CLI, the demo, the benchmarks, fault
  injection, the torture harness) and without ``__pycache__``.

:func:`package_layer_code` builds any other package the same way (a worker's handler module).

If that cannot work (no pip, no index, a wheel missing), synthesis fails with pip's output. It
never returns ``False``: that would make CDK fall back to Docker, which is not what anybody on
this project wants to debug.
"""

from __future__ import annotations

import fnmatch
import hashlib
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

#: Runtime dependencies shipped in the core layer. boto3 is in the Lambda runtime; Powertools
#: (with pydantic) comes from the AWS-managed Powertools layer. Pinned exactly so the layer's
#: content hash (and therefore CDK's bundling cache) is stable.
LAYER_REQUIREMENTS: tuple[str, ...] = ("rfc8785==0.1.4",)

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
    "local",        # the local stack (moto, in-process server)
    "cli.py",       # `leasefence` command line
    "demo",         # zombie demo and its instrumented kits
    "bench",        # benchmarks and request-unit meter
    "faults.py",    # fault-injecting client for tests
    "torture*",     # torture harness
)

_IGNORED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_IGNORED_SUFFIXES = (".pyc", ".pyo")


class LayerBundlingError(RuntimeError):
    """The core layer could not be built locally (never falls back to Docker)."""


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
        if not (self.package_dir / "__init__.py").is_file() and not any(self.package_dir.glob("*.py")):
            raise LayerBundlingError(f"no Python package at {self.package_dir}")
        site = Path(output_dir) / "python"
        site.mkdir(parents=True, exist_ok=True)
        if self.requirements:
            cmd = self.pip_command(site)
            try:
                proc = subprocess.run(
                    cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise LayerBundlingError(
                    f"{self.package_dir.name} layer: could not run pip ({exc}); command: {cmd}"
                ) from exc
            if proc.returncode != 0:
                raise LayerBundlingError(
                    f"{self.package_dir.name} layer: pip could not install the aarch64/py3.12 wheels "
                    f"(exit {proc.returncode}); command: {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
                )
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts are useless in a layer
        dest = site / self.package_dir.name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.package_dir, dest, ignore=_ignore_for(self.package_dir, self.excludes))
        return site

    # ILocalBundling
    def try_bundle(self, output_dir: str, options: BundlingOptions) -> bool:  # noqa: ARG002
        try:
            self.build(output_dir)
        except Exception as exc:
            # jsii turns a Python exception raised in a callback into a failed synth; print it
            # too, because the wrapped message may be truncated.
            print(f"{self.package_dir.name} layer bundling FAILED: {exc}", file=sys.stderr)
            raise
        return True


def core_layer_code(
    package_dir: Path = PACKAGE_DIR,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    *,
    extra_pip_args: Sequence[str] = (),
    excludes: Sequence[str] = CORE_LAYER_EXCLUDES,
) -> lambda_.Code:
    """``Code`` for the core layer, bundled locally at synth time (see module docstring)."""
    bundler = LocalLayerBundler(package_dir, requirements, extra_pip_args=extra_pip_args,
                                excludes=excludes)
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
        Path(package_dir).resolve(), tuple(requirements), extra_pip_args=extra_pip_args,
        excludes=excludes,
    )
