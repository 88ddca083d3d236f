"""A fenced refund tool, served over the Model Context Protocol (stdio).

The tool `refund` is the leasefence job type `refund` (class B, approval required): each call is
one operation whose id is derived from the run and the logical call that the MCP client names in
the request's `_meta` (`leasefence/run_id`, `leasefence/call_key`); its payload is the tool's
arguments; an approver approves their payload hash; the refund is written to the orders table
under the call's fence. See docs/agent-tools.md.

    python examples/agent_tool/refund_server.py                    # embedded DynamoDB, stdio
    python examples/agent_tool/refund_server.py --dynamodb-endpoint http://127.0.0.1:8766

The server's identity (`--actor`) enqueues every call, so it can never approve one: approvals
come from another identity (`leasefence ops approve`, the console, or `Engine.approve`).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import boto3
from mcp.server.fastmcp import FastMCP

from leasefence import Engine
from leasefence.agent_tools import EngineLedger, FencedCalls, FencedTools
from leasefence.schema import TableSpec, create_table
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import Job, Reconciled

ORDERS_TABLE = "example-orders"


class Orders:
    """The tool's target (class B): one item per order; each refund is appended under the
    call's fence, and the item refuses a lower fence of the same call inside the write."""

    def __init__(self, ddb: Any, table: str = ORDERS_TABLE) -> None:
        with contextlib.suppress(ddb.exceptions.ResourceInUseException):
            ddb.create_table(
                TableName=table,
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                BillingMode="PAY_PER_REQUEST",
            )
        self.table = FencedTable(ddb, table)

    def refunds(self, order_id: str) -> list[dict[str, Any]]:
        return list((self.table.read({"pk": order_id}) or {}).get("refunds", []))

    def on_claim(self, job: Job) -> None:
        """Right after the claim: the order refuses every lower fence of this call from now on."""
        self.table.raise_fence(job, {"pk": job.payload["order_id"]})

    def reconcile(self, job: Job) -> Reconciled:
        """A call taken over (its last holder died): the order says whether it was refunded."""
        made = any(r["op"] == job.operation_id for r in self.refunds(job.payload["order_id"]))
        return Reconciled.done("refunded") if made else Reconciled.not_done()

    def refund(self, job: Job, order_id: str, amount_cents: int) -> str:
        self.table.write(
            job,
            {"pk": order_id},
            {"status": "refunded"},
            append={"refunds": [{"op": job.operation_id, "amount": amount_cents}]},
        )
        return f"refunded {amount_cents}"


def build_server(engine: Engine, orders: Orders, tenant: str, actor: str, worker: str) -> FastMCP:
    """The MCP server: its tools are leasefence job types of ``tenant``."""
    tools = FencedTools(FencedCalls(EngineLedger(engine, tenant, actor), worker, lease_ms=60_000))
    mcp = FastMCP("refunds", log_level="WARNING")

    @mcp.tool()
    @tools.fenced(
        target_class="B", approval=True, on_claim=orders.on_claim, reconcile=orders.reconcile
    )
    def refund(job: Job, order_id: str, amount_cents: int) -> str:
        """Refund part of an order (in cents). Needs an approver's approval of these arguments."""
        return orders.refund(job, order_id, amount_cents)

    return mcp


def local_client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dynamodb-endpoint", help="default: an embedded endpoint of its own")
    parser.add_argument("--tenant", default="agents")
    parser.add_argument("--actor", default="refund-agent-server")
    parser.add_argument("--worker-id", default="refund-mcp-1")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.dynamodb_endpoint:
            ddb = local_client(args.dynamodb_endpoint)
        else:
            from leasefence_tools.local.embedded import EmbeddedAws

            ddb = stack.enter_context(EmbeddedAws()).client()
        spec = TableSpec()
        create_table(ddb, spec)  # the operations table, unless it is there
        engine = Engine(client=ddb, spec=spec)
        build_server(engine, Orders(ddb), args.tenant, args.actor, args.worker_id).run("stdio")


if __name__ == "__main__":
    main()
