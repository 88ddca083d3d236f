import { createHash } from "node:crypto";

/**
 * SHA-256 (hex) over the length-prefixed pair, as the Python SDK derives it
 * (`leasefence.targets.identity`): `("a#", "b")` and `("a", "#b")` differ.
 */
export function identityDigest(tenantId: string, operationId: string): string {
  const hash = createHash("sha256");
  for (const part of [tenantId, operationId]) {
    const bytes = Buffer.from(part, "utf8");
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length).update(bytes);
  }
  return hash.digest("hex");
}
