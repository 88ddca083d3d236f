"""The embedded endpoint's speed-ups answer exactly as plain moto does.

The same seeded workload runs against a patched endpoint (in this process) and against an
unpatched one (a subprocess with LEASEFENCE_MOTO_AS_IS=1); every answer must be identical.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

from leasefence.local.embedded import EmbeddedAws
from leasefence.schema import TableSpec

WORKLOAD = r'''
import json, random, sys
from leasefence.local.embedded import EmbeddedAws
from leasefence.schema import TableSpec

def run(aws):
    rng = random.Random(42)
    client = aws.client()
    spec = aws.create_tables(TableSpec(table_name="equiv", due_shards=3, sweep_shards=2))
    answers = []
    tenants = ["t", "t#1", "tenant-\u00e9"]
    for i in range(300):
        tenant = rng.choice(tenants)
        item = {
            "tenant_id": {"S": tenant},
            "operation_id": {"S": f"op-{rng.randrange(10**6)}-{i}"},
            "state": {"S": rng.choice(["queued", "claimed", "succeeded"])},
            "fence": {"N": str(rng.randrange(5))},
            "attempts": {"N": str(rng.randrange(5))},
            "max_attempts": {"N": "5"},
            "job_type": {"S": rng.choice(["a", "b", "c"])},
            "payload_hash": {"S": "sha256:" + "0" * 64},
            "nested": {"M": {"k": {"L": [{"N": "1.50"}, {"S": "x"}]}}},
        }
        if rng.random() < 0.7:
            item["due_pk"] = {"S": f"{tenant}#{rng.randrange(3)}"}
            item["due_at"] = {"N": str(rng.choice([rng.randrange(-5, 10**13), rng.randrange(100), 10**12 + 0.5]))}
        client.put_item(TableName="equiv", Item=item)
    for tenant in tenants:
        for shard in range(3):
            for limit in (1, 5, 16, 100):
                for forward in (True, False):
                    for flt in (None, "job_type IN (:a, :b)"):
                        kwargs = dict(
                            TableName="equiv", IndexName="due", Limit=limit, ScanIndexForward=forward,
                            KeyConditionExpression="#p = :p AND #d <= :n",
                            ExpressionAttributeNames={"#p": "due_pk", "#d": "due_at"},
                            ExpressionAttributeValues={":p": {"S": f"{tenant}#{shard}"}, ":n": {"N": str(10**12 + 1)}},
                        )
                        if flt:
                            kwargs["FilterExpression"] = flt
                            kwargs["ExpressionAttributeValues"].update({":a": {"S": "a"}, ":b": {"S": "b"}})
                        pages = []
                        while True:
                            page = client.query(**kwargs)
                            pages.append({k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")})
                            if "LastEvaluatedKey" not in page:
                                break
                            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
                        answers.append(pages)
        page = client.query(TableName="equiv", KeyConditionExpression="tenant_id = :t",
                            ExpressionAttributeValues={":t": {"S": tenant}}, ProjectionExpression="operation_id, fence")
        answers.append(page["Items"])
    keys = client.scan(TableName="equiv", ProjectionExpression="tenant_id, operation_id")["Items"]
    for key in sorted(keys, key=json.dumps)[:40]:
        answers.append(client.get_item(TableName="equiv", Key=key, ProjectionExpression="fence, nested.k[0]").get("Item"))
        try:
            got = client.update_item(TableName="equiv", Key=key, UpdateExpression="SET fence = fence + :one",
                                     ConditionExpression="attempts < max_attempts AND #s = :q",
                                     ExpressionAttributeNames={"#s": "state"},
                                     ExpressionAttributeValues={":one": {"N": "1"}, ":q": {"S": "queued"}},
                                     ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD")
            answers.append(["ok", got["Attributes"]])
        except client.exceptions.ConditionalCheckFailedException as refused:
            answers.append(["refused", refused.response.get("Item")])
    return answers

if __name__ == "__main__":
    with EmbeddedAws() as aws:
        print(json.dumps(run(aws), sort_keys=True))
'''


def test_patched_endpoint_answers_like_plain_moto(tmp_path):
    script = tmp_path / "workload.py"
    script.write_text(WORKLOAD)
    env = {**os.environ}
    plain = subprocess.run([sys.executable, str(script)], env={**env, "LEASEFENCE_MOTO_AS_IS": "1"},
                           capture_output=True, text=True, timeout=600, check=True)
    patched = subprocess.run([sys.executable, str(script)], env={k: v for k, v in env.items() if k != "LEASEFENCE_MOTO_AS_IS"},
                             capture_output=True, text=True, timeout=600, check=True)
    plain_answers, patched_answers = json.loads(plain.stdout), json.loads(patched.stdout)
    assert len(plain_answers) > 200
    assert patched_answers == plain_answers


def test_embedded_endpoint_does_not_keep_every_item_copy(aws, spec):
    """moto tracks every model instance it creates; with two deep copies of the item per
    update and of the tables per transaction, a long-running endpoint grew without bound. The
    embedded endpoint keeps none."""
    from moto.dynamodb.models.dynamo_type import Item
    from moto.dynamodb.models.table import Table

    from leasefence import Engine
    from leasefence.targets import same_table

    client = aws.client()
    client.create_table(TableName="leak-orders", AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST")
    engine = Engine(client=client, spec=spec)
    for i in range(5):
        engine.enqueue("t", f"op-{i}", "job", "sha256:" + "0" * 64)
        claim = engine.claim("t", f"op-{i}", "w")
        for _ in range(10):
            engine.heartbeat("t", f"op-{i}", claim.fence, "w")
        engine.complete_with("t", f"op-{i}", claim.fence, "ok",
                             [same_table.put("leak-orders", {"pk": f"order-{i}", "status": "refunded"})])
    assert len(Item.instances_tracked) == 0
    assert len(Table.instances_tracked) == 0
