// Triage: the parked operations (unknown, quarantined), oldest first, each with its resolve panel.

import { SCOPES, advice, api, has, jobTypes } from "./core.js";
import { liveStamp, liveToggle, poll } from "./live.js";
import { add, age, badge, errorBox, fill, fmtTime, h, needs, opLink, ownerRunbook } from "./render.js";
import { resolveForm } from "./resolve.js";

export async function viewTriage(main) {
  fill(main, h("h1", {}, "Triage"),
    h("p", { class: "muted" }, "Operations nothing automatic will move: an operator decides. Oldest first."));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "Triage")); return; }
  const classes = await advice().catch(() => ({}));
  const body = h("div", {}, liveToggle());
  add(main, body);
  const sections = {};
  for (const s of ["unknown", "quarantined"]) {
    sections[s] = h("section", { "data-test": `queue-${s}` });
    add(body, sections[s]);
  }
  const open = new Set();
  const fingerprints = {};
  const render = async () => {
    for (const s of ["unknown", "quarantined"]) {
      const { data, text } = await api("GET", `/v1/operations?state=${s}&limit=200`);
      if (fingerprints[s] === text || sections[s].contains(document.activeElement) && fingerprints[s]) continue;
      fingerprints[s] = text;
      const ops = data.operations.sort((a, b) => a.updated_at.localeCompare(b.updated_at));
      const catalogue = await jobTypes();
      const now = Date.now();
      const rows = ops.map((op) => {
        const detail = h("tr", { class: "detail", hidden: !open.has(op.operation_id) },
          h("td", { colspan: 8 }, resolveForm(op, classes[op.target_class], () => { open.delete(op.operation_id); fingerprints[s] = null; render(); }, catalogue[op.job_type])));
        const toggle = h("button", { type: "button", "aria-expanded": String(open.has(op.operation_id)), "data-test": "triage-open", onclick: () => {
          const shown = detail.hidden;
          detail.hidden = !shown;
          toggle.setAttribute("aria-expanded", String(shown));
          if (shown) { open.add(op.operation_id); detail.querySelector("textarea")?.focus(); } else open.delete(op.operation_id);
        } }, "Resolve…");
        return [h("tr", { "data-test": "triage-row", "data-id": op.operation_id },
          h("td", {}, opLink(op)), h("td", {}, op.job_type), h("td", { class: "num" }, op.target_class),
          h("td", { title: fmtTime(op.updated_at), "data-test": "age" }, age(op.updated_at, now)),
          h("td", { class: "num" }, `${op.attempts}/${op.max_attempts}`),
          h("td", { class: "clip" }, op.reason || "–"), h("td", {}, ownerRunbook(op.job_type, catalogue[op.job_type])),
          h("td", {}, toggle)), detail];
      });
      fill(sections[s], h("h2", {}, badge(s), ` ${ops.length}${data.next_cursor ? "+" : ""}`),
        ops.length ? h("table", { class: "ops" },
          h("thead", {}, h("tr", {}, ["Operation", "Job type", "Class", "Parked", "Attempts", "Reason", "Owner and runbook", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, rows)) : h("p", { class: "muted" }, `Nothing is ${s}.`));
    }
    liveStamp();
  };
  try { await render(); } catch (error) { add(body, errorBox(error, "Listing")); }
  poll(render);
}
