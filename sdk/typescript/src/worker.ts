/**
 * The worker loop over the HTTP API, as the Python worker runtime does it
 * (`leasefence.worker`): claim, reconcile, run, finish; and stop acting the moment ownership is
 * lost.
 *
 * - Each claim request carries a claim token. After a lost answer the client resends it; when it
 *   gives up (`Unavailable`), the worker keeps the token and sends it with its next claim, so a
 *   claim that was made meanwhile is answered again (same fence, no attempt spent) instead of
 *   being left to lapse. After `CLAIM_TOKEN_PATIENCE_MS` the token is given up for a new one.
 * - Heartbeats follow progress: the lease is renewed only when the handler called
 *   `job.progress()` since the last renewal, so a stuck handler loses its lease instead of holding
 *   it forever (its fence still protects the targets). A renewal within the lease starts no try
 *   past its end; one after it ran out (a handler that stalled, then went on) is sent anyway, and
 *   its refusal aborts the job's signal.
 * - Lost ownership: when a heartbeat is refused (`stale_fence`, `not_found`) or a fenced write is
 *   (`FencedTable`), the job's `signal` aborts (its reason a `LostOwnership`), `job.guard()` throws,
 *   and the worker makes no further write for that claim, whatever the handler returns.
 * - A claim with `reconcile_required` runs the handler's `reconcile` first: done -> complete;
 *   not done -> run under the new fence; cannot tell -> `unknown`. A class-D claim that carries an
 *   intent is never "not done" (at most one call).
 * - Outcomes: a returned string completes (default "ok"); `Retry`, `Permanent`, `Ambiguous` and
 *   `Uninterpretable` fail, fail for good, park as unknown or quarantine; a missing payload
 *   quarantines; `Unavailable` spends no attempt (the lease lapses); anything else fails
 *   retryably (class D: unknown). A busy API during the closing write is retried within half the
 *   lease, then the claim is left to lapse.
 *
 * Handlers run on Node's event loop: a handler that blocks it (a long synchronous loop) blocks
 * its heartbeats too; await between steps.
 */
import type { Claim, LeaseFenceClient, Operation } from "./client.js";
import { NotFound, PayloadMissing, StaleFence, Unavailable } from "./errors.js";
import type { JsonValue } from "./json.js";
import { Ambiguous, LostOwnership, Permanent, Reconciled, Retry, Uninterpretable } from "./outcomes.js";

/** How long a worker keeps resending an unanswered claim token (API Gateway's 30 s, twice). */
export const CLAIM_TOKEN_PATIENCE_MS = 60_000;
/** The engine refuses longer reasons. */
const MAX_REASON = 1024;

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

const reasonOf = (text: string) => text.slice(0, MAX_REASON) || "no reason given";

/** The job a handler gets: `{payload, fence, signal}` and the rest of its claim. */
export class Job<P = JsonValue> {
  readonly signal: AbortSignal;
  /** Why ownership was lost (undefined while it holds). */
  lostReason: string | undefined;
  /** Set once the closing write started: a heartbeat refused after it is no loss. */
  closing = false;
  /** The operation's state once this claim's closing write went through (undefined: none did). */
  closedState: string | undefined;
  private readonly controller = new AbortController();
  private progressCount = 0;
  private pendingCheckpoint: { value: JsonValue } | undefined;

  constructor(
    readonly claim: Claim,
    readonly tenantId: string,
    readonly workerId: string,
    readonly payload: P,
  ) {
    this.signal = this.controller.signal;
  }

  get operationId(): string {
    return this.claim.operation_id;
  }

  get fence(): number {
    return this.claim.fence;
  }

  get lost(): boolean {
    return this.lostReason !== undefined;
  }

  /** Say the job is making progress (the next heartbeat renews the lease), with an optional checkpoint to store. */
  progress(checkpoint?: JsonValue): void {
    this.progressCount += 1;
    if (checkpoint !== undefined) this.pendingCheckpoint = { value: checkpoint };
  }

  /** Throws `LostOwnership` once ownership is lost: call it before each side effect. */
  guard(): void {
    if (this.lostReason !== undefined) throw new LostOwnership(this.lostReason);
  }

  /** Put the job in lost-ownership mode: its signal aborts, and no further write is made. */
  lose(reason: string): void {
    if (this.lostReason !== undefined) return;
    this.lostReason = reason;
    this.controller.abort(new LostOwnership(reason));
  }

  /** @internal the progress count and the checkpoint to send with the next renewal (taken). */
  takeProgress(): { count: number; checkpoint: { value: JsonValue } | undefined } {
    const checkpoint = this.pendingCheckpoint;
    this.pendingCheckpoint = undefined;
    return { count: this.progressCount, checkpoint };
  }

  /** @internal a checkpoint whose renewal was not answered: sent with the next one. */
  unsent(checkpoint: { value: JsonValue }): void {
    this.pendingCheckpoint ??= checkpoint;
  }
}

export type HandlerFn<P = JsonValue> = (job: Job<P>) => Promise<string | void> | string | void;

export interface Handler<P = JsonValue> {
  run: HandlerFn<P>;
  /** After an earlier attempt that may have acted (`reconcile_required`): look before acting. Default: not done. */
  reconcile?: (job: Job<P>) => Promise<Reconciled> | Reconciled;
  /** Right after the claim, before reconcile (a class-B target raises its fence here). */
  onClaim?: (job: Job<P>) => Promise<void> | void;
}

export interface WorkerOptions {
  client: LeaseFenceClient;
  /** The token's tenant: targets derive each operation's identity from (tenant, operation id). */
  tenantId: string;
  /** Per job type, a function or `{run, reconcile, onClaim}`. */
  handlers: Record<string, HandlerFn<any> | Handler<any>>;
  workerId?: string;
  /** The lease asked for (a job type's max_lease_seconds may grant less); default 60. */
  leaseSeconds?: number;
  /** How often a job renews, at most (default a third of the lease; never more than a third of the granted one). */
  heartbeatIntervalMs?: number;
  idleSleepMs?: number;
  /** How far an idle worker backs off between polls (each is a request); default 20 s. */
  idleMaxSleepMs?: number;
  /** Claim every job type and quarantine what has no handler (default: only the handlers' types). */
  claimAnyType?: boolean;
}

type Closing = { what: string; write: () => Promise<Operation> };

export class Worker {
  readonly workerId: string;
  readonly leaseSeconds: number;
  private readonly client: LeaseFenceClient;
  private readonly handlers: Map<string, Handler<any>>;
  private readonly stopping = new AbortController();
  private unanswered: { token: string; firstSent: number } | undefined;
  /** The job in flight, if any. */
  current: Job<any> | undefined;

  constructor(private readonly options: WorkerOptions) {
    this.client = options.client;
    this.workerId = options.workerId ?? `worker-${crypto.randomUUID().slice(0, 12)}`;
    this.leaseSeconds = options.leaseSeconds ?? 60;
    this.handlers = new Map(
      Object.entries(options.handlers).map(([type, h]) => [type, typeof h === "function" ? { run: h } : h]),
    );
  }

  /** What this worker claims: its handlers' job types (undefined: every type). */
  get jobTypes(): string[] | undefined {
    return this.options.claimAnyType ? undefined : [...this.handlers.keys()].sort();
  }

  /** Stop claiming; the job in flight finishes. */
  stop(): void {
    this.stopping.abort();
  }

  /** Claim and run jobs until `stop()` or `signal` aborts; an idle worker backs off. */
  async run(signal?: AbortSignal): Promise<void> {
    signal?.addEventListener("abort", () => this.stop(), { once: true });
    const idleSleep = this.options.idleSleepMs ?? 1_000;
    const cap = Math.max(idleSleep, this.options.idleMaxSleepMs ?? 20_000);
    let idle = 0;
    while (!this.stopping.signal.aborted) {
      let worked: boolean;
      try {
        worked = await this.runOnce();
      } catch (error) {
        if (!(error instanceof Unavailable)) throw error;
        idle = 0; // the claim's answer may be lost: ask again (same token) soon
        await sleep(idleSleep, this.stopping.signal);
        continue;
      }
      if (worked) {
        idle = 0;
        continue;
      }
      idle += 1;
      const ceiling = Math.min(cap, idleSleep * 2 ** Math.min(idle - 1, 30));
      await sleep(cap <= idleSleep ? idleSleep : ceiling / 2 + (Math.random() * ceiling) / 2, this.stopping.signal);
    }
  }

  /** Claim one job and see it through; false when nothing was claimable. */
  async runOnce(): Promise<boolean> {
    if (this.stopping.signal.aborted) return false;
    const claim = await this.claimNext();
    if (claim === null) return false;
    await this.process(claim);
    return true;
  }

  /** One claim, with the token of an unanswered claim if there is one. */
  async claimNext(): Promise<Claim | null> {
    const sent = performance.now();
    const pending = this.unanswered ?? { token: crypto.randomUUID().replaceAll("-", ""), firstSent: sent };
    this.unanswered = pending;
    const types = this.jobTypes;
    let claim: Claim | null;
    try {
      claim = await this.client.claim(
        { worker_id: this.workerId, lease_seconds: this.leaseSeconds, claim_token: pending.token, ...(types ? { job_types: types } : {}) },
        this.claimBounds(sent),
      );
    } catch (error) {
      if (!(error instanceof Unavailable) || performance.now() - pending.firstSent >= CLAIM_TOKEN_PATIENCE_MS) {
        this.unanswered = undefined;
      }
      throw error; // Unavailable: the token stays, the next claim resends it
    }
    this.unanswered = undefined;
    return claim;
  }

  /** Claim one named operation if it is claimable now, else null (a fenced record handler claims what it enqueued). */
  claimOperation(operationId: string): Promise<Claim | null> {
    const types = this.jobTypes;
    const body = { worker_id: this.workerId, lease_seconds: this.leaseSeconds, operation_id: operationId, ...(types ? { job_types: types } : {}) };
    return this.client.claim(body, this.claimBounds(performance.now()));
  }

  /** A claim's bounds: no try starts past the lease it asks for, each waits a third of it. */
  private claimBounds(sent: number) {
    return { deadline: sent + this.leaseSeconds * 1000, tryTimeoutMs: (this.leaseSeconds * 1000) / 3 };
  }

  /** See one claim through: its payload, the handler, the closing write. */
  async process(claim: Claim): Promise<Job<any>> {
    let payload: unknown = claim.payload;
    let missing: string | undefined;
    if (payload === null || payload === undefined) {
      try {
        payload = await this.client.payload(claim.operation_id);
      } catch (error) {
        if (!(error instanceof PayloadMissing)) throw error; // Unavailable: the lease lapses
        missing = error.message;
      }
    }
    const job = new Job<any>(claim, this.options.tenantId, this.workerId, payload);
    this.current = job;
    const finished = new AbortController();
    const renewer = this.renew(job, finished.signal);
    try {
      const closing = missing !== undefined ? this.quarantine(job, `payload missing: ${missing}`) : await this.decide(job);
      if (closing) await this.finish(job, closing);
    } finally {
      finished.abort();
      await renewer;
      this.current = undefined;
    }
    return job;
  }

  private quarantine(job: Job<any>, reason: string): Closing {
    return { what: "quarantine", write: () => this.client.quarantine(job.operationId, job.fence, reasonOf(reason)) };
  }

  private unknown(job: Job<any>, reason: string): Closing {
    return { what: "park as unknown", write: () => this.client.unknown(job.operationId, job.fence, reasonOf(reason)) };
  }

  private failing(job: Job<any>, retryable: boolean, reason: string, retryAfterMs?: number): Closing {
    const body = {
      fence: job.fence,
      retryable,
      reason: reasonOf(reason),
      ...(retryAfterMs === undefined ? {} : { retry_after_seconds: Math.ceil(retryAfterMs / 1000) }),
    };
    return { what: "fail", write: () => this.client.fail(job.operationId, body) };
  }

  private completing(job: Job<any>, outcome: string): Closing {
    return { what: "complete", write: () => this.client.complete(job.operationId, job.fence, outcome) };
  }

  /** Run the handler (after reconciling) and return the closing write it calls for, if any. */
  private async decide(job: Job<any>): Promise<Closing | undefined> {
    const claim = job.claim;
    const handler = this.handlers.get(claim.job_type);
    if (handler === undefined) return this.quarantine(job, `no handler for job type ${JSON.stringify(claim.job_type)}`);
    try {
      await handler.onClaim?.(job);
      if (claim.reconcile_required) {
        let found = handler.reconcile ? await handler.reconcile(job) : Reconciled.notDone();
        if (found.kind === "not_done" && claim.target_class === "D" && claim.intent) {
          // Class D has no lookup: with an intent on record a call may have been made. Never call twice.
          found = Reconciled.unknown(`intent recorded by fence ${claim.intent.fence}; no lookup exists`);
        }
        if (job.lost) return undefined;
        if (found.kind === "done") return this.completing(job, found.outcomeCode || "reconciled");
        if (found.kind === "unknown") return this.unknown(job, found.reason);
      }
      const outcome = await handler.run(job);
      return job.lost ? undefined : this.completing(job, outcome || "ok");
    } catch (error) {
      if (job.lost || error instanceof LostOwnership) return undefined;
      if (error instanceof PayloadMissing) return this.quarantine(job, `payload missing: ${error.message}`);
      if (error instanceof Retry) return this.failing(job, true, error.reason, error.retryAfterMs);
      if (error instanceof Permanent) return this.failing(job, false, error.message || "permanent failure");
      if (error instanceof Uninterpretable) return this.quarantine(job, error.message || "uninterpretable input");
      if (error instanceof Ambiguous) return this.unknown(job, error.message || "ambiguous outcome");
      if (error instanceof Unavailable) return undefined; // no attempt spent: the lease lapses, the next claim reconciles
      const name = (error as Error)?.name ?? "Error";
      // Class D: no lookup, no second call: anything unexpected after the intent is ambiguous.
      return claim.target_class === "D" ? this.unknown(job, `handler raised ${name}`) : this.failing(job, true, `handler raised ${name}`);
    }
  }

  /** The closing write: skipped once ownership is lost; a refusal means it was lost; a busy API is retried within half the lease. */
  private async finish(job: Job<any>, closing: Closing): Promise<void> {
    if (job.lost) return;
    job.closing = true;
    const until = performance.now() + job.claim.lease_ms / 2;
    for (let attempt = 0; ; attempt++) {
      try {
        job.closedState = (await closing.write()).state;
        return;
      } catch (error) {
        if (error instanceof StaleFence || error instanceof NotFound) {
          job.lose(`${closing.what} refused: ${error.code}`);
          return;
        }
        if (!(error instanceof Unavailable)) throw error;
        const delay = Math.random() * Math.min(2_000, 100 * 2 ** attempt);
        if (performance.now() + delay >= until) return; // left to lapse: the next claim reconciles
        await sleep(delay);
      }
    }
  }

  /** The renewal interval: the configured one, but at least three renewals per GRANTED lease. */
  renewalIntervalMs(claim: Claim): number {
    const configured = this.options.heartbeatIntervalMs ?? Math.max(Math.floor((this.leaseSeconds * 1000) / 3), 50);
    return Math.max(1, Math.min(configured, Math.max(Math.floor(claim.lease_ms / 3), 50)));
  }

  /** Renew the lease while the handler makes progress; a refused renewal loses the job. */
  private async renew(job: Job<any>, finished: AbortSignal): Promise<void> {
    const interval = this.renewalIntervalMs(job.claim);
    let renewedAt = 0;
    let leaseEnds = performance.now() + job.claim.lease_ms;
    for (;;) {
      await sleep(interval, finished);
      if (finished.aborted || job.lost || job.closing) return;
      const { count, checkpoint } = job.takeProgress();
      if (count === renewedAt && checkpoint === undefined) continue; // no progress: let the lease run out
      const sent = performance.now();
      // Within the lease, no try starts past its end. A job that made no progress until its lease
      // ran out asks once more anyway: the answer says whether it still holds (nobody claimed it
      // meanwhile) or lost it (its signal aborts).
      const bounds = sent < leaseEnds ? { deadline: leaseEnds, tryTimeoutMs: job.claim.lease_ms / 3 } : { tryTimeoutMs: job.claim.lease_ms / 3 };
      try {
        await this.client.heartbeat(
          job.operationId,
          { fence: job.fence, worker_id: this.workerId, ...(checkpoint ? { checkpoint: checkpoint.value } : {}) },
          bounds,
        );
        renewedAt = count;
        leaseEnds = sent + job.claim.lease_ms;
      } catch (error) {
        if (error instanceof StaleFence || error instanceof NotFound) {
          if (!job.closing) job.lose(`heartbeat refused: ${error.code}`);
          return;
        }
        if (error instanceof Unavailable) {
          if (checkpoint) job.unsent(checkpoint);
          continue;
        }
        job.lose(`heartbeat failed: ${(error as Error)?.name ?? "error"}`);
        return;
      }
    }
  }
}
