import { createHash, createHmac, randomBytes, type Hash, type Hmac } from "node:crypto";

/** Feed each part to `hash` with its length in front (4 bytes, big-endian): `("a#", "b")` and `("a", "#b")` differ. */
export function lengthPrefixed<H extends Hash | Hmac>(hash: H, parts: readonly string[]): H {
  for (const part of parts) {
    const bytes = Buffer.from(part, "utf8");
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length).update(bytes);
  }
  return hash;
}

/**
 * SHA-256 (hex) over the length-prefixed pair, as the Python SDK derives it
 * (`leasefence.targets.identity`): `("a#", "b")` and `("a", "#b")` differ.
 */
export function identityDigest(tenantId: string, operationId: string): string {
  return lengthPrefixed(createHash("sha256"), [tenantId, operationId]).digest("hex");
}

let logKey: Buffer | undefined;

/**
 * A short, stable, non-reversible tag for ids in logs and errors (never the raw ids): the Python
 * side's `leasefence.privacy.keyed_hash`, the same tags under the same `LEASEFENCE_LOG_HASH_KEY`.
 * Without that key, a random one per process: the tags still hide the ids but do not correlate
 * across processes.
 */
export function keyedHash(...parts: string[]): string {
  const configured = process.env["LEASEFENCE_LOG_HASH_KEY"];
  logKey ??= configured ? Buffer.from(configured, "utf8") : randomBytes(32);
  return lengthPrefixed(createHmac("sha256", logKey), parts).digest("hex").slice(0, 16);
}
