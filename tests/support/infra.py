"""Small readers over a synthesized CloudFormation template (plain dicts)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import IConstruct

#: The full test stack's class A table is under this (imported) customer-managed key.
ORDERS_KEY_ARN = "arn:aws:kms:eu-west-1:111122223333:key/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
#: An external JWT issuer for the small stacks a test builds itself.
ISSUER = {"jwt_issuer": "https://idp.example.com/", "jwt_audience": ["leasefence"]}


def service_of(synth: Any, name: str) -> tuple[Stack, Any, dict[str, Any]]:
    """(stack, its ``LeaseFenceService``, its template) of one of the session's test stacks."""
    stack = synth.stacks[name]
    return stack, stack.service, synth.template_json(name)


def denies_insecure_transport(policy: dict[str, Any]) -> bool:
    """A bucket or queue policy that refuses every request without TLS."""
    return any(
        st["Effect"] == "Deny"
        and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for st in policy["PolicyDocument"]["Statement"]
    )


def logical_id(stack: Stack, construct: IConstruct) -> str:
    """Logical ID of a construct's CFN resource (the construct or its default child)."""
    child = construct.node.default_child or construct
    return stack.resolve(stack.get_logical_id(child))  # type: ignore[arg-type]


def resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def props(template: dict[str, Any], lid: str) -> dict[str, Any]:
    return template["Resources"][lid].get("Properties", {})


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(template: dict[str, Any], role_lid: str) -> list[dict[str, Any]]:
    """Every statement of every AWS::IAM::Policy / inline policy attached to the role."""
    statements: list[dict[str, Any]] = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_lid} in policy["Properties"].get("Roles", []):
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    role = props(template, role_lid)
    for inline in role.get("Policies", []):
        statements.extend(inline["PolicyDocument"]["Statement"])
    return statements


def actions_by_resource(statements: list[dict[str, Any]], prefix: str) -> list[tuple[frozenset[str], Any]]:
    """(actions with the given service prefix, resource) for each allowing statement."""
    out = []
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        acts = frozenset(a for a in as_list(st["Action"]) if a.startswith(prefix))
        if acts:
            # CDK merges statements with the same actions: one pair per resource either way.
            out.extend((acts, resource) for resource in as_list(st["Resource"]))
    return out


def grant_set(pairs: list[tuple[frozenset[str], Any]]) -> set[tuple[frozenset[str], str]]:
    """Order-free, hashable form of ``actions_by_resource`` output."""
    import json

    return {(actions, json.dumps(resource, sort_keys=True)) for actions, resource in pairs}


def getatt(lid: str, attr: str = "Arn") -> dict[str, Any]:
    return {"Fn::GetAtt": [lid, attr]}


def index_arn(table_lid: str, index: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [getatt(table_lid), f"/index/{index}"]]}


# What invokes a ServiceFunction: its `live` alias with SnapStart (``Ref`` of an alias is its ARN),
# the function itself otherwise.
def invoked_arn(stack: Stack, service_function: Any) -> dict[str, Any]:
    """The ARN an integration or a schedule targets."""
    if service_function.alias is not None:
        return {"Ref": logical_id(stack, service_function.alias)}
    return getatt(logical_id(stack, service_function.function))


def invoked_name(stack: Stack, service_function: Any) -> dict[str, Any]:
    """The ``FunctionName`` of an event source mapping: the function, or ``<function>:live``."""
    if service_function.alias is not None:
        alias_arn = {"Ref": logical_id(stack, service_function.alias)}
        return {"Fn::Join": ["", [{"Fn::Select": [6, {"Fn::Split": [":", alias_arn]}]}, ":live"]]}
    return {"Ref": logical_id(stack, service_function.function)}


def invoked_qualifier(stack: Stack, service_function: Any) -> Any:
    """The ``Qualifier`` of the asynchronous settings: the alias's name, or ``$LATEST``."""
    if service_function.alias is not None:
        alias_arn = {"Ref": logical_id(stack, service_function.alias)}
        return {"Fn::Select": [7, {"Fn::Split": [":", alias_arn]}]}
    return "$LATEST"
