/**
 * Class C: an external API with a documented idempotency key and a lookup by key
 * (`leasefence.targets.idempotent_api` in Python, the same keys). The key is derived from
 * `(tenant_id, operation_id)`: tenant-scoped and stable across attempts and fences, so every
 * retry of one operation presents the same key and the provider deduplicates it. After an
 * ambiguous attempt, look the key up before any retry. Dedupe as the provider defines it, not
 * fencing.
 */
import { identityDigest } from "./identity.js";
import { Ambiguous, Reconciled } from "./outcomes.js";

/** The operation's idempotency key: `lf-` and 48 hex digits. */
export function idempotencyKey(tenantId: string, operationId: string): string {
  return "lf-" + identityDigest(tenantId, operationId).slice(0, 48);
}

/** What a class-C target offers: execute under a key, look a key up (undefined or null: not found). */
export interface IdempotentApi<Req, Res> {
  execute(key: string, request: Req): Promise<Res>;
  lookup(key: string): Promise<Res | null | undefined>;
}

interface KeyedJob {
  tenantId: string;
  operationId: string;
  guard(): void;
}

/** Whether an error means the call may have been made and its answer lost. */
const isTimeout = (error: unknown) =>
  error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError" || (error as { code?: string }).code === "ETIMEDOUT");

/** Send `request` under the operation's key; a timeout or lost answer is `Ambiguous` (look the key up before any retry). */
export async function callIdempotent<Req, Res>(job: KeyedJob, api: IdempotentApi<Req, Res>, request: Req): Promise<Res> {
  job.guard();
  try {
    return await api.execute(idempotencyKey(job.tenantId, job.operationId), request);
  } catch (error) {
    if (isTimeout(error)) throw new Ambiguous("the provider did not answer; look the key up before any retry", { cause: error });
    throw error;
  }
}

/** Look the key up: found -> done (with `outcome(result)`); not found -> not done (safe to send under the key). */
export async function reconcileIdempotent<Req, Res>(
  job: KeyedJob,
  api: IdempotentApi<Req, Res>,
  outcome: (result: Res) => string = () => "reconciled",
): Promise<Reconciled> {
  const result = await api.lookup(idempotencyKey(job.tenantId, job.operationId));
  return result === undefined || result === null ? Reconciled.notDone() : Reconciled.done(outcome(result));
}
