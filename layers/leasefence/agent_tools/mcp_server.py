"""Fenced tools for a Model Context Protocol server (the ``mcp`` SDK, major version 1: its
``FastMCP``; install ``leasefence[mcp]``).

The decorator goes under ``@mcp.tool()``::

    mcp = FastMCP("payments")
    tools = FencedTools(FencedCalls(EngineLedger(engine, "acme", "agent-server"), "mcp-1"))

    @mcp.tool()
    @tools.fenced(target_class="B", approval=True, on_claim=..., reconcile=...)
    def refund(job: Job, order_id: str, amount_cents: int) -> str:
        ...  # the side effect, through the target helper of its class, under job's fence
        return "refunded"

The tool's name is its job type. Its first parameter (``job``) is the claimed operation and is
not part of the tool's input schema: the model sees the other parameters, unchanged. The MCP
client names the run and the logical call in the request's ``_meta``
(:data:`META_RUN_ID`, :data:`META_CALL_KEY`): the agent runtime sets them, not the model. Every
refusal comes back as a tool result with ``isError`` true and a machine code in its structured
content (``{"error": {"code": "stale_fence", ...}}``); a call made answers
``{"result": {"code": "succeeded", "outcome_code": ..., "replayed": ...}}``.

``mcp`` is imported only when a tool is wrapped, so this module imports without it.
"""

from __future__ import annotations

import functools
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

from leasefence.agent_tools.calls import CallOutcome, FencedCalls, ToolSpec
from leasefence.model import TargetClass
from leasefence.worker.handler import Job, Reconciled

#: The request ``_meta`` keys that name the run and the logical call within it.
META_RUN_ID = "leasefence/run_id"
META_CALL_KEY = "leasefence/call_key"
#: The name of the parameter that receives FastMCP's context (never in the input schema).
CONTEXT_PARAMETER = "lf_mcp_context"


def call_result(outcome: CallOutcome) -> Any:
    """The MCP ``CallToolResult`` of an outcome: JSON text and the same structured content;
    ``isError`` for every refusal."""
    from mcp.types import CallToolResult, TextContent

    body = outcome.to_json()
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, sort_keys=True))],
        structuredContent=body,
        isError=not outcome.ok,
    )


def _meta(context: Any) -> dict[str, Any]:
    """The request's ``_meta`` fields (none outside a request)."""
    try:
        meta = context.request_context.meta
    except (AttributeError, ValueError):
        return {}
    return dict(meta.model_extra or {}) if meta is not None else {}


class FencedTools:
    """Makes functions into fenced MCP tools that run through ``calls`` (one tenant)."""

    def __init__(self, calls: FencedCalls) -> None:
        self.calls = calls

    def fenced(
        self,
        *,
        job_type: str | None = None,
        target_class: TargetClass | str = TargetClass.C,
        approval: bool = False,
        approval_valid_ms: int | None = None,
        max_attempts: int | None = None,
        on_claim: Callable[[Job], None] | None = None,
        reconcile: Callable[[Job], Reconciled] | None = None,
    ) -> Callable[[Callable[..., str | None]], Callable[..., Any]]:
        """The decorator (under ``@mcp.tool()``): ``job_type`` defaults to the function's name,
        which is also the tool's name. ``approval``: every call waits for an approver to approve
        its exact arguments."""

        def wrap(fn: Callable[..., str | None]) -> Callable[..., Any]:
            spec = ToolSpec(
                job_type=job_type or fn.__name__,
                run=fn,
                target_class=TargetClass(target_class),
                approval=approval,
                approval_valid_ms=approval_valid_ms,
                max_attempts=max_attempts,
                on_claim=on_claim,
                reconcile=reconcile,
            )
            return self._tool(spec, fn)

        return wrap

    def _tool(self, spec: ToolSpec, fn: Callable[..., str | None]) -> Callable[..., Any]:
        import anyio.to_thread
        from mcp.server.fastmcp import Context
        from mcp.types import CallToolResult

        signature = inspect.signature(fn)
        params = list(signature.parameters.values())
        if not params or params[0].name != "job":
            raise TypeError(f"{fn.__name__}: a fenced tool's first parameter is `job`")
        hints = typing.get_type_hints(fn)
        # Annotations resolved here: FastMCP would resolve strings in this module's globals.
        exposed = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in params[1:]]
        context = inspect.Parameter(
            CONTEXT_PARAMETER, inspect.Parameter.KEYWORD_ONLY, annotation=Context
        )
        calls = self.calls

        @functools.wraps(fn)
        async def tool(**kwargs: Any) -> Any:
            from pydantic_core import to_jsonable_python

            meta = _meta(kwargs.pop(CONTEXT_PARAMETER, None))
            run_id, call_key = meta.get(META_RUN_ID), meta.get(META_CALL_KEY)
            if not isinstance(run_id, str) or not isinstance(call_key, str):
                outcome = CallOutcome(
                    False,
                    "run_required",
                    f"the request's _meta must name the run ({META_RUN_ID}) and the logical "
                    f"call ({META_CALL_KEY}) as strings: a call without them could not be "
                    "recognized when the run is resumed",
                )
                return call_result(outcome)
            arguments = to_jsonable_python(kwargs)
            outcome = await anyio.to_thread.run_sync(
                functools.partial(calls.call, spec, run_id, call_key, arguments)
            )
            return call_result(outcome)

        del tool.__wrapped__  # FastMCP reads the signature below, not the function's own
        tool.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*exposed, context], return_annotation=CallToolResult
        )
        tool.__annotations__ = {
            **{p.name: hints[p.name] for p in exposed if p.name in hints},
            CONTEXT_PARAMETER: Context,
            "return": CallToolResult,
        }
        return tool
