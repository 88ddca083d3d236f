"""Stateful resources never move: the table, bucket, keys, secret, user pool and every retained
resource keep their logical ids and the properties whose change replaces them, from one release
to the next, so an upgrade never starts on a new, empty table.

``releases/NNNN-<commit>.json`` records, per test stack, the stateful resources of a release
(``python -m leasefence_infra.stateful manifest <template>`` over its synthesized templates; the
newest one: ``LEASEFENCE_RECORD_RELEASE=NNNN-<commit> pytest tests/infra -k stateful`` writes it
from this tree). Every record must still hold for the current code (the upgrade from that
release replaces nothing), and the newest one is exactly the current set (a new stateful
resource is recorded on purpose).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from tests.support.infra import logical_id
from leasefence_infra import LeaseFenceService, LeaseFenceServiceProps
from leasefence_infra.stateful import STATEFUL_TYPES, main, moved, stack_policy, stateful_resources

RELEASES = Path(__file__).parent / "releases"
STACKS = ("default", "full")


def _records() -> list[Path]:
    return sorted(RELEASES.glob("[0-9][0-9][0-9][0-9]-*.json"))


@pytest.fixture(scope="module", autouse=True)
def _record_release(synth) -> None:
    """``LEASEFENCE_RECORD_RELEASE=NNNN-<commit>``: record this tree's stateful resources."""
    name = os.environ.get("LEASEFENCE_RECORD_RELEASE")
    if name:
        record = {"release": name.split("-", 1)[-1],
                  "stacks": {s: stateful_resources(synth.template_json(s)) for s in STACKS}}
        (RELEASES / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")


@pytest.mark.parametrize("name", STACKS)
def test_every_stateful_resource_is_pinned(synth, name: str) -> None:
    """The stateful resources are exactly the newest release's: none moved, none renamed, none
    added without being recorded."""
    newest = json.loads(_records()[-1].read_text())
    assert stateful_resources(synth.template_json(name)) == newest["stacks"][name], (
        f"the stateful resources of the {name} stack differ from {_records()[-1].name}: a moved "
        "or renamed one is replaced on upgrade (a new, empty table); a new one is recorded with "
        "LEASEFENCE_RECORD_RELEASE"
    )


@pytest.mark.parametrize("record", _records(), ids=lambda p: p.stem)
@pytest.mark.parametrize("name", STACKS)
def test_an_upgrade_from_each_recorded_release_replaces_no_stateful_resource(synth, name, record) -> None:
    recorded = json.loads(record.read_text())["stacks"][name]
    assert recorded, "an empty record checks nothing"
    assert moved(recorded, synth.template_json(name)) == []


def test_the_upgrade_check_sees_a_moved_renamed_or_rekeyed_table(synth) -> None:
    """What the upgrade test would report: the check itself can fail."""
    stack = synth.stacks["default"]
    template = synth.template_json("default")
    recorded = stateful_resources(template)
    table = logical_id(stack, stack.service.table)
    assert recorded[table]["Type"] == "AWS::DynamoDB::Table" and recorded[table]["DeletionPolicy"] == "Retain"

    renamed_id = copy.deepcopy(template)
    renamed_id["Resources"]["LeaseFenceStorageOperations"] = renamed_id["Resources"].pop(table)
    assert [p.split(" ")[0] for p in moved(recorded, renamed_id)] == [table]

    named = copy.deepcopy(template)
    named["Resources"][table]["Properties"]["TableName"] = "leasefence-ops"
    (problem,) = moved(recorded, named)
    assert "TableName changed from null" in problem

    rekeyed = copy.deepcopy(template)
    rekeyed["Resources"][table]["Properties"]["AttributeDefinitions"] = [
        {**d, "AttributeType": "N"} if d["AttributeName"] == "operation_id" else d
        for d in rekeyed["Resources"][table]["Properties"]["AttributeDefinitions"]
    ]
    (problem,) = moved(recorded, rekeyed)
    assert "KeyAttributes changed" in problem

    bucket = logical_id(stack, stack.service.payload_bucket)
    bucket_named = copy.deepcopy(template)
    bucket_named["Resources"][bucket]["Properties"]["BucketName"] = "acme-payloads"
    assert [p.split(" ")[0] for p in moved(recorded, bucket_named)] == [bucket]


@pytest.mark.parametrize("name", STACKS)
def test_the_table_bucket_key_and_secret_are_stateful(synth, name: str) -> None:
    stack = synth.stacks[name]
    svc = stack.service
    found = stateful_resources(synth.template_json(name))
    for construct in (svc.table, svc.payload_bucket, svc.storage.log_hash_key,
                      svc.monitoring.node.try_find_child("AlarmTopicKey") or svc.encryption_key):
        assert logical_id(stack, construct) in found, construct.node.path
    # Every retained resource is in the set, whatever its type.
    for lid, resource in synth.template_json(name)["Resources"].items():
        if resource.get("DeletionPolicy") == "Retain":
            assert lid in found, lid


def test_every_replacement_causing_property_is_compared() -> None:
    """The compared properties include each type's createOnlyProperties (what CloudFormation
    replaces a resource for), from the resource schemas cfn-lint ships."""
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    for resource_type, compared in STATEFUL_TYPES.items():
        schema = PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema
        create_only = {p.removeprefix("/properties/").split("/")[0] for p in schema.get("createOnlyProperties", [])}
        assert create_only <= set(compared), (resource_type, create_only - set(compared))


# ----------------------------------------------------------------------------- a fixed name, the stack policy


@pytest.fixture(scope="module")
def named(prebuilt_layer: Path) -> tuple[Stack, LeaseFenceService, dict[str, Any]]:
    app = App()
    stack = Stack(app, "Named")
    svc = LeaseFenceService(stack, "LeaseFence", jwt_issuer="https://issuer.example.com/", jwt_audience=["a"],
                            table_name="acme-leasefence-operations",
                            core_layer=lambda_.Code.from_asset(str(prebuilt_layer)))
    return stack, svc, Template.from_stack(stack).to_json()


def test_a_fixed_table_name_is_the_tables_identity(named) -> None:
    stack, svc, template = named
    table = stateful_resources(template)[logical_id(stack, svc.table)]
    assert table["Identity"]["TableName"] == "acme-leasefence-operations"


@pytest.mark.parametrize("bad", ["ab", "ops table", "x" * 256, "ops/1"])
def test_an_invalid_table_name_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="table_name"):
        LeaseFenceServiceProps(jwt_issuer="https://i.example/", jwt_audience=["a"], table_name=bad)


def test_the_stack_policy_denies_replacing_or_deleting_each_stateful_resource(named, tmp_path) -> None:
    stack, svc, template = named
    path = tmp_path / "Named.template.json"
    path.write_text(json.dumps(template))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["policy", str(path)]) == 0
    policy = json.loads(out.getvalue())
    assert policy == stack_policy(template)
    allow, deny = policy["Statement"]
    assert allow == {"Effect": "Allow", "Principal": "*", "Action": "Update:*", "Resource": "*"}
    assert deny["Effect"] == "Deny" and deny["Action"] == ["Update:Replace", "Update:Delete"]
    denied = {r.removeprefix("LogicalResourceId/") for r in deny["Resource"]}
    assert denied == set(stateful_resources(template))
    for construct in (svc.table, svc.payload_bucket, svc.storage.log_hash_key):
        assert logical_id(stack, construct) in denied
    # Nothing stateless is frozen (functions, roles, alarms stay updatable and replaceable).
    assert not any(template["Resources"][lid]["Type"].startswith(("AWS::Lambda::", "AWS::IAM::"))
                   for lid in denied)
