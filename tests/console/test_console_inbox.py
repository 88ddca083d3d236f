"""The approvals inbox an approver can work from (issue 37), in Debian's Chromium against a real
``leasefence local --samples``: each row says what the approval is for (the payload fields the
job type declares in the catalogue), who asked and when it expires; the approve dialog shows the
exact payload whose hash the approval sends; a token that may not read payloads sees no summary,
and an erased payload shows as erased."""

from __future__ import annotations

import json

import pytest
from tests.support.browser import WAIT_MS, client_of, wait_state
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(240)
expect.set_options(timeout=WAIT_MS)


def test_each_row_shows_the_declared_summary_who_asked_and_when_it_expires(local, page):
    # The samples' two refunds (refund: approval_summary amount, currency, reason) differ at a
    # glance: 12.50 EUR for a damaged parcel, 899.00 EUR for a duplicate charge.
    page.goto(local.link("approver-9", "approve", view="/approvals"))
    small = page.locator("[data-test=approval-row][data-id=refund-1001]")
    large = page.locator("[data-test=approval-row][data-id=refund-1002]")
    expect(small.locator("[data-test=summary] [data-field=amount]")).to_have_text("1250")
    expect(large.locator("[data-test=summary] [data-field=amount]")).to_have_text("89900")
    expect(small.locator("[data-test=summary]")).to_contain_text("currency EUR")
    expect(small.locator("[data-test=summary]")).to_contain_text("reason parcel arrived damaged")
    expect(large.locator("[data-test=summary]")).to_contain_text("reason duplicate charge")
    expect(small.locator("[data-test=requested-by]")).to_have_text("agent-7")
    expect(small.locator("[data-test=expires]")).to_contain_text("in ")
    # An operator without a payload-reading scope lists them, without their payloads' fields.
    page.goto(local.link("operator-9", "operate", view="/approvals"))
    expect(page.locator("[data-test=approval-row][data-id=refund-1001] [data-test=summary]")).to_have_attribute(
        "data-state", "needs_scope")
    expect(page.locator("[data-test=approval-row][data-id=refund-1001] [data-field]")).to_have_count(0)


def test_the_approve_dialog_shows_the_exact_payload_whose_hash_is_approved_and_erased_is_erased(local, page):
    agent = client_of(local, "agent-7")
    payload = {"order": "I-1", "amount": 4400, "currency": "EUR", "reason": "late delivery"}
    expected_hash = agent.enqueue("refund-i1", "refund", payload).operation.payload_hash
    agent.enqueue("refund-i2", "refund", {"order": "I-2", "amount": 10, "currency": "EUR"})
    page.goto(local.link("approver-9", "approve", view="/approvals"))
    expect(page.locator("[data-test=approval-row][data-id=refund-i1] [data-field=amount]")).to_have_text("4400")
    page.click("[data-test=approval-row][data-id=refund-i1] a.opid")
    page.click("[data-test=approve]")
    dialog = page.locator("dialog#confirm")
    expect(dialog.locator("[data-test=confirm-hash]")).to_have_text(expected_hash)
    shown = json.loads(dialog.locator("[data-test=confirm-payload]").inner_text())
    assert shown == payload
    page.click("#confirm-no")  # keeping it approves nothing
    assert agent.get("refund-i1").state == "awaiting_approval"
    page.click("[data-test=approve]")
    page.click("#confirm-yes")
    wait_state(agent, "refund-i1", "queued")
    # An erased payload: its row says so, with no summary.
    client_of(local, "operator-9", "operate").erase("refund-i2")
    page.goto(local.link("approver-9", "approve", view="/approvals"))
    row = page.locator("[data-test=approval-row][data-id=refund-i2]")
    expect(row.locator("[data-test=summary]")).to_have_attribute("data-state", "erased")
    expect(row.locator("[data-test=summary]")).to_have_text("payload erased")
