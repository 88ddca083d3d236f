// What needs no server: the typed errors of service and gateway answers, the class-B entry
// numbers, class-C keys, and the generated types being what openapi.json generates.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";

import {
  Ambiguous,
  AlreadyAttempted,
  Forbidden,
  InvalidInput,
  InvalidTransition,
  LeaseFenceError,
  PayloadTooLarge,
  StaleFence,
  Unauthorized,
  Unavailable,
  answerError,
  callIdempotent,
  entryValue,
  idempotencyKey,
  identityDigest,
  parseEntry,
  reconcileIdempotent,
  stateOf,
} from "../src/index.js";
import { PACKAGE } from "./support/local.js";

test("the service's error bodies become their classes, by code", () => {
  const stale = answerError(409, JSON.stringify({ error: { code: "stale_fence", message: "fence 1 < 2" } }));
  assert.ok(stale instanceof StaleFence);
  assert.equal(stale.message, "fence 1 < 2");
  assert.equal(stale.answeredBy, "service");
  assert.ok(answerError(409, { error: { code: "already_attempted", message: "m" } }) instanceof InvalidTransition);
  assert.ok(answerError(409, { error: { code: "already_attempted", message: "m" } }) instanceof AlreadyAttempted);
  const invalid = answerError(422, { error: { code: "invalid_request", message: "bad", details: [{ field: "fence", type: "int", message: "no" }] } });
  assert.ok(invalid instanceof InvalidInput);
  assert.equal(invalid.details?.[0]?.field, "fence");
  const unknown = answerError(409, { error: { code: "a_code_added_later", message: "new" } });
  assert.equal(unknown.constructor, LeaseFenceError);
  assert.equal(unknown.code, "a_code_added_later");
  assert.equal(unknown.retryable, false);
});

test("API Gateway's own answers become the same classes, by status", () => {
  const headers = new Headers({ "WWW-Authenticate": 'Bearer error="invalid_token", error_description="the token has expired"' });
  const expired = answerError(401, '{"message":"Unauthorized"}', headers);
  assert.ok(expired instanceof Unauthorized);
  assert.equal(expired.answeredBy, "gateway");
  assert.match(expired.message, /HTTP 401 from the gateway: Unauthorized \(the token has expired\)/);
  assert.ok(answerError(403, { message: "Forbidden" }) instanceof Forbidden);
  assert.ok(answerError(413, { message: "Request Entity Too Large" }) instanceof PayloadTooLarge);
  const throttled = answerError(429, { message: "Too Many Requests" });
  assert.ok(throttled instanceof Unavailable);
  assert.equal(throttled.retryable, true);
  const timedOut = answerError(504, "<html>Endpoint request timed out</html>");
  assert.ok(timedOut instanceof Unavailable);
  assert.equal(timedOut.code, "unavailable");
  assert.ok(answerError(400, "").message.includes("no body"));
});

test("class-B entries: fence and 13-digit claim time in one exact number, read back however DynamoDB writes it", () => {
  assert.equal(entryValue(3, 1765000000123), "3.1765000000123");
  assert.deepEqual(parseEntry("3.1765000000123"), { fence: 3, time: 1765000000123 });
  assert.deepEqual(parseEntry("12.17650000001"), { fence: 12, time: 1765000000100 }); // trailing zeros trimmed
  assert.deepEqual(parseEntry("7"), { fence: 7, time: null }); // an earlier version's plain fence
  assert.deepEqual(parseEntry("3.1765000000123E1"), { fence: 31, time: 7650000001230 });
  assert.throws(() => entryValue(1, 0), RangeError);
  const state = stateOf({ lf_fence_x: { N: "2.1765000000000" }, lf_fence_y: { S: "not ours" }, lf_horizon: { N: "1764000000000" } });
  assert.deepEqual([...state.entries.keys()], ["lf_fence_x"]);
  assert.equal(state.horizon, 1764000000000);
});

test("identities are length-prefixed: separators inside ids do not collide", () => {
  assert.notEqual(identityDigest("a#", "b"), identityDigest("a", "#b"));
  assert.match(idempotencyKey("t", "op"), /^lf-[0-9a-f]{48}$/);
  assert.notEqual(idempotencyKey("t1", "op"), idempotencyKey("t2", "op"));
});

test("class C: one key per operation; a lost answer is Ambiguous, and the lookup then finds the effect", async () => {
  const results = new Map<string, { id: string }>();
  let loseNext = true;
  const provider = {
    async execute(key: string, request: { to: string }) {
      if (!results.has(key)) results.set(key, { id: `effect-${results.size + 1}:${request.to}` });
      if (loseNext) {
        loseNext = false;
        throw Object.assign(new Error("no answer"), { name: "TimeoutError" });
      }
      return results.get(key)!;
    },
    async lookup(key: string) {
      return results.get(key);
    },
  };
  const job = { tenantId: "t", operationId: "receipt-1", guard() {} };
  assert.equal((await reconcileIdempotent(job, provider)).kind, "not_done");
  await assert.rejects(callIdempotent(job, provider, { to: "a@example.com" }), Ambiguous);
  assert.deepEqual(await reconcileIdempotent(job, provider, (r) => `sent:${r.id}`), { kind: "done", outcomeCode: "sent:effect-1:a@example.com" });
  assert.deepEqual(await callIdempotent(job, provider, { to: "a@example.com" }), { id: "effect-1:a@example.com" });
  assert.deepEqual([...results.keys()], [idempotencyKey("t", "receipt-1")]);
});

test("src/openapi.ts is what openapi.json generates (npm run generate)", async () => {
  await promisify(execFile)(process.execPath, ["scripts/generate-types.mjs", "--check"], { cwd: PACKAGE });
});
