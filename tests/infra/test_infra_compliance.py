"""cdk-nag (AwsSolutions) with zero unacknowledged findings, cfn-lint clean, no drift.

The snapshot (``snapshots/<stack>.json``) holds only what a reviewer should see change on
purpose: resource types and counts, and every cdk-nag acknowledgment (resource, rule,
appliesTo). Regenerate after an intended change with::

    LEASEFENCE_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/infra -k snapshot
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match
from cfnlint.api import ManualArgs, lint_file

SNAPSHOTS = Path(__file__).parent / "snapshots"
STACKS = ["default", "full"]

#: cfn-lint warnings accepted with a reason; anything else (and every error) fails.
ACCEPTED_CFN_LINT_WARNINGS = {
    # CDK adds DependsOn from each function to its role although Role: GetAtt already orders them.
    "W3005",
}
#: Non-nag CDK warnings accepted in the test stacks (message substrings).
ACCEPTED_CDK_WARNINGS = (
    # @aws-cdk/aws-s3:accessLogsPolicyNotAdded: the full stack logs to an imported bucket whose
    # policy CDK cannot edit; its owner grants logging.s3.amazonaws.com (infra/README.md).
    "Unable to add necessary logging permissions to imported target bucket",
)
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]


def _nag_messages(stack: Any, level: str) -> list[str]:
    finder = Annotations.from_stack(stack)
    found = getattr(finder, f"find_{level}")("*", Match.string_like_regexp("AwsSolutions-.*"))
    return [f"{m.id}: {str(m.entry.data)[:300]}" for m in found]


@pytest.mark.parametrize("name", STACKS)
def test_cdk_nag_has_no_unacknowledged_findings(synth, name: str) -> None:
    stack = synth.stacks[name]
    assert _nag_messages(stack, "error") == []
    assert _nag_messages(stack, "warning") == []


@pytest.mark.parametrize("name", STACKS)
def test_cdk_nag_ran_and_every_acknowledgment_has_a_reason(synth, name: str) -> None:
    template = synth.template_json(name)
    acks = _acknowledgments(template)
    assert acks, "no acknowledgments at all: is cdk-nag still wired in?"
    for lid in acks:
        for rule in template["Resources"][lid]["Metadata"]["cdk_nag"]["rules_to_suppress"]:
            assert rule["id"].startswith("AwsSolutions-"), (lid, rule)
            assert len(rule["reason"]) >= 40, (lid, rule)
    # The nag report was written, so the checks did run over this stack.
    (report,) = synth.outdir.glob(f"AwsSolutions-*{synth.stacks[name].artifact_id}-NagReport.csv")
    rows = list(csv.DictReader(report.read_text().splitlines()))
    compliance = Counter(row["Compliance"] for row in rows)
    assert compliance["Compliant"] > 20
    assert compliance["Non-Compliant"] == 0
    suppressed = {row["Rule ID"].split("[")[0] for row in rows if row["Compliance"] == "Suppressed"}
    acknowledged = {rule.split(" ")[0] for rules in acks.values() for rule in rules}
    assert suppressed == acknowledged  # no acknowledgment is dead weight


@pytest.mark.parametrize("name", STACKS)
def test_no_unexpected_cdk_warnings_or_errors(synth, name: str) -> None:
    annotations = Annotations.from_stack(synth.stacks[name])
    assert annotations.find_error("*", Match.any_value()) == []
    warnings = [str(m.entry.data) for m in annotations.find_warning("*", Match.any_value())]
    unexpected = [w for w in warnings if not any(a in w for a in ACCEPTED_CDK_WARNINGS)]
    assert unexpected == []


@pytest.mark.parametrize("name", STACKS)
def test_cfn_lint_clean(synth, name: str) -> None:
    matches = lint_file(synth.template_path(name), config=ManualArgs(regions=REGIONS))
    problems = [
        f"{m.rule.id} {m.message} ({m.filename}:{m.linenumber})"
        for m in matches
        if m.rule.id not in ACCEPTED_CFN_LINT_WARNINGS or m.rule.id.startswith("E")
    ]
    assert problems == []


def _acknowledgments(template: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for lid, resource in sorted(template["Resources"].items()):
        rules = resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
        if rules:
            out[lid] = sorted(
                r["id"] + (f" [{', '.join(sorted(map(_applies, r['applies_to'])))}]" if r.get("applies_to") else "")
                for r in rules
            )
    return out


def _applies(entry: Any) -> str:
    """An appliesTo entry: a finding's text, or a regex over findings."""
    return f"regex:{entry['regex']}" if isinstance(entry, dict) else str(entry)


def _snapshot(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "resource_types": dict(sorted(Counter(r["Type"] for r in template["Resources"].values()).items())),
        "parameters": sorted(k for k in template.get("Parameters", {}) if k != "BootstrapVersion"),
        "outputs": sorted(template.get("Outputs", {})),
        "nag_acknowledgments": _acknowledgments(template),
    }


@pytest.mark.parametrize("name", STACKS)
def test_snapshot_resources_and_acknowledgments(synth, name: str) -> None:
    actual = _snapshot(synth.template_json(name))
    path = SNAPSHOTS / f"{name}.json"
    if os.environ.get("LEASEFENCE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(json.dumps(actual, indent=2, sort_keys=False) + "\n")
    expected = json.loads(path.read_text())
    assert actual == expected, (
        f"{path.name} drifted; if intended, regenerate with LEASEFENCE_UPDATE_SNAPSHOTS=1 and review the diff"
    )
