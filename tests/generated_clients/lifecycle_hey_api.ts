// A lifecycle (enqueue, claim, heartbeat, complete) through the client @hey-api/openapi-ts
// generates from openapi.json (into ./hey). tsc --strict checks it, the @ts-expect-error lines
// included: each must be an error, or the build fails. LEASEFENCE_URL, LEASEFENCE_TOKEN,
// OPERATION_ID: env (lifecycle_common.ts).
import { client } from "./hey/client.gen";
import { env, run, seen } from "./lifecycle_common";
import { claimOperation, completeOperation, enqueueOperation, heartbeat } from "./hey/sdk.gen";
import type { EnqueueRequest, ErrorDetail } from "./hey/types.gen";

// @ts-expect-error operation_id is required
export const noOperationId: EnqueueRequest = { job_type: "t", payload: {} };
// @ts-expect-error payload is never null
export const nullPayload: EnqueueRequest = { operation_id: "o", job_type: "t", payload: null };
// @ts-expect-error a payload, or payload_ref with payload_hash
export const noPayload: EnqueueRequest = { operation_id: "o", job_type: "t" };
// An error code the document does not list is still a code (the list is open).
export const newerCode: ErrorDetail["code"] = "a_code_added_later";

run(async () => {
  client.setConfig({ baseUrl: env.url, auth: () => env.token });
  const operationId = env.operationId;
  const enqueued = await enqueueOperation({
    body: { operation_id: operationId, job_type: "generated", payload: [1, "two", { three: 3 }] },
  });
  if (enqueued.response.status !== 201 || !enqueued.data) throw new Error(`enqueue: ${enqueued.response.status}`);
  const claimed = await claimOperation({
    body: { worker_id: "hey-worker", operation_id: operationId, lease_seconds: 30 },
  });
  const claim = claimed.data?.claim;
  if (claimed.response.status !== 200 || !claim) throw new Error(`claim: ${claimed.response.status}`);
  const path = { id: operationId };
  const beat = await heartbeat({ path, body: { fence: claim.fence, worker_id: "hey-worker" } });
  if (!beat.data) throw new Error(`heartbeat: ${beat.response.status}`);
  const stale = await completeOperation({ path, body: { fence: claim.fence + 1, outcome_code: "done" } });
  const done = await completeOperation({ path, body: { fence: claim.fence, outcome_code: "done" } });
  if (!done.data) throw new Error(`complete: ${done.response.status}`);
  return seen(
    enqueued.response.status, claim.fence, beat.data.lease_expires_at,
    { status: stale.response.status, error: stale.error }, done.data.operation.state,
  );
});
