"""Clients generated from openapi.json by three mainstream generators each complete a lifecycle
(enqueue, claim, heartbeat, a stale complete refused, complete; the Python one a batch too)
against the local stack, and type the enqueue body as the document means it: a body without
``operation_id``, with ``payload: null``, or with neither payload nor reference does not
type-check (``tsc --strict`` without skipLibCheck over the ``@ts-expect-error`` lines of the
lifecycle files; mypy ``--warn-unused-ignores`` over python_types_check.py).

Each generator writes into the test's temporary folder: what is checked is what the committed
document generates today, so nothing generated is committed (nor can go stale).
"""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from leasefence_tools.local.tokens import ALL_SCOPES
from tests.generated_clients.support import (
    DOCUMENT,
    GENERATOR_VENV,
    HERE,
    NODE_MODULES,
    last_json,
    run,
    tool,
)
from tests.support.api import Api, new_tenant


@pytest.fixture
def lifecycle_env(stack) -> dict[str, str]:
    tenant = new_tenant()
    return {
        "LEASEFENCE_URL": stack.base_url,
        "LEASEFENCE_TOKEN": stack.token(tenant, ALL_SCOPES),
        "OPERATION_ID": f"generated-{uuid.uuid4().hex[:8]}",
    }


def _assert_lifecycle(stack, env: dict[str, str], seen: dict[str, Any]) -> None:
    """What the client saw, and the operation as the server tells it."""
    assert seen["enqueued"] == 201
    assert seen["fence"] >= 1
    assert seen["stale"] == [409, "stale_fence"]
    assert seen["state"] == "succeeded"
    operation = Api(stack.base_url, env["LEASEFENCE_TOKEN"]).get(
        f"/v1/operations/{env['OPERATION_ID']}"
    )
    assert operation.status == 200
    assert (operation.json["state"], operation.json["outcome_code"]) == ("succeeded", "done")
    assert operation.json["fence"] == seen["fence"]


def _typescript_project(tmp_path: Path, lifecycle: str) -> Path:
    """A folder with this folder's tsconfig.json, the lifecycle files and its node_modules."""
    (tmp_path / "node_modules").symlink_to(NODE_MODULES)
    for name in ("tsconfig.json", "lifecycle_common.ts", lifecycle):
        shutil.copy(HERE / name, tmp_path)
    return tmp_path


def test_openapi_typescript(stack, lifecycle_env, tmp_path) -> None:
    project = _typescript_project(tmp_path, "lifecycle_openapi_typescript.ts")
    # --default-non-nullable false: a request field with a default may be left out (the
    # generator's default makes it required, as it is in an answer).
    run(
        tool("openapi-typescript"),
        DOCUMENT,
        "--default-non-nullable",
        "false",
        "-o",
        project / "api.d.ts",
    )
    run(tool("tsc"), "-p", project)
    seen = last_json(
        run("node", project / "out" / "lifecycle_openapi_typescript.js", env=lifecycle_env)
    )
    _assert_lifecycle(stack, lifecycle_env, seen)


def test_hey_api_openapi_ts(stack, lifecycle_env, tmp_path) -> None:
    project = _typescript_project(tmp_path, "lifecycle_hey_api.ts")
    run(tool("openapi-ts"), "-i", DOCUMENT, "-o", project / "hey", cwd=project)
    run(tool("tsc"), "-p", project)
    seen = last_json(run("node", project / "out" / "lifecycle_hey_api.js", env=lifecycle_env))
    _assert_lifecycle(stack, lifecycle_env, seen)


def test_openapi_python_client(stack, lifecycle_env, tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("post_hooks: []\n")  # no ruff run over the output: not needed to import it
    package = tmp_path / "generated" / "leasefence_client"
    run(
        tool("openapi-python-client"),
        "generate",
        "--path",
        DOCUMENT,
        "--output-path",
        package,
        "--meta",
        "none",
        "--config",
        config,
    )
    # mypy refuses the bodies the document refuses (each `type: ignore` there must be needed).
    mypy_ini = tmp_path / "mypy.ini"
    mypy_ini.write_text("[mypy]\n")
    run(
        Path(sys.executable).with_name("mypy"),
        "--strict",
        "--warn-unused-ignores",
        "--follow-imports=silent",
        "--no-incremental",
        "--config-file",
        mypy_ini,
        "--python-executable",
        GENERATOR_VENV / "bin" / "python",
        HERE / "python_types_check.py",
        env={"MYPYPATH": str(package.parent)},
    )
    output = run(
        GENERATOR_VENV / "bin" / "python",
        HERE / "lifecycle_python.py",
        package.parent,
        env=lifecycle_env,
    )
    seen = last_json(output)
    _assert_lifecycle(stack, lifecycle_env, seen)
    assert seen["refused_without_operation_id"] is True
    assert seen["newer_code"] == "a_code_added_later"
    assert seen["batched"] == [[201, "EnqueueOut"], [409, "ErrorOut"]]
