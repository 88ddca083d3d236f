"""cdk-nag acknowledgments, optional: the library imports and synthesizes without cdk-nag.

Every acknowledgment carries its reason. With cdk-nag installed they are written as its
suppression metadata, so an app that runs ``AwsSolutionsChecks`` sees them; without it there is
nothing to acknowledge to, and :func:`acknowledge` does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import Stack
from constructs import IConstruct

try:
    from cdk_nag import NagSuppressions
except ImportError:  # cdk-nag is a dev / [nag] extra, not a dependency of the construct
    NagSuppressions = None


def nag_installed() -> bool:
    return NagSuppressions is not None


def acknowledge(
    construct: IConstruct,
    rule: str,
    reason: str,
    applies_to: Sequence[str | Mapping[str, str]] | None = None,
    children: bool = True,
) -> None:
    """One cdk-nag acknowledgment (``AwsSolutions-...``), always with its reason. An
    ``applies_to`` entry is a finding's text, or ``{"regex": "/.../"}`` (:func:`finding_pattern`)."""
    if not reason.strip():
        raise ValueError(f"{rule}: an acknowledgment needs a reason")
    if NagSuppressions is None:
        return
    suppression: dict[str, object] = {"id": rule, "reason": reason}
    if applies_to:
        suppression["appliesTo"] = [dict(a) if isinstance(a, Mapping) else a for a in applies_to]
    NagSuppressions.add_resource_suppressions(construct, [suppression], apply_to_children=children)


def finding_resource(scope: IConstruct, value: str) -> str:
    """``Resource::<...>``: how cdk-nag names a policy resource in a finding (its
    ``flattenCfnReference``), for the ``applies_to`` of an acknowledgment. Works for resources
    this app creates (``<Logical.Arn>/...``) and imported ones (``arn:<AWS::Partition>:...``)."""
    return "Resource::" + _flatten(Stack.of(scope).resolve(value))


def _flatten(node: Any) -> str:
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return delimiter.join(_flatten(item) for item in items)
        if "Fn::Sub" in node:
            return _flatten(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{_flatten(resource)}.{_flatten(attribute)}>"
        if "Fn::ImportValue" in node:
            return _flatten(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{_flatten(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


def finding_pattern(resource_suffix: str) -> dict[str, str]:
    """``{"regex": ...}`` for the ``applies_to`` of a ``Resource::`` finding that ends with
    ``resource_suffix``, whatever comes before it: for a grant whose resource another stack
    renders (an ``Fn::ImportValue`` there, a ``Ref`` here)."""
    escaped = "".join("\\" + c if c in "/*.^$?+()[]{}|\\" else c for c in resource_suffix)
    return {"regex": f"/^Resource::.*{escaped}$/"}
