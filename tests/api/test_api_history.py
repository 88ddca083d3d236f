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
