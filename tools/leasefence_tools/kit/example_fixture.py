"""The verification fixture of :mod:`leasefence_tools.kit.examples` (a team writes one like it).

``build(env)`` creates the team's own tables on the embedded stack, points the handlers at them
and at leasefence's class C and D fakes, and says how to prepare one operation: seed the target
(a paid order to refund) and return the payload to enqueue.
"""

from __future__ import annotations

import contextlib
from typing import Any

from leasefence_tools.kit import examples
from leasefence_tools.kit.rig import Target, VerifyEnv


def create_table(dynamodb: Any, name: str, partition: str, sort: str) -> None:
    with contextlib.suppress(dynamodb.exceptions.ResourceInUseException):
        dynamodb.create_table(
            TableName=name,
            AttributeDefinitions=[
                {"AttributeName": partition, "AttributeType": "S"},
                {"AttributeName": sort, "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": partition, "KeyType": "HASH"},
                {"AttributeName": sort, "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )


def build(env: VerifyEnv) -> Target:
    create_table(env.dynamodb, examples.ORDERS, "tenant_id", "order_id")
    create_table(env.dynamodb, examples.LEDGER, "tenant_id", "account")
    examples.connect(env.dynamodb, env.idempotent_api, env.gateway, clock=env.clock)

    def prepare(tenant_id: str, operation_id: str) -> dict[str, Any]:
        order = f"order-{operation_id}"
        env.dynamodb.put_item(
            TableName=examples.ORDERS,
            Item={"tenant_id": {"S": tenant_id}, "order_id": {"S": order}, "status": {"S": "paid"}},
        )
        return {"order": order, "cents": 1250, "account": "acct-1", "phone": "+15550100"}

    return Target(prepare)
