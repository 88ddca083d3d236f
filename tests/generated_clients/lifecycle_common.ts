// What both TypeScript lifecycles share: the environment they read, and how they report what
// they saw (one JSON line, which the test reads) or fail (exit code 1).

declare const process: { env: Record<string, string | undefined>; exitCode?: number };

/** LEASEFENCE_URL, LEASEFENCE_TOKEN and OPERATION_ID, as the test sets them. */
export const env = {
  url: process.env.LEASEFENCE_URL ?? "",
  token: process.env.LEASEFENCE_TOKEN ?? "",
  operationId: process.env.OPERATION_ID ?? "",
};

export interface Seen {
  enqueued: number;
  fence: number;
  lease_expires_at: string;
  stale: [number, string | null];
  state: string;
}

/** What a lifecycle saw: the enqueue's status, the claim's fence, the renewed lease, the stale
 * complete's status and (for the service's own error body) its code, the final state. */
export function seen(
  enqueued: number, fence: number, leaseExpiresAt: string,
  stale: { status: number; error: unknown }, state: string,
): Seen {
  const error = stale.error;
  const code = typeof error === "object" && error !== null && "error" in error
    ? (error as { error: { code: string } }).error.code
    : null;
  return { enqueued, fence, lease_expires_at: leaseExpiresAt, stale: [stale.status, code], state };
}

/** Run the lifecycle: print what it saw, or the error (exit code 1). */
export function run(lifecycle: () => Promise<Seen>): void {
  lifecycle().then(
    (saw) => console.log(JSON.stringify(saw)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
