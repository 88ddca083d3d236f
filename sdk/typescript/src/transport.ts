/**
 * One call to the API with the retries that are safe for it (exponential backoff with full
 * jitter, `Retry-After` honoured), bounded by a try timeout and an optional deadline, as the
 * Python SDK does (`leasefence.client`):
 *
 * - a refused connection (the request never reached the server) is retried for any call;
 * - a lost answer (a dropped connection, a timeout) and 429/5xx are retried for calls that are
 *   safe to repeat (`idempotent`, the default; a claim is, by its claim token); 429 for every call;
 * - no try, and no backoff, starts past `deadline` (a `performance.now()` instant): an answer that
 *   comes after the lease it renews has lapsed is worth nothing.
 */
import { answerError, Unavailable } from "./errors.js";

const RETRY_STATUSES = new Set([429, 500, 502, 503, 504]);

/** Bounds of one call: each try waits at most `tryTimeoutMs`; nothing starts past `deadline`. */
export interface CallBounds {
  /** A `performance.now()` instant. */
  deadline?: number;
  tryTimeoutMs?: number;
}

export interface RetryPolicy {
  timeoutMs: number;
  retries: number;
  backoffMs: number;
  maxBackoffMs: number;
}

/** What an openapi-fetch call resolves to. */
export interface Answer<D> {
  data?: D;
  error?: unknown;
  response: Response;
}

export interface Sent<D> {
  status: number;
  data: D | undefined;
}

function connectionRefused(error: unknown): boolean {
  for (let cause: unknown = error; cause; cause = (cause as { cause?: unknown }).cause) {
    if ((cause as { code?: unknown }).code === "ECONNREFUSED") return true;
  }
  return false;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class Transport {
  constructor(readonly policy: RetryPolicy) {}

  private delayMs(attempt: number, headers: Headers | undefined): number {
    const retryAfter = Number(headers?.get("retry-after") ?? Number.NaN);
    if (Number.isFinite(retryAfter)) return Math.min(this.policy.maxBackoffMs, Math.max(0, retryAfter * 1000));
    return Math.random() * Math.min(this.policy.maxBackoffMs, this.policy.backoffMs * 2 ** attempt);
  }

  /** Sleeps before try `attempt + 1`; false (no sleep) when that would end past the deadline. */
  private async backoff(attempt: number, headers: Headers | undefined, deadline: number | undefined) {
    const delay = this.delayMs(attempt, headers);
    if (deadline !== undefined && performance.now() + delay >= deadline) return false;
    await sleep(delay);
    return true;
  }

  /**
   * `send` (an openapi-fetch call given the try's abort signal) until it is answered 2xx or no
   * retry is left: `{status, data}`, else the typed error of the last answer.
   */
  async call<D>(
    send: (signal: AbortSignal) => Promise<Answer<D>>,
    options: CallBounds & { idempotent?: boolean } = {},
  ): Promise<Sent<D>> {
    const { deadline, tryTimeoutMs, idempotent = true } = options;
    for (let attempt = 0; ; attempt++) {
      let timeout = Math.min(this.policy.timeoutMs, tryTimeoutMs ?? this.policy.timeoutMs);
      if (deadline !== undefined) {
        timeout = Math.min(timeout, deadline - performance.now());
        if (timeout <= 0) throw new Unavailable("no answer from the API within the time the lease leaves", { code: "unavailable" });
      }
      const left = attempt < this.policy.retries;
      let answer: Answer<D>;
      try {
        answer = await send(AbortSignal.timeout(Math.max(1, Math.floor(timeout))));
      } catch (error) {
        const notSent = connectionRefused(error);
        if ((notSent || idempotent) && left && (await this.backoff(attempt, undefined, deadline))) continue;
        const what = notSent ? "the API is unreachable (connection refused)" : `no answer from the API (${(error as Error)?.name ?? "error"})`;
        throw new Unavailable(what, { code: "unavailable", cause: error });
      }
      const { status, headers } = answer.response;
      if (RETRY_STATUSES.has(status) && left && (idempotent || status === 429) && (await this.backoff(attempt, headers, deadline))) {
        continue;
      }
      if (status >= 200 && status < 300) return { status, data: answer.data };
      throw answerError(status, answer.error, headers);
    }
  }
}
