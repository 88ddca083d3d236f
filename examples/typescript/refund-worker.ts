// A class-B refund worker in TypeScript: examples/refund_worker's jobs (Python), item for item, so
// Python and TypeScript workers can share the refunds table. Each refund is appended to its
// account's item in a DynamoDB table whose items carry fences (`FencedTable`), so a worker that
// stalled past its lease and wakes up after another took the refund over is refused by the table
// itself. Each refund's payload: `{"account": "acct-1", "cents": 1250}`; its operation id is the
// refund request's id.
//
// Run it: `node refund-worker.js` with LEASEFENCE_BASE_URL, LEASEFENCE_TOKEN (a token with the
// work scope), LEASEFENCE_TENANT and REFUNDS_TABLE set; the DynamoDB client takes its region,
// credentials and endpoint from the environment (AWS_REGION, AWS_ENDPOINT_URL, ...).
import { pathToFileURL } from "node:url";

import { FencedTable, LeaseFenceClient, Permanent, Reconciled, TargetRefused, Worker, type Handler, type Job } from "@leasefence/sdk";

export type Refund = { account: string; cents: number };
type Entry = { refund: string; cents: number };

/** The environment variable that names the refunds table. */
export const TABLE_ENV = "REFUNDS_TABLE";

const account = (job: Job<Refund>) => ({ account: job.payload.account });

/** The refund handlers over a refunds table (its items keyed by `account`): the worker's `handlers`. */
export function refundHandlers(refunds: FencedTable): Record<string, Handler<Refund>> {
  return {
    refund: {
      // On claim, before anything else: from now on the account's item refuses older fences of
      // this refund, even before this holder writes.
      onClaim: (job) => refunds.raiseFence(job, account(job)),
      // A previous holder may have refunded before it lost its lease: look first.
      reconcile: async (job) => {
        const entries = ((await refunds.read(account(job)))?.["refunds"] ?? []) as Entry[];
        return entries.some((entry) => entry.refund === job.operationId) ? Reconciled.done("refunded") : Reconciled.notDone();
      },
      // Append the refund to its account: one conditional write that carries the fence.
      run: async (job) => {
        job.progress();
        const entry: Entry = { refund: job.operationId, cents: job.payload.cents };
        try {
          await refunds.write(job, account(job), { last_refund: job.operationId }, {
            condition: "attribute_not_exists(#closed)", // the business guard, beside the fence's
            names: { "#closed": "closed" },
            append: { refunds: [entry] },
          });
        } catch (error) {
          if (error instanceof TargetRefused) throw new Permanent("account closed", { cause: error }); // no retry will open it
          throw error; // LostOwnership: the worker makes no further write for this claim
        }
        return "refunded";
      },
    },
  };
}

function needed(env: NodeJS.ProcessEnv, name: string): string {
  const value = env[name];
  if (!value) throw new Error(`set ${name}`);
  return value;
}

/** The worker over the environment's API and table. */
export function refundWorker(env: NodeJS.ProcessEnv = process.env): Worker {
  const need = (name: string) => needed(env, name);
  return new Worker({
    client: new LeaseFenceClient({ baseUrl: need("LEASEFENCE_BASE_URL"), token: need("LEASEFENCE_TOKEN") }),
    tenantId: need("LEASEFENCE_TENANT"),
    handlers: refundHandlers(new FencedTable({ tableName: need(TABLE_ENV) })),
    workerId: `refunds-${process.pid}`,
  });
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const worker = refundWorker();
  process.once("SIGTERM", () => worker.stop()); // stop claiming; the job in flight finishes
  await worker.run();
}
