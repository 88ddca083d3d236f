// Bulk triage: one decision with one note for operations selected by hand or by a filter (resolved
// to explicit ids first), sent as POST /v1/batch/triage: each operation is pinned to the state and
// fence shown, gets its own answer (shown in its row), and a class-D requeue with an intent on
// record is only sent when the operator named it in the confirmation.

import { api, uuid } from "./core.js";
import { add, confirmDialog, errorBox, fill, h, toast } from "./render.js";
import { cliLine, risk, shellQuote } from "./safety.js";

const MAX_ITEMS = 100; // leasefence.limits.MAX_TRIAGE_ITEMS: the route's cap per request
const ACTIONS = [
  ["failed_terminal", "Mark failed…", "resolve"],
  ["succeeded", "Mark succeeded…", "resolve"],
  ["requeue", "Requeue…", "requeue"],
];

// Sends `action` for `ops` (as the page read them), MAX_ITEMS a request; the per-item results.
export async function sendTriage(action, resolution, ops, note, acceptRisks) {
  const token = uuid();
  const results = [];
  for (let start = 0; start < ops.length; start += MAX_ITEMS) {
    const chunk = ops.slice(start, start + MAX_ITEMS);
    const ids = new Set(chunk.map((op) => op.operation_id));
    const body = {
      action, note, request_token: token,
      items: chunk.map((op) => ({ operation_id: op.operation_id, expected_state: op.state, expected_fence: op.fence })),
    };
    if (resolution) body.resolution = resolution;
    const named = acceptRisks.filter((id) => ids.has(id));
    if (named.length) body.accept_risks = named;
    results.push(...(await api("POST", "/v1/batch/triage", body)).data.results);
  }
  return results;
}

function bulkCommand(action, resolution, ops, note, acceptRisks) {
  return ["leasefence ops triage", action, ...ops.map((op) => shellQuote(op.operation_id)),
    resolution ? `--resolution ${resolution}` : null, `--note ${shellQuote(note || "<what you checked>")}`,
    ...acceptRisks.map((id) => `--accept-risk ${shellQuote(id)}`)].filter(Boolean).join(" ");
}

// The bulk bar. `selection()`: the selected operations as shown; `select(predicate)`: selects the
// shown operations it accepts; `showResults(results)`: each row's answer; `classes`: the advice.
export function bulkBar({ selection, select, showResults, classes }) {
  const note = h("textarea", { id: "bulk-note", rows: 2, maxlength: 1024, "data-test": "bulk-note",
    placeholder: "What you checked (one note, kept with each operation)" });
  const out = h("div", { "aria-live": "polite", "data-test": "bulk-out" });
  const count = h("strong", { "data-test": "bulk-count" }, "0");
  const jobType = h("input", { name: "bulk-job-type", size: 14, placeholder: "job type", "data-test": "bulk-filter-job-type" });
  const reason = h("input", { name: "bulk-reason", size: 18, placeholder: "reason contains", "data-test": "bulk-filter-reason" });
  const cls = h("select", { name: "bulk-class", "data-test": "bulk-filter-class" }, h("option", { value: "" }, "any class"),
    ["A", "B", "C", "D"].map((c) => h("option", { value: c }, `class ${c}`)));
  const command = cliLine(bulkCommand("resolve", "failed_terminal", [], "", []), "cli-bulk");
  const refresh = () => {
    const ops = selection();
    count.textContent = String(ops.length);
    command.querySelector("code").textContent = bulkCommand("resolve", "failed_terminal", ops, note.value.trim(), []);
  };
  note.addEventListener("input", refresh);
  const byFilter = h("button", { type: "button", "data-test": "bulk-select-matching", onclick: () => {
    const wanted = { job: jobType.value.trim(), cls: cls.value, text: reason.value.trim().toLowerCase() };
    select((op) => (!wanted.job || op.job_type === wanted.job) && (!wanted.cls || op.target_class === wanted.cls)
      && (!wanted.text || (op.reason || "").toLowerCase().includes(wanted.text)));
  } }, "Select matching");
  const buttons = ACTIONS.map(([value, label, action]) => h("button", { type: "button", "data-test": `bulk-${value}`, onclick: async () => {
    fill(out, );
    const ops = selection();
    if (!ops.length) { add(out, h("p", { class: "error", role: "alert" }, "Select operations first.")); return; }
    if (!note.value.trim()) { add(out, h("p", { class: "error", role: "alert" }, "A note is required: say what you checked.")); note.focus(); return; }
    const risky = action === "requeue" ? ops.filter((op) => risk(op, "requeue", classes[op.target_class])) : [];
    const include = h("input", { type: "checkbox", id: "bulk-accept-risks", "data-test": "bulk-accept-risks" });
    const ok = await confirmDialog(`${label.replace("…", "")} ${ops.length} operation${ops.length === 1 ? "" : "s"}?`, [
      h("p", {}, `One note for each, each pinned to the state and fence shown here: one that changed since is refused in its row.`),
      risky.length ? [
        h("p", { class: "risk", "data-test": "bulk-risky" }, h("strong", {}, `${risky.length} of them are class D with an intent on record: `),
          risky.map((op) => op.operation_id).join(", "), `. ${risk(risky[0], "requeue", classes[risky[0].target_class])}`),
        h("p", {}, include, h("label", { for: "bulk-accept-risks" }, " Requeue these too, despite the risk (otherwise they are left out and refused)")),
      ] : null,
    ], label.replace("…", ""));
    if (!ok) return;
    const accept = include.checked ? risky.map((op) => op.operation_id) : [];
    try {
      const results = await sendTriage(action, action === "resolve" ? value : null, ops, note.value.trim(), accept);
      const done = results.filter((r) => r.status >= 200 && r.status < 300).length;
      add(out, h("p", { class: done === results.length ? "ok" : "notice", "data-test": "bulk-summary" },
        `${done} of ${results.length} done${done === results.length ? "" : "; the others are refused in their rows"}.`));
      toast(`${done} of ${results.length} done`);
      showResults(results);
    } catch (error) {
      add(out, errorBox(error, "Bulk triage refused"));
    }
  } }, label));
  refresh();
  return {
    element: h("section", { class: "bulk", "data-test": "bulk" }, h("h2", {}, "Bulk: ", count, " selected"),
      h("div", { class: "filters" }, "Select by filter (resolved to the ids shown below first): ", jobType, " ", cls, " ", reason, " ", byFilter),
      h("label", { for: "bulk-note" }, "Note (required)"), note, h("div", { class: "actions" }, buttons), command, out),
    refresh,
  };
}
