"""What the operator console needs from the API (issue 25), through the real handlers: the page and
its files, the list's filters and paging, counts per state, an approver's inbox, the target-class
advice, the park reason, intent and checkpoint on the operation, and the deployment's retention."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

import pytest

from leasefence import advice, listing
from leasefence.api.security import APPROVE, OPERATE, PRODUCE, WORK
from leasefence.errors import InvalidInput
from leasefence.model import Resolution, State, TargetClass

# ---------------------------------------------------------------------------------- the console's files


def test_root_redirects_to_the_console_and_the_page_is_served_without_a_token(http):
    anonymous = http(None)
    status, headers, body = anonymous.call("GET", "/")
    assert status == 302 and headers["Location"] == "/console"
    status, headers, page = anonymous.call("GET", "/console")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert '<script type="module" src="console/console.js">' in page
    policy = headers["Content-Security-Policy"]
    # Nothing but its own files, and no request anywhere but this API.
    assert "script-src 'self'" in policy and "connect-src 'self'" in policy
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert headers["Referrer-Policy"] == "no-referrer"
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        status, headers, text = anonymous.call("GET", f"/console/{name}")
        assert status == 200 and headers["Content-Type"].startswith(kind), name
        assert "http://" not in text and "https://" not in text, f"{name} loads nothing from elsewhere"
    status, _, _ = anonymous.call("GET", "/console/secrets.txt")
    assert status == 404
    status, _ = anonymous.json("GET", "/console/../v1/settings")
    assert status in (401, 404)  # never the settings without a token


def test_the_console_is_native_modules_each_served_preloaded_and_resolvable(http):
    # Issue 37: the script is split into ES modules served as they are (no build step). Every
    # module of the package is served under the same strict policy, preloaded by the page, and
    # every relative import names a module that is served.
    from leasefence import console

    anonymous = http(None)
    _, _, page = anonymous.call("GET", "/console")
    modules = sorted(name for name in console.ASSETS if name.endswith(".js"))
    assert "console.js" in modules and len(modules) > 5
    preloaded = set(re.findall(r'<link rel="modulepreload" href="console/([\w.-]+)">', page))
    assert preloaded == set(modules) - {"console.js"}
    imported: set[str] = set()
    for name in modules:
        status, headers, text = anonymous.call("GET", f"/console/{name}")
        assert status == 200 and headers["Content-Type"].startswith("text/javascript"), name
        assert headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self';")
        assert "http://" not in text and "https://" not in text, f"{name} loads nothing from elsewhere"
        for target in re.findall(r'^import [^;]+ from "\./([\w.-]+)";$', text, re.MULTILINE):
            assert target in modules, f"{name} imports {target}, which is not served"
            imported.add(target)
    assert imported == set(modules) - {"console.js"}, "every module is used"


def test_sign_in_configuration_follows_the_environment(http, monkeypatch):
    anonymous = http(None)
    assert anonymous.json("GET", "/console/config.json") == (200, {"sign_in": "token", "oidc": None})
    monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_ISSUER", "https://idp.example.com/tenant/")
    monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_CLIENT_ID", "console-client")
    monkeypatch.setenv("LEASEFENCE_CONSOLE_OIDC_TOKEN_ENDPOINT", "https://auth.example.net/oauth2/token")
    status, config = anonymous.json("GET", "/console/config.json")
    assert status == 200 and config["sign_in"] == "oidc"
    assert config["oidc"]["client_id"] == "console-client" and config["oidc"]["scopes"] == "openid"
    _, headers, _ = anonymous.call("GET", "/console")
    # The page may now talk to the issuer (discovery) and the token endpoint, and nowhere else.
    assert "connect-src 'self' https://idp.example.com https://auth.example.net;" in headers["Content-Security-Policy"]


def test_a_deployment_without_the_console_answers_its_routes_404(http, monkeypatch):
    monkeypatch.setenv("LEASEFENCE_CONSOLE", "off")
    anonymous = http(None)
    for path in ("/", "/console", "/console/console.js"):
        status, body = anonymous.json("GET", path)
        assert (status, body["error"]["code"]) == (404, "not_found"), path
    assert anonymous.json("GET", "/v1/health") == (200, {"status": "ok"})


def test_an_undeclared_method_on_the_consoles_paths_is_405_and_404_once_it_is_off(http, monkeypatch):
    anonymous = http(None)
    for method, path in (("POST", "/console"), ("DELETE", "/console/console.js"), ("PUT", "/")):
        status, headers, _ = anonymous.call(method, path)
        assert (status, headers.get("Allow")) == (405, "GET"), path
    # Without the console its paths are unknown (as API Gateway, without their routes, says).
    monkeypatch.setenv("LEASEFENCE_CONSOLE", "off")
    for method, path in (("POST", "/console"), ("DELETE", "/console/console.js"), ("PUT", "/")):
        status, body = anonymous.json(method, path)
        assert (status, body["error"]["code"]) == (404, "not_found"), path
    # The console's data routes stay, and so do their 405s.
    status, headers, _ = anonymous.call("POST", "/v1/target-classes")
    assert (status, headers.get("Allow")) == (405, "GET")


# ---------------------------------------------------------------------------------- the operation


def _parked_email(client, operation_id, checkpoint, reason):
    """A class-D email claimed by w-1, with a checkpoint and an intent, then parked unknown."""
    client.enqueue(operation_id, "send-email", {"to": "a@example.com"}, target_class="D")
    claim = client.claim("w-1", operation_id=operation_id)
    client.heartbeat(operation_id, claim.fence, "w-1", checkpoint=checkpoint)
    client.heartbeat(operation_id, claim.fence, "w-1", intent="send via relay")
    client.unknown(operation_id, claim.fence, reason)
    return claim


def test_the_operation_carries_its_park_reason_intent_and_checkpoint(sdk, tenant):
    client = sdk(tenant)
    claim = _parked_email(client, "mail-1", {"step": 2}, "relay timed out after DATA")
    op = client.get("mail-1")
    assert op.state == "unknown" and op.reason == "relay timed out after DATA"
    assert op.intent == {"fence": claim.fence, "what": "send via relay"}
    assert op.checkpoint == {"step": 2}
    assert op.enqueued_by is None  # not gated: the history's enqueue entry names the producer
    # Resolved, it keeps why it was parked (the operator's note is in its history); erasure
    # removes the free text and keeps the intent's fence.
    resolved = client.resolve("mail-1", "failed_terminal", note="checked the relay log: not sent")
    assert resolved.state == "failed_terminal" and resolved.reason == "relay timed out after DATA"
    erased = client.erase("mail-1")
    assert erased.reason is None and erased.checkpoint is None
    assert erased.intent == {"fence": claim.fence, "what": "erased"}


# ---------------------------------------------------------------------------------- listing


def _ids(client, **filters):
    ids, cursor = [], None
    while True:
        page = client.list(limit=filters.pop("limit", 50), cursor=cursor, **filters)
        ids += [op.operation_id for op in page.operations]
        cursor = page.next_cursor
        if not cursor:
            # Sorted: a tenant of several write shards is listed shard by shard (the console's
            # stack runs the default: 64 for a new tenant); each id exactly once.
            assert len(ids) == len(set(ids))
            return sorted(ids)


@pytest.fixture
def mixed(sdk, tenant):
    """Seven operations of two job types and three classes, two of them parked, one failed."""
    client = sdk(tenant)
    for n, (job_type, target_class) in enumerate(
        [("charge", "C"), ("charge", "C"), ("email", "D"), ("ledger", "B"), ("ledger", "B"),
         ("charge", "A"), ("email", "D")]
    ):
        client.enqueue(f"op-{n}", job_type, {"n": n}, target_class=target_class)
    for op_id, park in (("op-2", "unknown"), ("op-3", "quarantine"), ("op-1", "fail")):
        claim = client.claim("w", operation_id=op_id)
        if park == "unknown":
            client.unknown(op_id, claim.fence, "SMTP timeout on DATA")
        elif park == "quarantine":
            client.quarantine(op_id, claim.fence, "row 17 unreadable")
        else:
            client.fail(op_id, claim.fence, False, "card declined")
    return client


def test_list_filters_by_job_type_class_text_and_state(mixed):
    assert _ids(mixed) == [f"op-{n}" for n in range(7)]
    assert _ids(mixed, job_type="charge") == ["op-0", "op-1", "op-5"]
    assert _ids(mixed, target_class="B") == ["op-3", "op-4"]
    assert _ids(mixed, job_type="charge", target_class="A") == ["op-5"]
    assert _ids(mixed, state="unknown") == ["op-2"]
    assert _ids(mixed, q="timeout") == ["op-2"]  # the reason
    assert _ids(mixed, q="ledg") == ["op-3", "op-4"]  # the job type
    assert _ids(mixed, q="op-6") == ["op-6"]  # the id
    assert _ids(mixed, q="Timeout") == []  # case-sensitive
    assert _ids(mixed, state="failed_terminal", job_type="email") == []


def test_list_filters_by_time_and_pages_through_a_narrow_filter(mixed, http, tenant):
    operate = http(tenant, [OPERATE])
    later = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    earlier = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    assert _ids(mixed, updated_after=later) == []
    assert _ids(mixed, updated_before=earlier) == []
    assert _ids(mixed, updated_after=earlier, updated_before=later) == [f"op-{n}" for n in range(7)]
    # Pages of 2 over a filter matching 3: every page is at most 2, the cursor reaches them all.
    status, page = operate.json("GET", "/v1/operations?" + urlencode({"job_type": "charge", "limit": 2}))
    assert status == 200 and len(page["operations"]) <= 2 and page["next_cursor"]
    assert _ids(mixed, job_type="charge", limit=2) == ["op-0", "op-1", "op-5"]
    # RFC 3339 exactly as the document's format: date-time (lower-case t and z, a leap second too).
    for fine in ("2026-12-01t10:00:00z", "2016-12-31T23:59:60Z", "2026-12-01T10:00:00.123456789-05:30"):
        assert operate.json("GET", "/v1/operations?" + urlencode({"updated_before": fine}))[0] == 200, fine
    for bad in ({"updated_after": "yesterday"}, {"updated_after": "2026-12-01T10:00:00"},
                {"updated_after": ""}, {"updated_before": "2026-12-01T10:00Z"},
                {"updated_before": "2026-02-30T10:00:00Z"}, {"updated_after": "2026-12-01 10:00:00Z"},
                {"target_class": "E"}, {"q": "x" * 257}, {"job_type": ""}):
        status, body = operate.json("GET", "/v1/operations?" + urlencode(bad))
        if bad == {"job_type": ""}:
            assert status in (200, 422)  # empty means no filter or a refusal, never a 5xx
            continue
        assert (status, body["error"]["code"]) == (422, "invalid_request"), bad


def test_counts_per_state_are_bounded_and_follow_the_filters(mixed, http, tenant):
    counts = mixed.state_counts()
    assert counts["complete"] is True and counts["examined"] == 7 and counts["total"] == 7
    assert set(counts["counts"]) == {s.value for s in State}
    assert {k: v for k, v in counts["counts"].items() if v} == {
        "queued": 4, "unknown": 1, "quarantined": 1, "failed_terminal": 1}
    charge = mixed.state_counts(job_type="charge")
    assert {k: v for k, v in charge["counts"].items() if v} == {"queued": 2, "failed_terminal": 1}
    assert mixed.state_counts(q="declined")["total"] == 1
    bounded = mixed.state_counts(limit=3)
    assert bounded["complete"] is False and bounded["examined"] == 3 and bounded["total"] == 3
    # Operators only: an approver, a producer or a worker cannot count the tenant's operations.
    for scope in (APPROVE, PRODUCE, WORK):
        status, body = http(tenant, [scope]).json("GET", "/v1/state-counts")
        assert (status, body["error"]["code"]) == (403, "forbidden"), scope
    status, body = http(tenant, [OPERATE]).json("GET", "/v1/state-counts?limit=5001")
    assert (status, body["error"]["code"]) == (422, "invalid_request")


def test_counts_read_no_more_than_their_limit(engine):
    for n in range(12):
        engine.enqueue("t", f"op-{n:02d}", "job", payload_hash="sha256:" + "a" * 64, payload_ref="ref")
    assert engine.state_counts("t").to_public() == {
        "counts": {**{s.value: 0 for s in State}, "queued": 12}, "total": 12, "examined": 12, "complete": True}
    partial = engine.state_counts("t", limit=5)
    assert (partial.examined, partial.complete, partial.counts["queued"]) == (5, False, 5)
    only_b = engine.state_counts("t", listing.Filters.of(target_class="B"))
    assert only_b.complete and only_b.examined == 12 and sum(only_b.counts.values()) == 0
    with pytest.raises(InvalidInput):
        engine.state_counts("t", limit=listing.MAX_COUNT_ITEMS + 1)
    # Another tenant's operations are never counted.
    assert engine.state_counts("u").to_public()["total"] == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"state": "done"}, {"target_class": "X"}, {"updated_after": 1.5}, {"updated_before": True},
     {"text": ""}, {"text": "x" * 257}, {"job_type": ""}],
)
def test_filters_refuse_what_cannot_be_meant(kwargs):
    with pytest.raises(InvalidInput):
        listing.Filters.of(**kwargs)


# ---------------------------------------------------------------------------------- an approver's inbox


def test_an_approver_lists_what_awaits_approval_and_nothing_else(sdk, http, tenant):
    operator = sdk(tenant, sub="operator-1")
    operator.put_job_type("refund", {"target_class": "C", "approval_required": True})
    agent = sdk(tenant, sub="agent-7")
    agent.enqueue("refund-1", "refund", {"amount": 10})
    agent.enqueue("plain-1", "charge", {"amount": 5})
    approver = http(tenant, [APPROVE], sub="approver-1")
    status, page = approver.json("GET", "/v1/operations?state=awaiting_approval")
    assert status == 200 and [op["operation_id"] for op in page["operations"]] == ["refund-1"]
    assert page["operations"][0]["enqueued_by"] == "agent-7"  # the requester
    for query in ("", "?state=queued", "?job_type=refund"):
        status, body = approver.json("GET", f"/v1/operations{query}")
        assert (status, body["error"]["code"]) == (403, "forbidden"), query
        assert "awaiting_approval" in body["error"]["message"]
    # A producer alone still cannot list.
    status, _ = http(tenant, [PRODUCE]).json("GET", "/v1/operations?state=awaiting_approval")
    assert status == 403
    # The approver reads the payload of what it lists (issue 21), and approves it by its hash.
    status, _, payload = approver.call("GET", f"/v1/operations/{quote('refund-1')}/payload")
    assert status == 200 and payload == '{"amount":10}'
    status, answer = approver.json(
        "POST", "/v1/operations/refund-1/approve", {"payload_hash": page["operations"][0]["payload_hash"]})
    assert status == 200 and answer["operation"]["approved_by"] == "approver-1"


def test_an_operator_reads_any_one_operation_as_it_lists_them_all(sdk, http, tenant):
    # The console's operation view for a person with only leasefence/operate (as a Cognito group
    # gives it): the list showed the operation, so reading it by id must not be refused.
    sdk(tenant, sub="agent-7").enqueue("plain-2", "charge", {"amount": 5})
    status, op = http(tenant, [OPERATE]).json("GET", "/v1/operations/plain-2")
    assert status == 200 and op["operation_id"] == "plain-2" and op["state"] == "queued"
    # An approver still reads only what went through the gate; a worker reads none by id.
    status, body = http(tenant, [APPROVE], sub="approver-1").json("GET", "/v1/operations/plain-2")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert "leasefence/produce or leasefence/operate" in body["error"]["message"]
    status, body = http(tenant, [WORK]).json("GET", "/v1/operations/plain-2")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    # The refusal names every scope that would do (the console shows it as the reason).
    assert body["error"]["message"] == (
        "this token lacks the scope leasefence/produce or leasefence/operate or leasefence/approve")
    # The payload stays the workers' and approvers' (an operator reads the hash, not the bytes).
    status, body = http(tenant, [OPERATE]).json("GET", "/v1/operations/plain-2/payload")
    assert (status, body["error"]["code"]) == (403, "forbidden")


def test_ops_show_prints_the_park_reason_intent_and_checkpoint(console_stack, sdk, tenant):
    from typer.testing import CliRunner

    from leasefence_tools.cli import app

    client = sdk(tenant)
    claim = _parked_email(client, "mail-9", {"step": 3}, "relay hung up after DATA")
    # With only the operate scope, as an operator runs it.
    token = console_stack.token(tenant, [OPERATE], subject="operator-1")
    shown = CliRunner().invoke(
        app, ["ops", "show", "mail-9", "--base-url", console_stack.base_url, "--token", token],
        env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    lines = {line.split(None, 1)[0]: line.split(None, 1)[1].strip() for line in shown.output.splitlines() if line.strip()}
    assert lines["state"] == "unknown"
    assert lines["reason"] == "relay hung up after DATA"
    assert "send via relay" in lines["intent"] and lines["checkpoint"] == "{'step': 3}"


# ---------------------------------------------------------------------------------- advice and settings


def test_target_class_advice_is_open_and_covers_every_class_and_resolution(http):
    status, body = http(None).json("GET", "/v1/target-classes")
    assert status == 200
    table = {c["target_class"]: c for c in body["target_classes"]}
    assert list(table) == [c.value for c in TargetClass]
    for cls, entry in table.items():
        assert set(entry["resolutions"]) == {r.value for r in Resolution}, cls
        assert all(len(text) > 20 for text in entry["resolutions"].values()), cls
        assert entry["name"] and entry["guarantee"] and entry["reconcile"]
    # Class D's requeue says the truth of the runtime: with an intent on record it does not act.
    assert "intent" in table["D"]["resolutions"]["requeue"]
    assert body["target_classes"] == advice.target_classes()


def test_a_resolutions_risk_depends_on_the_class_and_the_operations_intent(http):
    # Issue 37: the rule the console (never the primary choice, a confirmation naming the risk)
    # and a bulk requeue share: class D's requeue is dangerous while an intent is on record.
    intent = {"fence": 1, "what": "send the mail"}
    assert advice.risk("D", "requeue", intent) is not None
    assert "intent is on record" in advice.risk("D", "requeue", intent)
    assert advice.risk("D", "requeue", None) is None
    for cls in "ABC":
        assert advice.risk(cls, "requeue", intent) is None
    for resolution in ("succeeded", "failed_terminal"):
        assert advice.risk("D", resolution, intent) is None
    status, body = http(None).json("GET", "/v1/target-classes")
    risks = {c["target_class"]: c["risks"] for c in body["target_classes"]}
    assert risks == {"A": {}, "B": {}, "C": {}, "D": {"requeue": {
        "when": "intent", "risk": advice.risk("D", "requeue", intent)}}}


def test_settings_show_the_deployments_retention(http, tenant):
    status, body = http(tenant, [OPERATE]).json("GET", "/v1/settings")
    assert status == 200
    assert body == {"strict_job_types": False, "identity_retention_days": 400, "payload_retention_days": 30}
    status, body = http(tenant, [OPERATE]).json("PUT", "/v1/settings", {"strict_job_types": True})
    assert status == 200 and body["strict_job_types"] is True and body["payload_retention_days"] == 30
    # The retention is the deployment's: a request cannot set it.
    status, body = http(tenant, [OPERATE]).json(
        "PUT", "/v1/settings", {"strict_job_types": True, "payload_retention_days": 1})
    assert (status, body["error"]["code"]) == (422, "invalid_request")

