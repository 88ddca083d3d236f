"""``leasefence verify`` on the README's handlers (one per class: go) and on broken variants
(no-go, naming the check that catches each, with a sentence saying why)."""

from __future__ import annotations

import pytest

from leasefence_tools.kit import examples
from leasefence_tools.kit.checks import CHECK_NAMES
from leasefence_tools.kit.report import VerifyReport
from leasefence_tools.kit.verify import SetupError, verify

EXAMPLES = "leasefence_tools.kit.examples:HANDLERS"
FIXTURE = "leasefence_tools.kit.example_fixture:build"


def _actions(report: VerifyReport, check: str, operation_id: str, **fields):
    return [
        a
        for a in report.check(check).actions
        if a.operation_id == operation_id and all(getattr(a, k) == v for k, v in fields.items())
    ]


@pytest.mark.parametrize("job_type", list(examples.CLASSES))
def test_the_readme_examples_are_a_go(aws, job_type: str) -> None:
    target_class = examples.CLASSES[job_type]
    report = verify(EXAMPLES, job_type, target_class, FIXTURE, aws=aws)

    assert report.go, report.text()
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    assert VerifyReport.model_validate_json(report.model_dump_json()) == report
    # The evidence is what the target recorded: the zombie really was paused at its write, and
    # the target really refused it (class C deduplicated it; class D refused its intent).
    late = "stale-write-late"
    if target_class in ("A", "B"):
        assert _actions(report, "stale-write", late, fence=1, kind="write", outcome="refused")
        assert _actions(report, "stale-write", late, fence=2, kind="write", outcome="landed")
    elif target_class == "C":
        assert _actions(report, "stale-write", late, fence=1, kind="call", outcome="deduplicated")
        assert _actions(report, "stale-write", late, fence=2, kind="call", outcome="landed")
    else:
        assert _actions(report, "stale-write", late, fence=1, kind="intent", outcome="refused")
        assert not _actions(report, "stale-write", late, kind="call")
    crash = _actions(report, "crash-after-effect", "crash-after-effect-op")
    assert [a.fence for a in crash if a.outcome == "landed" and a.kind in ("write", "call")] == [1]


#: (variant, job type, class, every no-go check, the check that must name it, why contains)
BROKEN = [
    # The four.
    ("NO_FENCE", "ledger-post", "B", {"stale-write", "hang"}, "stale-write", "no fence condition"),
    ("NO_RECONCILE", "ledger-post", "B",
     {"stale-write", "crash-after-effect", "ambiguous-target", "hang"},
     "crash-after-effect", "has no reconcile"),
    ("RETRIES_CALL", "sms", "D", {"ambiguous-target"}, "ambiguous-target",
     "gateway was called 2 times"),
    ("SWALLOWS_LOST_OWNERSHIP", "ledger-post", "B", {"stale-write", "hang"}, "hang",
     "told it lost ownership"),
]
#: More ways to get it wrong, each run on the check that must catch it.
BROKEN_ONE_CHECK = [
    ("BLIND_RECONCILE", "ledger-post", "B", "crash-after-effect", "reconcile answered not done"),
    ("NO_RAISE_FENCE", "ledger-post", "B", "stale-write", "FencedTable.raise_fence"),
    ("LYING_HEARTBEAT", "ledger-post", "B", "hang", "a heartbeat that lies"),
    ("KEY_WITHOUT_TENANT", "receipt-email", "C", "two-tenants", "derive target keys from the tenant"),
]


@pytest.mark.parametrize(("variant", "job_type", "target_class", "no_go", "named", "why"), BROKEN,
                         ids=[b[0] for b in BROKEN])
def test_broken_variants_are_no_go(aws, variant, job_type, target_class, no_go, named, why) -> None:
    report = verify(f"leasefence_tools.kit.examples_broken:{variant}", job_type, target_class, FIXTURE,
                    aws=aws)
    assert not report.go
    assert set(report.no_go) == no_go, report.text()
    assert why in report.check(named).why, report.check(named).why
    assert "NO-GO  " + named in report.text()


@pytest.mark.parametrize(("variant", "job_type", "target_class", "named", "why"), BROKEN_ONE_CHECK,
                         ids=[b[0] for b in BROKEN_ONE_CHECK])
def test_more_broken_variants_are_caught_by_their_check(aws, variant, job_type, target_class,
                                                         named, why) -> None:
    report = verify(f"leasefence_tools.kit.examples_broken:{variant}", job_type, target_class, FIXTURE,
                    aws=aws, checks=[named])
    assert report.no_go == [named]
    assert why in report.check(named).why, report.check(named).why
    # ... and the example it breaks passes that same check.
    assert verify(EXAMPLES, job_type, target_class, FIXTURE, aws=aws, checks=[named]).go


def test_a_handler_writing_through_its_own_client_is_no_go_not_go(aws) -> None:
    """A fixture that leaves the handler on a client of its own (not env.dynamodb) hides every
    write from the checks: that proves nothing, so it is a no-go saying so, never a go."""

    def own_client(env):
        from leasefence_tools.kit.example_fixture import build

        target = build(env)
        examples.connect(aws.client(), env.idempotent_api, env.gateway)  # not env.dynamodb
        return target

    report = verify(EXAMPLES, "ledger-post", "B", own_client, aws=aws, checks=["stale-write"])
    assert report.no_go == ["stale-write"]
    assert "does the fixture point the handler at env.dynamodb" in report.check("stale-write").why


def test_setup_errors_say_what_is_missing(aws) -> None:
    with pytest.raises(SetupError, match="no job type 'refunds'.*has: ledger-post, receipt-email"):
        verify(EXAMPLES, "refunds", "B", FIXTURE, aws=aws)
    with pytest.raises(SetupError, match="cannot import 'no_such_module'"):
        verify("no_such_module:HANDLERS", "refund", "A", FIXTURE, aws=aws)
    with pytest.raises(SetupError, match="has no attribute 'nothing'"):
        verify(EXAMPLES, "refund", "A", "leasefence_tools.kit.example_fixture:nothing", aws=aws)
