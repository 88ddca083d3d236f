"""An agent run that calls the fenced `refund` tool, is approved, and is replayed.

Runs the example's MCP server (refund_server.py) with the MCP SDK's in-memory client session, on
an embedded DynamoDB of its own; each step prints what the tool answered:

    python examples/agent_tool/walkthrough.py

1. The agent calls `refund` (run `run-7`, logical call `step-2`): `approval_required`, with the
   payload hash of its arguments. Nothing reaches the order.
2. An approver (another identity than the server's) approves that hash.
3. The agent calls again: the refund is made, once, under the call's fence.
4. The run is replayed (say, resumed after a crash): the framework gives the call a new id, the
   run and the logical call are the same: the recorded outcome comes back, nothing is called.
5. The same logical call with another amount: `payload_conflict`, nothing is called.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.shared.memory import create_connected_server_and_client_session

from leasefence import Engine
from leasefence.agent_tools import META_CALL_KEY, META_RUN_ID
from leasefence_tools.local.embedded import EmbeddedAws

sys.path.insert(0, str(Path(__file__).resolve().parent))
from refund_server import Orders, build_server  # the example's own module

TENANT, SERVER, APPROVER = "agents", "refund-agent-server", "approver-1"


async def call(mcp: Any, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """One tools/call, as an agent runtime sends it: the run and the logical call in `_meta`
    (the framework's own call id rides along and is not used)."""
    meta = {META_RUN_ID: "run-7", META_CALL_KEY: "step-2", "framework/call_id": call_id}
    async with create_connected_server_and_client_session(mcp) as session:
        result = await session.call_tool("refund", arguments, meta=meta)
    return dict(result.structuredContent or {})


def show(step: str, answer: dict[str, Any]) -> None:
    kind, body = next(iter(answer.items()))
    shown = {k: body[k] for k in ("code", "outcome_code", "replayed") if k in body}
    print(f"{step}: {kind} {json.dumps(shown, sort_keys=True)}")


def main() -> None:
    with EmbeddedAws() as aws:
        ddb = aws.client()
        engine = Engine(client=ddb, spec=aws.create_tables())
        orders = Orders(ddb)
        mcp = build_server(engine, orders, TENANT, SERVER, "refund-mcp-1")
        args = {"order_id": "order-42", "amount_cents": 1500}

        first = anyio.run(call, mcp, args, "call_a")
        show("1 call", first)
        pending = first["error"]
        engine.approve(TENANT, pending["operation_id"], pending["payload_hash"], APPROVER)
        print(f"2 approved by {APPROVER}")
        show("3 call", anyio.run(call, mcp, args, "call_b"))
        show("4 replay", anyio.run(call, mcp, args, "call_c"))
        show("5 changed", anyio.run(call, mcp, {**args, "amount_cents": 9900}, "call_d"))
        print(f"refunds at the order: {len(orders.refunds('order-42'))}")


if __name__ == "__main__":
    main()
