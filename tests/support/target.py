"""The DynamoDB the tests run on: the embedded endpoint, or the one
``LEASEFENCE_TEST_DYNAMODB_ENDPOINT`` names (:mod:`leasefence_tools.local.external`; opt-in).

On another endpoint the run's first lines say what it lacks (the capability probe's findings), a
test marked ``@pytest.mark.needs("transactions", ...)`` (names: ``external.NEEDS``) that needs
something it lacks is reported as not applicable, naming the capability, and the summary counts
them by capability. At the end the tables the run created are deleted (only those).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from leasefence_tools.local.embedded import EmbeddedAws
from leasefence_tools.local.external import NEEDS, ExternalDynamoDB

TARGET = pytest.StashKey[ExternalDynamoDB | None]()
#: What the run did on the target: outcomes of the tests that use it, and those not applicable by
#: the first capability lacking (read from the reports, so that it adds up under pytest-xdist).
TALLY = pytest.StashKey[Counter]()
_USES = "leasefence_target"
_NOT_APPLICABLE = "not applicable: "


def target_of(config: pytest.Config) -> ExternalDynamoDB | None:
    return config.stash.get(TARGET, None)


@pytest.fixture(scope="session")
def aws(pytestconfig):
    """One serialized embedded endpoint per session, or the DynamoDB the run targets (its tables
    there, S3 and the rest on an embedded endpoint of its own)."""
    target = target_of(pytestconfig)
    if target is not None:
        yield target
        return
    with EmbeddedAws() as server:
        yield server


@pytest.fixture(scope="module")
def own_endpoint(pytestconfig):
    """An endpoint of the module's own in a child process (thousands of requests, or many client
    threads, with no other test's tables and no interpreter lock to share), or the target."""
    target = target_of(pytestconfig)
    if target is not None:
        yield target
        return
    with EmbeddedAws(process=True) as server:
        yield server


@pytest.fixture
def table_named(pytestconfig):
    """For a test that creates a table itself: its spec as the target names it (under the run's
    prefix, deleted at the end); on the embedded endpoint, unchanged."""
    target = target_of(pytestconfig)
    return target.own if target is not None else (lambda spec: spec)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"needs(*capabilities): what the test needs of its DynamoDB ({', '.join(NEEDS)}); "
        "not applicable on an endpoint that lacks it",
    )
    target = ExternalDynamoDB.from_env()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if target is not None and worker:  # each pytest-xdist worker under a prefix of its own
        target.prefix = f"{target.prefix}-{worker}"
    config.stash[TARGET] = target.start() if target is not None else None
    config.stash[TALLY] = Counter()
    _TALLIES[:] = [config.stash[TALLY]] if target is not None else []


def pytest_unconfigure(config: pytest.Config) -> None:
    target = target_of(config)
    if target is not None:
        left = target.stop()
        if left:
            print(f"leasefence: could not delete the tables {', '.join(left)}: delete them")


def pytest_report_header(config: pytest.Config) -> str:
    target = target_of(config)
    return target.header() if target else "leasefence DynamoDB target: the embedded endpoint"


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """The header line even under ``-q`` (which leaves out pytest's header)."""
    target, reporter = (
        target_of(session.config),
        session.config.pluginmanager.get_plugin("terminalreporter"),
    )
    if target is not None and reporter is not None and session.config.option.verbose < 0:
        reporter.write_line(target.header())


def needed(item: pytest.Item) -> list[str]:
    """The capabilities ``item`` needs (its ``needs`` marks), each checked to be a known name."""
    names = [name for mark in item.iter_markers("needs") for name in mark.args]
    unknown = [name for name in names if name not in NEEDS]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: needs {unknown}; known: {', '.join(NEEDS)}")
    return [NEEDS[name] for name in names]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = target_of(config)
    for item in items:
        needs = needed(item)
        if target is None:
            continue
        lacking = [c for c in needs if c in target.lacking]
        if lacking:
            why = ", ".join(f"{c} ({target.lacking[c]})" for c in lacking)
            item.add_marker(pytest.mark.skip(reason=f"{_NOT_APPLICABLE}{target.name} lacks {why}"))
        elif {"aws", "own_endpoint"} & set(getattr(item, "fixturenames", ())):
            item.user_properties.append((_USES, True))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Tallied where the reports arrive (the controller, under pytest-xdist), once each."""
    tally = _TALLIES[0] if _TALLIES else None
    if tally is None:
        return
    if report.skipped and _NOT_APPLICABLE in str(report.longrepr):
        reason = str(report.longrepr).split(" lacks ", 1)[1]
        tally["not applicable: " + reason.split(" (", 1)[0]] += 1
    elif dict(report.user_properties).get(_USES) and (report.when == "call" or report.failed):
        tally[report.outcome] += 1


#: The tally of this process's run on a target (none on the embedded endpoint).
_TALLIES: list[Counter] = []


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    target = target_of(config)
    if target is not None:
        tally = config.stash[TALLY]
        lacking = {k.split(": ", 1)[1]: n for k, n in tally.items() if k.startswith("not ")}
        by = ", ".join(f"{c}: {n}" for c, n in sorted(lacking.items())) or "none"
        terminalreporter.write_line(
            f"leasefence DynamoDB target {target.name}: of the tests that use it "
            f"{tally['passed']} passed, {tally['failed']} failed; {sum(lacking.values())} not "
            f"applicable (by the first capability lacking: {by})"
        )
