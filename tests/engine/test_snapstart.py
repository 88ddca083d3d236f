"""SnapStart runtime hooks: restored instances must not share the random state of the snapshot.

A "restore" here is what SnapStart does to a process: the memory state taken before the
snapshot (the engine's generator state), then the after-restore hooks. Two restores of the same
state stand for two instances started from one snapshot.
"""

from __future__ import annotations

import random
import sys
import types

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
    runtime = settings.install(settings.Settings(table_name="snapstart-ops"))
    try:
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
    finally:
        settings.reset()


def test_after_restore_reseeds_tenant_engines_too():
    runtime = settings.install(
        settings.Settings(table_name="snapstart-ops", tenant_role_arn="arn:aws:iam::1:role/t")
    )
    try:
        tenant_engine = Engine(spec=runtime.settings.table_spec, rng=random.Random(7))
        runtime._tenant_engines["t1"] = tenant_engine  # as engine_for("t1") caches it
        before = tenant_engine.rng.getstate()
        snapstart.run_after_restore()
        assert tenant_engine.rng.getstate() != before
    finally:
        settings.reset()


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
