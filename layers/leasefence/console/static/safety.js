// Safe by default: what the API would refuse for an operation's state (so the page never offers
// it), the risk of a resolution for the operation's class and facts (from GET /v1/target-classes:
// never the primary choice, confirmed by name), and the CLI command of every action.

import { PARKED } from "./core.js";
import { h, toast } from "./render.js";

// Why the API would refuse `act` for `op` as the page last read it; null when it would not (as
// far as the page can tell: a change meanwhile is still refused by the API, and shown).
export function refusal(op, act) {
  switch (act) {
    case "cancel":
      if (op.state !== "queued" && op.state !== "awaiting_approval") {
        return `it is ${op.state}: only a queued operation no worker claimed, or one awaiting approval, can be cancelled`;
      }
      if (op.attempts > 0 || op.fence > 0) return "a worker claimed it before: its next claim must reconcile, so it cannot be cancelled";
      return null;
    case "erase":
      return op.state === "claimed" ? "it is claimed: erase it once it left claimed" : null;
    case "resolve":
      return PARKED.has(op.state) ? null : `it is ${op.state}: only unknown or quarantined operations are resolved`;
    case "approve":
    case "reject":
      return op.state === "awaiting_approval" ? null : `it is ${op.state}: nothing to decide`;
    default:
      return null;
  }
}

// The risk of `resolution` for `op` (its class's advice and its facts), in words; null if none.
export function risk(op, resolution, classAdvice) {
  const found = classAdvice && classAdvice.risks && classAdvice.risks[resolution];
  if (!found) return null;
  if (found.when === "intent") return op.intent ? found.risk : null;
  return null;
}

// The resolution the panel makes primary: requeue, unless it is dangerous for this operation
// (then none: the operator verifies and chooses).
export function primaryResolution(op, classAdvice) {
  return risk(op, "requeue", classAdvice) ? null : "requeue";
}

export function shellQuote(value) {
  const text = String(value);
  return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
}

// The `leasefence` command that does `act` to `op` (extra: resolution, note, payload hash).
export function cliCommand(act, op, extra = {}) {
  const id = shellQuote(op.operation_id);
  const note = shellQuote(extra.note || "<what you checked>");
  switch (act) {
    case "resolve": return `leasefence ops resolve ${id} --resolution ${extra.resolution} --note ${note}`;
    case "approve": return `leasefence ops approve ${id} --payload-hash ${op.payload_hash}`;
    case "reject": return `leasefence ops reject ${id} --note ${note}`;
    default: return `leasefence ops ${act} ${id}`;
  }
}

// A command line and a button that copies it.
export function cliLine(command, test = "cli") {
  const code = h("code", { "data-test": test }, command);
  const copy = h("button", { type: "button", class: "link copy", "aria-label": "Copy the command", onclick: () => {
    const text = code.textContent;
    const done = () => toast("Command copied");
    if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(text).then(done, () => select(code));
    else select(code);
  } }, "copy");
  return h("div", { class: "cli" }, h("span", { class: "muted" }, "$ "), code, " ", copy);
}

function select(el) {
  const range = document.createRange();
  range.selectNodeContents(el);
  const selection = getSelection();
  selection.removeAllRanges();
  selection.addRange(range);
  toast("Selected: copy it with Ctrl+C");
}
