"""The state folder of a local stack (leasefence_tools.local.state): where a stack writes, where
the commands look, the lock that makes it one stack per folder, and what the commands say when no
stack runs where they looked."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from leasefence_tools.cli import app as cli
from leasefence_tools.local.state import (
    ENV,
    FOLDER,
    LOCK_FILE,
    STATE_FILE,
    StateFolder,
    StateFolderInUse,
    find,
    own_folder,
)
from tests.support import ROOT


@pytest.fixture(autouse=True)
def _no_state_variable(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def _hold(folder, **state) -> StateFolder:
    held = StateFolder(folder)
    held.acquire()
    held.write({"pid": os.getpid(), **state})
    return held


def test_a_stack_uses_state_dir_then_the_variable_then_the_current_folder(tmp_path, monkeypatch):
    assert own_folder(cwd=tmp_path) == tmp_path / FOLDER
    monkeypatch.setenv(ENV, str(tmp_path / "from-env"))
    assert own_folder(cwd=tmp_path) == tmp_path / "from-env"
    assert own_folder(tmp_path / "given", cwd=tmp_path) == tmp_path / "given"
    monkeypatch.chdir(tmp_path)
    assert own_folder("relative") == tmp_path / "relative"  # absolute, to be printed


def test_commands_find_the_nearest_running_stack_from_a_subfolder(tmp_path):
    outer = _hold(tmp_path / FOLDER, base_url="http://outer")
    inner = _hold(tmp_path / "a" / FOLDER, base_url="http://inner")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    try:
        found = find(cwd=deep)
        assert (found.folder, found.running, found.get("base_url")) == (
            tmp_path / "a" / FOLDER,
            True,
            "http://inner",
        )
        assert find(cwd=tmp_path / "a").get("base_url") == "http://inner"
        assert find(cwd=tmp_path).get("base_url") == "http://outer"
        inner.release()  # stopped: its folder stays, without a state, so the search goes on up
        assert (tmp_path / "a" / FOLDER).is_dir()
        assert find(cwd=deep).get("base_url") == "http://outer"
    finally:
        inner.release()
        outer.release()


def test_state_dir_and_the_variable_are_taken_as_given(tmp_path, monkeypatch):
    held = _hold(tmp_path / "named", base_url="http://named")
    near = _hold(tmp_path / FOLDER, base_url="http://near")
    try:
        assert find(tmp_path / "named", cwd=tmp_path).get("base_url") == "http://named"
        monkeypatch.setenv(ENV, str(tmp_path / "named"))
        assert find(cwd=tmp_path).get("base_url") == "http://named"
        monkeypatch.setenv(ENV, str(tmp_path / "empty"))
        found = find(cwd=tmp_path)
        assert (found.folder, found.running) == (tmp_path / "empty", False)
        assert found.why_none() == (
            f"no running local stack in the state folder {tmp_path / 'empty'} (no {STATE_FILE} there)"
        )
        assert find(tmp_path / FOLDER, cwd=tmp_path).get("base_url") == "http://near"
    finally:
        held.release()
        near.release()


def test_a_state_whose_holder_died_is_stale_and_the_next_stack_replaces_it(tmp_path):
    folder = tmp_path / FOLDER
    folder.mkdir()
    (folder / STATE_FILE).write_text(json.dumps({"pid": 4242, "base_url": "http://gone:1"}))
    found = find(cwd=tmp_path)
    assert not found.running and found.get("base_url") is None
    assert found.stale["pid"] == 4242
    assert "(pid 4242, http://gone:1) is no longer running" in found.why_none()
    held = StateFolder(folder)
    held.acquire()  # the lock is free: the dead stack's state goes
    try:
        assert not (folder / STATE_FILE).exists()
        assert (folder / LOCK_FILE).read_text().strip() == str(os.getpid())
    finally:
        held.release()


def test_one_holder_per_folder_until_it_lets_go(tmp_path):
    folder = tmp_path / "state"
    first = _hold(folder, base_url="http://first:1")
    try:
        with pytest.raises(StateFolderInUse) as refused:
            StateFolder(folder).acquire()
        message = str(refused.value)
        assert f"the state folder {folder} is in use" in message
        assert f"pid {os.getpid()}, API at http://first:1" in message
        assert "--state-dir" in message
        assert json.loads((folder / STATE_FILE).read_text())["base_url"] == "http://first:1"
        assert stat.S_IMODE((folder / STATE_FILE).stat().st_mode) == 0o600  # it holds the secret
        assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    finally:
        first.release()
    assert not (folder / STATE_FILE).exists()
    second = StateFolder(folder)
    second.acquire()
    second.release()


def test_a_holder_still_starting_is_named_by_its_pid(tmp_path):
    held = StateFolder(tmp_path)
    held.acquire()  # no state written yet
    try:
        with pytest.raises(StateFolderInUse, match=rf"pid {os.getpid()}, still starting"):
            StateFolder(tmp_path).acquire()
    finally:
        held.release()


# ------------------------------------------------------------- what the commands say without one


@pytest.mark.parametrize(
    "command, other",
    [
        (["ops", "list"], "--base-url"),
        (["ops", "show", "op-1"], "--base-url"),
        (["job-types", "list"], "--base-url"),
        (["controls"], "--base-url"),
        (["events", "tail", "--count", "1"], "--endpoint"),
        (["invoke", "api", "--event", str(ROOT / "events" / "api-health.json")], "--endpoint"),
    ],
    ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else v,
)
def test_a_command_without_a_running_stack_names_the_folder_it_looked_in(
    command, other, tmp_path, monkeypatch
):
    for name in ("LEASEFENCE_BASE_URL", "LEASEFENCE_TOKEN", "LEASEFENCE_DYNAMODB_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(cli, [*command, "--state-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert f"no running local stack in the state folder {tmp_path}" in result.output
    assert other in result.output and "leasefence local" in result.output


def test_token_without_a_secret_names_the_folder_it_looked_in(tmp_path, monkeypatch):
    monkeypatch.delenv("LEASEFENCE_LOCAL_JWT_SECRET", raising=False)
    result = CliRunner().invoke(cli, ["token", "--tenant", "acme", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert f"no running local stack in the state folder {tmp_path}" in result.output


def test_the_state_folder_is_ignored_by_git():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"{FOLDER}/" in ignored
