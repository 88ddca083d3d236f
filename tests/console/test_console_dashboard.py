"""The dashboard (issue 37), in Debian's Chromium against a real ``leasefence local``: in a tenant of
its own, a seeded scenario with known counts per job type and state, and the page's figures must
equal them (ended by outcome, unknown and quarantined parks, parked now, approvals waiting,
queued, and the oldest ages)."""

from __future__ import annotations

import re
import uuid

import pytest
from tests.support.browser import WAIT_MS, client_of
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(240)
expect.set_options(timeout=WAIT_MS)

#: job type -> state -> how many the scenario leaves there.
SCENARIO = {
    "ship": {"succeeded": 5, "failed_terminal": 2, "quarantined": 1, "queued": 3},
    "mail": {"succeeded": 1, "cancelled": 2, "unknown": 3},
    "refund": {"awaiting_approval": 2},
}


def _seed(client) -> None:
    client.put_job_type("refund", {"target_class": "C", "approval_required": True})
    n = 0
    for job_type, states in SCENARIO.items():
        for state, count in states.items():
            for _ in range(count):
                n += 1
                op_id = f"{job_type}-{n:03d}"
                client.enqueue(op_id, job_type, {"n": n})
                if state in ("queued", "awaiting_approval"):
                    continue
                if state == "cancelled":
                    client.cancel(op_id)
                    continue
                claim = client.claim("worker-d", operation_id=op_id)
                if state == "succeeded":
                    client.complete(op_id, claim.fence, "done")
                elif state == "failed_terminal":
                    client.fail(op_id, claim.fence, False, "declined")
                elif state == "unknown":
                    client.unknown(op_id, claim.fence, "timed out")
                else:
                    client.quarantine(op_id, claim.fence, "unreadable")


def test_the_dashboards_figures_equal_a_seeded_scenarios_counts(local, page):
    tenant = f"dash-{uuid.uuid4().hex[:8]}"
    _seed(client_of(local, "seeder", tenant=tenant))
    token = local.token("operator-d", "operate", tenant=tenant)
    page.goto(f"{local.base_url}/console#token={token}&view=/dashboard%3Fhours%3D1")
    coverage = page.locator("[data-test=dash-coverage]")
    expect(coverage).to_have_text("19 operations read (all of them).")

    def figure(row, name):
        return row.locator(f"[data-figure={name}]")

    for job_type, states in SCENARIO.items():
        row = page.locator(f"[data-test=dash-type][data-job-type={job_type}]")
        for name, state in (("ended-succeeded", "succeeded"), ("ended-failed_terminal", "failed_terminal"),
                            ("ended-cancelled", "cancelled"), ("unknown", "unknown"), ("quarantined", "quarantined"),
                            ("approvals", "awaiting_approval"), ("queued", "queued")):
            expect(figure(row, name)).to_have_text(str(states.get(state, 0)))
        parked = states.get("unknown", 0) + states.get("quarantined", 0)
        expect(figure(row, "parked-now")).to_have_text(str(parked))
        ended = sum(states.get(s, 0) for s in ("succeeded", "failed_terminal", "cancelled"))
        expect(figure(row, "per-minute")).to_have_text(f"{ended / 60:.2f}")
        expect(figure(row, "oldest-parked")).to_have_text(re.compile(r"^\d+ s$") if parked else re.compile("^–$"))
    total = page.locator("[data-test=dash-all]")
    expect(figure(total, "ended-succeeded")).to_have_text("6")
    expect(figure(total, "approvals")).to_have_text("2")
    expect(figure(total, "parked-now")).to_have_text("4")
    # The timeline: every ended lifecycle is in the last bucket's rates (the scenario is minutes old).
    expect(page.locator("[data-test=dash-timeline] tbody tr")).to_have_count(12)


def test_the_operations_list_orders_a_page_by_urgency_and_says_within_the_page(local, page):
    tenant = f"order-{uuid.uuid4().hex[:8]}"
    client = client_of(local, "seeder", tenant=tenant)
    for op_id in ("op-1", "op-2", "op-3"):
        client.enqueue(op_id, "sync", {"id": op_id})
    claim = client.claim("worker-d", operation_id="op-2")
    client.unknown("op-2", claim.fence, "timed out")
    claim = client.claim("worker-d", operation_id="op-1")
    client.complete("op-1", claim.fence, "done")  # op-3 is now the oldest change, op-1 the newest
    token = local.token("operator-d", "operate", tenant=tenant)
    ids = "rows => rows.map(r => r.dataset.id)"
    for order, expected in (("id", ["op-1", "op-2", "op-3"]), ("oldest", ["op-3", "op-2", "op-1"]),
                            ("state", ["op-2", "op-3", "op-1"])):
        page.goto(f"{local.base_url}/console#token={token}&view=/operations%3Forder%3D{order}")
        expect(page.locator("[data-test=op-row]")).to_have_count(3)
        assert page.locator("[data-test=op-row]").evaluate_all(ids) == expected, order
        expect(page.locator("[data-test=order-text]")).to_contain_text("within this page")
