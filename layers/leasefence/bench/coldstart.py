"""Cold start: import time of each Lambda handler module against a bare ``import boto3``.

Each import runs in a fresh interpreter (``python -c``) that times the ``import`` statement alone
(interpreter start-up excluded, identically for every module). Runs alternate between modules so
that background load hits all of them alike; the figure is the median. One more run per handler
with ``-X importtime`` gives the breakdown: the top packages by cumulative import time.

The handlers are imported from the repository root as ``functions.api.handler`` and
``functions.sweeper.handler`` (the same code Lambda imports as ``handler``), with the
environment of the benchmark process plus what a Lambda function has at import:
``AWS_LAMBDA_FUNCTION_NAME``, ``AWS_REGION`` and the function's ``LEASEFENCE_*`` settings.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HANDLERS = ("functions.api.handler", "functions.sweeper.handler")
BASELINE = "boto3"

_TIMER = (
    "import time, sys\n"
    "t = time.perf_counter()\n"
    "import {module}\n"
    "sys.stdout.write(str(time.perf_counter() - t))\n"
)
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def repo_root() -> Path:
    """The repository root (where ``functions/`` lives), found from this file or the cwd."""
    for start in (Path(__file__).resolve(), Path.cwd().resolve()):
        for candidate in (start, *start.parents):
            if (candidate / "functions" / "api" / "handler.py").exists():
                return candidate
    raise FileNotFoundError(
        "functions/api/handler.py not found above the package or the working directory"
    )


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
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


def _time_import(module: str, root: Path, env: dict[str, str]) -> float:
    result = _run_python(module, ["-c", _TIMER.format(module=module)], root, env)
    return float(result.stdout.strip())


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


def measure(runs: int = 7) -> dict[str, Any]:
    root = repo_root()
    env = _env(root)
    modules = (BASELINE, *HANDLERS)
    times: dict[str, list[float]] = {m: [] for m in modules}
    for i in range(runs):
        order = modules if i % 2 == 0 else tuple(reversed(modules))
        for module in order:
            times[module].append(_time_import(module, root, env))
    medians = {m: statistics.median(v) for m, v in times.items()}
    base = medians[BASELINE]
    handlers: dict[str, dict[str, Any]] = {}
    for module in HANDLERS:
        handlers[module] = {
            "median_ms": round(medians[module] * 1000, 1),
            "ratio": round(medians[module] / base, 3),
            "runs_ms": [round(t * 1000, 1) for t in times[module]],
            "importtime": importtime_breakdown(module, root, env),
        }
    return {
        "runs": runs,
        "boto3_median_ms": round(base * 1000, 1),
        "boto3_runs_ms": [round(t * 1000, 1) for t in times[BASELINE]],
        "handlers": handlers,
        "import_ratio_max": max(h["ratio"] for h in handlers.values()),
        "method": "median wall time of the import statement in fresh interpreters, alternating order",
    }
