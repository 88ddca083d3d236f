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

from leasefence_tools.local.embedded import EmbeddedAws
from leasefence.schema import TableSpec

WORKLOAD = r'''
import json, random, sys
from leasefence_tools.local.embedded import EmbeddedAws
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
    # Each tenant's pages of one of its three due partitions, a different shard per tenant (every
    # partition holds a sample of the same item mix: reading all nine asks the same cases three
    # times over); the other six stay in the table as candidates each query must leave out.
    for shard, tenant in enumerate(tenants):
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
    answers.extend(transactions_and_updates(client, sorted(keys, key=json.dumps)[:2]))
    return answers

def attempt(call, **kwargs):
    from botocore.exceptions import ClientError
    try:
        return ["ok", call(**kwargs).get("Attributes")]
    except ClientError as error:
        return ["error", error.response["Error"]["Code"], error.response["Error"].get("Message"),
                error.response.get("CancellationReasons"), error.response.get("Item")]

def transactions_and_updates(client, ranged_keys):
    """Transactions that commit and that are cancelled (everything they did is undone), on a
    hash-only and on a hash-and-range table; update expressions valid and not."""
    answers = []
    client.create_table(TableName="equiv-orders", AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}], BillingMode="PAY_PER_REQUEST",
                        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    for i in range(8):
        client.put_item(TableName="equiv-orders", Item={"pk": {"S": f"order-{i}"}, "status": {"S": "open"}, "n": {"N": str(i)},
                                                        "blob": {"B": bytes([i, 255, 0])}, "tags": {"SS": ["a", "b"]}})
    def key(name):
        return {"pk": {"S": name}}
    def update(k, expression, condition=None, table="equiv-orders", **values):
        op = {"TableName": table, "Key": k, "UpdateExpression": expression,
              "ExpressionAttributeValues": {f":{n}": v for n, v in values.items()}}
        if condition:
            op["ConditionExpression"] = condition
        return {"Update": op}
    s = lambda text: {"S": text}
    cases = [
        [update(key("order-1"), "SET #st = :s", s=s("refunded")),
         {"Put": {"TableName": "equiv-orders", "Item": {"pk": s("order-new-1"), "status": s("open")}}},
         {"Delete": {"TableName": "equiv-orders", "Key": key("order-2")}},
         {"ConditionCheck": {"TableName": "equiv-orders", "Key": key("order-3"), "ConditionExpression": "attribute_exists(pk)"}}],
        [update(key("order-4"), "SET n = n + :one", one={"N": "10"}),
         {"Put": {"TableName": "equiv-orders", "Item": {"pk": s("order-new-2"), "status": s("open")}}},
         {"Delete": {"TableName": "equiv-orders", "Key": key("order-5")}},
         update(ranged_keys[0], "SET fence = fence + :one", table="equiv", one={"N": "1"}),
         {"ConditionCheck": {"TableName": "equiv-orders", "Key": key("order-6"), "ConditionExpression": "#st = :nope",
                             "ExpressionAttributeNames": {"#st": "status"}, "ExpressionAttributeValues": {":nope": s("nope")},
                             "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}}],
        [update(key("order-7"), "SET n = :z", z={"N": "0"}), update(key("order-7"), "SET n = :z", z={"N": "1"})],
        [update(ranged_keys[1], "SET fence = :f", table="equiv", f={"N": "9"}),
         update(key("order-missing"), "SET n = :z", condition="attribute_exists(pk)", z={"N": "0"})],
    ]
    for items in cases:
        for item in items:
            op = item.get("Update")
            if op is not None and "#st" in op["UpdateExpression"]:
                op["ExpressionAttributeNames"] = {"#st": "status"}
        answers.append(attempt(client.transact_write_items, TransactItems=items))
    for expression in ("SET a = :a, b = :b REMOVE n", "SET a = :a SET b = :b", "REMOVE a ADD c :one",
                       "SET a = :a, a = :b", "ADD c :one SET b = :b, d = :a"):
        names = {}
        values = {k: v for k, v in {":a": s("x"), ":b": s("y"), ":one": {"N": "1"}}.items() if k in expression}
        answers.append(attempt(client.update_item, TableName="equiv-orders", Key=key("order-0"),
                               UpdateExpression=expression, ExpressionAttributeValues=values, ReturnValues="ALL_NEW"))
    answers.append(sorted(client.scan(TableName="equiv-orders")["Items"], key=repr))
    answers.append([client.get_item(TableName="equiv", Key=k).get("Item") for k in ranged_keys])
    answers.append(stream_records(client, "equiv-orders"))
    return answers

def stream_records(client, table):
    """Every record of the table's stream (GetRecords), without what differs from run to run."""
    streams = AWS.client("dynamodbstreams")
    arn = client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records = streams.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    assert records and all(r["dynamodb"].pop("ApproximateCreationDateTime").year > 2000 for r in records)
    for record in records:  # moto sizes a record from its creation time's text: it varies
        assert record["dynamodb"].pop("SizeBytes") > 0
    return [{k: v for k, v in r.items() if k != "eventID"} for r in records]

if __name__ == "__main__":
    with EmbeddedAws() as AWS:
        print(json.dumps(run(AWS), sort_keys=True, default=repr))
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
    assert len(plain_answers) > 100
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


def test_embedded_endpoint_loop_waits_in_select(aws):
    """waitress casts its loop timeout to an int: a fraction of a second became 0, a select that
    never waited, and the endpoint's loop thread spun as long as it ran (a fifth of a core while
    idle, the interpreter lock taken from the requests under load)."""
    assert aws._server.adj.asyncore_loop_timeout >= 1
