// What both TypeScript lifecycles share: the environment they read, and how they report what
// they saw (one JSON line, which the test reads) or fail (exit code 1).

declare const process: { env: Record<string, string | undefined>; exitCode?: number };

/** LEASEFENCE_URL, LEASEFENCE_TOKEN and OPERATION_ID, as the test sets them. */
export const env = {
  url: process.env.LEASEFENCE_URL ?? "",
  token: process.env.LEASEFENCE_TOKEN ?? "",
  operationId: process.env.OPERATION_ID ?? "",
};

/** A stale complete's answer: its status and, for the service's own error body, its code. */
export function staleAnswer(status: number, error: unknown): [number, string | null] {
  const code = typeof error === "object" && error !== null && "error" in error
    ? (error as { error: { code: string } }).error.code
    : null;
  return [status, code];
}

export interface Seen {
  enqueued: number;
  fence: number;
  lease_expires_at: string;
  stale: [number, string | null];
  state: string;
}

/** Run the lifecycle: print what it saw, or the error (exit code 1). */
export function run(lifecycle: () => Promise<Seen>): void {
  lifecycle().then(
    (seen) => console.log(JSON.stringify(seen)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
