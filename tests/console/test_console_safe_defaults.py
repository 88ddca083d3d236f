"""The console at 3 a.m. (issue 37), in Debian's Chromium against a real ``leasefence local
--samples``: the dangerous resolution is never the primary button and is confirmed by its risk,
the resolve panel shows the facts a decision needs in triage as on the operation page, no action the
API would refuse is offered, the page's fields agree with the history, the job type's owner and
runbook are linked, and each action has a command line that does the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.browser import WAIT_MS, client_of, wait_state
from playwright.sync_api import expect

pytestmark = pytest.mark.timeout(240)
expect.set_options(timeout=WAIT_MS)


def _park_unknown(client, op_id: str, target_class: str, intent: str | None, reason: str) -> int:
    client.enqueue(op_id, "send-email", {"to": f"{op_id}@example.com"}, target_class=target_class)
    claim = client.claim("worker-s", operation_id=op_id)
    if intent:
        client.heartbeat(op_id, claim.fence, "worker-s", checkpoint={"step": "relay"}, intent=intent)
    client.unknown(op_id, claim.fence, reason)
    return claim.fence


def _triage_panel(page, local, sub: str, op_id: str):
    page.goto(local.link(sub, view="/triage"))
    row = page.locator(f"[data-test=queue-unknown] [data-test=triage-row][data-id={op_id}]")
    row.locator("[data-test=triage-open]").click()
    return page.locator("[data-test=resolve]").filter(has=page.locator(f"#note-{op_id}"))


def test_a_class_d_unknown_with_an_intent_never_makes_requeue_primary_and_confirms_the_risk(local, page):
    worker = client_of(local, "worker-s")
    fence = _park_unknown(worker, "safe-d1", "D", "post the welcome mail", "relay timed out after DATA")
    form = _triage_panel(page, local, "operator-s1", "safe-d1")
    # The panel shows, in triage, what the decision rests on.
    expect(form.locator("[data-test=resolve-intent]")).to_have_text(f'"post the welcome mail" under fence {fence}')
    expect(form.locator("[data-test=resolve-checkpoint]")).to_contain_text('"step": "relay"')
    expect(form.locator("[data-test=resolve-reason]")).to_have_text("relay timed out after DATA")
    requeue = form.locator("[data-test=resolve-requeue]")
    expect(requeue).not_to_have_class("primary")
    expect(requeue).to_have_attribute("data-risky", "true")
    expect(form.locator("button.primary")).to_have_count(0)
    expect(form.locator("[data-test=risk-requeue]")).to_contain_text("intent is on record")
    form.locator("[data-test=resolve-note]").fill("provider says no mail left the relay")
    requeue.click()
    dialog = page.locator("dialog#confirm")
    expect(dialog.locator("[data-test=confirm-risk]")).to_contain_text("a call may already have been made")
    expect(dialog.locator("[data-test=confirm-intent]")).to_have_text(f'"post the welcome mail" under fence {fence}')
    expect(page.locator("#confirm-no")).to_be_focused()  # keeping it is the default
    page.keyboard.press("Enter")
    expect(dialog).not_to_be_visible()
    assert worker.get("safe-d1").state == "unknown"
    requeue.click()
    page.click("#confirm-yes")
    wait_state(worker, "safe-d1", "queued")


def test_without_an_intent_or_outside_class_d_requeue_stays_the_primary_choice(local, page):
    worker = client_of(local, "worker-s")
    _park_unknown(worker, "safe-d2", "D", None, "worker died before the call")
    _park_unknown(worker, "safe-b1", "B", None, "store timed out")
    for op_id in ("safe-d2", "safe-b1"):
        form = _triage_panel(page, local, "operator-s2", op_id)
        expect(form.locator("[data-test=resolve-intent]")).to_have_text("none recorded")
        expect(form.locator("[data-test=resolve-requeue]")).to_have_class("primary")
        expect(form.locator("[data-test=risk-requeue]")).to_have_count(0)
        form.locator("[data-test=resolve-note]").fill("checked: nothing happened")
        form.locator("[data-test=resolve-requeue]").click()  # no confirmation: not dangerous
        wait_state(worker, op_id, "queued")


def test_no_action_the_api_would_refuse_is_offered(local, page):
    # sync-4001 (a sample) succeeded: no cancel, no resolve panel; erase stays (allowed).
    page.goto(local.link("operator-s3", view="/op/sync-4001"))
    expect(page.locator("[data-test=op-state]")).to_have_text("succeeded")
    expect(page.locator("[data-test=cancel]")).to_be_disabled()
    expect(page.locator("[data-test=why]")).to_contain_text("it is succeeded")
    expect(page.locator("[data-test=erase]")).to_be_enabled()
    expect(page.locator("[data-test=resolve]")).to_have_count(0)
    # A fresh queued operation: cancel offered, with its command line.
    producer = client_of(local, "producer-s")
    producer.enqueue("safe-q1", "nightly-report", {"day": 1})
    page.goto(local.link("operator-s3", view="/op/safe-q1"))
    expect(page.locator("[data-test=cancel]")).to_be_enabled()
    expect(page.locator("[data-test=cli-cancel]")).to_have_text("leasefence ops cancel safe-q1")
    # Claimed: neither cancel nor erase, and no command offered for them.
    producer.claim("worker-s", operation_id="safe-q1")
    page.reload()
    expect(page.locator("[data-test=op-state]")).to_have_text("claimed")
    expect(page.locator("[data-test=cancel]")).to_be_disabled()
    expect(page.locator("[data-test=erase]")).to_be_disabled()
    expect(page.locator("[data-test=cli-commands]")).to_have_count(0)


def test_every_field_agrees_with_the_history(local, page):
    # email-2001 (a sample) was enqueued by agent-7 without an approval gate, so the item keeps
    # no enqueuer: the page takes it from the history rather than showing "-" beside it.
    page.goto(local.link("operator-s4", view="/op/email-2001"))
    entries = page.locator("[data-test=history-entry]")
    expect(entries.first).to_be_visible()
    enqueue = page.locator("[data-test=history-entry][data-transition=enqueue]")
    expect(enqueue).to_contain_text("by agent-7")
    expect(page.locator("[data-test=op-enqueued-by]")).to_have_text("agent-7")
    claim = page.locator("[data-test=history-entry][data-transition=claim]").last
    expect(claim).to_contain_text("by worker-a")
    expect(page.locator("[data-test=op-claimed-by]")).to_have_text("worker-a")
    reason = page.locator("[data-test=history-entry][data-transition=unknown] .reason")
    expect(page.locator("[data-test=op-reason]")).to_have_text(reason.inner_text())
    expect(page.locator("[data-test=resolve-reason]")).to_have_text(reason.inner_text())


def test_owner_and_runbook_on_the_operation_and_in_triage_and_a_command_that_works(local, page, tmp_path):
    operator = client_of(local, "operator-s5")
    operator.put_job_type("payout", {"target_class": "C", "max_attempts": 2, "owner": "treasury-oncall",
                                     "runbook_url": "https://runbooks.example.com/payouts"})
    operator.enqueue("safe-p1", "payout", {"amount": 5})
    claim = operator.claim("worker-s", operation_id="safe-p1")
    operator.quarantine("safe-p1", claim.fence, "bank code unknown")
    page.goto(local.link("operator-s5", view="/op/safe-p1"))
    expect(page.locator("[data-test=owner]").first).to_have_text("treasury-oncall")
    expect(page.locator("[data-test=runbook]").first).to_have_attribute("href", "https://runbooks.example.com/payouts")
    page.goto(local.link("operator-s5", view="/triage"))
    row = page.locator("[data-test=queue-quarantined] [data-test=triage-row][data-id=safe-p1]")
    expect(row.locator("[data-test=owner]")).to_have_text("treasury-oncall")
    expect(row.locator("[data-test=runbook]")).to_have_attribute("href", "https://runbooks.example.com/payouts")
    row.locator("[data-test=triage-open]").click()
    form = page.locator("[data-test=resolve]").filter(has=page.locator("#note-safe-p1"))
    form.locator("[data-test=resolve-note]").fill("bank confirms: never paid out")
    command = form.locator("[data-test=cli-resolve-failed_terminal]").inner_text()
    assert command == "leasefence ops resolve safe-p1 --resolution failed_terminal --note 'bank confirms: never paid out'"
    # The command, pasted into a shell, does what the button would.
    env = {**os.environ, "LEASEFENCE_BASE_URL": local.base_url, "LEASEFENCE_TOKEN": local.token("operator-s5", "operate")}
    bin_dir = Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    resolved = operator.get("safe-p1")
    assert (resolved.state, resolved.outcome_code) == ("failed_terminal", "resolved:failed_terminal")
