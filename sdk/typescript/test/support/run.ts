// `npm test`: one `leasefence local` for every test file (started here, shared through
// SHARED_STACK, stopped after them), instead of one per file: the files run in parallel, each on
// tenants and tables of its own. Arguments: the test files.
import { spawn } from "node:child_process";

import { SHARED_STACK, startLocal } from "./local.js";

const local = await startLocal();
let code: number;
try {
  const child = spawn(process.execPath, ["--conditions=leasefence-sdk-tests", "--test", "--test-reporter", "spec", ...process.argv.slice(2)], {
    stdio: "inherit",
    env: { ...process.env, [SHARED_STACK]: local.shared },
  });
  code = await new Promise<number>((done) => child.once("exit", (status) => done(status ?? 1)));
} finally {
  await local.stop();
}
process.exitCode = code;
