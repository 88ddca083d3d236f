"""examples/agent_tool runs as its README says: the walkthrough's story, and the server over
stdio as an MCP client launches it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from leasefence.agent_tools import META_CALL_KEY, META_RUN_ID
from tests.support import ROOT
from tests.support.asyncio_thread import run as run_async

EXAMPLE = ROOT / "examples" / "agent_tool"


def test_the_walkthrough_calls_the_target_once_through_approval_and_replay() -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE / "walkthrough.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        '1 call: error {"code": "approval_required"}',
        "2 approved by approver-1",
        '3 call: result {"code": "succeeded", "outcome_code": "refunded 1500", "replayed": false}',
        '4 replay: result {"code": "succeeded", "outcome_code": "refunded 1500", "replayed": true}',
        '5 changed: error {"code": "payload_conflict"}',
        "refunds at the order: 1",
    ]


def test_the_server_serves_the_fenced_tool_over_stdio() -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLE / "refund_server.py")])
    arguments = {"order_id": "order-1", "amount_cents": 700}

    async def session() -> tuple[Any, Any, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = (await client.list_tools()).tools
            unnamed = await client.call_tool("refund", arguments)
            meta = {META_RUN_ID: "run-1", META_CALL_KEY: "step-1"}
            gated = await client.call_tool("refund", arguments, meta=meta)
            return tools, unnamed, gated

    tools, unnamed, gated = run_async(session)
    assert [t.name for t in tools] == ["refund"]
    assert set(tools[0].inputSchema["properties"]) == {"order_id", "amount_cents"}
    assert unnamed.isError and unnamed.structuredContent["error"]["code"] == "run_required"
    assert gated.isError and gated.structuredContent["error"]["code"] == "approval_required"
