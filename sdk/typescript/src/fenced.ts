/**
 * One wrapper that fences an existing record handler: an SQS consumer under Powertools for AWS
 * Lambda (TypeScript)'s `BatchProcessor` (`processPartialResponse`), or any event whose records
 * carry an identity. The Python decorator's twin (`leasefence.worker.fenced`), with the same
 * decision table. Powertools is not needed at run time: the wrapper is a plain function.
 *
 * ```ts
 * const recordHandler = fenced(
 *   async (record: SQSRecord, job: Job<Refund>) => { ... },   // the target helpers take `job`
 *   { client, tenantId: "acme", jobType: "refund", operationId: (r) => JSON.parse(r.body).refund_id },
 * );
 * export const handler = (event: SQSEvent, context: Context) =>
 *   processPartialResponse(event, recordHandler, new BatchProcessor(EventType.SQS), { context });
 * ```
 *
 * Each call of the wrapped handler, for one record:
 *
 * 1. derives the operation id (`operationId`: a function of the record; default its `messageId`)
 *    and the payload (`payload`; default the record's `body`, parsed when it is JSON);
 * 2. enqueues it (a redelivery is a replay: same id, same payload hash);
 * 3. claims it by id and runs the handler under that claim through the worker loop (`onClaim`,
 *    `reconcile`, progress-tied heartbeats, lost-ownership mode, the closing write), the handler
 *    getting `(record, job, context)`;
 * 4. answers: it resolves (a success in the partial batch response: SQS deletes the message) once
 *    the operation has ENDED (`succeeded`, `failed_terminal`, `cancelled`), and rejects with a
 *    `MessageKept` otherwise, which `BatchProcessor` reports as a batch item failure: the message
 *    stays, comes back after its visibility timeout, and goes to the dead-letter queue after
 *    `maxReceiveCount` receives.
 *
 * **SQS keeps a message exactly while its operation may still have to run:**
 *
 * - a redelivery while another delivery holds the lease (or a retry's backoff, an approval
 *   awaited): `TryLater`, the handler does not run a second time;
 * - `payload_conflict` (the id is bound to another payload, which no retry changes): `PoisonMessage`,
 *   the handler never runs, the redrive policy takes it to the dead-letter queue;
 * - parked `unknown` or `quarantined`: `Parked`, an operator decides (`leasefence ops resolve`);
 * - the handler ran without ending it (a retryable failure, lost ownership: a stale fence refused
 *   by the target or the API, an API that stayed busy): `NotFinished`.
 *
 * The wrapper keeps the record handler's call shape, `(record, context?)`, which is how
 * `BatchProcessor` calls it; its result is the handler's. A string result that is a valid outcome
 * code (1-256 characters, no control characters) is also the operation's outcome (else `ok`).
 */
import type { LeaseFenceClient } from "./client.js";
import { InvalidInput, PayloadConflict } from "./errors.js";
import { keyedHash } from "./identity.js";
import type { JsonValue, Payload } from "./json.js";
import type { Reconciled } from "./outcomes.js";
import { type Job, Worker } from "./worker.js";

/** The states in which an operation never changes again: its message is acknowledged. */
export const ENDED_STATES: ReadonlySet<string> = new Set(["succeeded", "failed_terminal", "cancelled"]);
/** The states an operator must resolve. */
export const PARKED_STATES: ReadonlySet<string> = new Set(["unknown", "quarantined"]);

/** The record's message stays in the queue (a batch item failure). `op` names the operation by its keyed hash (`keyedHash(tenantId, operationId)`), never by its id. */
export class MessageKept extends Error {
  constructor(
    readonly reason: string,
    readonly op: string,
    options?: { cause?: unknown },
  ) {
    super(`operation ${op}: ${reason}`, options);
    this.name = new.target.name;
  }
}

/** Not claimable now: another delivery holds the lease, or the next attempt is not due. The handler did not run. */
export class TryLater extends MessageKept {}
/** `payload_conflict`: the id is bound to another payload; the handler never runs for it (the dead-letter queue is where it belongs). */
export class PoisonMessage extends MessageKept {}
/** Parked `unknown` or `quarantined`: an operator decides. */
export class Parked extends MessageKept {}
/** This delivery ran the handler but did not end the operation: a later delivery tries again. */
export class NotFinished extends MessageKept {}

/** How records become operations, and where they go. */
export interface FenceOptions<R, P = JsonValue> {
  /** A client whose token has the produce and work scopes. */
  client: LeaseFenceClient;
  /** The token's tenant (targets derive identities from it). */
  tenantId: string;
  jobType: string;
  /**
   * The operation id of a record. Default: its `messageId`, which makes SQS redeliveries one
   * operation; a producer that sends the same request again gets a new message id, and so another
   * operation: name the business key when sends repeat.
   */
  operationId?: (record: R) => string;
  /** The payload, bound to the id by its hash. Default: the record's `body`, parsed when it is JSON. */
  payload?: (record: R) => P;
  /** Sent with the enqueue (a catalogue entry for the job type decides when the tenant has one). */
  targetClass?: "A" | "B" | "C" | "D";
  maxAttempts?: number;
  /** The lease each claim asks for (default 60); a longer handler calls `job.progress()`. */
  leaseSeconds?: number;
  workerId?: string;
  /** After an attempt that may have acted: look before acting (default: not done; class D parks). */
  reconcile?: (job: Job<P>) => Promise<Reconciled> | Reconciled;
  /** Right after the claim (a class-B target raises its fence here). */
  onClaim?: (job: Job<P>) => Promise<void> | void;
}

/** A record handler that gets the claimed job: `(record, job, context)`. */
export type FencedRecordHandler<R, P, C, T> = (record: R, job: Job<P>, context?: C) => Promise<T> | T;

/** The operation id in `messageId`, or a clear error. */
function messageId(record: unknown): string {
  const id = (record as { messageId?: unknown } | null)?.messageId;
  if (typeof id !== "string") throw new TypeError("the record has no messageId: name its operation id (the operationId option)");
  return id;
}

/** The record's `body`, parsed when it is JSON. */
function body(record: unknown): JsonValue {
  const raw = (record as { body?: unknown } | null)?.body;
  if (raw === undefined || raw === null) {
    throw new InvalidInput("the record has no body: name its payload (the payload option)", { code: "invalid_request" });
  }
  if (typeof raw !== "string") return raw as JsonValue;
  try {
    return JSON.parse(raw) as JsonValue;
  } catch {
    return raw;
  }
}

/** The handler's result as an outcome code, when it is one. */
function outcomeCode(result: unknown): string | undefined {
  // eslint-disable-next-line no-control-regex
  return typeof result === "string" && result.length >= 1 && result.length <= 256 && !/[\u0000-\u001f\u007f-\u009f]/.test(result)
    ? result
    : undefined;
}

/**
 * Fence a record handler: see the module's comment. The result keeps the record handler's call
 * shape, `(record, context?)`: give it to `processPartialResponse` (or call it yourself).
 */
export function fenced<R, P = JsonValue, C = unknown, T = unknown>(
  handler: FencedRecordHandler<R, P, C, T>,
  options: FenceOptions<R, P>,
): (record: R, context?: C) => Promise<T | undefined> {
  const workerId = options.workerId ?? `fenced-${crypto.randomUUID().slice(0, 12)}`;
  const pickId = options.operationId ?? messageId;
  const pickPayload = options.payload ?? (body as (record: R) => P);

  return async function fencedHandler(record: R, context?: C): Promise<T | undefined> {
    const operationId = pickId(record);
    const op = keyedHash(options.tenantId, operationId);
    const payload = pickPayload(record);
    let state: string;
    try {
      const enqueued = await options.client.enqueue({
        operation_id: operationId,
        job_type: options.jobType,
        payload: payload as Payload, // a null body is the service's 422 (InvalidInput)
        ...(options.targetClass ? { target_class: options.targetClass } : {}),
        ...(options.maxAttempts !== undefined ? { max_attempts: options.maxAttempts } : {}),
      });
      state = enqueued.operation.state;
    } catch (error) {
      if (error instanceof PayloadConflict) {
        throw new PoisonMessage("payload_conflict: the id is bound to another payload", op, { cause: error });
      }
      throw error;
    }
    if (ENDED_STATES.has(state)) return undefined; // a delivery of an operation that has ended: nothing runs again
    if (PARKED_STATES.has(state)) throw new Parked(`parked ${state}: an operator decides`, op);

    const results: T[] = [];
    const worker = new Worker({
      client: options.client,
      tenantId: options.tenantId,
      workerId,
      leaseSeconds: options.leaseSeconds ?? 60,
      handlers: {
        [options.jobType]: {
          run: async (job: Job<P>) => {
            results.push(await handler(record, job, context));
            return outcomeCode(results[0]);
          },
          ...(options.reconcile ? { reconcile: options.reconcile } : {}),
          ...(options.onClaim ? { onClaim: options.onClaim } : {}),
        },
      },
    });
    const claim = await worker.claimOperation(operationId);
    if (claim === null) throw new TryLater(`not claimable now (${state}): another delivery holds it, or not due`, op);
    const job = await worker.process(claim);
    const closed = job.closedState;
    if (closed !== undefined && ENDED_STATES.has(closed)) return results[0];
    if (closed !== undefined && PARKED_STATES.has(closed)) throw new Parked(`parked ${closed}: an operator decides`, op);
    if (job.lost) throw new NotFinished(`lost ownership: ${job.lostReason}`, op);
    throw new NotFinished("not finished: a retryable failure or an API that stayed busy", op);
  };
}
