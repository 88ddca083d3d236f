"""The core Lambda layer, built on this machine without Docker.

``aws-lambda-python-alpha`` and CDK's default bundling both need Docker. The core layer needs
pure-Python code plus a few compiled wheels (``pydantic-core``, ``wrapt``), and pip can fetch
genuine ``manylinux2014_aarch64`` / ``py3-none-any`` wheels for Lambda's Python 3.12 on any host.
So the layer is built by :class:`LocalLayerBundler`, an ``ILocalBundling`` that CDK calls at synth:

* the locked versions (``requirements.lock``, see :mod:`.versions`) of :data:`LAYER_DISTRIBUTIONS`
  (Powertools with the X-Ray SDK, pydantic, fastjsonschema, rfc8785, and every dependency of theirs
  that the Lambda runtime does not provide) are installed with ``pip install --no-deps --platform
  manylinux2014_aarch64 --only-binary=:all: --python-version 3.12 --implementation cp --target
  <out>/python`` from a wheel cache (:func:`wheel_cache_dir`); the wheels missing there are
  downloaded into it first (``pip download``, the only step that needs a package index), so a
  second synth works offline;
* the installed distributions are compiled to Python 3.12 bytecode (``compileall``,
  ``unchecked-hash``: reproducible, never re-checked) when a CPython 3.12 is found
  (:func:`find_bytecode_python`), so that a cold start does not compile Powertools and pydantic
  from source (``/opt`` is read-only: nothing compiled there is kept); without one the layer ships
  sources only and says so;
* the installed ``leasefence`` package is copied to ``<out>/python/leasefence`` as it is, without
  ``__pycache__`` and compiled files: the package is exactly the runtime (the CLI, the local stack,
  the benchmarks, the torture run, the demo, the rollout kit and the fakes are a separate package,
  ``leasefence_tools``, that the layer never sees).

:func:`package_layer_code` builds any other package the same way (a worker's handler module).

When no wheel can be had (typically: no package index offline and an empty cache), the
distributions installed in the Python running the synth stand in if each is exactly the pinned
version and pure Python (a ``py3-none-any`` wheel: the same files pip would have fetched);
otherwise synthesis stops with :class:`LayerBundlingError`, one sentence saying what is missing and
what to do (pip's output is printed before it). It never returns ``False``: that would make CDK
fall back to Docker, which is not what anybody on this project wants to debug.
"""

from __future__ import annotations

import functools
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

#: Distributions the core layer ships besides ``leasefence`` by default (``powertools_layer=
#: "bundled"``): Powertools with what the functions use of it (the X-Ray SDK for the Tracer, pydantic
#: for the validated API, fastjsonschema for payload schemas), rfc8785, and every dependency of
#: theirs that the Lambda runtime does not provide (:data:`LAMBDA_RUNTIME_DISTRIBUTIONS`). They are
#: installed without dependency resolution, so nothing else comes in (a test checks the closure).
LAYER_DISTRIBUTIONS: tuple[str, ...] = (
    "rfc8785",
    "aws-lambda-powertools",
    "jmespath",
    "aws-xray-sdk",
    "wrapt",
    "pydantic",
    "pydantic-core",
    "annotated-types",
    "typing-inspection",
    "typing-extensions",
    "fastjsonschema",
)
#: Their locked versions, ``name==version``: exact pins keep the layer's content hash (and so
#: CDK's bundling cache) stable, and a lock update changes it.
LAYER_REQUIREMENTS: tuple[str, ...] = locked_requirements(LAYER_DISTRIBUTIONS)
#: What the core layer ships besides ``leasefence`` when Powertools comes from another layer
#: (``powertools_layer="managed"`` or a layer ARN): that layer brings Powertools, pydantic,
#: fastjsonschema and the X-Ray SDK (in the versions its release was built with).
SLIM_LAYER_DISTRIBUTIONS: tuple[str, ...] = ("rfc8785",)
SLIM_LAYER_REQUIREMENTS: tuple[str, ...] = locked_requirements(SLIM_LAYER_DISTRIBUTIONS)
#: The distributions a core layer's description names (with their versions).
_DESCRIBED = ("rfc8785", "aws-lambda-powertools", "pydantic", "fastjsonschema", "aws-xray-sdk")


def layer_description(requirements: Sequence[str]) -> str:
    """``leasefence core package + rfc8785 0.1.4, aws-lambda-powertools 3.37.0, ... (python3.12,
    arm64)``: what an operator looking at the layer version wants to know (at most 256 chars)."""
    pins = {Requirement(r).name: next(iter(Requirement(r).specifier)).version for r in requirements}
    named = [f"{name} {pins[name]}" for name in _DESCRIBED if name in pins]
    return f"leasefence core package + {', '.join(named)} (python3.12, arm64)"[:256]


#: Provided by Lambda's python3.12 runtime, never bundled (the SDK and its dependencies).
LAMBDA_RUNTIME_DISTRIBUTIONS: tuple[str, ...] = (
    "boto3",
    "botocore",
    "s3transfer",
    "urllib3",
    "python-dateutil",
    "six",
)

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
#: The bytecode Lambda's python3.12 runs (``sys.implementation.cache_tag``).
LAMBDA_CACHE_TAG = "cpython-312"
#: Where the layer's ``python/`` is mounted in Lambda (the path compiled files name).
LAMBDA_LAYER_PATH = "/opt/python"
#: Environment variables: a CPython 3.12 to compile the layer's bytecode with, and the wheel cache.
BYTECODE_PYTHON_ENV = "LEASEFENCE_BYTECODE_PYTHON"
WHEEL_CACHE_ENV = "LEASEFENCE_WHEEL_CACHE"

#: The installed core package, found through its import spec (``layers/leasefence`` in a checkout
#: installed in editable mode, ``site-packages/leasefence`` from the wheel).
PACKAGE_DIR = Path(importlib.util.find_spec("leasefence").origin).parent  # type: ignore[union-attr,arg-type]

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


def is_cache(rel: Path) -> bool:
    """Whether a path (relative to the package root) is a cache or a compiled file: the one kind
    of file that stays out of the layer (and its hash). Everything else in the package ships."""
    return any(part in _IGNORED_DIRS for part in rel.parts) or rel.name.endswith(_IGNORED_SUFFIXES)


def _ignore_caches(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if is_cache(Path(directory) / n)}


def wheel_cache_dir() -> Path:
    """Where downloaded Lambda wheels are kept between synths: ``$LEASEFENCE_WHEEL_CACHE``, else
    ``leasefence/lambda-wheels-cp312-aarch64`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    configured = os.environ.get(WHEEL_CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "leasefence" / "lambda-wheels-cp312-aarch64"


@functools.cache
def _cache_tag(python: str) -> str | None:
    """``sys.implementation.cache_tag`` of an interpreter, or None if it does not run."""
    try:
        proc = subprocess.run(
            [python, "-c", "import sys; print(sys.implementation.cache_tag)"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def find_bytecode_python() -> str | None:
    """A CPython 3.12 to compile the layer's bytecode with: ``$LEASEFENCE_BYTECODE_PYTHON``, else
    the Python running the synth, ``python3.12`` or ``python3`` on the ``PATH``, the first that
    runs and whose bytecode is :data:`LAMBDA_CACHE_TAG`. None when there is none."""
    configured = os.environ.get(BYTECODE_PYTHON_ENV)
    candidates = (
        [configured]
        if configured
        else [sys.executable, shutil.which("python3.12"), shutil.which("python3")]
    )
    for candidate in candidates:
        if candidate and _cache_tag(candidate) == LAMBDA_CACHE_TAG:
            return candidate
    return None


def compile_bytecode(site: Path, python: str, *, timeout_s: float = 300.0) -> None:
    """Compile every ``.py`` under ``site`` with ``python``: ``unchecked-hash`` pycs (no
    timestamp: the same sources give the same files; never re-checked at import, as nothing
    changes under ``/opt``), naming the files as Lambda mounts them (:data:`LAMBDA_LAYER_PATH`)."""
    targets = sorted(str(p) for p in site.iterdir() if p.name != "bin")
    if not targets:
        return
    cmd = [
        python,
        "-m",
        "compileall",
        "-q",
        "--invalidation-mode",
        "unchecked-hash",
        "-s",
        str(site),
        "-p",
        LAMBDA_LAYER_PATH,
        *targets,
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LayerBundlingError(f"could not compile the layer's bytecode ({exc})") from exc
    if proc.returncode != 0:
        # compileall goes on past a file it cannot compile (and exits 1): that file stays source.
        print(
            f"layer bytecode: some files were left as source ({(proc.stdout + proc.stderr).strip()[-500:]})",
            file=sys.stderr,
        )


def pip_args(extra_pip_args: Sequence[str], resolve_dependencies: bool) -> tuple[str, ...]:
    """What the bundler adds to every pip command (and to the fingerprint)."""
    return (*(() if resolve_dependencies else ("--no-deps",)), *extra_pip_args)


def source_fingerprint(
    package_dir: Path = PACKAGE_DIR,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    extra_pip_args: Sequence[str] = (),
    bytecode: str | None = None,
) -> str:
    """SHA-256 over the shipped files (path + bytes), the requirements, the pip target and the
    bytecode the requirements are compiled to (``None``: sources only).

    Used as the asset hash: the same sources give the same hash (CDK then reuses a bundle it
    already built in the same ``cdk.out``), any edit of a shipped file gives a new one.
    """
    h = hashlib.sha256()
    for item in (*requirements, *PIP_PLATFORM_ARGS, *extra_pip_args):
        h.update(item.encode() + b"\0")
    if bytecode is not None and requirements:
        h.update(b"bytecode:" + bytecode.encode() + b"\0")
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if is_cache(rel):
            continue
        if path.is_file():
            h.update(str(rel.as_posix()).encode() + b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


@jsii.implements(ILocalBundling)
class LocalLayerBundler:
    """Builds ``<output_dir>/python/{<package>,<requirements>}`` with pip, no Docker.

    The package is copied as it is (caches and compiled files left out).
    ``resolve_dependencies``: let pip add the requirements' dependencies (default: no, the
    requirements list every one, as the core layer's do); ``extra_pip_args`` go to every pip
    command.
    ``bytecode_python``: the CPython 3.12 that compiles the installed requirements (default:
    :func:`find_bytecode_python`; ``""`` for none). ``wheel_cache``: where downloaded wheels are
    kept (default :func:`wheel_cache_dir`).
    """

    def __init__(
        self,
        package_dir: Path = PACKAGE_DIR,
        requirements: Sequence[str] = LAYER_REQUIREMENTS,
        *,
        python: str = sys.executable,
        extra_pip_args: Sequence[str] = (),
        timeout_s: float = 300.0,
        resolve_dependencies: bool = False,
        bytecode_python: str | None = None,
        wheel_cache: str | os.PathLike[str] | None = None,
    ) -> None:
        self.package_dir = Path(package_dir)
        self.requirements = tuple(requirements)
        self.python = python
        self.extra_pip_args = pip_args(extra_pip_args, resolve_dependencies)
        self.timeout_s = timeout_s
        self.bytecode_python = (
            find_bytecode_python() if bytecode_python is None else bytecode_python or None
        )
        self.wheel_cache = Path(wheel_cache) if wheel_cache is not None else wheel_cache_dir()

    @property
    def bytecode(self) -> str | None:
        """The bytecode the installed requirements ship with, or None (sources only)."""
        return LAMBDA_CACHE_TAG if self.bytecode_python else None

    def _pip(self, verb: str, *args: str) -> list[str]:
        return [
            self.python,
            "-m",
            "pip",
            verb,
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            *PIP_PLATFORM_ARGS,
            *self.extra_pip_args,
            *args,
            *self.requirements,
        ]

    def pip_command(self, target: Path) -> list[str]:
        """Install the requirements into ``target`` from the wheel cache alone (no index)."""
        return self._pip(
            "install",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(self.wheel_cache),
            "--target",
            str(target),
        )

    def download_command(self) -> list[str]:
        """Download the requirements' wheels missing from the cache into it (needs an index)."""
        return self._pip(
            "download", "--find-links", str(self.wheel_cache), "--dest", str(self.wheel_cache)
        )

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
            shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts are useless here
            if self.bytecode_python:
                compile_bytecode(site, self.bytecode_python, timeout_s=self.timeout_s)
            else:
                print(
                    f"{self.package_dir.name} layer: no CPython 3.12 found to compile its "
                    f"dependencies' bytecode ({BYTECODE_PYTHON_ENV}, python3.12 on the PATH), so "
                    "each cold start compiles them from source",
                    file=sys.stderr,
                )
        dest = site / self.package_dir.name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.package_dir, dest, ignore=_ignore_caches)
        return site

    def _run_pip(self, cmd: list[str]) -> str | None:
        """Run pip; ``None`` when it succeeded, else what it (or the attempt to run it) said."""
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

    def _pip_install(self, site: Path) -> str | None:
        """Install from the wheel cache, downloading what it lacks first; ``None`` when it
        worked, else pip's output."""
        if self._run_pip(self.pip_command(site)) is None:
            return None
        self.wheel_cache.mkdir(parents=True, exist_ok=True)
        downloaded = self._run_pip(self.download_command())
        if downloaded is not None:
            return downloaded
        return self._run_pip(self.pip_command(site))

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
                f"({'; '.join(problems)}): let pip reach a package index (PyPI, or PIP_INDEX_URL) "
                f"once, which keeps the wheels in {self.wheel_cache}, or install exactly these "
                "pure-Python versions here (make install), and synthesize again.",
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
        if file.parts[0] == ".." or is_cache(Path(*file.parts)):
            continue  # console scripts outside site-packages; caches
        source = Path(str(dist.locate_file(file)))
        if source.is_file():
            dest = site.joinpath(*file.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)


def fetch_wheels(
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    wheel_cache: str | os.PathLike[str] | None = None,
) -> Path:
    """Download the core layer's wheels into the wheel cache now (needs a package index), so that
    later synths work offline (``make install`` runs it)."""
    bundler = LocalLayerBundler(
        requirements=requirements, wheel_cache=wheel_cache, bytecode_python=""
    )
    bundler.wheel_cache.mkdir(parents=True, exist_ok=True)
    failed = bundler._run_pip(bundler.download_command())
    if failed is not None:
        raise LayerBundlingError(
            f"could not download {', '.join(requirements)} for Lambda (python3.12, arm64) into "
            f"{bundler.wheel_cache}: let pip reach a package index (PyPI, or PIP_INDEX_URL).",
            details=failed,
        )
    return bundler.wheel_cache


def core_layer_code(
    package_dir: Path = PACKAGE_DIR,
    requirements: Sequence[str] = LAYER_REQUIREMENTS,
    *,
    extra_pip_args: Sequence[str] = (),
    resolve_dependencies: bool = False,
) -> lambda_.Code:
    """``Code`` for the core layer, bundled locally at synth time (see module docstring).
    ``requirements``: :data:`LAYER_REQUIREMENTS` (Powertools bundled, the default) or
    :data:`SLIM_LAYER_REQUIREMENTS` (Powertools from another layer)."""
    bundler = LocalLayerBundler(
        package_dir,
        requirements,
        extra_pip_args=extra_pip_args,
        resolve_dependencies=resolve_dependencies,
    )
    return lambda_.Code.from_asset(
        str(package_dir),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=source_fingerprint(
            package_dir, requirements, bundler.extra_pip_args, bundler.bytecode
        ),
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
) -> lambda_.Code:
    """``Code`` for a layer holding one package of yours (``python/<package>``) and, optionally,
    its pinned requirements (with their dependencies) as aarch64 / Python 3.12 wheels; built like
    the core layer.

    Meant for :attr:`WorkerProps.code`: ``package_layer_code("src/acme_jobs")`` ships
    ``acme_jobs`` so that ``handlers="acme_jobs.jobs:HANDLERS"`` can import it.
    """
    return core_layer_code(
        Path(package_dir).resolve(),
        tuple(requirements),
        extra_pip_args=extra_pip_args,
        resolve_dependencies=True,
    )
