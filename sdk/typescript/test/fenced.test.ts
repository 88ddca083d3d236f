// `fenced` (an SQS record handler fenced by one wrapper) under Powertools' BatchProcessor, against
// a real `leasefence local`: partial batch failures as Powertools reports them, a poison message,
// a redelivery during the lease, an ambiguous outcome, and a stalled handler whose stale class-B
// write the table refuses.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { BatchProcessor, EventType, FullBatchFailureError, processPartialResponse } from "@aws-lambda-powertools/batch";
import type { SQSRecord } from "aws-lambda";

import {
  Ambiguous,
  FencedTable,
  LostOwnership,
  NotFinished,
  Parked,
  PoisonMessage,
  Reconciled,
  TryLater,
  fenced,
  type Job,
} from "../src/index.js";
import { signal, sleep, unique } from "./support/helpers.js";
import { PYTHON, startLocal, type Local } from "./support/local.js";

// Kept messages name operations by keyed hash: with this key, the Python side's own hashes.
process.env["LEASEFENCE_LOG_HASH_KEY"] = "fenced-test-key";


type Refund = { refund_id: string; cents: number };
type Message = SQSRecord;

/** An SQS record as Lambda delivers it. */
const message = (messageId: string, refund: Refund): Message => ({
  messageId,
  receiptHandle: `handle-${messageId}`,
  body: JSON.stringify(refund),
  attributes: {
    ApproximateReceiveCount: "1",
    SentTimestamp: String(Date.now()),
    SenderId: "AIDAEXAMPLE",
    ApproximateFirstReceiveTimestamp: String(Date.now()),
  },
  messageAttributes: {},
  md5OfBody: "",
  eventSource: "aws:sqs",
  eventSourceARN: "arn:aws:sqs:us-east-1:123456789012:refunds",
  awsRegion: "us-east-1",
});
const refundId = (record: Message) => (JSON.parse(record.body) as Refund).refund_id;

/** One invocation: the batch through Powertools, as a Lambda handler would send it. */
function deliver<T>(records: Message[], handler: (record: Message) => Promise<T>, options: { inOrder?: boolean } = {}) {
  const processor = new BatchProcessor(EventType.SQS);
  const sent = processPartialResponse({ Records: records }, handler, processor, {
    processInParallel: !options.inOrder,
  });
  return { processor, response: sent };
}

let local: Local;
before(async () => {
  local = await startLocal();
});
after(async () => {
  await local?.stop();
});

describe("fenced", () => {
  test("partial batch failures as Powertools reports them: a resend runs once, a poison message is kept", { timeout: 30_000 }, async () => {
    const tenantId = unique("t");
    const client = local.client(tenantId);
    const calls: string[] = [];
    const recordHandler = fenced(
      async (record: Message, job: Job<Refund>) => {
        calls.push(`${job.payload.refund_id}:${job.fence}`);
        assert.equal(JSON.parse(record.body).cents, job.payload.cents);
        return "refunded";
      },
      { client, tenantId, jobType: "refund", operationId: refundId },
    );
    const r1 = unique("r1");
    const r2 = unique("r2");
    const batch = [
      message("m1", { refund_id: r1, cents: 100 }),
      message("m2", { refund_id: r1, cents: 100 }), // the producer sent r1 again: one operation
      message("m3", { refund_id: r1, cents: 999 }), // r1 with another amount: a poison message
      message("m4", { refund_id: r2, cents: 5 }),
    ];
    const { processor, response } = deliver(batch, recordHandler, { inOrder: true });
    assert.deepEqual(await response, { batchItemFailures: [{ itemIdentifier: "m3" }] });
    assert.deepEqual(calls, [`${r1}:1`, `${r2}:1`]);
    assert.equal(processor.errors.length, 1);
    const poison = processor.errors[0];
    assert.ok(poison instanceof PoisonMessage, String(poison));
    assert.ok(!poison.message.includes(r1), "errors name the operation by a keyed hash, not its id");
    const hashed = "import sys; from leasefence.privacy import keyed_hash; print(keyed_hash(*sys.argv[1:]))";
    const { stdout } = await promisify(execFile)(PYTHON, ["-c", hashed, tenantId, r1]);
    assert.equal(poison.op, stdout.trim()); // the tag the Python decorator logs for this operation
    assert.deepEqual(
      processor.successMessages.map((record) => (record as Message).messageId),
      ["m1", "m2", "m4"],
    );
    for (const id of [r1, r2]) {
      const op = await client.get(id);
      assert.equal(op.state, "succeeded");
      assert.equal(op.outcome_code, "refunded");
      assert.equal(op.attempts, 1);
    }
  });

  test("a redelivery during the lease does not run the handler again: TryLater, then acknowledged once it ended", { timeout: 30_000 }, async () => {
    const tenantId = unique("t");
    const client = local.client(tenantId);
    const running = signal();
    const release = signal();
    let calls = 0;
    const recordHandler = fenced(
      async (_record: Message, job: Job<Refund>) => {
        calls += 1;
        running.resolve();
        await release.promise;
        job.guard();
        return "sent";
      },
      { client, tenantId, jobType: "email", leaseSeconds: 30 },
    );
    const first = deliver([message("m1", { refund_id: "x", cents: 1 })], recordHandler);
    await running.promise;
    // SQS hands the same message to another invocation (its visibility timeout ran out): every
    // record of that batch fails, which Powertools reports by throwing.
    const again = deliver([message("m1", { refund_id: "x", cents: 1 })], recordHandler);
    await assert.rejects(again.response, (error: unknown) => {
      assert.ok(error instanceof FullBatchFailureError);
      assert.ok(error.recordErrors[0] instanceof TryLater, String(error.recordErrors[0]));
      return true;
    });
    release.resolve();
    assert.deepEqual(await first.response, { batchItemFailures: [] });
    const late = deliver([message("m1", { refund_id: "x", cents: 1 })], recordHandler);
    assert.deepEqual(await late.response, { batchItemFailures: [] });
    assert.equal(calls, 1);
    const op = await client.get("m1"); // the default operation id: the message id
    assert.equal(op.state, "succeeded");
    assert.equal(op.outcome_code, "sent");
  });

  test("an ambiguous outcome parks the operation: the message is kept (Parked), and a redelivery does not run it", { timeout: 30_000 }, async () => {
    const tenantId = unique("t");
    const client = local.client(tenantId);
    let calls = 0;
    const recordHandler = fenced(
      () => {
        calls += 1;
        throw new Ambiguous("the provider timed out");
      },
      { client, tenantId, jobType: "charge" },
    );
    const batch = [message("m1", { refund_id: "a", cents: 1 }), message("m2", { refund_id: "b", cents: 2 })];
    const okay = fenced(() => "charged", { client, tenantId, jobType: "charge" });
    const mixed = (record: Message) => (record.messageId === "m1" ? recordHandler(record) : okay(record));
    for (let round = 0; round < 2; round++) {
      const { processor, response } = deliver(batch, mixed);
      assert.deepEqual(await response, { batchItemFailures: [{ itemIdentifier: "m1" }] });
      assert.ok(processor.errors[0] instanceof Parked, String(processor.errors[0]));
    }
    assert.equal(calls, 1);
    assert.equal((await client.get("m1")).state, "unknown");
    assert.equal((await client.get("m2")).state, "succeeded");
  });

  test("a stalled handler's stale class-B write is refused; the message is kept (NotFinished), the takeover acknowledged", { timeout: 30_000 }, async () => {
    const tenantId = unique("t");
    const client = local.client(tenantId);
    const tableName = unique("refunds");
    await local.createTable(tableName);
    const table = new FencedTable({ tableName, client: local.dynamodb() });
    const key = { pk: "acct-1" };
    const stalled = signal();
    const wake = signal();
    const refused: unknown[] = [];
    const recordHandler = fenced(
      async (_record: Message, job: Job<Refund>) => {
        if (job.fence === 1) {
          stalled.resolve();
          await wake.promise; // no progress: the 1 s lease lapses meanwhile
        }
        try {
          await table.write(job, key, { last_refund: job.operationId }, { append: { refunds: [job.fence] } });
        } catch (error) {
          refused.push(error);
          throw error;
        }
        return "refunded";
      },
      {
        client,
        tenantId,
        jobType: "refund",
        targetClass: "B",
        leaseSeconds: 1,
        onClaim: (job) => table.raiseFence(job, key),
        reconcile: async (job) => (((await table.read(key))?.["refunds"] as number[] | undefined)?.length ? Reconciled.done("refunded") : Reconciled.notDone()),
      },
    );
    const record = message("m1", { refund_id: "r", cents: 700 });
    const zombie = deliver([record], recordHandler);
    const zombieDone = zombie.response.catch((error: unknown) => error);
    await stalled.promise;
    for (const until = performance.now() + 15_000; ; ) {
      // redeliveries: kept (TryLater) until the stalled delivery's lease lapsed, then taken over
      const { response } = deliver([record], recordHandler);
      const answer = await response.catch((error: unknown) => error);
      if (!(answer instanceof FullBatchFailureError)) {
        assert.deepEqual(answer, { batchItemFailures: [] });
        break;
      }
      assert.ok(answer.recordErrors[0] instanceof TryLater, String(answer.recordErrors[0]));
      assert.ok(performance.now() < until, "the lease never lapsed");
      await sleep(200);
    }
    wake.resolve();
    const late = await zombieDone;
    assert.ok(late instanceof FullBatchFailureError, String(late));
    assert.ok(late.recordErrors[0] instanceof NotFinished, String(late.recordErrors[0]));
    assert.match(late.recordErrors[0].message, /lost ownership/);
    assert.ok(refused[0] instanceof LostOwnership, String(refused[0]));
    assert.deepEqual((await table.read(key))?.["refunds"], [2]); // fence 2's write alone
    const op = await client.get("m1");
    assert.equal(op.state, "succeeded");
    assert.equal(op.fence, 2);
  });
});
