"""Bulk triage in the console (issue 37), in Debian's Chromium against a real ``leasefence local
--samples``: after a simulated provider outage parks 40 operations, a filter selects them (resolved
to their ids first), one note resolves them in one action, and the one changed meanwhile reports
its refusal in its own row while the 39 others succeed; a bulk requeue leaves out a class-D
operation with an intent unless the operator names it."""

from __future__ import annotations

import pytest
from tests.support.browser import WAIT_MS, client_of
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(300)
expect.set_options(timeout=WAIT_MS)


def _outage(client, prefix: str, count: int, job_type: str, target_class: str = "C", intent: str | None = None):
    """``count`` operations parked unknown by a provider outage (through the batch routes)."""
    ids = [f"{prefix}-{n:02d}" for n in range(count)]
    client.enqueue_batch([{"operation_id": i, "job_type": job_type, "payload": {"n": i}, "target_class": target_class}
                          for i in ids])
    claims = [r.result() for r in client.claim_batch([{"worker_id": "worker-o", "operation_id": i} for i in ids])]
    if intent:
        client.heartbeat_batch([{"operation_id": c.operation_id, "fence": c.fence, "worker_id": "worker-o", "intent": intent}
                                for c in claims])
    finished = client.finish_batch([{"action": "unknown", "operation_id": c.operation_id, "fence": c.fence,
                                     "reason": "provider timed out (outage)"} for c in claims])
    assert all(r.ok for r in finished)
    return ids


def test_bulk_resolve_of_40_after_an_outage_with_one_changed_meanwhile(local, page):
    client = client_of(local, "worker-o")
    ids = _outage(client, "outage", 40, "charge-psp")
    page.goto(local.link("operator-b1", view="/triage"))
    expect(page.locator("[data-test=queue-unknown] [data-test=triage-row]", has_text="charge-psp")).to_have_count(40)
    page.fill("[data-test=bulk-filter-job-type]", "charge-psp")
    page.click("[data-test=bulk-select-matching]")
    expect(page.locator("[data-test=bulk-count]")).to_have_text("40")
    # Meanwhile another operator requeues one; a worker claims it and it parks again.
    changed = ids[17]
    client.resolve(changed, "requeue", "retrying this one by hand")
    claim = client.claim("worker-o", operation_id=changed)
    client.unknown(changed, claim.fence, "timed out again")
    page.fill("[data-test=bulk-note]", "provider confirms none of these was charged")
    expect(page.locator("[data-test=cli-bulk]")).to_contain_text("leasefence ops triage resolve outage-00")
    page.click("[data-test=bulk-failed_terminal]")
    expect(page.locator("dialog#confirm")).to_contain_text("40 operations")
    page.click("#confirm-yes")
    expect(page.locator("[data-test=bulk-summary]")).to_have_text(
        "39 of 40 done; the others are refused in their rows.")
    refused = page.locator(f"[data-test=triage-row][data-id={changed}] [data-test=bulk-result]")
    expect(refused).to_contain_text("409 stale_fence")
    expect(refused).to_contain_text("changed since it was read")
    done = page.locator("[data-test=triage-row]", has_text="charge-psp").locator("[data-test=bulk-result]", has_text="✓ failed_terminal")
    expect(done).to_have_count(39)
    states = {i: client.get(i).state for i in ids}
    assert states.pop(changed) == "unknown"
    assert set(states.values()) == {"failed_terminal"}
    assert {client.get(i).outcome_code for i in ids[:3]} == {"resolved:failed_terminal"}


def test_a_bulk_requeue_leaves_out_class_d_with_an_intent_unless_named(local, page):
    client = client_of(local, "worker-o")
    risky = _outage(client, "mailout", 2, "send-mail", target_class="D", intent="send via relay")
    safe = _outage(client, "resync", 2, "resync-stock", target_class="B")
    page.goto(local.link("operator-b2", view="/triage"))
    expect(page.locator("[data-test=triage-row][data-id=resync-01]")).to_be_visible()
    for op_id in risky + safe:
        page.check(f"[data-test=triage-row][data-id={op_id}] [data-test=select]")
    expect(page.locator("[data-test=bulk-count]")).to_have_text("4")
    page.fill("[data-test=bulk-note]", "outage over")
    page.click("[data-test=bulk-requeue]")
    warning = page.locator("dialog#confirm [data-test=bulk-risky]")
    expect(warning).to_contain_text("2 of them are class D with an intent on record: mailout-00, mailout-01")
    expect(page.locator("[data-test=bulk-accept-risks]")).not_to_be_checked()
    page.click("#confirm-yes")
    expect(page.locator("[data-test=bulk-summary]")).to_contain_text("2 of 4 done")
    for op_id in risky:
        expect(page.locator(f"[data-test=triage-row][data-id={op_id}] [data-test=bulk-result]")).to_contain_text("422 invalid_request")
        assert client.get(op_id).state == "unknown"
    for op_id in safe:
        assert client.get(op_id).state == "queued"
