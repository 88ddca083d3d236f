// The SDK against a real `leasefence local` (started here on free ports): the client's
// lifecycle and batches, claim tokens after a lost answer, the worker loop, and class-B
// fencing of a stalled worker's stale write, read back by the Python SDK.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import {
  FencedTable,
  LostOwnership,
  PayloadConflict,
  NotFound,
  Permanent,
  StaleFence,
  Unavailable,
  Worker,
  fenceAttribute,
  idempotencyKey,
  type Job,
} from "../src/index.js";
import { signal, sleep, unique } from "./support/helpers.js";
import { PYTHON, startLocal, type Local } from "./support/local.js";


/** `attempt()` until it gives something truthy (a claim once the lease lapsed), within `ms`. */
async function eventually<T>(attempt: () => Promise<T>, ms = 15_000): Promise<NonNullable<T>> {
  const until = performance.now() + ms;
  for (;;) {
    const got = await attempt();
    if (got) return got as NonNullable<T>;
    if (performance.now() > until) throw new Error("gave up waiting");
    await sleep(100);
  }
}

/** A fetch that loses the answer of the first request whose path ends with `suffix` (it reaches the server). */
function losingFirstAnswer(suffix: string) {
  const bodies: string[] = [];
  let lost = false;
  const fetcher = async (request: Request) => {
    const path = new URL(request.url).pathname;
    if (path.endsWith(suffix)) bodies.push(await request.clone().text());
    const response = await fetch(request);
    if (!lost && path.endsWith(suffix)) {
      lost = true;
      await response.arrayBuffer();
      throw new TypeError("fetch failed", { cause: Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }) });
    }
    return response;
  };
  return { fetcher, bodies };
}

let local: Local;
before(async () => {
  local = await startLocal();
});
after(async () => {
  await local?.stop();
});

describe("client", () => {
  test("a lifecycle: enqueue, replay, conflict, claim, heartbeat, complete, read back", { timeout: 30_000 }, async () => {
    const lf = local.client(unique("t"));
    const id = unique("op");
    const first = await lf.enqueue({ operation_id: id, job_type: "charge", payload: { amount: 1200 } });
    assert.equal(first.created, true);
    const replay = await lf.enqueue({ operation_id: id, job_type: "charge", payload: { amount: 1200 } });
    assert.equal(replay.created, false);
    await assert.rejects(lf.enqueue({ operation_id: id, job_type: "charge", payload: { amount: 1 } }), (error: unknown) => {
      assert.ok(error instanceof PayloadConflict);
      assert.equal(error.status, 409);
      assert.equal(error.code, "payload_conflict");
      assert.equal(error.answeredBy, "service");
      return true;
    });
    const claim = await lf.claim({ worker_id: "w1", lease_seconds: 30 });
    assert.ok(claim);
    assert.equal(claim.operation_id, id);
    assert.equal(claim.fence, 1);
    assert.deepEqual(claim.payload, { amount: 1200 });
    assert.equal(await lf.claim({ worker_id: "w1" }), null); // nothing else is due: 204
    const expires = await lf.heartbeat(id, { fence: 1, worker_id: "w1", checkpoint: { step: 1 } });
    assert.ok(Date.parse(expires) > Date.now());
    await assert.rejects(lf.complete(id, 7, "charged"), StaleFence);
    const done = await lf.complete(id, 1, "charged");
    assert.equal(done.state, "succeeded");
    assert.equal((await lf.get(id)).outcome_code, "charged");
    assert.deepEqual(await lf.payload(id), { amount: 1200 });
    const seen = [];
    for await (const entry of lf.iterHistory(id)) seen.push(entry);
    assert.ok(seen.length >= 2, `history: ${JSON.stringify(seen)}`);
    await assert.rejects(lf.get(unique("missing")), NotFound);
    const listed = [];
    for await (const op of lf.iterOperations({ state: "succeeded" })) listed.push(op.operation_id);
    assert.deepEqual(listed, [id]);
  });

  test("the batches: enqueue, claim, heartbeat and finish, each item with its own answer", { timeout: 30_000 }, async () => {
    const lf = local.client(unique("t"));
    const ids = [unique("a"), unique("b"), unique("c")].sort();
    const enqueued = await lf.enqueueBatch(ids.map((id) => ({ operation_id: id, job_type: "mail", payload: { id } })));
    assert.deepEqual(enqueued.map((r) => r.result().created), [true, true, true]);
    const claims = await lf.claimBatch([{ worker_id: "b1" }, { worker_id: "b2" }, { worker_id: "b3" }, { worker_id: "b4" }]);
    const granted = claims.map((r) => r.result()).filter((c) => c !== null);
    assert.deepEqual(granted.map((c) => c.operation_id).sort(), ids);
    assert.equal(claims[3]!.result(), null);
    const [a, b, c] = granted;
    const renewals = await lf.heartbeatBatch([
      { operation_id: a!.operation_id, fence: a!.fence, worker_id: "b1" },
      { operation_id: b!.operation_id, fence: b!.fence + 5, worker_id: "b2" },
    ]);
    assert.ok(renewals[0]!.ok);
    assert.ok(renewals[1]!.error instanceof StaleFence);
    const finished = await lf.finishBatch([
      { action: "complete", operation_id: a!.operation_id, fence: a!.fence, outcome_code: "sent" },
      { action: "fail", operation_id: b!.operation_id, fence: b!.fence, retryable: false, reason: "bounced" },
      { action: "quarantine", operation_id: c!.operation_id, fence: c!.fence, reason: "garbled" },
    ]);
    assert.deepEqual(
      finished.map((r) => r.result().state),
      ["succeeded", "failed_terminal", "quarantined"],
    );
  });

  test("a round closes a job and claims the next in one request, each item in its own list", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const lf = local.client(tenant);
    const ids = [unique("op"), unique("op")];
    for (const id of ids) await lf.enqueue({ operation_id: id, job_type: "round", payload: { id } });
    const first = (await lf.workBatch({ claim: [{ worker_id: "r1", job_types: ["round"] }] })).claim[0]!.result()!;
    const round = await lf.workBatch({
      finish: [{ action: "complete", operation_id: first.operation_id, fence: first.fence, outcome_code: "sent" }],
      heartbeat: [{ operation_id: first.operation_id, fence: first.fence, worker_id: "r1" }],
      claim: [{ worker_id: "r1", job_types: ["round"], claim_token: "next-1", after: first.operation_id }],
    });
    assert.equal(round.finish[0]!.result().state, "succeeded");
    // The renewal comes after the close: the claim is no longer held.
    assert.ok(round.heartbeat[0]!.error instanceof StaleFence);
    const next = round.claim[0]!.result()!;
    assert.deepEqual([next.operation_id, next.fence, next.claim_token], [ids.find((id) => id !== first.operation_id), 1, "next-1"]);
    // Sent again with its token and `after` (its answer lost): the same claim, nothing spent.
    const again = await lf.workBatch({ claim: [{ worker_id: "r1", job_types: ["round"], claim_token: "next-1", after: first.operation_id }] });
    assert.deepEqual([again.claim[0]!.result()!.operation_id, again.claim[0]!.result()!.fence], [next.operation_id, 1]);
    assert.equal((await lf.get(next.operation_id)).attempts, 1);
  });

  test("a lost claim answer is recovered by resending its claim token: the same claim, no attempt spent", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const id = unique("op");
    await local.client(tenant).enqueue({ operation_id: id, job_type: "charge", payload: 1 });
    const { fetcher, bodies } = losingFirstAnswer("/v1/claims");
    const lf = local.client(tenant, { fetch: fetcher, backoffMs: 10 });
    const claim = await lf.claim({ worker_id: "w1", lease_seconds: 30 });
    assert.equal(bodies.length, 2, "the claim was sent again after its answer was lost");
    const tokens = bodies.map((body) => JSON.parse(body).claim_token);
    assert.equal(tokens[0], tokens[1]);
    assert.equal(claim?.operation_id, id);
    assert.equal(claim?.fence, 1);
    assert.equal(claim?.claim_token, tokens[0]);
    const op = await lf.get(id);
    assert.equal(op.attempts, 1);
    assert.equal(op.state, "claimed");
  });
});

describe("worker", () => {
  test("a lifecycle: heartbeats follow progress past the lease, the outcome completes; Permanent fails for good", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const lf = local.client(tenant);
    const slow = unique("slow");
    const broken = unique("broken");
    await lf.enqueue({ operation_id: slow, job_type: "charge", payload: { amount: 5 } });
    await lf.enqueue({ operation_id: broken, job_type: "refund", payload: { amount: 6 } });
    const seen: unknown[] = [];
    const worker = new Worker({
      client: lf,
      tenantId: tenant,
      leaseSeconds: 1,
      handlers: {
        charge: async (job: Job<{ amount: number }>) => {
          seen.push(job.payload.amount);
          for (let step = 0; step < 8; step++) {
            await sleep(200); // 1.6 s in all: longer than the 1 s lease, renewed by progress
            job.progress({ step });
          }
          assert.equal(job.signal.aborted, false);
          return "charged";
        },
        refund: () => {
          throw new Permanent("no such account");
        },
      },
    });
    assert.equal(await worker.runOnce(), true);
    assert.equal(await worker.runOnce(), true);
    assert.equal(await worker.runOnce(), false);
    assert.deepEqual(seen, [5]);
    const done = await lf.get(slow);
    assert.equal(done.state, "succeeded");
    assert.equal(done.outcome_code, "charged");
    assert.equal(done.attempts, 1);
    const failed = await lf.get(broken);
    assert.equal(failed.state, "failed_terminal");
    assert.match(failed.reason ?? "", /no such account/);
  });

  test("a lost claim answer: the worker keeps the token and its next claim gets the same claim", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const id = unique("op");
    await local.client(tenant).enqueue({ operation_id: id, job_type: "charge", payload: 2 });
    const { fetcher, bodies } = losingFirstAnswer("/v1/claims");
    const lf = local.client(tenant, { fetch: fetcher, retries: 0 });
    const fences: number[] = [];
    const worker = new Worker({ client: lf, tenantId: tenant, leaseSeconds: 30, handlers: { charge: (job) => void fences.push(job.fence) } });
    await assert.rejects(worker.runOnce(), Unavailable);
    assert.equal(await worker.runOnce(), true);
    assert.deepEqual(fences, [1]);
    assert.equal(JSON.parse(bodies[0]!).claim_token, JSON.parse(bodies[1]!).claim_token);
    const op = await lf.get(id);
    assert.equal(op.state, "succeeded");
    assert.equal(op.attempts, 1);
  });

  test("a stalled worker's stale write is refused by a class-B table, and its signal aborts", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const id = unique("post");
    const tableName = unique("ledger");
    await local.createTable(tableName);
    const table = new FencedTable({ tableName, client: local.dynamodb() });
    const key = { pk: "account-1" };
    const lf = local.client(tenant);
    await lf.enqueue({ operation_id: id, job_type: "post", payload: { amount: 10 }, target_class: "B" });
    const outcome: { error?: unknown; aborted?: boolean } = {};
    const rescued = signal();
    const handler = (who: string, stall: Promise<void>) => ({
      onClaim: (job: Job) => table.raiseFence(job, key),
      run: async (job: Job) => {
        await stall; // the zombie makes no progress (no heartbeat): its 1 s lease lapses meanwhile
        try {
          await table.write(job, key, { balance: who }, { append: { postings: [who] } });
        } catch (error) {
          outcome.error = error;
          outcome.aborted = job.signal.aborted;
          throw error;
        }
        return `posted-by-${who}`;
      },
    });
    const zombieClaimed = signal();
    const zombieHandler = handler("zombie", rescued.promise);
    const onClaim = async (job: Job) => {
      await zombieHandler.onClaim(job);
      zombieClaimed.resolve();
    };
    const stalled = new Worker({ client: lf, tenantId: tenant, workerId: "zombie", leaseSeconds: 1, handlers: { post: { ...zombieHandler, onClaim } } });
    const rescuer = new Worker({ client: lf, tenantId: tenant, workerId: "rescuer", leaseSeconds: 30, handlers: { post: handler("rescuer", Promise.resolve()) } });
    const zombie = stalled.runOnce();
    await zombieClaimed.promise; // the zombie holds fence 1 before the rescuer asks
    await eventually(() => rescuer.runOnce()); // takes over with fence 2 once the zombie's lease lapsed
    rescued.resolve(); // the zombie wakes up and writes
    assert.equal(await zombie, true);
    assert.ok(outcome.error instanceof LostOwnership, String(outcome.error));
    assert.match((outcome.error as Error).message, /seen 2/);
    assert.equal(outcome.aborted, true);
    const item = await table.read(key);
    assert.equal(item?.["balance"], "rescuer");
    assert.deepEqual(item?.["postings"], ["rescuer"]);
    const op = await lf.get(id);
    assert.equal(op.state, "succeeded");
    assert.equal(op.outcome_code, "posted-by-rescuer");
    assert.equal(op.fence, 2);

    // The Python SDK reads the same entry: one item layout for both languages.
    const state = await table.fenceState(key);
    const attr = fenceAttribute(tenant, id);
    const ours = state.entries.get(attr);
    assert.equal(ours?.fence, 2);
    const script = [
      "import json, sys, boto3",
      "from leasefence.targets.fenced_table import FencedTable, fence_attribute",
      "from leasefence.targets.idempotent_api import idempotency_key",
      "endpoint, table, tenant, op = sys.argv[1:5]",
      "client = boto3.client('dynamodb', endpoint_url=endpoint, region_name='us-east-1', aws_access_key_id='testing', aws_secret_access_key='testing')",
      "state = FencedTable(client, table).fence_state({'pk': 'account-1'})",
      "print(json.dumps({'attr': fence_attribute(tenant, op), 'entries': state.entries, 'key': idempotency_key(tenant, op)}))",
    ].join("\n");
    const { stdout } = await promisify(execFile)(PYTHON, ["-c", script, local.dynamodbEndpoint, tableName, tenant, id]);
    const python = JSON.parse(stdout);
    assert.equal(python.attr, attr);
    assert.deepEqual(python.entries[attr], [ours?.fence, ours?.time]);
    assert.equal(python.key, idempotencyKey(tenant, id));
  });

  test("the handler's signal aborts when a heartbeat reports the lease lost", { timeout: 30_000 }, async () => {
    const tenant = unique("t");
    const id = unique("op");
    const lf = local.client(tenant);
    await lf.enqueue({ operation_id: id, job_type: "slow", payload: 3 });
    const seen: { reason?: unknown; guard?: unknown } = {};
    const rescued = signal();
    const claimed = signal();
    const stalled = new Worker({
      client: lf,
      tenantId: tenant,
      leaseSeconds: 1,
      handlers: {
        slow: async (job) => {
          claimed.resolve();
          await rescued.promise; // stalled past the lease: another worker claims meanwhile
          job.progress(); // progress again: the next heartbeat is refused
          await new Promise((resolve) => job.signal.addEventListener("abort", resolve, { once: true }));
          seen.reason = job.signal.reason;
          seen.guard = (() => {
            try {
              job.guard();
            } catch (error) {
              return error;
            }
          })();
          return "too late";
        },
      },
    });
    const zombie = stalled.runOnce();
    await claimed.promise; // the stalled worker holds fence 1 before the rescuer asks
    const rescuer = await eventually(() => lf.claim({ worker_id: "rescuer", lease_seconds: 30 }));
    assert.equal(rescuer.fence, 2);
    rescued.resolve();
    await zombie;
    assert.ok(seen.reason instanceof LostOwnership);
    assert.match((seen.reason as Error).message, /heartbeat refused: stale_fence/);
    assert.ok(seen.guard instanceof LostOwnership);
    const op = await lf.get(id);
    assert.equal(op.state, "claimed"); // the stale worker made no closing write
    assert.equal(op.fence, 2);
  });
});
