/**
 * The leasefence HTTP API, every public route, typed from openapi.json (src/openapi.ts, made by
 * openapi-typescript; openapi-fetch sends the requests). Bodies and answers are the document's
 * own shapes (snake_case, as on the wire).
 *
 * Errors are typed (`errors.ts`), whoever answered: the service or API Gateway. What is retried
 * after a lost answer is what is safe to repeat (`transport.ts`): reads, enqueue (a repeat is a
 * replay), heartbeats and fenced finishes (the same fence repeating the same transition gets its
 * answer again), claims by their claim token (a resend answers the claim the first request
 * made), resolve and job-type puts by a request token of their own. Deleting a job type is not
 * retried after a lost answer (a repeat is 404).
 */
import createClient, { type Client as FetchClient } from "openapi-fetch";
import type { OperationRequestBodyContent, Writable } from "openapi-typescript-helpers";

import type { components, operations, paths } from "./openapi.js";
import { type CallBounds, type Answer, Transport } from "./transport.js";
import { answerError, type LeaseFenceError } from "./errors.js";

type Schemas = components["schemas"];
/** A route's JSON request body, as openapi-fetch sends it. */
type BodyOf<P extends keyof paths, M extends "post" | "put"> = Writable<OperationRequestBodyContent<paths[P][M]>>;
export type EnqueueRequest = BodyOf<"/v1/operations", "post">;
export type EnqueueResult = Schemas["EnqueueOut"];
export type Operation = Schemas["OperationOut"];
export type OperationPage = Schemas["OperationPage"];
export type HistoryPage = Schemas["HistoryOut"];
export type HistoryEntry = Schemas["HistoryEntryOut"];
export type JobType = Schemas["JobTypeOut"];
export type JobTypeSpec = BodyOf<"/v1/job-types/{job_type}", "put">;
export type ClaimRequest = BodyOf<"/v1/claims", "post">;
export type HeartbeatRequest = BodyOf<"/v1/operations/{id}/heartbeat", "post">;
export type FailRequest = BodyOf<"/v1/operations/{id}/fail", "post">;
export type ClaimBatchItem = BodyOf<"/v1/batch/claim", "post">["items"][number];
export type EnqueueBatchItem = BodyOf<"/v1/batch/enqueue", "post">["items"][number];
export type HeartbeatBatchItem = BodyOf<"/v1/batch/heartbeat", "post">["items"][number];
export type FinishBatchItem = BodyOf<"/v1/batch/finish", "post">["items"][number];
/** A worker fleet's round (`workBatch`): closes, renewals and claims, up to 25 of each. */
export interface WorkRound {
  finish?: readonly FinishBatchItem[];
  heartbeat?: readonly HeartbeatBatchItem[];
  claim?: readonly ClaimBatchItem[];
}
/** Each list of a round answered: one result per item sent, in order. */
export interface WorkResults {
  finish: ItemResult<Operation>[];
  heartbeat: ItemResult<string>[];
  claim: ItemResult<Claim | null>[];
}
export type ListQuery = NonNullable<operations["listOperations"]["parameters"]["query"]>;
export type CountQuery = NonNullable<operations["countOperations"]["parameters"]["query"]>;
export type Resolution = Schemas["ResolveRequest"]["resolution"];

/** A claim as the API grants it, with the claim token that made it. */
export type Claim = Schemas["ClaimOut"] & { claim_token: string };

/** The most items one batch request takes; longer lists are sent in several requests. */
export const MAX_BATCH_ITEMS = 25;

export interface ClientOptions {
  /** The API's base URL (for the IAM API, with the scope's prefix). */
  baseUrl: string;
  /** A bearer token, or a function that gives the current one (called for every request). */
  token?: string | (() => string | Promise<string>);
  /** How long one try waits for its answer (default 10 s). */
  timeoutMs?: number;
  /** Retries after the first try, where retrying is safe (default 3). */
  retries?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  /** The fetch to send with (default the global one): a signer, a proxy, a test's fault. */
  fetch?: (request: Request) => Promise<Response>;
}

/** One item's answer in a batch: what its one-at-a-time call would have answered. */
export class ItemResult<T> {
  constructor(
    readonly operationId: string | null,
    readonly status: number,
    readonly value: T | undefined,
    readonly error: LeaseFenceError | undefined,
  ) {}

  get ok(): boolean {
    return this.error === undefined;
  }

  /** The value, or the item's error thrown (as the one-at-a-time call would). */
  result(): T {
    if (this.error !== undefined) throw this.error;
    return this.value as T;
  }
}

interface RawItem {
  operation_id: string | null;
  status: number;
  body: unknown;
}

function itemResult<T>(raw: RawItem, read: (body: never) => T): ItemResult<T> {
  if (raw.status >= 200 && raw.status < 300) return new ItemResult(raw.operation_id, raw.status, read(raw.body as never), undefined);
  return new ItemResult<T>(raw.operation_id, raw.status, undefined, answerError(raw.status, raw.body));
}

function newToken(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

function chunks<T>(items: readonly T[]): T[][] {
  const out: T[][] = [];
  for (let start = 0; start < items.length; start += MAX_BATCH_ITEMS) out.push(items.slice(start, start + MAX_BATCH_ITEMS));
  return out;
}

export class LeaseFenceClient {
  /** The typed openapi-fetch client underneath (for a route's raw answer). */
  readonly api: FetchClient<paths>;
  private readonly transport: Transport;

  constructor(options: ClientOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`baseUrl must be an http:// or https:// URL, not ${options.baseUrl}`);
    const fetcher = options.fetch ?? ((request: Request) => globalThis.fetch(request));
    this.api = createClient<paths>({ baseUrl: options.baseUrl.replace(/\/+$/, ""), fetch: fetcher });
    const token = options.token;
    if (token !== undefined) {
      this.api.use({
        async onRequest({ request }) {
          request.headers.set("Authorization", `Bearer ${typeof token === "function" ? await token() : token}`);
          return request;
        },
      });
    }
    this.transport = new Transport({
      timeoutMs: options.timeoutMs ?? 10_000,
      retries: Math.max(0, options.retries ?? 3),
      backoffMs: options.backoffMs ?? 200,
      maxBackoffMs: options.maxBackoffMs ?? 5_000,
    });
  }

  private async data<D>(send: (signal: AbortSignal) => Promise<Answer<D>>, options?: CallBounds & { idempotent?: boolean }): Promise<D> {
    return (await this.transport.call(send, options)).data as D;
  }

  private static id(id: string) {
    return { params: { path: { id } } };
  }

  // ------------------------------------------------------------------ producing and reading

  health() {
    return this.data((signal) => this.api.GET("/v1/health", { signal }));
  }

  /** Record an operation; `created` is false for a replay (a repeat after a lost answer too). */
  enqueue(body: EnqueueRequest): Promise<EnqueueResult> {
    return this.data((signal) => this.api.POST("/v1/operations", { body, signal }));
  }

  get(operationId: string): Promise<Operation> {
    return this.data((signal) => this.api.GET("/v1/operations/{id}", { ...LeaseFenceClient.id(operationId), signal }));
  }

  list(query: ListQuery = {}): Promise<OperationPage> {
    return this.data((signal) => this.api.GET("/v1/operations", { params: { query }, signal }));
  }

  /** Every operation the query matches, page by page. */
  async *iterOperations(query: Omit<ListQuery, "cursor"> = {}): AsyncGenerator<Operation> {
    let cursor: string | undefined;
    do {
      const page = await this.list({ ...query, ...(cursor ? { cursor } : {}) });
      yield* page.operations;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** The inline payload as enqueued (`PayloadMissing` once purged or erased, never null). */
  payload(operationId: string): Promise<unknown> {
    return this.data((signal) => this.api.GET("/v1/operations/{id}/payload", { ...LeaseFenceClient.id(operationId), signal }));
  }

  history(operationId: string, query: { limit?: number; cursor?: string } = {}): Promise<HistoryPage> {
    return this.data((signal) =>
      this.api.GET("/v1/operations/{id}/history", { params: { path: { id: operationId }, query }, signal }),
    );
  }

  async *iterHistory(operationId: string, limit = 50): AsyncGenerator<HistoryEntry> {
    let cursor: string | undefined;
    do {
      const page = await this.history(operationId, { limit, ...(cursor ? { cursor } : {}) });
      yield* page.entries;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  stateCounts(query: CountQuery = {}) {
    return this.data((signal) => this.api.GET("/v1/state-counts", { params: { query }, signal }));
  }

  targetClasses() {
    return this.data((signal) => this.api.GET("/v1/target-classes", { signal }));
  }

  controls() {
    return this.data((signal) => this.api.GET("/v1/controls", { signal }));
  }

  // ------------------------------------------------------------------ working

  /**
   * A claim, or null when nothing is claimable. The request carries a claim token (the body's
   * `claim_token`, else a new one) and is resent with it after a lost answer: if the first
   * request claimed, the resend answers that same claim (same fence, no attempt spent). To resend
   * yourself after `Unavailable`, call again with the same body and `claim_token`.
   */
  async claim(body: ClaimRequest, bounds: CallBounds = {}): Promise<Claim | null> {
    const claimToken = body.claim_token ?? newToken();
    const sent = await this.transport.call(
      (signal) => this.api.POST("/v1/claims", { body: { ...body, claim_token: claimToken }, signal }),
      bounds,
    );
    if (sent.status === 204 || !sent.data) return null;
    return { ...sent.data.claim, claim_token: claimToken };
  }

  /** Extend the lease; the new expiry. `StaleFence`: a newer claim holds it, stop working. */
  async heartbeat(operationId: string, body: HeartbeatRequest, bounds: CallBounds = {}): Promise<string> {
    const lease = await this.data(
      (signal) => this.api.POST("/v1/operations/{id}/heartbeat", { ...LeaseFenceClient.id(operationId), body, signal }),
      bounds,
    );
    return lease.lease_expires_at;
  }

  async complete(operationId: string, fence: number, outcomeCode: string): Promise<Operation> {
    const body = { fence, outcome_code: outcomeCode };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/complete", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  async fail(operationId: string, body: FailRequest): Promise<Operation> {
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/fail", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  /** Park as `unknown`: the side effect may or may not have happened (an operator decides). */
  async unknown(operationId: string, fence: number, reason: string): Promise<Operation> {
    const body = { fence, reason };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/unknown", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  async quarantine(operationId: string, fence: number, reason: string): Promise<Operation> {
    const body = { fence, reason };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/quarantine", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  // ------------------------------------------------------------------ operating and approving

  async erase(operationId: string): Promise<Operation> {
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/erase", { ...LeaseFenceClient.id(operationId), body: {}, signal }))).operation;
  }

  /** Approve what you saw (`payloadHash`); another hash is `PayloadMismatch` and changes nothing. */
  async approve(operationId: string, payloadHash: string): Promise<Operation> {
    const body = { payload_hash: payloadHash };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/approve", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  async reject(operationId: string, note = ""): Promise<Operation> {
    const body = { note };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/reject", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  async cancel(operationId: string): Promise<Operation> {
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/cancel", { ...LeaseFenceClient.id(operationId), body: {}, signal }))).operation;
  }

  /** An operator's decision on an unknown or quarantined operation (a request token makes a resend a replay). */
  async resolve(operationId: string, resolution: Resolution, note = ""): Promise<Operation> {
    const body = { resolution, note, request_token: newToken() };
    return (await this.data((signal) => this.api.POST("/v1/operations/{id}/resolve", { ...LeaseFenceClient.id(operationId), body, signal }))).operation;
  }

  async listJobTypes(): Promise<JobType[]> {
    return (await this.data((signal) => this.api.GET("/v1/job-types", { signal }))).job_types;
  }

  getJobType(jobType: string): Promise<JobType> {
    return this.data((signal) => this.api.GET("/v1/job-types/{job_type}", { params: { path: { job_type: jobType } }, signal }));
  }

  /** Declare a job type: `{job_type, changed}` (`changed`: this call changed the entry, even if a retry answered). */
  putJobType(jobType: string, spec: Omit<JobTypeSpec, "request_token">) {
    const body = { ...spec, request_token: newToken() };
    return this.data((signal) => this.api.PUT("/v1/job-types/{job_type}", { params: { path: { job_type: jobType } }, body, signal }));
  }

  deleteJobType(jobType: string, expectedVersion?: number): Promise<JobType> {
    const query = expectedVersion === undefined ? {} : { expected_version: expectedVersion };
    return this.data(
      (signal) => this.api.DELETE("/v1/job-types/{job_type}", { params: { path: { job_type: jobType }, query }, signal }),
      { idempotent: false },
    );
  }

  settings() {
    return this.data((signal) => this.api.GET("/v1/settings", { signal }));
  }

  setStrictJobTypes(strict: boolean) {
    return this.data((signal) => this.api.PUT("/v1/settings", { body: { strict_job_types: strict }, signal }));
  }

  // ------------------------------------------------------------------ batches (25 items a request)

  /** Several claims, each with its own claim token (a fresh one where an item has none): a resend answers each claim made. */
  async claimBatch(items: readonly ClaimBatchItem[], bounds: CallBounds = {}): Promise<ItemResult<Claim | null>[]> {
    const sent = items.map((item) => ({ ...item, claim_token: item.claim_token ?? newToken() }));
    const results: ItemResult<Claim | null>[] = [];
    for (const chunk of chunks(sent)) {
      const data = await this.data((signal) => this.api.POST("/v1/batch/claim", { body: { items: chunk }, signal }), bounds);
      data.results.forEach((raw, i) => {
        const token = chunk[i]!.claim_token;
        results.push(itemResult(raw, (body: { claim: Schemas["ClaimOut"] } | null) => (body ? { ...body.claim, claim_token: token } : null)));
      });
    }
    return results;
  }

  /** Several enqueues; a refusal is that item's error, the other items are recorded. */
  async enqueueBatch(items: readonly EnqueueBatchItem[]): Promise<ItemResult<EnqueueResult>[]> {
    const results: ItemResult<EnqueueResult>[] = [];
    for (const chunk of chunks(items)) {
      const data = await this.data((signal) => this.api.POST("/v1/batch/enqueue", { body: { items: chunk }, signal }));
      for (const raw of data.results) results.push(itemResult(raw, (body: EnqueueResult) => body));
    }
    return results;
  }

  /** Several renewals: each value is that lease's new expiry; a `StaleFence` error: stop that job. */
  async heartbeatBatch(items: readonly HeartbeatBatchItem[], bounds: CallBounds = {}): Promise<ItemResult<string>[]> {
    const results: ItemResult<string>[] = [];
    for (const chunk of chunks(items)) {
      const data = await this.data((signal) => this.api.POST("/v1/batch/heartbeat", { body: { items: chunk }, signal }), bounds);
      for (const raw of data.results) results.push(itemResult(raw, (body: Schemas["LeaseOut"]) => body.lease_expires_at));
    }
    return results;
  }

  /**
   * A worker fleet's round trip in one request (`POST /v1/batch/work`, up to 25 of each): the
   * closes, then the renewals, then the claims (each with its own claim token: a fresh one where an
   * item has none), so a worker closes its job and claims its next one at once. Every item is safe
   * to repeat: a lost answer is resent whole, and each claim made is answered again. A claim item
   * may name the operation a finish item of the same round closes (`after`): its marker is then
   * written with that operation's payload expiry, one write unit less; resend its token with the
   * same `after`.
   */
  async workBatch(round: WorkRound, bounds: CallBounds = {}): Promise<WorkResults> {
    const claim = (round.claim ?? []).map((item) => ({ ...item, claim_token: item.claim_token ?? newToken() }));
    const body = { finish: [...(round.finish ?? [])], heartbeat: [...(round.heartbeat ?? [])], claim };
    const data = await this.data((signal) => this.api.POST("/v1/batch/work", { body, signal }), bounds);
    return {
      finish: data.finish.map((raw) => itemResult(raw, (answer: { operation: Operation }) => answer.operation)),
      heartbeat: data.heartbeat.map((raw) => itemResult(raw, (answer: Schemas["LeaseOut"]) => answer.lease_expires_at)),
      claim: data.claim.map((raw, i) =>
        itemResult(raw, (answer: { claim: Schemas["ClaimOut"] } | null) =>
          answer ? { ...answer.claim, claim_token: claim[i]!.claim_token } : null,
        ),
      ),
    };
  }

  /** Several fenced finishes (complete, fail, unknown, quarantine), made in order. */
  async finishBatch(items: readonly FinishBatchItem[]): Promise<ItemResult<Operation>[]> {
    const results: ItemResult<Operation>[] = [];
    for (const chunk of chunks(items)) {
      const data = await this.data((signal) => this.api.POST("/v1/batch/finish", { body: { items: chunk }, signal }));
      for (const raw of data.results) results.push(itemResult(raw, (body: { operation: Operation }) => body.operation));
    }
    return results;
  }
}
