"""The API on a stack with the default write shard layout (no counts set, as the construct
deploys it): a new tenant's operations spread over its 64 recorded write shards, and every route
that reads by id, lists or counts finds them (the other API tests set one write shard, to read
items by the bare tenant id)."""

from __future__ import annotations

from collections import Counter

from leasefence import keys
from tests.support.api import Api, claimed, enqueue, op_path


def test_a_new_tenant_of_the_default_stack_spreads_and_every_route_finds_it(default_stack, aws):
    api = Api(default_stack.base_url, default_stack.token("spread"))
    ids = [f"order-{i}" for i in range(40)]
    for op in ids:
        enqueue(api, op, payload={"n": op})
    items = aws.client().scan(TableName=default_stack.table_name)["Items"]
    record = [i for i in items if i["operation_id"]["S"] == keys.LAYOUT_ID]
    assert [int(n["N"]) for n in record[0]["write_shards"]["L"]] == [64]
    held = Counter(
        i["tenant_id"]["S"] for i in items if i["operation_id"]["S"] >= keys.FIRST_OPERATION_ID
    )
    assert len(held) > 20 and all(keys.tenant_of(p) == "spread" for p in held)
    listed = api.get("/v1/operations?limit=100").json
    assert sorted(o["operation_id"] for o in listed["operations"]) == sorted(ids)
    assert listed["next_cursor"] is None  # one page: every shard read before answering
    counts = api.get("/v1/state-counts").json
    assert counts["counts"]["queued"] == 40 and counts["complete"] is True
    grant = claimed(api, "order-7")
    done = api.post(op_path("order-7", "complete"), {"fence": grant["fence"], "outcome_code": "ok"})
    assert done.status == 200, done.text
    assert api.get(op_path("order-7")).json["state"] == "succeeded"
    # Another tenant's token reaches none of them.
    other = Api(default_stack.base_url, default_stack.token("someone-else"))
    assert other.get(op_path("order-7")).status == 404
    assert other.get("/v1/operations").json["operations"] == []
