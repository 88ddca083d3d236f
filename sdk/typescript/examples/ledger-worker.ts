// A class-B worker in TypeScript: the ledger handler of docs/sdk.md (Python), item for item, so
// Python and TypeScript workers can share the ledger table. tsc checks this file with the tests.
import { FencedTable, LeaseFenceClient, Permanent, Reconciled, TargetRefused, Worker, type Job } from "@leasefence/sdk";

type Posting = { account: string; cents: number };

const tenantId = "acme-dev"; // the token's tenant
const client = new LeaseFenceClient({
  baseUrl: process.env["LEASEFENCE_BASE_URL"] ?? "http://127.0.0.1:8765",
  token: process.env["LEASEFENCE_TOKEN"] ?? "", // leasefence token --tenant acme-dev
});
const ledger = new FencedTable({
  tableName: "ledger",
  clientConfig: { endpoint: process.env["LEASEFENCE_DYNAMODB_ENDPOINT"] ?? "http://127.0.0.1:8766", region: "us-east-1" },
});
const account = (job: Job<Posting>) => ({ tenant_id: job.tenantId, account: job.payload.account });

const worker = new Worker({
  client,
  tenantId,
  workerId: `ledger-${process.pid}`,
  leaseSeconds: 60,
  handlers: {
    "ledger-post": {
      // On claim: the ledger refuses this operation's older fences from now on.
      onClaim: (job: Job<Posting>) => ledger.raiseFence(job, account(job)),
      // A previous holder may have posted: look first.
      reconcile: async (job: Job<Posting>) => {
        const entries = ((await ledger.read(account(job)))?.["entries"] ?? []) as { op: string }[];
        return entries.some((entry) => entry.op === job.operationId) ? Reconciled.done("posted") : Reconciled.notDone();
      },
      run: async (job: Job<Posting>) => {
        const { payload, fence, signal } = job;
        job.progress(); // heartbeats follow progress
        signal.throwIfAborted(); // the lease is lost: stop before acting
        try {
          await ledger.write(
            job, // the write carries the fence; the ledger checks it
            account(job), // the item's key
            { last_op: job.operationId, last_fence: fence }, // the attributes to set
            {
              condition: "attribute_not_exists(#closed)", // your own guard, beside the fence's
              names: { "#closed": "closed" },
              append: { entries: [{ op: job.operationId, cents: payload.cents }] },
            },
          );
        } catch (error) {
          if (error instanceof TargetRefused) throw new Permanent("account closed", { cause: error });
          throw error; // LostOwnership: the worker makes no further write for this claim
        }
        return "posted";
      },
    },
  },
});

process.once("SIGTERM", () => worker.stop()); // stop claiming; the job in flight finishes
await worker.run();
