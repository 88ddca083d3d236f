"""Fenced agent tools with the server holding an API token (ClientLedger) on the local stack: the
approval gate is the job type's catalogue entry, the approver another identity, and an approval
declared by the tool but not enforced by the catalogue refuses the call before it runs."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

from leasefence.agent_tools import (
    META_CALL_KEY,
    META_RUN_ID,
    ClientLedger,
    FencedCalls,
    FencedTools,
)
from leasefence.client import LeaseFenceClient
from leasefence.errors import Forbidden
from leasefence.targets import idempotent_api
from leasefence.worker import Job
from tests.support.asyncio_thread import run as run_async

ARGS = {"to": "ada@example.com", "subject": "Your refund"}


@pytest.fixture
def setup(stack, tenant, sdk):
    sdk.put_job_type("send_email", {"target_class": "C", "approval_required": True})
    token = stack.token(
        tenant, ["leasefence/produce", "leasefence/work"], subject="mail-agent-server"
    )
    client = LeaseFenceClient(stack.base_url, token, retries=2, backoff=0.01)
    provider = idempotent_api.InMemoryIdempotentApi()
    tools = FencedTools(FencedCalls(ClientLedger(client, tenant), "mail-mcp-1", lease_ms=30_000))
    mcp = FastMCP("mail", log_level="WARNING")

    def sent(job: Job) -> Any:
        return idempotent_api.reconcile(job, provider, lambda _r: "sent")

    @mcp.tool()
    @tools.fenced(target_class="C", approval=True, reconcile=sent)
    def send_email(job: Job, to: str, subject: str) -> str:
        idempotent_api.call(job, provider, {"to": to, "subject": subject})
        return "sent"

    @mcp.tool()
    @tools.fenced(target_class="C", approval=True)
    def send_sms(job: Job, to: str, text: str) -> str:  # no catalogue entry requires approval
        idempotent_api.call(job, provider, {"to": to, "text": text})
        return "sent"

    def approver(subject: str) -> LeaseFenceClient:
        return LeaseFenceClient(
            stack.base_url, stack.token(tenant, ["leasefence/approve"], subject=subject)
        )

    return mcp, provider, approver


def call(mcp: FastMCP, tool: str, arguments: dict[str, Any], key: str) -> dict[str, Any]:
    async def go() -> Any:
        async with create_connected_server_and_client_session(mcp) as session:
            meta = {META_RUN_ID: "run-9", META_CALL_KEY: key}
            return await session.call_tool(tool, arguments, meta=meta)

    result = run_async(go)
    body = result.structuredContent
    assert result.isError == ("error" in body)
    return body.get("error") or body["result"]


def test_over_http_the_call_is_approved_by_another_identity_and_made_once(setup):
    mcp, provider, approver = setup
    pending = call(mcp, "send_email", ARGS, "step-1")
    assert pending["code"] == "approval_required" and provider.executions == []
    # the server's own identity cannot approve what it enqueued
    with pytest.raises(Forbidden):
        approver("mail-agent-server").approve(pending["operation_id"], pending["payload_hash"])
    approver("approver-1").approve(pending["operation_id"], pending["payload_hash"])
    made = call(mcp, "send_email", ARGS, "step-1")
    assert made["code"] == "succeeded" and made["replayed"] is False
    again = call(mcp, "send_email", ARGS, "step-1")
    assert again["code"] == "succeeded" and again["replayed"] is True
    changed = call(mcp, "send_email", {**ARGS, "subject": "Your refund of 9,900"}, "step-1")
    assert changed["code"] == "payload_conflict"
    assert len(provider.executions) == 1


def test_an_approval_the_catalogue_does_not_enforce_refuses_the_call(setup):
    mcp, provider, _ = setup
    refused = call(mcp, "send_sms", {"to": "+100", "text": "hi"}, "step-1")
    assert refused["code"] == "approval_not_enforced" and refused["state"] == "queued"
    assert provider.executions == []
