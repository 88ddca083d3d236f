// Triage: the parked operations (unknown, quarantined), oldest first, each with its resolve panel
// and the job type's owner and runbook; select several (by hand or by filter) for one bulk decision.

import { SCOPES, advice, api, has, jobTypes } from "./core.js";
import { bulkBar } from "./bulk.js";
import { liveStamp, liveToggle, poll } from "./live.js";
import { add, age, badge, errorBox, fill, fmtTime, h, needs, opLink, ownerRunbook } from "./render.js";
import { resolveForm } from "./resolve.js";

const QUEUES = ["unknown", "quarantined"];

function resultText(result) {
  if (result.status >= 200 && result.status < 300) return h("span", { class: "ok" }, `✓ ${result.body.operation.state}`);
  const err = (result.body && result.body.error) || {};
  return h("span", { class: "error-text" }, `${result.status} ${err.code || ""}: ${err.message || ""}`);
}

export async function viewTriage(main) {
  fill(main, h("h1", {}, "Triage"),
    h("p", { class: "muted" }, "Operations nothing automatic will move: an operator decides. Oldest first."));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "Triage")); return; }
  const classes = await advice().catch(() => ({}));
  const shown = new Map(); // operation id -> the operation as shown
  const selected = new Set();
  const results = new Map(); // operation id -> its bulk answer
  const boxes = new Map(); // operation id -> its checkbox
  const resultCells = new Map();
  const bulk = bulkBar({
    classes,
    selection: () => [...selected].filter((id) => shown.has(id)).map((id) => shown.get(id)),
    select: (accepts) => {
      for (const [id, op] of shown) if (accepts(op)) selected.add(id); else selected.delete(id);
      for (const [id, box] of boxes) box.checked = selected.has(id);
      bulk.refresh();
    },
    showResults: (answers) => {
      for (const answer of answers) {
        results.set(answer.operation_id, answer);
        const cell = resultCells.get(answer.operation_id);
        if (cell) fill(cell, resultText(answer));
      }
    },
  });
  const body = h("div", {}, liveToggle(), bulk.element);
  add(main, body);
  const sections = {};
  for (const s of QUEUES) {
    sections[s] = h("section", { "data-test": `queue-${s}` });
    add(body, sections[s]);
  }
  const open = new Set();
  const fingerprints = {};
  const render = async () => {
    // A selection or bulk answers on the page are the operator's work: not redrawn under them.
    if (selected.size || results.size) { liveStamp(); return; }
    for (const s of QUEUES) {
      const { data, text } = await api("GET", `/v1/operations?state=${s}&limit=200`);
      if (fingerprints[s] === text || sections[s].contains(document.activeElement) && fingerprints[s]) continue;
      fingerprints[s] = text;
      const ops = data.operations.sort((a, b) => a.updated_at.localeCompare(b.updated_at));
      for (const [id, op] of shown) if (op.state === s) { shown.delete(id); boxes.delete(id); resultCells.delete(id); }
      const catalogue = await jobTypes();
      const now = Date.now();
      const rows = ops.map((op) => {
        shown.set(op.operation_id, op);
        const box = h("input", { type: "checkbox", "data-test": "select", "aria-label": `Select ${op.operation_id}`, checked: selected.has(op.operation_id),
          onchange: () => { if (box.checked) selected.add(op.operation_id); else selected.delete(op.operation_id); bulk.refresh(); } });
        boxes.set(op.operation_id, box);
        const resultCell = h("td", { "data-test": "bulk-result" });
        resultCells.set(op.operation_id, resultCell);
        const detail = h("tr", { class: "detail", hidden: !open.has(op.operation_id) },
          h("td", { colspan: 10 }, resolveForm(op, classes[op.target_class], () => { open.delete(op.operation_id); fingerprints[s] = null; render(); }, catalogue[op.job_type])));
        const toggle = h("button", { type: "button", "aria-expanded": String(open.has(op.operation_id)), "data-test": "triage-open", onclick: () => {
          const opened = detail.hidden;
          detail.hidden = !opened;
          toggle.setAttribute("aria-expanded", String(opened));
          if (opened) { open.add(op.operation_id); detail.querySelector("textarea")?.focus(); } else open.delete(op.operation_id);
        } }, "Resolve…");
        return [h("tr", { "data-test": "triage-row", "data-id": op.operation_id },
          h("td", {}, box), h("td", {}, opLink(op)), h("td", {}, op.job_type), h("td", { class: "num" }, op.target_class),
          h("td", { title: fmtTime(op.updated_at), "data-test": "age" }, age(op.updated_at, now)),
          h("td", { class: "num" }, `${op.attempts}/${op.max_attempts}`),
          h("td", { class: "clip" }, op.reason || "–"), h("td", {}, ownerRunbook(op.job_type, catalogue[op.job_type])),
          h("td", {}, toggle), resultCell), detail];
      });
      const all = h("input", { type: "checkbox", "data-test": `select-all-${s}`, "aria-label": `Select every ${s} operation shown`, onchange: () => {
        for (const op of ops) { if (all.checked) selected.add(op.operation_id); else selected.delete(op.operation_id); boxes.get(op.operation_id).checked = all.checked; }
        bulk.refresh();
      } });
      fill(sections[s], h("h2", {}, badge(s), ` ${ops.length}${data.next_cursor ? "+" : ""}`),
        ops.length ? h("table", { class: "ops" },
          h("thead", {}, h("tr", {}, h("th", { scope: "col" }, all),
            ["Operation", "Job type", "Class", "Parked", "Attempts", "Reason", "Owner and runbook", "", "Bulk answer"].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, rows)) : h("p", { class: "muted" }, `Nothing is ${s}.`));
    }
    bulk.refresh();
    liveStamp();
  };
  try { await render(); } catch (error) { add(body, errorBox(error, "Listing")); }
  poll(render);
}
