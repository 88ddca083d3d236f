"""The history route answers from the operation's own item: each transition's entry is there as
soon as the transition's answer is (no stream lag to wait for), in the shape of the contract."""

from __future__ import annotations

from tests.support.api import claimed, enqueue, op_path


def _history(api, op, **query):
    path = op_path(op, "history")
    if query:
        path += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    reply = api.get(path)
    assert reply.status == 200, reply.text
    return reply.json


def test_each_answer_is_followed_by_its_history_entry_at_once(api):
    op = "hist-1"
    steps = []

    def after(transition, state, fence, attempt, **more):
        steps.append((transition, state, fence, attempt))
        page = _history(api, op)  # asked right after the answer: nothing to wait for
        assert [
            (e["transition"], e["state"], e["fence"], e["attempt"]) for e in page["entries"]
        ] == steps
        assert [e["sequence"] for e in page["entries"]] == list(range(1, len(steps) + 1))
        assert page["dropped"] == 0 and page["next_cursor"] is None
        newest = page["entries"][-1]
        for name, value in more.items():
            assert newest[name] == value, (name, newest)
        return page

    enqueue(api, op)
    after("enqueue", "queued", 0, 0, previous_state=None)
    first = claimed(api, op, "worker-1", lease_seconds=30)
    after("claim", "claimed", 1, 1, previous_state="queued", actor="worker-1")
    assert api.post(op_path(op, "heartbeat"), {"fence": 1, "worker_id": "worker-1"}).status == 200
    assert len(_history(api, op)["entries"]) == 2  # a heartbeat is no transition
    reply = api.post(op_path(op, "fail"), {"fence": first["fence"], "retryable": True, "reason": "busy", "retry_after_seconds": 0})
    assert reply.status == 200, reply.text
    after("retry", "queued", 1, 1, previous_state="claimed", actor="worker-1", reason="busy")
    claimed(api, op, "worker-2", lease_seconds=30)
    after("claim", "claimed", 2, 2, actor="worker-2")
    reply = api.post(op_path(op, "complete"), {"fence": 2, "outcome_code": "done"})
    assert reply.status == 200, reply.text
    page = after("complete", "succeeded", 2, 2, outcome_code="done", actor="worker-2")
    assert page["entries"][-1]["sequence"] == 5
    # Paged by the cursor, as before.
    first_page = _history(api, op, limit=2)
    rest = _history(api, op, limit=50, cursor=first_page["next_cursor"])
    assert first_page["entries"] + rest["entries"] == page["entries"]


def test_a_slimmed_operation_answers_an_empty_page_saying_its_history_expired(api, stack, tenant):
    """Ended more than the payload retention ago (an engine whose clock is 31 days behind made
    it): a payload item of layout 2 has no purge, its operation reads as slim from then on,
    before any sweep. The history is an empty page with history_expired_at; the operation, its
    replay and its conflict answer as before."""
    from leasefence.payloads import canonicalize
    from leasefence.settings import runtime

    engine = runtime().engine
    days = 31 * 86_400_000
    past = type(engine)(spec=engine.spec, client=engine.store.client, clock=lambda: engine.clock() - days,
                        events=engine.events, payloads=engine.payloads)
    op, payload = "slim-1", {"n": "slim-1"}
    canonical = canonicalize(payload)
    past.enqueue(tenant, op, "job", canonical.hash, payload_json=canonical.body)
    grant = past.claim(tenant, op, "worker-1")
    past.complete(tenant, op, grant.fence, "done")
    page = _history(api, op)
    assert page["entries"] == [] and page["next_cursor"] is None and page["dropped"] == 0
    assert page["history_expired_at"] is not None and page["history_expired_at"].endswith("Z")
    assert "payload_purged_at" not in past.store.get({"tenant_id": tenant, "operation_id": op})
    operation = api.get(op_path(op)).json
    assert operation["state"] == "succeeded" and operation["payload_state"] == "purged"
    assert operation["fence"] == grant.fence and operation["outcome_code"] == "done"
    replay = api.post("/v1/operations", {"operation_id": op, "job_type": "job", "payload": payload})
    assert replay.status == 200 and replay.json["created"] is False
    conflict = api.post("/v1/operations", {"operation_id": op, "job_type": "job", "payload": {"n": 2}})
    assert conflict.status == 409 and conflict.json["error"]["code"] == "payload_conflict"
    done = api.post(op_path(op, "complete"), {"fence": grant.fence, "outcome_code": "done"})
    assert done.status == 200, done.text
