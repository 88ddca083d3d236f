/**
 * What a handler may throw to say how its job ends (the Python worker's `Retry`, `Permanent`,
 * `Ambiguous`, `Uninterpretable`), what reconcile answers, and `LostOwnership`: the lease is
 * lost, make no further write.
 */

/** The lease is lost (a heartbeat or a fenced write was refused): stop, write nothing more. */
export class LostOwnership extends Error {
  override name = "LostOwnership";
}

/** Try again later (`fail` with `retryable: true`; after the last attempt it ends failed). */
export class Retry extends Error {
  override name = "Retry";
  constructor(
    readonly reason: string,
    readonly retryAfterMs?: number,
  ) {
    super(reason);
  }
}

/** It will never succeed: `fail` with `retryable: false`. */
export class Permanent extends Error {
  override name = "Permanent";
}

/** The side effect may or may not have happened: park as `unknown` for an operator. */
export class Ambiguous extends Error {
  override name = "Ambiguous";
}

/** The input cannot be understood: quarantine for an operator. */
export class Uninterpretable extends Error {
  override name = "Uninterpretable";
}

/** What a reconcile found out about an earlier attempt. */
export type Reconciled =
  | { kind: "done"; outcomeCode: string }
  | { kind: "not_done" }
  | { kind: "unknown"; reason: string };

export const Reconciled = {
  /** The side effect happened: complete with this outcome. */
  done: (outcomeCode: string): Reconciled => ({ kind: "done", outcomeCode }),
  /** It did not: run the handler under the new fence. */
  notDone: (): Reconciled => ({ kind: "not_done" }),
  /** Cannot tell: park as `unknown`. */
  unknown: (reason = "cannot tell whether the side effect happened"): Reconciled => ({ kind: "unknown", reason }),
};
