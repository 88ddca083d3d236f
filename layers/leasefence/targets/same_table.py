"""Class A: the target lives in DynamoDB next to the operations table.

The business writes go into the same ``TransactWriteItems`` as the completion, which is
conditional on the operation's fence and state. A stale worker's transaction is refused as a
whole, so its business write cannot commit. Each business write keeps its own guard (for
example, only a ``paid`` order can become ``refunded``).
"""

from __future__ import annotations

from typing import Any

from leasefence.store import to_attr, to_item


def _expression(
    action: dict[str, Any],
    condition: str | None,
    names: dict[str, str] | None,
    values: dict[str, Any] | None,
) -> dict[str, Any]:
    if condition:
        action["ConditionExpression"] = condition
        action["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    if names:
        action["ExpressionAttributeNames"] = names
    if values:
        action["ExpressionAttributeValues"] = {k: to_attr(v) for k, v in values.items()}
    return action


def put(
    table: str,
    item: dict[str, Any],
    condition: str | None = None,
    names: dict[str, str] | None = None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``Put`` action for :meth:`leasefence.worker.Job.complete_with`."""
    return {
        "Put": _expression({"TableName": table, "Item": to_item(item)}, condition, names, values)
    }


def update(
    table: str,
    key: dict[str, Any],
    expression: str,
    condition: str | None = None,
    names: dict[str, str] | None = None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An ``Update`` action for :meth:`leasefence.worker.Job.complete_with`."""
    action = {"TableName": table, "Key": to_item(key), "UpdateExpression": expression}
    return {"Update": _expression(action, condition, names, values)}
