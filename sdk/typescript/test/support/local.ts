/**
 * A real `leasefence local` on free ports (port 0), started by the tests and stopped after
 * them, with its own state folder and JWT secret; HS256 dev tokens minted here the way the local
 * stack's `mint` does (issuer leasefence-local, audience leasefence).
 *
 * The `leasefence` command: LEASEFENCE_BIN, else the repository's .venv/bin/leasefence.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { CreateTableCommand, DynamoDBClient } from "@aws-sdk/client-dynamodb";

import { LeaseFenceClient, type ClientOptions } from "../../src/index.js";

/** sdk/typescript, from build/sdk/typescript/test/support/ (the tests' build keeps the repository's layout). */
export const PACKAGE = resolve(fileURLToPath(import.meta.url), "../../../../../..");
export const REPOSITORY = resolve(PACKAGE, "../..");
export const PYTHON = process.env["LEASEFENCE_PYTHON"] ?? join(REPOSITORY, ".venv/bin/python");
const LEASEFENCE = process.env["LEASEFENCE_BIN"] ?? join(REPOSITORY, ".venv/bin/leasefence");
const ALL_SCOPES = ["produce", "work", "operate", "approve"];

const b64url = (data: string | Buffer) => Buffer.from(data).toString("base64url");

export interface Local {
  baseUrl: string;
  dynamodbEndpoint: string;
  token(tenant: string, scopes?: string[], subject?: string): string;
  client(tenant: string, options?: Partial<ClientOptions>): LeaseFenceClient;
  dynamodb(): DynamoDBClient;
  /** A target table keyed by `key` (a string; default `pk`) on the embedded endpoint. */
  createTable(name: string, key?: string): Promise<void>;
  /** What `SHARED_STACK` carries to the test files. */
  shared: string;
  /** Stops the stack this file started (nothing for a shared one). */
  stop(): Promise<void>;
}

/** The environment variable through which `run.ts` shares its stack with the test files. */
export const SHARED_STACK = "LEASEFENCE_TS_TEST_STACK";

/**
 * The stack the test files share (`run.ts` started it: `npm test`), or one of this file's own
 * (a test file run alone). Tests keep apart by tenant and table names of their own.
 */
export async function startLocal(timeoutMs = 90_000): Promise<Local> {
  const shared = process.env[SHARED_STACK];
  if (shared) {
    const { baseUrl, dynamodbEndpoint, secret } = JSON.parse(shared) as Shared;
    return localOf(baseUrl, dynamodbEndpoint, secret, async () => {});
  }
  const folder = await mkdtemp(join(tmpdir(), "leasefence-ts-"));
  const secret = randomBytes(24).toString("hex");
  const child: ChildProcess = spawn(
    LEASEFENCE,
    ["local", "--port", "0", "--dynamodb-port", "0", "--sweep-interval", "0", "--no-streams", "--state-dir", join(folder, "state")],
    { env: { ...process.env, LEASEFENCE_LOCAL_JWT_SECRET: secret }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  const started = performance.now();
  while (!output.includes("Press Ctrl-C to stop.")) {
    if (child.exitCode !== null || performance.now() - started > timeoutMs) {
      child.kill("SIGKILL");
      throw new Error(`leasefence local did not start:\n${output.slice(-3000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const baseUrl = output.match(/API base URL:\s+(\S+)/)![1]!;
  const dynamodbEndpoint = output.match(/DynamoDB endpoint:\s+(\S+)/)![1]!;
  return localOf(baseUrl, dynamodbEndpoint, secret, async () => {
    if (child.exitCode === null) {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(killer);
    }
    await rm(folder, { recursive: true, force: true });
  });
}

type Shared = { baseUrl: string; dynamodbEndpoint: string; secret: string };

function localOf(baseUrl: string, dynamodbEndpoint: string, secret: string, stop: () => Promise<void>): Local {

  function token(tenant: string, scopes = ALL_SCOPES, subject = `ts:${tenant}`): string {
    const now = Math.floor(Date.now() / 1000);
    const claims = {
      iss: "leasefence-local",
      aud: "leasefence",
      sub: subject,
      tenant_id: tenant,
      scope: scopes.map((s) => `leasefence/${s}`).join(" "),
      iat: now,
      exp: now + 3600,
      jti: randomBytes(8).toString("hex"),
    };
    const signing = `${b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }))}.${b64url(JSON.stringify(claims))}`;
    return `${signing}.${createHmac("sha256", secret).update(signing).digest("base64url")}`;
  }

  const dynamodb = () =>
    new DynamoDBClient({ endpoint: dynamodbEndpoint, region: "us-east-1", credentials: { accessKeyId: "testing", secretAccessKey: "testing" } });

  return {
    baseUrl,
    dynamodbEndpoint,
    token,
    client: (tenant, options = {}) => new LeaseFenceClient({ baseUrl, token: token(tenant), ...options }),
    dynamodb,
    async createTable(name, key = "pk") {
      await dynamodb().send(
        new CreateTableCommand({
          TableName: name,
          KeySchema: [{ AttributeName: key, KeyType: "HASH" }],
          AttributeDefinitions: [{ AttributeName: key, AttributeType: "S" }],
          BillingMode: "PAY_PER_REQUEST",
        }),
      );
    },
    shared: JSON.stringify({ baseUrl, dynamodbEndpoint, secret } satisfies Shared),
    stop,
  };
}
