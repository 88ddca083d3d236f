"""The operations table, defined from :mod:`leasefence.schema` (keys, the sparse indexes and their
projections, the TTL attribute, the stream): nothing about the layout is restated here.

:class:`LeaseFenceTable` is what the service creates by default, and what you create in your own
stack to bring your own table (``LeaseFenceService(..., table=LeaseFenceTable(stack, "Ops"))``).
A table defined any other way in the same app is checked against the schema at synth
(:class:`TableSchemaCheck`); an imported table (``Table.from_table_attributes``) cannot be
checked here: it must have been created with the same schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsii
from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from constructs import Construct, IValidation

from leasefence import schema

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}
#: ``schema.STREAM_SPECIFICATION``'s view type (new and old images).
STREAM_VIEW_TYPE = dynamodb.StreamViewType(schema.STREAM_SPECIFICATION["StreamViewType"])
_PROJECTIONS = {
    "INCLUDE": dynamodb.ProjectionType.INCLUDE,
    "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY,
}


def _attribute(name: str) -> dynamodb.Attribute:
    types = {d["AttributeName"]: d["AttributeType"] for d in schema.attribute_definitions()}
    return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[types[name]])


def _key_names(key_schema: Sequence[Mapping[str, str]]) -> tuple[str, str | None]:
    by_type = {k["KeyType"]: k["AttributeName"] for k in key_schema}
    return by_type["HASH"], by_type.get("RANGE")


class LeaseFenceTable(dynamodb.Table):
    """The operations table: :mod:`leasefence.schema`'s keys, indexes, TTL and stream (new and old
    images: stream dispatch, history and outcome events read it), on-demand, point-in-time
    recovery on.

    ``encryption_key``: a customer-managed key (default: the AWS-owned key).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table_name: str | None = None,
        deletion_protection: bool = True,
        encryption_key: kms.IKey | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        table_pk, table_sk = _key_names(schema.key_schema())
        super().__init__(
            scope,
            construct_id,
            table_name=table_name,
            partition_key=_attribute(table_pk),
            sort_key=_attribute(table_sk) if table_sk else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            encryption=(
                dynamodb.TableEncryption.CUSTOMER_MANAGED
                if encryption_key is not None
                else dynamodb.TableEncryption.DEFAULT  # AWS-owned key
            ),
            encryption_key=encryption_key,
            time_to_live_attribute=schema.TTL_ATTRIBUTE,
            stream=STREAM_VIEW_TYPE,
            removal_policy=removal_policy,
        )
        for gsi in schema.global_secondary_indexes():
            pk, sk = _key_names(gsi["KeySchema"])
            projection = gsi["Projection"]
            self.add_global_secondary_index(
                index_name=gsi["IndexName"],
                partition_key=_attribute(pk),
                sort_key=_attribute(sk) if sk else None,
                projection_type=_PROJECTIONS[projection["ProjectionType"]],
                non_key_attributes=list(projection.get("NonKeyAttributes", [])) or None,
            )


def index_arn(table: dynamodb.ITable, index_name: str) -> str:
    """The ARN of one of the table's indexes (what IAM grants on)."""
    return f"{table.table_arn}/index/{index_name}"


def _pascal(value: Any) -> Any:
    """CDK's resolved L1 properties (``keySchema``, ``attributeName``) in CloudFormation's
    casing (``KeySchema``, ``AttributeName``), as :mod:`leasefence.schema` writes them."""
    if isinstance(value, dict):
        return {k[:1].upper() + k[1:]: _pascal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_pascal(v) for v in value]
    return value


def schema_mismatches(table: dynamodb.ITable) -> list[str]:
    """How a table defined in this app differs from :mod:`leasefence.schema` (empty: it matches,
    or it is imported and cannot be checked here)."""
    cfn = table.node.default_child
    if not isinstance(cfn, (dynamodb.CfnTable, dynamodb.CfnGlobalTable)):
        return []
    stack = Stack.of(cfn)
    problems: list[str] = []
    replicas = (
        _pascal(stack.resolve(cfn.replicas)) or []
        if isinstance(cfn, dynamodb.CfnGlobalTable)
        else []
    )
    if len(replicas) > 1 or any(c.node.id.startswith("Replica") for c in table.node.children):
        problems.append(
            "it is replicated (a global table): conditions are checked per region and replication"
            " is last-writer-wins, so two regions could claim one operation at the same fence;"
            " run one service per region, each with its own table"
        )
        return problems
    key_schema = _pascal(stack.resolve(cfn.key_schema))
    if key_schema != schema.key_schema():
        problems.append(f"key schema {key_schema} is not {schema.key_schema()}")
    definitions = {
        d["AttributeName"]: d["AttributeType"]
        for d in _pascal(stack.resolve(cfn.attribute_definitions)) or []
    }
    for wanted in schema.attribute_definitions():
        name = wanted["AttributeName"]
        if name in definitions and definitions[name] != wanted["AttributeType"]:
            problems.append(
                f"attribute {name} has type {definitions[name]}, not {wanted['AttributeType']}"
            )
    indexes = {
        g["IndexName"]: g for g in _pascal(stack.resolve(cfn.global_secondary_indexes)) or []
    }
    for wanted in schema.global_secondary_indexes():
        name = wanted["IndexName"]
        found = indexes.get(name)
        if found is None:
            problems.append(f"index {name} is missing")
            continue
        for part in ("KeySchema", "Projection"):
            if found.get(part) != wanted[part]:
                problems.append(f"index {name}: {part} {found.get(part)} is not {wanted[part]}")
    ttl = _pascal(stack.resolve(cfn.time_to_live_specification))
    if not ttl or not ttl.get("Enabled") or ttl.get("AttributeName") != schema.TTL_ATTRIBUTE:
        problems.append(f"TTL must be enabled on {schema.TTL_ATTRIBUTE}, got {ttl}")
    stream = _pascal(stack.resolve(cfn.stream_specification)) or {}
    if stream.get("StreamViewType") != STREAM_VIEW_TYPE.value:
        problems.append(
            f"its stream must carry {STREAM_VIEW_TYPE.value}, got "
            f"{stream.get('StreamViewType') or 'no stream'}"
        )
    return problems


@jsii.implements(IValidation)
class TableSchemaCheck:
    """A synth-time check that a brought-in table has :mod:`leasefence.schema`'s layout (run after
    the whole app is built, so indexes added after the service was created count)."""

    def __init__(self, table: dynamodb.ITable) -> None:
        self._table = table

    def validate(self) -> list[str]:
        problems = schema_mismatches(self._table)
        if not problems:
            return []
        return [
            f"table {self._table.node.path} is not a leasefence operations table (create it with "
            f"LeaseFenceTable): {'; '.join(problems)}"
        ]
