// What the test files share besides the stack: waiting, names of their own, and signals.
import { randomUUID } from "node:crypto";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A name no other test uses (tests share one stack: tenants and tables of their own). */
export const unique = (what: string) => `${what}-${randomUUID().slice(0, 8)}`;

/** A promise and the function that resolves it. */
export function signal() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
