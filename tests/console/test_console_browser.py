"""The operator console in a real browser (Debian's Chromium, driven by Playwright) against a real
``leasefence local --samples`` (issue 25): sign in from the link it prints, find an operation by
filter, open its timeline, approve with the right hash, watch a self-approval refused, resolve an
``unknown`` with a note, cancel, see a refused action's error, and read-only views without a scope.

Every check reads the page as a person would, then the API confirms what the click did."""

from __future__ import annotations

import re
import time

import pytest
from tests.support.browser import browser, local_stack
from playwright.sync_api import expect

from leasefence.client import LeaseFenceClient

pytestmark = pytest.mark.timeout(240)
WAIT_MS = 15_000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    with local_stack(tmp_path_factory.mktemp("console-local")) as running:
        yield running


@pytest.fixture(scope="module")
def chromium():
    with browser() as launched:
        yield launched


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], f"the page raised: {errors}"


def _client(local, sub: str, scopes: str = "produce work operate approve") -> LeaseFenceClient:
    return LeaseFenceClient(local.base_url, local.token(sub, scopes), retries=2, backoff=0.05)


def _wait_state(client: LeaseFenceClient, op_id: str, state: str) -> None:
    deadline = time.monotonic() + 10
    while client.get(op_id).state != state:
        assert time.monotonic() < deadline, f"{op_id} never became {state}: {client.get(op_id)}"
        time.sleep(0.1)


def test_the_printed_link_signs_in_and_shows_the_samples(local, page):
    page.goto(local.console_link)
    expect(page.locator("[data-test=who]")).to_have_text("dev:console")
    expect(page.locator("[data-test=tenant]")).to_have_text("dev")
    expect(page.locator("[data-test=scopes]")).to_contain_text("operate")
    expect(page.locator("[data-test=op-row][data-id=sync-4001]")).to_be_visible()
    # The token left the address bar (and never went to the server in a URL).
    assert "token=" not in page.url and page.url.endswith("#/operations")
    expect(page.locator("[data-test=count-unknown] strong")).not_to_have_text("0")
    # Keyboard: the nav and the filter are reachable without a mouse, "/" focuses the search.
    page.keyboard.press("/")
    expect(page.locator("[data-test=filter-text]")).to_be_focused()


def test_filter_finds_an_operation_and_its_timeline_shows_the_takeover(local, page):
    page.goto(local.link("dev:console"))
    expect(page.locator("[data-test=op-row]").first).to_be_visible()
    page.fill("input[name=job_type]", "sync-inventory")
    page.select_option("select[name=target_class]", "B")
    page.click("[data-test=apply-filters]")
    expect(page).to_have_url(re.compile(r"#/operations\?.*job_type=sync-inventory.*target_class=B"))
    rows = page.locator("[data-test=op-row]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-id", "sync-4001")
    # A shared link opens the same filtered list.
    shared = page.url
    page.goto(local.link("dev:console", view="/operations?q=sync-4"))
    expect(page.locator("[data-test=op-row]")).to_have_count(1)
    page.goto(shared)
    expect(page.locator("[data-test=op-row]")).to_have_count(1)
    page.click("[data-test=op-row] [data-test=op-link]")
    expect(page.locator("[data-test=op-title]")).to_have_text("sync-4001")
    expect(page.locator("[data-test=op-fence]")).to_have_text("2")
    entries = page.locator("[data-test=history-entry]")
    expect(entries).to_have_count(4)
    takeover = page.locator("[data-test=history-entry][data-transition=takeover]")
    expect(takeover).to_contain_text("fence 2")
    expect(takeover.locator("[data-test=takeover]")).to_contain_text("took over from worker-a")
    expect(page.locator("[data-test=class-advice]")).to_contain_text("conditional-write store")


def test_approve_binds_the_hash_shown_and_a_self_approval_is_refused(local, page):
    agent = _client(local, "agent-7")
    enqueued = agent.enqueue("refund-b1", "refund", {"order": "B-1", "amount": 700, "currency": "EUR"})
    expected_hash = enqueued.operation.payload_hash
    # The producer itself, with the approve scope: the API refuses, and the page says why.
    page.goto(local.link("agent-7", view="/approval/refund-b1"))
    expect(page.locator("[data-test=requester]")).to_have_text("agent-7")
    expect(page.locator("[data-test=seen-hash]")).to_have_text(expected_hash)
    page.click("[data-test=approve]")
    error = page.locator("[data-test=api-error]")
    expect(error).to_contain_text("403 forbidden")
    expect(error).to_contain_text("enqueued")  # the API's own reason: the approver enqueued it
    assert agent.get("refund-b1").state == "awaiting_approval"
    # Another identity, from the inbox.
    page.goto(local.link("approver-1", "approve", view="/approvals"))
    page.click("[data-test=approval-row][data-id=refund-b1] a.opid")
    expect(page.locator("[data-test=payload-hash]")).to_have_text(expected_hash)
    expect(page.get_by_role("cell", name="B-1")).to_be_visible()  # the payload, readable
    page.click("[data-test=approve]")
    expect(page.locator("[data-test=approved]")).to_contain_text("Approved by approver-1")
    approved = agent.get("refund-b1")
    assert approved.state == "queued" and approved.approved_by == "approver-1"


def test_resolving_an_unknown_needs_a_note_and_explains_each_choice(local, page):
    worker = _client(local, "worker-z")
    worker.enqueue("email-b1", "send-email", {"to": "x@example.com"}, target_class="D")
    claim = worker.claim("worker-z", operation_id="email-b1")
    worker.unknown("email-b1", claim.fence, "relay hung up after DATA")
    page.goto(local.link("operator-1", view="/triage"))
    row = page.locator("[data-test=queue-unknown] [data-test=triage-row][data-id=email-b1]")
    expect(row).to_contain_text("relay hung up after DATA")
    expect(row.locator("[data-test=age]")).to_contain_text("ago")
    row.locator("[data-test=triage-open]").click()
    form = page.locator("[data-test=resolve]").filter(has=page.locator("#note-email-b1"))
    # Before any click: what each choice means for class D.
    expect(form.locator("[data-test=explain-requeue]")).to_contain_text("intent")
    expect(form.locator("[data-test=explain-succeeded]")).to_contain_text("verified")
    form.locator("[data-test=resolve-failed_terminal]").click()
    expect(form.locator("[role=alert]")).to_contain_text("note is required")
    assert worker.get("email-b1").state == "unknown"
    form.locator("[data-test=resolve-note]").fill("relay log shows no 250 for this message")
    form.locator("[data-test=resolve-failed_terminal]").click()
    _wait_state(worker, "email-b1", "failed_terminal")
    expect(page.locator("[data-test=queue-unknown] [data-test=triage-row][data-id=email-b1]")).to_have_count(0)


def test_cancel_with_confirmation_and_a_refused_cancel_shows_the_apis_error(local, page):
    producer = _client(local, "producer-1")
    producer.enqueue("cancel-b1", "nightly-report", {"day": 1})
    producer.enqueue("cancel-b2", "nightly-report", {"day": 2})
    claim = producer.claim("w-9", operation_id="cancel-b2")
    producer.fail("cancel-b2", claim.fence, True, "try later")  # queued again after an attempt
    page.goto(local.link("producer-1", "produce", view="/op/cancel-b1"))
    page.click("[data-test=cancel]")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_be_visible()
    page.click("#confirm-no")  # keeping it changes nothing
    assert producer.get("cancel-b1").state == "queued"
    page.click("[data-test=cancel]")
    page.click("#confirm-yes")
    _wait_state(producer, "cancel-b1", "cancelled")
    expect(page.locator("[data-test=op-state]")).to_have_text("cancelled")
    page.goto(local.link("producer-1", "produce", view="/op/cancel-b2"))
    page.click("[data-test=cancel]")
    page.keyboard.press("Enter")  # the focused button is "Keep it"
    assert producer.get("cancel-b2").state == "queued"
    page.click("[data-test=cancel]")
    page.click("#confirm-yes")
    error = page.locator("[data-test=action-result] [data-test=api-error]")
    expect(error).to_contain_text("409 already_attempted")
    expect(error.locator("pre")).to_contain_text('"code":"already_attempted"')  # the API's body
    assert producer.get("cancel-b2").state == "queued"


def test_without_a_scope_views_are_read_only_and_say_why(local, page):
    page.goto(local.link("producer-2", "produce", view="/operations"))
    expect(page.locator("[data-test=needs-scope]")).to_contain_text("leasefence/operate")
    page.goto(local.link("producer-2", "produce", view="/op/receipt-5001"))
    erase = page.locator("[data-test=erase]")
    expect(erase).to_be_disabled()
    expect(page.locator(".why", has_text="needs leasefence/operate")).to_be_visible()
    expect(page.locator("[data-test=cancel]")).to_be_enabled()
    expect(page.locator(".history [data-test=needs-scope]")).to_contain_text("leasefence/operate")
