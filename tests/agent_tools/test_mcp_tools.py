"""Fenced agent tools over MCP (the SDK's in-memory client/server session, the in-process engine
on the embedded endpoint): a tool call is one operation derived from the run and the logical
call, so a resumed or replayed run calls the target once; approvals bind the exact arguments;
a stale fence is an error result with a machine code."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

from leasefence import State
from leasefence.agent_tools import (
    META_CALL_KEY,
    META_RUN_ID,
    EngineLedger,
    FencedCalls,
    FencedTools,
    ToolSpec,
    call_operation_id,
)
from leasefence.errors import PayloadMismatch
from leasefence.payloads import canonicalize
from leasefence.targets.fenced_table import FencedTable
from leasefence.worker import Job, Reconciled
from leasefence_tools.testing.kits import _create_table
from tests.support.asyncio_thread import run as run_async

TENANT = "acme"
SERVER = "agent-server"  # the identity the server enqueues as
APPROVER = "approver-1"
LEASE = 30_000
_tables = itertools.count()


class Crash(BaseException):
    """The agent server's process dies: nothing after this runs."""


class Refunds:
    """The tool's target (class B): one item per order; a refund is appended under the fence."""

    def __init__(self, ddb: Any) -> None:
        name = f"orders-{next(_tables)}"
        _create_table(ddb, name)
        self.table = FencedTable(ddb, name)
        self.during: Any = None  # called inside the tool, before its write (a stall, a takeover)
        self.after: Any = None  # called inside the tool, after its write (a crash)

    def refunds(self, order_id: str) -> list[dict[str, Any]]:
        return list((self.table.read({"pk": order_id}) or {}).get("refunds", []))

    def on_claim(self, job: Job) -> None:
        self.table.raise_fence(job, {"pk": job.payload["order_id"]})

    def reconcile(self, job: Job) -> Reconciled:
        done = any(r["op"] == job.operation_id for r in self.refunds(job.payload["order_id"]))
        return Reconciled.done("refunded") if done else Reconciled.not_done()

    def run(self, job: Job, order_id: str, amount_cents: int) -> str:
        if self.during is not None:
            self.during(job)
        self.table.write(
            job,
            {"pk": order_id},
            {"status": "refunded"},
            append={"refunds": [{"op": job.operation_id, "amount": amount_cents}]},
        )
        if self.after is not None:
            self.after(job)
        return f"refunded {amount_cents}"


@pytest.fixture
def refunds(ddb):
    return Refunds(ddb)


def server(engine, refunds: Refunds, worker: str) -> FastMCP:
    """An agent server: one process of it; ``worker`` names it as a claimer."""
    tools = FencedTools(FencedCalls(EngineLedger(engine, TENANT, SERVER), worker, lease_ms=LEASE))
    mcp = FastMCP("payments")

    @mcp.tool()
    @tools.fenced(
        target_class="B", approval=True, on_claim=refunds.on_claim, reconcile=refunds.reconcile
    )
    def refund(job: Job, order_id: str, amount_cents: int) -> str:
        """Refund part of an order."""
        return refunds.run(job, order_id, amount_cents)

    return mcp


def call(mcp: FastMCP, arguments: dict[str, Any], run: str, key: str, call_id: str) -> Any:
    """One tools/call over the SDK's in-memory session; ``call_id`` is the framework's own id
    for this call (sent, and ignored by the derivation)."""

    async def go() -> Any:
        async with create_connected_server_and_client_session(mcp) as session:
            meta = {META_RUN_ID: run, META_CALL_KEY: key, "framework/call_id": call_id}
            return await session.call_tool("refund", arguments, meta=meta)

    return run_async(go)


def body(result: Any) -> dict[str, Any]:
    return result.structuredContent["error" if result.isError else "result"]


ARGS = {"order_id": "order-42", "amount_cents": 1500}


def approve(engine, run: str = "run-1", key: str = "step-3", args: dict = ARGS) -> None:
    oid = call_operation_id("refund", run, key)
    engine.approve(TENANT, oid, canonicalize(args).hash, APPROVER)


def test_the_tool_schema_is_the_functions_arguments_without_the_job(engine, refunds):
    async def tools() -> Any:
        async with create_connected_server_and_client_session(server(engine, refunds, "w")) as s:
            return (await s.list_tools()).tools

    (tool,) = run_async(tools)
    assert tool.name == "refund" and tool.description == "Refund part of an order."
    assert set(tool.inputSchema["properties"]) == {"order_id", "amount_cents"}
    assert sorted(tool.inputSchema["required"]) == ["amount_cents", "order_id"]


def test_a_call_without_its_run_and_key_is_refused(engine, refunds):
    async def go() -> Any:
        async with create_connected_server_and_client_session(server(engine, refunds, "w")) as s:
            return await s.call_tool("refund", ARGS)

    result = run_async(go)
    assert result.isError and body(result)["code"] == "run_required"
    assert engine.list(TENANT).operations == [] and refunds.refunds("order-42") == []


def test_the_id_comes_from_run_and_logical_call_not_the_framework_call_id():
    one = call_operation_id("refund", "run-1", "step-3")
    assert one == call_operation_id("refund", "run-1", "step-3")
    assert (
        len(
            {
                one,
                call_operation_id("refund", "run-1", "step-4"),
                call_operation_id("refund", "run-2", "step-3"),
                call_operation_id("charge", "run-1", "step-3"),
                # no separator trick makes two calls one
                call_operation_id("refund", 'run-1", "step', "3"),
                call_operation_id("refund", "run-1", '", "step-3'),
            }
        )
        == 6
    )
    assert one.startswith("agent-call-") and len(one) == len("agent-call-") + 64


def test_approval_then_replay_calls_the_target_once(engine, refunds):
    mcp = server(engine, refunds, "server-a")
    first = call(mcp, ARGS, "run-1", "step-3", "call_A1")
    assert first.isError and body(first)["code"] == "approval_required"
    assert body(first)["payload_hash"] == canonicalize(ARGS).hash
    # nothing reached the target before the approval, and asking again does not either
    assert call(mcp, ARGS, "run-1", "step-3", "call_A2").isError
    assert refunds.refunds("order-42") == []

    approve(engine)
    ran = call(mcp, ARGS, "run-1", "step-3", "call_B1")
    assert not ran.isError, ran
    assert body(ran) | {"replayed": False} == body(ran)
    assert body(ran)["outcome_code"] == "refunded 1500"
    # the run is replayed (a retry after a lost answer, or the whole run again): a fresh call id
    again = call(mcp, {"amount_cents": 1500, "order_id": "order-42"}, "run-1", "step-3", "call_C")
    assert not again.isError and body(again)["replayed"] is True
    assert body(again)["outcome_code"] == "refunded 1500"
    assert refunds.refunds("order-42") == [
        {"op": call_operation_id("refund", "run-1", "step-3"), "amount": 1500}
    ]


def test_resume_after_a_crash_with_a_fresh_call_id_calls_the_target_once(engine, refunds, clock):
    approve_first = server(engine, refunds, "server-a")
    assert body(call(approve_first, ARGS, "run-1", "step-3", "call_1"))["code"] == (
        "approval_required"
    )
    approve(engine)
    # The first server process makes the refund and dies before it records the outcome.
    refunds.after = lambda _job: (_ for _ in ()).throw(Crash())
    crashing = FencedCalls(EngineLedger(engine, TENANT, SERVER), "server-a", lease_ms=LEASE)
    spec = ToolSpec(
        "refund", refunds.run, "B", True, on_claim=refunds.on_claim, reconcile=refunds.reconcile
    )
    with pytest.raises(Crash):
        crashing.call(spec, "run-1", "step-3", dict(ARGS))
    refunds.after = None
    assert len(refunds.refunds("order-42")) == 1

    # The run resumes on a new server process; the model's turn is generated again (another
    # framework call id), with the same arguments for the same logical call.
    resumed = server(engine, refunds, "server-b")
    busy = call(resumed, ARGS, "run-1", "step-3", "call_2")
    assert busy.isError and body(busy)["code"] == "in_progress"  # the dead holder's lease
    clock.advance(LEASE + 1)
    done = call(resumed, ARGS, "run-1", "step-3", "call_3")
    assert not done.isError, done
    # reconciled from the target (the refund is there), not run again
    assert body(done)["outcome_code"] == "refunded"
    assert len(refunds.refunds("order-42")) == 1
    assert engine.get(TENANT, call_operation_id("refund", "run-1", "step-3")).state is (
        State.SUCCEEDED
    )


def test_changed_arguments_are_not_covered_by_the_approval(engine, refunds):
    mcp = server(engine, refunds, "server-a")
    call(mcp, ARGS, "run-1", "step-3", "c1")
    approve(engine)
    changed = {"order_id": "order-42", "amount_cents": 150000}
    # the same logical call with other arguments: refused, nothing called, the approved call
    # unchanged (still queued, claimable with its approved arguments only)
    conflict = call(mcp, changed, "run-1", "step-3", "c2")
    assert conflict.isError and body(conflict)["code"] == "payload_conflict"
    assert refunds.refunds("order-42") == []
    assert engine.get(TENANT, call_operation_id("refund", "run-1", "step-3")).state is State.QUEUED
    # as a new call it needs an approval of its own: the old approval's hash does not pass it
    fresh = call(mcp, changed, "run-1", "step-4", "c3")
    assert fresh.isError and body(fresh)["code"] == "approval_required"
    assert body(fresh)["payload_hash"] == canonicalize(changed).hash != canonicalize(ARGS).hash
    with pytest.raises(PayloadMismatch):
        approve(engine, key="step-4", args=ARGS)
    assert call(mcp, changed, "run-1", "step-4", "c4").isError
    assert refunds.refunds("order-42") == []
    # approved for what it says, it runs once
    approve(engine, key="step-4", args=changed)
    assert not call(mcp, changed, "run-1", "step-4", "c5").isError
    assert [r["amount"] for r in refunds.refunds("order-42")] == [150000]


def test_a_stale_fence_is_an_error_result_with_its_code(engine, refunds, clock):
    """The tool stalls past its lease; the resumed run takes the call over and makes it; the
    stalled holder's write is refused by the target and its call answers ``stale_fence``."""
    mcp_a, mcp_b = server(engine, refunds, "server-a"), server(engine, refunds, "server-b")
    call(mcp_a, ARGS, "run-1", "step-3", "c1")
    approve(engine)
    answers: list[Any] = []

    def stall(_job: Job) -> None:
        refunds.during = None
        clock.advance(LEASE + 1)
        answers.append(call(mcp_b, ARGS, "run-1", "step-3", "c3"))  # takes over, refunds

    refunds.during = stall
    stale = call(mcp_a, ARGS, "run-1", "step-3", "c2")
    assert stale.isError and body(stale)["code"] == "stale_fence", stale
    assert body(stale)["fence"] == 1
    (taken_over,) = answers
    assert not taken_over.isError and body(taken_over)["outcome_code"] == "refunded 1500"
    assert len(refunds.refunds("order-42")) == 1
    op = engine.get(TENANT, call_operation_id("refund", "run-1", "step-3"))
    assert op.state is State.SUCCEEDED and op.fence == 2
