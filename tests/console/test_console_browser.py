"""The operator console in a real browser (Debian's Chromium, driven by Playwright) against a real
``leasefence local --samples`` (issue 25): sign in from the link it prints, find an operation by
filter, open its timeline, approve with the right hash, watch a self-approval refused, resolve an
``unknown`` with a note, cancel, see a refused action's error, and read-only views without a scope
(issue 37's safe defaults, bulk triage and dashboard: the other test_console_*.py files).

Every check reads the page as a person would, then the API confirms what the click did."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import secrets
import threading
import time
import urllib.parse
import uuid
from datetime import timedelta

import pytest
from tests.support.browser import SECRET, WAIT_MS, client_of as _client, wait_state as _wait_state
from playwright.sync_api import expect

from leasefence.client import LeaseFenceClient
from leasefence_tools.local.tokens import mint

pytestmark = pytest.mark.timeout(240)
expect.set_options(timeout=WAIT_MS)


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
    page.click("#confirm-yes")  # the dialog shows the exact payload approved (issue 37)
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
    page.click("#confirm-yes")  # the dialog shows the exact payload approved (issue 37)
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
    # Offered while no worker claimed it; claimed and failed behind the page's back, the API
    # refuses the cancel, and the page shows its answer.
    page.goto(local.link("producer-1", "produce", view="/op/cancel-b2"))
    page.click("[data-test=cancel]")
    page.keyboard.press("Enter")  # the focused button is "Keep it"
    assert producer.get("cancel-b2").state == "queued"
    claim = producer.claim("w-9", operation_id="cancel-b2")
    producer.fail("cancel-b2", claim.fence, True, "try later")  # queued again after an attempt
    page.click("[data-test=cancel]")
    page.click("#confirm-yes")
    error = page.locator("[data-test=action-result] [data-test=api-error]")
    expect(error).to_contain_text("409 already_attempted")
    expect(error.locator("pre")).to_contain_text('"code":"already_attempted"')  # the API's body
    assert producer.get("cancel-b2").state == "queued"
    # Read again, the page no longer offers it, and says why (issue 37).
    page.reload()
    expect(page.locator("[data-test=cancel]")).to_be_disabled()
    expect(page.locator("[data-test=why]", has_text="claimed it before")).to_be_visible()


def test_without_a_scope_views_are_read_only_and_say_why(local, page):
    page.goto(local.link("producer-2", "produce", view="/operations"))
    expect(page.locator("[data-test=needs-scope]")).to_contain_text("leasefence/operate")
    _client(local, "producer-2").enqueue("scope-q1", "nightly-report", {"day": 1})
    page.goto(local.link("producer-2", "produce", view="/op/scope-q1"))
    erase = page.locator("[data-test=erase]")
    expect(erase).to_be_disabled()
    expect(page.locator(".why", has_text="needs leasefence/operate")).to_be_visible()
    expect(page.locator("[data-test=cancel]")).to_be_enabled()
    expect(page.locator(".history [data-test=needs-scope]")).to_contain_text("leasefence/operate")


def test_the_list_refreshes_itself_counts_per_state_and_pages(local, page):
    producer = _client(local, "producer-3")
    page.goto(local.link("operator-3", "operate", view="/operations?q=live-"))
    expect(page.locator("[data-test=results]")).to_contain_text("No operation matches")
    expect(page.locator("[data-test=counts]")).to_contain_text("all 0")
    page.evaluate("window.notReloaded = true")
    producer.enqueue("live-1", "nightly-report", {"day": 1})
    producer.enqueue("live-2", "nightly-report", {"day": 2})
    claim = producer.claim("w-live", operation_id="live-2")
    producer.unknown("live-2", claim.fence, "printer on fire")
    # Within a refresh (5 s), without reloading or navigating: the rows and the counts.
    expect(page.locator("[data-test=op-row]")).to_have_count(2)
    expect(page.locator("[data-test=count-queued] strong")).to_have_text("1")
    expect(page.locator("[data-test=count-unknown] strong")).to_have_text("1")
    assert page.evaluate("window.notReloaded") is True and page.url.endswith("#/operations?q=live-")
    # A state's count is a link to that state's list.
    page.click("[data-test=count-unknown]")
    expect(page.locator("[data-test=op-row]")).to_have_count(1)
    expect(page.locator("[data-test=op-row]").first).to_have_attribute("data-id", "live-2")
    # Paging: a page of 3 in id order, the next page (its cursor in the link), and back.
    page.goto(local.link("operator-3", "operate", view="/operations?limit=3"))
    expect(page.locator("[data-test=op-row]")).to_have_count(3)
    first = page.locator("[data-test=op-row]").evaluate_all("rows => rows.map(r => r.dataset.id)")
    page.click("[data-test=next-page]")
    expect(page).to_have_url(re.compile(r"limit=3.*cursor=|cursor=.*limit=3"))
    expect(page.locator("[data-test=op-row]").first).not_to_have_attribute("data-id", first[0])
    second = page.locator("[data-test=op-row]").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert len(second) == 3 and not set(first) & set(second)
    page.get_by_role("button", name="Previous page").click()
    expect(page.locator("[data-test=op-row]").first).to_have_attribute("data-id", first[0])


def test_the_time_filter_narrows_the_list_and_its_counts(local, page):
    producer = _client(local, "producer-4")
    since = producer.enqueue("time-0", "nightly-report", {"day": 0}).operation.updated_at
    time.sleep(0.05)
    producer.enqueue("time-1", "nightly-report", {"day": 1})
    after = (since + timedelta(milliseconds=1)).isoformat().replace("+00:00", "Z")
    page.goto(local.link("operator-4", "operate", view=f"/operations?q=time-&updated_after={after}"))
    expect(page.locator("[data-test=op-row]")).to_have_count(1)
    expect(page.locator("[data-test=op-row]").first).to_have_attribute("data-id", "time-1")
    expect(page.locator("[data-test=count-queued] strong")).to_have_text("1")
    # Through the form: nothing was updated after 2099.
    page.fill("input[name=updated_after]", "2099-01-01T00:00")
    page.click("[data-test=apply-filters]")
    expect(page).to_have_url(re.compile(r"updated_after=2099-01-01T"))
    expect(page.locator("[data-test=op-row]")).to_have_count(0)
    expect(page.locator("[data-test=counts]")).to_contain_text("all 0")


def test_an_operator_alone_reads_an_operation_its_lease_intent_and_checkpoint(local, page):
    worker = _client(local, "worker-5")
    worker.enqueue("lease-1", "charge-card", {"order": "L-1"}, target_class="D")
    claim = worker.claim("worker-5", lease_seconds=600, operation_id="lease-1")
    worker.heartbeat("lease-1", claim.fence, "worker-5", checkpoint={"step": 2, "psp": "started"})
    worker.heartbeat("lease-1", claim.fence, "worker-5", intent="charge the card via the PSP")
    # Only leasefence/operate (an operator as a Cognito group makes one): the list's operation opens.
    page.goto(local.link("operator-5", "operate", view="/operations?q=lease-"))
    page.click("[data-test=op-row][data-id=lease-1] [data-test=op-link]")
    expect(page.locator("[data-test=op-state]")).to_have_text("claimed")
    expect(page.locator("[data-test=op-fence]")).to_have_text(str(claim.fence))
    expect(page.locator("[data-test=op-lease-owner]")).to_have_text("worker-5")
    expect(page.locator("[data-test=op-lease-expires]")).to_contain_text("expires in")
    expect(page.locator("[data-test=op-intent]")).to_contain_text(
        f'"charge the card via the PSP" under fence {claim.fence}')
    expect(page.locator("[data-test=op-checkpoint]")).to_contain_text('"psp": "started"')
    expect(page.locator("[data-test=class-advice]")).to_contain_text("no idempotency")
    expect(page.locator("[data-test=history-entry][data-transition=claim]")).to_contain_text("worker-5")
    # Cancel is the producer's: disabled, and says why.
    expect(page.locator("[data-test=cancel]")).to_be_disabled()
    expect(page.locator(".why", has_text="needs leasefence/produce")).to_be_visible()
    # Erase of a claimed operation, which the API would refuse, is not offered (issue 37).
    expect(page.locator("[data-test=erase]")).to_be_disabled()
    expect(page.locator(".why", has_text="it is claimed")).to_be_visible()


def test_reject_needs_a_note_and_erase_asks_first(local, page):
    agent = _client(local, "agent-8")
    agent.enqueue("refund-r1", "refund", {"order": "R-1", "amount": 90000, "currency": "EUR"})
    page.goto(local.link("approver-2", "approve", view="/approval/refund-r1"))
    expect(page.locator("[data-test=requester]")).to_have_text("agent-8")
    expect(page.locator("[data-test=deadline]")).to_contain_text(re.compile(r"\(in (23h|1d)"))
    page.click("[data-test=reject]")
    expect(page.locator("[data-test=action-result] [role=alert]")).to_contain_text("note")
    assert agent.get("refund-r1").state == "awaiting_approval"
    page.fill("[data-test=reject-note]", "amount exceeds the refund policy")
    page.click("[data-test=reject]")
    expect(page.locator("[data-test=rejected]")).to_contain_text("failed_terminal")
    rejected = agent.get("refund-r1")
    assert (rejected.state, rejected.outcome_code, rejected.reason) == (
        "failed_terminal", "rejected", "amount exceeds the refund policy")
    # Erase: a confirmation that says what it removes; Escape keeps everything.
    page.goto(local.link("operator-6", "operate", view="/op/refund-r1"))
    page.click("[data-test=erase]")
    dialog = page.locator("dialog#confirm")
    expect(dialog).to_contain_text("cannot be undone")
    expect(page.locator("#confirm-no")).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()
    assert agent.get("refund-r1").payload_state == "stored"
    page.click("[data-test=erase]")
    page.click("#confirm-yes")
    expect(page.locator("[data-test=op-reason]")).to_have_text("–")
    erased = agent.get("refund-r1")
    assert erased.payload_state == "erased" and erased.reason is None


def test_catalogue_go_no_go_and_strict_mode_with_the_keyboard(local, page):
    operator = _client(local, "operator-7")
    page.goto(local.link("operator-7", "operate", view="/catalogue"))
    refund = page.locator("[data-test=job-types] tr", has_text="refund")
    expect(refund).to_contain_text("payments-oncall")
    expect(refund.locator("td").nth(1)).to_have_text(str(operator.get_job_type("refund").version))
    report = page.locator("[data-test=controls] details", has_text="refund")
    report.locator("summary").focus()
    page.keyboard.press("Enter")  # a summary opens with the keyboard
    expect(report).to_have_attribute("open", "")
    expect(report.locator("li")).to_have_count(9)
    expect(report.locator("li").first).to_be_visible()
    # Settings: strict mode, switched with the keyboard behind a confirmation.
    page.goto(local.link("operator-7", "operate", view="/settings"))
    expect(page.locator("[data-test=identity-retention]")).to_contain_text("days")
    strict = page.locator("[data-test=strict]")
    expect(strict).not_to_be_checked()
    try:
        strict.focus()
        page.keyboard.press("Space")
        expect(page.locator("dialog#confirm")).to_contain_text("refused")
        expect(page.locator("#confirm-no")).to_be_focused()
        page.keyboard.press("Tab")
        expect(page.locator("#confirm-yes")).to_be_focused()
        page.keyboard.press("Enter")
        expect(page.locator("dialog#confirm")).not_to_be_visible()
        deadline = time.monotonic() + 10
        while not operator.settings()["strict_job_types"]:
            assert time.monotonic() < deadline, "strict mode never turned on"
            time.sleep(0.1)
        expect(strict).to_be_checked()
    finally:
        operator.set_strict_job_types(False)


def test_pasting_a_token_signs_in_and_an_expired_one_is_refused(local, page):
    page.goto(f"{local.base_url}/console")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.fill("#token-input", local.token("operator-8", "operate"))
    page.click("#token-sign-in")
    expect(page.locator("[data-test=who]")).to_have_text("operator-8")
    expect(page.locator("[data-test=scopes]")).to_have_text("operate")
    expect(page.locator("[data-test=op-row]").first).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expired = mint("dev", ["leasefence/operate"], ttl_seconds=60, secret=SECRET, subject="operator-8",
                   now=time.time() - 3600)
    page.goto("about:blank")
    page.goto(f"{local.base_url}/console#token={expired}")
    expect(page.locator("main [role=alert]")).to_contain_text("expired")


def test_swagger_try_it_out_enqueues_its_body_unedited(local, page):
    # Issue 25: "Try it out" on enqueue filled in a body that failed validation. The body Swagger
    # UI fills in from the document now validates: executed unedited, it enqueues (201).
    page.goto(f"{local.base_url}/docs")
    page.click("button.authorize")
    page.locator(".modal-ux input").first.fill(local.token("producer-9", "produce"))
    page.locator(".modal-ux button.authorize").click()
    page.locator(".modal-ux button.btn-done").click()
    enqueue = page.locator("#operations-operations-enqueueOperation")
    enqueue.locator(".opblock-summary").first.click()
    enqueue.locator("button.try-out__btn").click()
    body = json.loads(enqueue.locator("textarea.body-param__text").input_value())
    assert {"operation_id", "job_type", "payload"} <= set(body)
    enqueue.locator("button.execute").click()
    expect(enqueue.locator(".live-responses-table tbody .response-col_status")).to_have_text("201")
    stored = _client(local, "producer-9").get(body["operation_id"])
    assert (stored.job_type, stored.state) == (body["job_type"], "queued")


class _IdentityProvider:
    """A stand-in OpenID Connect provider on a free port: discovery, an authorization endpoint
    that signs the user in at once (302 back with a code), a token endpoint that checks PKCE
    (S256 of the verifier against the challenge) before it hands out an access token, and an
    end-session endpoint. Every request is recorded."""

    def __init__(self, mint_token) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.codes: dict[str, dict[str, str]] = {}
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: object = None, headers: dict | None = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the browser navigated away (a redirect it followed at once)

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                params = dict(urllib.parse.parse_qsl(url.query))
                provider.requests.append((url.path, params))
                if url.path == "/.well-known/openid-configuration":
                    self._send(200, {"issuer": provider.issuer,
                                     "authorization_endpoint": f"{provider.issuer}authorize",
                                     "token_endpoint": f"{provider.issuer}token",
                                     "end_session_endpoint": f"{provider.issuer}logout"})
                elif url.path == "/authorize":
                    code = secrets.token_urlsafe(12)
                    provider.codes[code] = params
                    back = urllib.parse.urlencode({"code": code, "state": params["state"]})
                    self._send(302, headers={"Location": f"{params['redirect_uri']}?{back}"})
                elif url.path == "/logout":
                    self._send(302, headers={"Location": params["logout_uri"]})
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self) -> None:
                form = dict(urllib.parse.parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
                provider.requests.append((self.path, form))
                asked = provider.codes.pop(form.get("code", ""), None)
                challenge = base64.urlsafe_b64encode(
                    hashlib.sha256(form.get("code_verifier", "").encode()).digest()).rstrip(b"=").decode()
                if (asked is None or asked["code_challenge_method"] != "S256" or challenge != asked["code_challenge"]
                        or form.get("grant_type") != "authorization_code"
                        or form.get("client_id") != asked["client_id"]
                        or form.get("redirect_uri") != asked["redirect_uri"]):
                    self._send(400, {"error": "invalid_grant", "error_description": "PKCE check failed"})
                    return
                self._send(200, {"access_token": mint_token(), "token_type": "Bearer", "expires_in": 3600})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _IdentityProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_deployed_sign_in_is_an_authorization_code_with_pkce_against_the_issuer(console_stack, chromium, monkeypatch):
    # As deployed with an issuer (jwt_issuer + console_client_id): config.json names it, the page
    # reads its discovery document, sends the person there with a PKCE challenge, and trades the
    # code and its verifier for the access token the API then takes.
    tenant = f"oidc-{uuid.uuid4().hex[:8]}"
    sdk = LeaseFenceClient(console_stack.base_url, console_stack.token(tenant), retries=2, backoff=0.05)
    sdk.enqueue("oidc-op-1", "nightly-report", {"day": 1})
    with _IdentityProvider(lambda: console_stack.token(tenant, ["leasefence/operate"], subject="oidc-person-1")) as idp:
        monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_ISSUER", idp.issuer)
        monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_CLIENT_ID", "console-spa")
        monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_SCOPES", "openid leasefence/operate")
        context = chromium.new_context()
        context.set_default_timeout(WAIT_MS)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            page.goto(f"{console_stack.base_url}/console#/op/oidc-op-1")
            page.click("#oidc-sign-in")
            expect(page.locator("[data-test=who]")).to_have_text("oidc-person-1")
            expect(page.locator("[data-test=tenant]")).to_have_text(tenant)
            expect(page.locator("[data-test=op-title]")).to_have_text("oidc-op-1")  # back where it started
            assert "code=" not in page.url and page.url.endswith("/console#/op/oidc-op-1")
            (_, asked), = [(p, q) for p, q in idp.requests if p == "/authorize"]
            assert asked["response_type"] == "code" and asked["client_id"] == "console-spa"
            assert asked["scope"] == "openid leasefence/operate" and asked["code_challenge_method"] == "S256"
            assert asked["redirect_uri"] == f"{console_stack.base_url}/console"
            assert "code_verifier" not in asked  # the verifier only ever goes to the token endpoint
            # Signing out ends the provider's session too, and comes back to the sign-in page.
            page.get_by_role("button", name="Sign out").click()
            deadline = time.monotonic() + WAIT_MS / 1000
            while not [p for p, _ in idp.requests if p == "/logout"]:
                assert time.monotonic() < deadline, "the page never went to the end-session endpoint"
                time.sleep(0.05)
            assert [q["client_id"] for p, q in idp.requests if p == "/logout"] == ["console-spa"]
            page.wait_for_url(f"{console_stack.base_url}/console")  # back from the provider
            expect(page.locator("#oidc-sign-in")).to_be_visible()
            # An answer that does not match the request (state) signs nobody in.
            page.goto(f"{console_stack.base_url}/console?code=forged&state=forged")
            expect(page.locator("main [role=alert]")).to_contain_text("does not match the request")
            assert not [p for p, _ in idp.requests if p == "/token" and _.get("code") == "forged"]
        finally:
            context.close()
    assert errors == [], f"the page raised: {errors}"
