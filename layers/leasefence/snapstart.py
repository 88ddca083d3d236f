"""Lambda SnapStart runtime hooks: what runs before the snapshot and after each restore.

With SnapStart, Lambda initializes a function once per published version, snapshots its memory,
and starts every later instance from that snapshot. Anything random or unique created before the
snapshot is then the same in every restored instance: the engine's random generator (shard and
candidate order of a claim) would make restored instances claim in lockstep, contending for the
same items. So:

* :func:`after_restore` registers a hook that Lambda runs in each restored instance before its
  first invocation (the settings module re-seeds every engine it built, the worker runtime its
  jitter, and the process-wide ``random``);
* :func:`before_snapshot` registers a hook that Lambda runs once, before the snapshot;
  :func:`preload` is the common case: each handler names the modules its first event imports
  (``FIRST_EVENT_IMPORTS``: the engine, the validated resolver, the batch utility ...), and they
  are imported there, so restored instances do not import them on their first event. The
  benchmark reports each handler's import with and without them
  (:mod:`leasefence_tools.bench.coldstart`).

Lambda's Python runtime provides ``snapshot_restore_py`` (``register_before_snapshot``,
``register_after_restore``); when it is importable the hooks are registered with it, and always
kept here too, so :func:`run_after_restore` / :func:`run_before_snapshot` can run them where there
is no SnapStart (tests, local stacks). Without SnapStart nothing calls them.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from typing import Any, TypeVar

Hook = TypeVar("Hook", bound=Callable[[], object])

_before_snapshot: list[Callable[[], object]] = []
_after_restore: list[Callable[[], object]] = []


def _runtime_library() -> Any:
    """Lambda's ``snapshot_restore_py`` module, or None where it is not importable."""
    try:
        import snapshot_restore_py  # type: ignore[import-not-found]
    except ImportError:
        return None
    return snapshot_restore_py


#: Looked up once (a failed import is not cached by Python: each attempt would search sys.path).
RUNTIME_LIBRARY = _runtime_library()


def after_restore(hook: Hook) -> Hook:
    """Run ``hook()`` in every instance restored from a snapshot (usable as a decorator)."""
    if RUNTIME_LIBRARY is not None:
        RUNTIME_LIBRARY.register_after_restore(hook)
    _after_restore.append(hook)
    return hook


def before_snapshot(hook: Hook) -> Hook:
    """Run ``hook()`` once before the snapshot is taken (usable as a decorator)."""
    if RUNTIME_LIBRARY is not None:
        RUNTIME_LIBRARY.register_before_snapshot(hook)
    _before_snapshot.append(hook)
    return hook


def preload(*modules: str) -> tuple[str, ...]:
    """Import ``modules`` before the snapshot (what the first event would import otherwise);
    returns them, so a handler can keep the list it declared."""

    def import_first_event_modules() -> None:
        for name in modules:
            importlib.import_module(name)

    before_snapshot(import_first_event_modules)
    return modules


def run_after_restore() -> None:
    """What Lambda does after a restore: run the registered after-restore hooks, in order."""
    for hook in list(_after_restore):
        hook()


def run_before_snapshot() -> None:
    """What Lambda does before the snapshot: run the registered before-snapshot hooks, in order."""
    for hook in list(_before_snapshot):
        hook()


@after_restore
def _reseed_process_random() -> None:
    # The module-level generator (botocore's retry jitter among others), seeded at interpreter
    # start, i.e. before the snapshot. Seeding with no argument draws from os.urandom.
    random.seed()
