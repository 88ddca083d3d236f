"""Cold start: import time of each Lambda handler module against a bare ``import boto3``.

Each import runs in a fresh interpreter (``python -c``) that times the ``import`` statement alone
(interpreter start-up excluded, identically for every module), in CPU time (see :func:`measure`).
Runs alternate between modules so that background load hits all of them alike; the figure is the
median. One more run per handler
with ``-X importtime`` gives the breakdown: the top packages by cumulative import time.

Every handler the service deploys is measured (:data:`HANDLERS`), imported from the repository
root as ``functions.<name>.handler`` (the same code Lambda imports as ``handler``), with the
environment of the benchmark process plus what a Lambda function has at import
(:func:`lambda_environment`): ``LAMBDA_TASK_ROOT`` and ``AWS_EXECUTION_ENV`` (the X-Ray SDK and
Powertools' Tracer decide from them that they run in Lambda: tracing on, the local sampler, no
X-Ray client built at import), ``AWS_LAMBDA_FUNCTION_NAME``, ``AWS_REGION`` and the function's
``LEASEFENCE_*`` settings; and as deployed, with tracing on (``POWERTOOLS_TRACE_DISABLED`` is
dropped). Like Lambda, which ships the handlers and the core layer without bytecode, the
leasefence modules are compiled at import (``PYTHONDONTWRITEBYTECODE``, no ``__pycache__`` kept).

A handler imports at module level only what runs before its first line; what its first event
needs (the engine and boto3, the API's validated resolver, the batch utility ...) it names in
``FIRST_EVENT_IMPORTS`` (read here from its source: :func:`first_event_imports`), imported on that
event or, with SnapStart, before the snapshot. Each handler is measured with those modules too
(``with_first_request_ratio``): the import plus the first event's imports is the cold start of a
container without SnapStart, so deferring an import never hides its cost.
"""

from __future__ import annotations

import ast
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HANDLERS = (
    "functions.api.handler",
    "functions.sweeper.handler",
    "functions.worker.handler",
    "functions.publisher.handler",
    "functions.pretoken.handler",
)
BASELINE = "boto3"
#: The name a handler module gives the modules its first event imports (rather than the module
#: itself; with SnapStart they are imported before the snapshot). Each handler's import is
#: measured with them too (``with_first_request_ratio``), so the report shows what the deferral
#: moved, not only what it saved.
FIRST_EVENT_NAME = "FIRST_EVENT_IMPORTS"

#: Prints "<cpu seconds> <wall seconds>" of the import statement alone.
_TIMER = (
    "import time, sys\n"
    "c, t = time.process_time(), time.perf_counter()\n"
    "import {module}\n"
    "sys.stdout.write(f'{{time.process_time() - c}} {{time.perf_counter() - t}}')\n"
)
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def repo_root() -> Path:
    """A root whose ``functions/`` holds the handlers: the repository (found from this file or the
    cwd), else, for the installed wheel, a temporary folder whose ``functions`` links to the
    installed handlers (``leasefence_infra/_functions``)."""
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "functions" / "api" / "handler.py").exists():
                return candidate
    from leasefence_tools.local.server import FUNCTIONS_DIR

    if FUNCTIONS_DIR is None:
        raise FileNotFoundError(
            "the Lambda handlers are neither in a checkout (functions/) nor installed "
            "(leasefence_infra/_functions)"
        )
    root = Path(tempfile.mkdtemp(prefix="leasefence-coldstart-"))
    (root / "functions").symlink_to(FUNCTIONS_DIR, target_is_directory=True)
    return root


def first_event_imports(module: str, root: Path) -> tuple[str, ...]:
    """The modules ``module`` (a handler) declares its first event imports: the string arguments
    of its ``FIRST_EVENT_IMPORTS = preload(...)``, read from the source (the benchmark never
    imports a handler in its own process); ``()`` when it declares none."""
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == FIRST_EVENT_NAME for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            names = [
                a.value
                for a in node.value.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            if len(names) != len(node.value.args):
                raise ValueError(f"{path}: {FIRST_EVENT_NAME} must list module names as strings")
            return tuple(names)
    return ()


def lambda_environment(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (the benchmark's environment) as a deployed function has it at import."""
    env = dict(os.environ if base is None else base)
    env.pop("POWERTOOLS_TRACE_DISABLED", None)  # deployed functions trace (Tracing.ACTIVE)
    env.update(
        {
            "LAMBDA_TASK_ROOT": str(root),
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.12",
            "AWS_LAMBDA_FUNCTION_NAME": "leasefence-bench",
            "AWS_REGION": env.get("AWS_REGION", "us-east-1"),
            "AWS_DEFAULT_REGION": env.get("AWS_DEFAULT_REGION", "us-east-1"),
            "LEASEFENCE_TABLE": "leasefence-operations",
            "PYTHONPATH": os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


def _run_python(
    module: str, args: list[str], root: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter that imports ``module``; a failed import raises (never a 0 figure)."""
    result = subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"import {module} failed: {result.stderr.strip().splitlines()[-1:]}")
    return result


def _time_import(module: str, root: Path, env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of ``import module`` in a fresh interpreter."""
    result = _run_python(module, ["-c", _TIMER.format(module=module)], root, env)
    cpu, wall = result.stdout.split()
    return float(cpu), float(wall)


def importtime_breakdown(
    module: str, root: Path, env: dict[str, str], top: int = 8
) -> dict[str, Any]:
    """``-X importtime`` for one module: its cumulative time and the costliest top-level packages
    it pulled in (by the largest cumulative entry per top-level package)."""
    result = _run_python(module, ["-X", "importtime", "-c", f"import {module}"], root, env)
    rows = []
    for line in result.stderr.splitlines():
        match = _LINE.match(line)
        if match:
            rows.append(
                (int(match.group(1)), int(match.group(2)), len(match.group(3)) // 2, match.group(4))
            )
    total = next((cum for _self, cum, _depth, name in rows if name == module), None)
    by_package: dict[str, int] = {}
    for _self, cum, _depth, name in rows:
        package = name.split(".")[0]
        by_package[package] = max(by_package.get(package, 0), cum)
    by_self: dict[str, int] = {}
    for self_us, _cum, _depth, name in rows:
        by_self[name] = self_us
    return {
        "cumulative_ms": round((total or 0) / 1000, 1),
        "top_packages_ms": {
            k: round(v / 1000, 1)
            for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
            if k not in ("encodings", "site")
        },
        "top_self_ms": {
            k: round(v / 1000, 1) for k, v in sorted(by_self.items(), key=lambda kv: -kv[1])[:top]
        },
    }


def measure(runs: int = 7, breakdowns: tuple[str, ...] = HANDLERS) -> dict[str, Any]:
    """Median CPU time of each import over ``runs`` fresh interpreters (alternating order), and
    its ratio to a bare ``import boto3``. CPU time, not wall time: on a shared machine another
    process's load stretches the wall time of one run by up to 3x, the CPU time by a few percent
    (an import is CPU-bound: the files are in the page cache). Wall medians are reported too.
    ``breakdowns``: the handlers that also get an ``-X importtime`` run (one interpreter each)."""
    root = repo_root()
    env = lambda_environment(root)
    first_event = {h: first_event_imports(h, root) for h in HANDLERS}
    with_first = {h: ", ".join((h, *m)) for h, m in first_event.items() if m}
    modules = (BASELINE, *HANDLERS, *with_first.values())
    cpu: dict[str, list[float]] = {m: [] for m in modules}
    wall: dict[str, list[float]] = {m: [] for m in modules}
    for i in range(runs):
        order = modules if i % 2 == 0 else tuple(reversed(modules))
        for module in order:
            cpu_s, wall_s = _time_import(module, root, env)
            cpu[module].append(cpu_s)
            wall[module].append(wall_s)
    medians = {m: statistics.median(v) for m, v in cpu.items()}
    base = medians[BASELINE]
    handlers: dict[str, dict[str, Any]] = {}
    for module in HANDLERS:
        handlers[module] = {
            "median_ms": round(medians[module] * 1000, 1),
            "ratio": round(medians[module] / base, 3),
            "runs_ms": [round(t * 1000, 1) for t in cpu[module]],
            "wall_median_ms": round(statistics.median(wall[module]) * 1000, 1),
        }
        if module in breakdowns:
            handlers[module]["importtime"] = importtime_breakdown(module, root, env)
        if module in with_first:
            handlers[module]["first_request_imports"] = list(first_event[module])
            handlers[module]["with_first_request_ratio"] = round(
                medians[with_first[module]] / base, 3
            )
            handlers[module]["with_first_request_median_ms"] = round(
                medians[with_first[module]] * 1000, 1
            )
    return {
        "runs": runs,
        "boto3_median_ms": round(base * 1000, 1),
        "boto3_runs_ms": [round(t * 1000, 1) for t in cpu[BASELINE]],
        "boto3_wall_median_ms": round(statistics.median(wall[BASELINE]) * 1000, 1),
        "handlers": handlers,
        "import_ratio_max": max(h["ratio"] for h in handlers.values()),
        "with_first_request_ratio_max": max(
            h.get("with_first_request_ratio", h["ratio"]) for h in handlers.values()
        ),
        "method": "median CPU time of the import statement in fresh interpreters (Lambda's "
        "environment, tracing on), alternating order",
    }
