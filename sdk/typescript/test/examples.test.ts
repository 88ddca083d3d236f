// examples/typescript (the class-B refund worker) against a real `leasefence local`: each refund
// once, a closed account fails for good, and a worker that stalls past its lease is refused by the
// refunds table after another took the refund over.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { PutItemCommand } from "@aws-sdk/client-dynamodb";

import { refundHandlers, refundWorker, type Refund } from "../../../examples/typescript/refund-worker.js";
import { FencedTable, Worker, type Job } from "../src/index.js";
import { signal, sleep, unique } from "./support/helpers.js";
import { startLocal, type Local } from "./support/local.js";


let local: Local;
before(async () => {
  local = await startLocal();
});
after(async () => {
  await local?.stop();
});

/** The example's refunds table (keyed by `account`) on the embedded DynamoDB. */
async function refundsTable(): Promise<FencedTable> {
  const tableName = unique("refunds");
  await local.createTable(tableName, "account");
  return new FencedTable({ tableName, client: local.dynamodb() });
}

test("the worker refunds each request once; a closed account fails for good", { timeout: 30_000 }, async () => {
  const tenant = unique("t");
  const producer = local.client(tenant);
  const refunds = await refundsTable();
  await local.dynamodb().send(new PutItemCommand({ TableName: refunds.tableName, Item: { account: { S: "acct-0" }, closed: { BOOL: true } } }));
  for (const [id, payload] of [
    ["refund-1", { account: "acct-1", cents: 1250 }],
    ["refund-2", { account: "acct-1", cents: 300 }],
    ["refund-1", { account: "acct-1", cents: 1250 }], // sent again: a replay
    ["refund-3", { account: "acct-0", cents: 50 }], // a closed account
  ] as const) {
    await producer.enqueue({ operation_id: id, job_type: "refund", payload, target_class: "B" });
  }
  const worker = new Worker({ client: producer, tenantId: tenant, handlers: refundHandlers(refunds) });
  while (await worker.runOnce());
  const item = await refunds.read({ account: "acct-1" });
  assert.deepEqual((item?.["refunds"] as { refund: string }[]).map((entry) => entry.refund).sort(), ["refund-1", "refund-2"]);
  const one = await producer.get("refund-1");
  assert.equal(one.outcome_code, "refunded");
  assert.equal(one.attempts, 1);
  const closed = await producer.get("refund-3");
  assert.equal(closed.state, "failed_terminal");
  assert.match(closed.reason ?? "", /account closed/);
});

test("a stalled worker is refused by the refunds table", { timeout: 30_000 }, async () => {
  const tenant = unique("t");
  const producer = local.client(tenant);
  const refunds = await refundsTable();
  await producer.enqueue({ operation_id: "refund-9", job_type: "refund", payload: { account: "acct-9", cents: 700 }, target_class: "B" });
  const example = refundHandlers(refunds).refund!;
  const stalled = signal();
  const wake = signal();
  const handlers = {
    refund: {
      ...example,
      run: async (job: Job<Refund>) => {
        if (job.fence === 1) {
          stalled.resolve(); // the first holder stalls past its lease before its write
          await wake.promise;
        }
        return example.run(job);
      },
    },
  };
  const zombie = new Worker({ client: producer, tenantId: tenant, leaseSeconds: 1, handlers }).runOnce();
  await stalled.promise;
  const rescuer = new Worker({ client: producer, tenantId: tenant, handlers });
  for (const until = performance.now() + 15_000; !(await rescuer.runOnce()); await sleep(100)) {
    assert.ok(performance.now() < until, "the lease never lapsed");
  }
  wake.resolve();
  await zombie;
  const entries = (await refunds.read({ account: "acct-9" }))?.["refunds"] as { refund: string }[];
  assert.deepEqual(entries.map((entry) => entry.refund), ["refund-9"]); // one refund: fence 2's
  const op = await producer.get("refund-9");
  assert.equal(op.fence, 2);
  assert.equal(op.state, "succeeded");
});

test("refundWorker takes its API, tenant and table from the environment, and names what is missing", () => {
  assert.throws(() => refundWorker({}), /set LEASEFENCE_BASE_URL/);
  const worker = refundWorker({ LEASEFENCE_BASE_URL: local.baseUrl, LEASEFENCE_TOKEN: "t", LEASEFENCE_TENANT: "acme", REFUNDS_TABLE: "refunds" });
  assert.deepEqual(worker.jobTypes, ["refund"]);
});
