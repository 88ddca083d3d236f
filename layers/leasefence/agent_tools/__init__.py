"""Fenced agent tools: each tool call an operation, at most once at its target (docs/agent-tools.md).

:mod:`.calls` holds the framework-free part (the call id derivation, the ledger, the call);
:mod:`.mcp_server` the decorator for a Model Context Protocol server (``leasefence[mcp]``).
"""

from leasefence.agent_tools.calls import (
    CALL_ID_VERSION,
    CallLedger,
    CallOutcome,
    CallState,
    FencedCalls,
    ToolSpec,
    call_operation_id,
)
from leasefence.agent_tools.ledgers import ClientLedger, EngineLedger
from leasefence.agent_tools.mcp_server import META_CALL_KEY, META_RUN_ID, FencedTools, call_result

__all__ = [
    "CALL_ID_VERSION",
    "META_CALL_KEY",
    "META_RUN_ID",
    "CallLedger",
    "CallOutcome",
    "CallState",
    "ClientLedger",
    "EngineLedger",
    "FencedCalls",
    "FencedTools",
    "ToolSpec",
    "call_operation_id",
    "call_result",
]
