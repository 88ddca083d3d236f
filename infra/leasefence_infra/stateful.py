"""The stateful resources of a synthesized template, and the stack policy that keeps them.

A stateful resource is one whose replacement loses data or identity: the operations table (every
identity and fence), the payload bucket, the customer-managed key, the log-hash secret, the user
pool, and anything else the template retains (``DeletionPolicy: Retain``: the log groups). Their
logical ids are the contract between one release of the construct and the next: if one moved,
CloudFormation would create a new, empty resource and (retained) orphan the old one, and an
upgraded service would start on an empty table: every identity and fence forgotten, duplicates
possible. ``tests/infra`` pins them for both test stacks and checks them against the record of
the previous release (``tests/infra/releases/``).

From the command line (after ``cdk synth``)::

    python -m leasefence_infra.stateful manifest cdk.out/LeaseFence.template.json
    python -m leasefence_infra.stateful policy cdk.out/LeaseFence.template.json > stack-policy.json
    aws cloudformation set-stack-policy --stack-name LeaseFence --stack-policy-body file://stack-policy.json

``manifest`` prints each stateful resource's logical id, type, deletion policy and the properties
whose change replaces it (its name, a table's key schema); ``policy`` prints a stack policy that
allows every update except replacing or deleting those resources (CloudFormation then fails the
update, and rolls back, instead of replacing the table).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Resource types that hold data or identity whatever their deletion policy, with the properties
#: whose change makes CloudFormation replace the resource (its createOnlyProperties, and for a
#: table its key schema: DynamoDB cannot change a table's keys in place).
STATEFUL_TYPES: dict[str, tuple[str, ...]] = {
    "AWS::DynamoDB::Table": (
        "TableName",
        "KeySchema",
        "KeyAttributes",  # the AttributeDefinitions of the key schema's attributes
        "LocalSecondaryIndexes",
        "ImportSourceSpecification",
    ),
    "AWS::DynamoDB::GlobalTable": ("TableName", "KeySchema", "KeyAttributes"),
    "AWS::S3::Bucket": ("BucketName", "BucketNamePrefix", "BucketNamespace"),
    "AWS::KMS::Key": (),  # an immutable property change fails the update instead
    "AWS::SecretsManager::Secret": ("Name",),
    "AWS::Cognito::UserPool": (),
}
#: Deletion policies that keep a resource when the stack (or the resource) goes.
RETAINED = ("Retain", "RetainExceptOnCreate", "Snapshot")
#: What a retained resource of another type is identified by.
_NAME_PROPERTIES: dict[str, tuple[str, ...]] = {
    "AWS::Logs::LogGroup": ("LogGroupName",),
    "AWS::SQS::Queue": ("QueueName", "FifoQueue"),
}


def _identity(resource_type: str, properties: Mapping[str, Any]) -> dict[str, Any]:
    names = STATEFUL_TYPES.get(resource_type) or _NAME_PROPERTIES.get(resource_type, ())
    identity: dict[str, Any] = {}
    for name in names:
        if name == "KeyAttributes":
            keys = {k["AttributeName"] for k in properties.get("KeySchema") or []}
            identity[name] = sorted(
                (
                    d
                    for d in properties.get("AttributeDefinitions") or []
                    if d["AttributeName"] in keys
                ),
                key=lambda d: str(d["AttributeName"]),
            )
        else:
            identity[name] = properties.get(name)
    return identity


def stateful_resources(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Logical id -> ``{"Type", "DeletionPolicy", "Identity"}`` of every stateful resource."""
    found: dict[str, dict[str, Any]] = {}
    for lid, resource in sorted(template.get("Resources", {}).items()):
        resource_type = resource["Type"]
        policy = resource.get("DeletionPolicy", "Delete")
        if resource_type not in STATEFUL_TYPES and policy not in RETAINED:
            continue
        found[lid] = {
            "Type": resource_type,
            "DeletionPolicy": policy,
            "Identity": _identity(resource_type, resource.get("Properties") or {}),
        }
    return found


def moved(recorded: Mapping[str, Mapping[str, Any]], template: Mapping[str, Any]) -> list[str]:
    """What an upgrade from the release ``recorded`` describes to ``template`` would replace or
    orphan, one sentence each (empty: every recorded stateful resource is kept in place)."""
    current = stateful_resources(template)
    resources = template.get("Resources", {})
    problems = []
    for lid, was in sorted(recorded.items()):
        now = current.get(lid)
        if lid not in resources:
            problems.append(
                f"{lid} ({was['Type']}) is gone: an upgrade would create its successor empty "
                "and orphan (or delete) it"
            )
        elif now is None or now["Type"] != was["Type"]:
            problems.append(f"{lid} changed type from {was['Type']}: it would be replaced")
        else:
            for name, value in was["Identity"].items():
                if now["Identity"].get(name) != value:
                    problems.append(
                        f"{lid} ({was['Type']}): {name} changed from {json.dumps(value)} to "
                        f"{json.dumps(now['Identity'].get(name))}: it would be replaced"
                    )
    return problems


def stack_policy(template: Mapping[str, Any]) -> dict[str, Any]:
    """A CloudFormation stack policy: every update allowed, except replacing or deleting a
    stateful resource of ``template``."""
    ids = sorted(stateful_resources(template))
    statements: list[dict[str, Any]] = [
        {"Effect": "Allow", "Principal": "*", "Action": "Update:*", "Resource": "*"}
    ]
    if ids:
        statements.append(
            {
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["Update:Replace", "Update:Delete"],
                "Resource": [f"LogicalResourceId/{lid}" for lid in ids],
            }
        )
    return {"Statement": statements}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m leasefence_infra.stateful",
        description="Stateful resources of a synthesized template, and their stack policy.",
    )
    parser.add_argument("command", choices=("manifest", "policy"))
    parser.add_argument("template", type=Path, help="e.g. cdk.out/LeaseFence.template.json")
    args = parser.parse_args(argv)
    template = json.loads(args.template.read_text())
    out = stateful_resources(template) if args.command == "manifest" else stack_policy(template)
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
