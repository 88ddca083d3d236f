// Compile-time checks (tsc --strict runs before the tests): the client's bodies are the
// document's. A line marked @ts-expect-error fails the build if it starts to type-check.
import assert from "node:assert/strict";
import { test } from "node:test";

import type { EnqueueRequest, FinishBatchItem, Job } from "../src/index.js";

test("request bodies are typed as the document means them", () => {
  const inline: EnqueueRequest = { operation_id: "op-1", job_type: "charge", payload: { amount: 1 } };
  const byReference: EnqueueRequest = {
    operation_id: "op-2",
    job_type: "charge",
    payload_ref: "s3://bucket/key",
    payload_hash: `sha256:${"0".repeat(64)}`,
  };
  // @ts-expect-error an enqueue body without operation_id
  const noId: EnqueueRequest = { job_type: "charge", payload: { amount: 1 } };
  // @ts-expect-error payload: null (the server answers 422)
  const nullPayload: EnqueueRequest = { operation_id: "op-3", job_type: "charge", payload: null };
  // @ts-expect-error a finish item needs its action's fields (complete: outcome_code)
  const finish: FinishBatchItem = { action: "complete", operation_id: "op-1", fence: 1 };
  const handler = (job: Job<{ amount: number }>) => job.payload.amount + job.fence;
  assert.equal([inline, byReference, noId, nullPayload, finish, handler].length, 6);
});
