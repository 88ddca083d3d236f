"""SnapStart runtime hooks: restored instances must not share the random state of the snapshot.

A "restore" here is what SnapStart does to a process: the memory state taken before the
snapshot (the engine's generator state), then the after-restore hooks. Two restores of the same
state stand for two instances started from one snapshot.
"""

from __future__ import annotations

import random
import sys
import types

from tests.support.runtime import installed
from leasefence import Engine, settings, snapstart

SHARDS = 16


def _shard_orders(engine, claims: int = 3) -> list[list[int]]:
    """The shard order of the engine's next claims (``claim_next`` shuffles its shards the same way)."""
    orders = []
    for _ in range(claims):
        shards = list(range(SHARDS))
        engine.rng.shuffle(shards)
        orders.append(shards)
    return orders


def _restore(engine, snapshot_state, *, hooks: bool) -> list[list[int]]:
    engine.rng.setstate(snapshot_state)
    if hooks:
        snapstart.run_after_restore()
    return _shard_orders(engine)


def test_after_restore_reseeds_the_engine_so_restored_instances_do_not_claim_in_lockstep():
    with installed(settings.Settings(table_name="snapstart-ops")) as runtime:
        engine = runtime.engine  # built during init, i.e. before the snapshot
        snapshot_state = engine.rng.getstate()

        # Without the hook: every restored instance tries the shards in the same order.
        assert _restore(engine, snapshot_state, hooks=False) == _restore(
            engine, snapshot_state, hooks=False
        )

        first = _restore(engine, snapshot_state, hooks=True)
        assert engine.rng.getstate() != snapshot_state  # the hook ran and re-seeded it
        second = _restore(engine, snapshot_state, hooks=True)
        assert first != second


def test_after_restore_reseeds_tenant_engines_too():
    with installed(
        settings.Settings(table_name="snapstart-ops", tenant_role_arn="arn:aws:iam::1:role/t")
    ) as runtime:
        tenant_engine = Engine(spec=runtime.settings.table_spec, rng=random.Random(7))
        runtime._tenant_engines["t1"] = tenant_engine  # as engine_for("t1") caches it
        before = tenant_engine.rng.getstate()
        snapstart.run_after_restore()
        assert tenant_engine.rng.getstate() != before


def test_hooks_register_with_the_lambda_runtime_library_when_it_is_importable(monkeypatch):
    registered: dict[str, list] = {"before": [], "after": []}
    fake = types.ModuleType("snapshot_restore_py")
    fake.register_before_snapshot = registered["before"].append
    fake.register_after_restore = registered["after"].append
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", fake)
    monkeypatch.setattr(snapstart, "RUNTIME_LIBRARY", snapstart._runtime_library())
    monkeypatch.setattr(snapstart, "_after_restore", [])
    monkeypatch.setattr(snapstart, "_before_snapshot", [])

    def reseed():
        pass

    def warm():
        pass

    assert snapstart.after_restore(reseed) is reseed
    assert snapstart.before_snapshot(warm) is warm
    assert registered == {"before": [warm], "after": [reseed]}
    # Kept locally too, so the hooks can run where there is no SnapStart.
    assert snapstart._after_restore == [reseed] and snapstart._before_snapshot == [warm]


def test_worker_function_builds_a_new_worker_identity_after_restore(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    from functions.worker import handler

    monkeypatch.setattr(handler, "_built", ("runtime", "worker built before the snapshot", None))
    snapstart.run_after_restore()
    assert handler._built is None


def test_api_imports_its_resolver_before_the_snapshot():
    from leasefence.api import app

    assert app.resolver in snapstart._before_snapshot
    snapstart.run_before_snapshot()
    assert "leasefence.api.routes" in sys.modules


HANDLERS = ("api", "sweeper", "worker", "publisher")

# A fresh interpreter, configured as a deployed function (tracing off: the X-Ray SDK is not what
# this checks): importing the handlers imports none of what they declare for the first event,
# and the before-snapshot hooks import all of it.
_FIRST_EVENT_CHECK = """
import importlib, json, sys
handlers = [importlib.import_module(f"functions.{{h}}.handler") for h in {handlers!r}]
declared = sorted({{m for h in handlers for m in h.FIRST_EVENT_IMPORTS}})
at_import = [m for m in declared if m in sys.modules]
from leasefence import snapstart
snapstart.run_before_snapshot()
print(json.dumps({{"declared": declared, "at_import": at_import,
                  "after_hooks": [m for m in declared if m in sys.modules]}}))
"""


def test_handlers_import_their_first_event_modules_before_the_snapshot_not_at_import():
    import json
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "layers")]),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "AWS_REGION": "us-east-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_EVENT_CHECK.format(handlers=HANDLERS)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result = json.loads(out.stdout)
    assert {"leasefence.engine", "aws_lambda_powertools.utilities.batch"} <= set(result["declared"])
    assert result["at_import"] == []
    assert result["after_hooks"] == result["declared"]


def test_the_bench_reads_each_handlers_first_event_imports_from_its_source():
    import importlib
    from pathlib import Path

    from leasefence_tools.bench import coldstart

    root = Path(__file__).resolve().parents[2]
    for name in HANDLERS:
        module = importlib.import_module(f"functions.{name}.handler")
        declared = coldstart.first_event_imports(f"functions.{name}.handler", root)
        assert declared == module.FIRST_EVENT_IMPORTS
        assert "leasefence.engine" in declared
    assert coldstart.first_event_imports("functions.pretoken.handler", root) == ()


def test_preload_imports_its_modules_only_when_the_hooks_run(tmp_path, monkeypatch):
    (tmp_path / "preload_probe_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(snapstart, "_before_snapshot", [])
    assert snapstart.preload("preload_probe_module") == ("preload_probe_module",)
    assert "preload_probe_module" not in sys.modules
    snapstart.run_before_snapshot()
    assert sys.modules["preload_probe_module"].VALUE == 1
    monkeypatch.delitem(sys.modules, "preload_probe_module")


def test_the_package_names_resolve_on_first_use():
    import leasefence
    from leasefence import engine, errors, model

    assert leasefence.Engine is engine.Engine
    assert leasefence.StaleFence is errors.StaleFence
    assert leasefence.State is model.State
    assert "Engine" in dir(leasefence)
    try:
        leasefence.NoSuchName  # noqa: B018
    except AttributeError as error:
        assert "NoSuchName" in str(error)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
