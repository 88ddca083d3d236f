// The approvals inbox and the review of one approval (its payload, and the hash approving binds).

import { SCOPES, api, has } from "./core.js";
import { liveStamp, liveToggle, poll } from "./live.js";
import { action, add, age, badge, confirmDialog, errorBox, facts, fill, fmtTime, h, json, link, needs, operationPage, parseHash, toast } from "./render.js";
import { route } from "./router.js";
import { cliCommand, cliLine } from "./safety.js";
import { loadHistory, timeline } from "./timeline.js";

// What a row's summary cell says: the declared payload fields, or why there are none.
const NO_SUMMARY = {
  not_declared: "no summary declared (approval_summary in the catalogue)",
  needs_scope: "the payload needs leasefence/approve to read",
  erased: "payload erased",
  purged: "payload purged",
  external: "payload by reference",
  missing: "payload missing",
};

export function summaryCell(row) {
  if (row.summary_state !== "shown") return h("span", { class: "muted", "data-test": "summary", "data-state": row.summary_state }, NO_SUMMARY[row.summary_state] || row.summary_state);
  return h("span", { "data-test": "summary", "data-state": "shown" }, Object.entries(row.summary).map(([k, v], i) => [
    i ? " · " : null, h("span", { class: "muted" }, `${k} `), h("strong", { "data-field": k }, typeof v === "object" ? JSON.stringify(v) : String(v))]));
}

export async function viewApprovals(main) {
  fill(main, h("h1", {}, "Approvals"),
    h("p", { class: "muted" }, "Operations waiting for a person: nothing claims them until approved. Soonest deadline first."));
  if (!has(SCOPES.approve) && !has(SCOPES.operate)) { add(main, needs(SCOPES.approve, "The approvals inbox")); return; }
  if (!has(SCOPES.approve)) add(main, needs(SCOPES.approve, "Approving or rejecting"));
  const list = h("div", { "data-test": "approvals" });
  add(main, liveToggle(), list);
  let shown = "";
  const render = async () => {
    const { data, text } = await api("GET", "/v1/approvals?limit=200");
    if (text !== shown) {
      shown = text;
      const now = Date.now();
      const rows = data.approvals;
      fill(list, rows.length ? h("table", { class: "ops" },
        h("thead", {}, h("tr", {}, ["Operation", "Job type", "What for", "Requested by", "Requested", "Expires", ""].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, rows.map((row) => {
          const op = row.operation;
          return h("tr", { "data-test": "approval-row", "data-id": op.operation_id },
            h("td", {}, h("a", { href: link(["approval", op.operation_id]), class: "opid" }, op.operation_id)),
            h("td", {}, op.job_type), h("td", {}, summaryCell(row)), h("td", { "data-test": "requested-by" }, op.enqueued_by || "–"),
            h("td", { title: fmtTime(op.created_at) }, age(op.created_at, now)),
            h("td", { title: fmtTime(op.approval_expires_at), "data-test": "expires" }, age(op.approval_expires_at, now)),
            h("td", {}, h("a", { class: "button", href: link(["approval", op.operation_id]) }, "Review")));
        }))) :
        h("p", { class: "muted" }, "Nothing awaits approval."));
    }
    liveStamp();
  };
  try { await render(); } catch (error) { add(list, errorBox(error, "Listing")); }
  poll(render);
}

export function readable(value) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    return h("table", { class: "payload" }, h("tbody", {}, Object.entries(value).map(([k, v]) => h("tr", {},
      h("th", { scope: "row" }, k),
      h("td", {}, v !== null && typeof v === "object" ? json(v) : String(v))))));
  }
  return json(value);
}

export async function viewApproval(main, id) {
  const op = await operationPage(main, "Approve", id);
  if (op === null) return;
  const out = h("div", { "data-test": "action-result" });
  const payloadBox = h("section", {}, h("h2", {}, "Payload"));
  let seenHash = null;
  let seenText = null;
  try {
    const { text } = await api("GET", `/v1/operations/${encodeURIComponent(id)}/payload`);
    // The hash of exactly the bytes shown (RFC 8785 canonical JSON, as stored): what an approval binds.
    seenHash = "sha256:" + [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)))]
      .map((b) => b.toString(16).padStart(2, "0")).join("");
    seenText = text;
    add(payloadBox, readable(JSON.parse(text)),
      h("details", {}, h("summary", {}, "As stored (canonical JSON)"), h("pre", { class: "json" }, text)));
  } catch (error) {
    add(payloadBox, errorBox(error, "Reading the payload"));
  }
  const matches = seenHash !== null && seenHash === op.payload_hash;
  const note = h("textarea", { id: "reject-note", rows: 2, maxlength: 1024, "data-test": "reject-note", placeholder: "Why it is rejected (kept as the operation's reason)" });
  const awaiting = op.state === "awaiting_approval";
  const approve = action("Approve this payload", [SCOPES.approve], async () => {
    fill(out, );
    // The dialog shows the exact bytes whose hash the approval sends (what it binds).
    const ok = await confirmDialog(`Approve ${id}?`, [
      h("p", {}, "You approve exactly this payload, as stored (canonical JSON):"),
      h("pre", { class: "json", "data-test": "confirm-payload" }, seenText),
      h("p", {}, "Its hash, which the approval sends: ", h("code", { class: "hash", "data-test": "confirm-hash" }, seenHash)),
      h("p", { class: "muted" }, "If the payload changed since it was shown, the API refuses the approval (payload_mismatch)."),
    ], "Approve");
    if (!ok) return;
    try {
      const { data } = await api("POST", `/v1/operations/${encodeURIComponent(id)}/approve`, { payload_hash: seenHash });
      toast(`${id} approved: ${data.operation.state}`);
      add(out, h("p", { class: "ok", "data-test": "approved" }, `Approved by ${data.operation.approved_by}: it is ${data.operation.state}.`));
      setTimeout(() => { if (parseHash().parts[1] === id) route(); }, 1500);
    } catch (error) {
      add(out, errorBox(error, "Approval refused"));
    }
  }, { class: "primary", "data-test": "approve", disabled: !awaiting || seenHash === null });
  const reject = action("Reject", [SCOPES.approve], async () => {
    fill(out, );
    if (!note.value.trim()) {
      add(out, h("p", { class: "error", role: "alert" }, "Say why in the note before rejecting."));
      note.focus();
      return;
    }
    try {
      const { data } = await api("POST", `/v1/operations/${encodeURIComponent(id)}/reject`, { note: note.value.trim() });
      toast(`${id} rejected`);
      add(out, h("p", { class: "ok", "data-test": "rejected" }, `Rejected: it is ${data.operation.state}.`));
    } catch (error) {
      add(out, errorBox(error, "Rejection refused"));
    }
  }, { class: "danger", "data-test": "reject", disabled: !awaiting });
  add(main, 
    h("p", {}, badge(op.state), " ", h("span", { class: "muted" }, `${op.job_type} · class ${op.target_class}`), " ",
      h("a", { href: link(["op", id]) }, "Operation details and history")),
    facts([
      ["Requested by", op.enqueued_by, "requester"],
      ["Requested", `${fmtTime(op.created_at)} (${age(op.created_at)})`],
      ["Deadline", op.approval_expires_at ? `${fmtTime(op.approval_expires_at)} (${age(op.approval_expires_at)})` : "–", "deadline"],
      ["Payload hash", h("code", { class: "hash", "data-test": "payload-hash" }, op.payload_hash)],
      ["Shown payload hashes to", seenHash ? h("span", {}, h("code", { class: "hash", "data-test": "seen-hash" }, seenHash), " ",
        matches ? badge("matches", "check") : badge("differs", "warn")) : "–"],
      op.approved_by ? ["Approved by", op.approved_by] : null,
      op.reason ? ["Reason", op.reason] : null,
    ]),
    payloadBox,
    h("section", { class: "decide" }, h("h2", {}, "Decide"),
      awaiting ? null : h("p", { class: "notice" }, `It is ${op.state}: nothing to decide.`),
      h("p", { class: "muted" }, "Approving sends the hash of the payload shown above: if the payload changed since, the API refuses it (payload_mismatch). You cannot approve what you enqueued."),
      h("div", { class: "actions" }, approve), awaiting ? cliLine(cliCommand("approve", op), "cli-approve") : null,
      h("label", { for: "reject-note" }, "Note"), note, h("div", { class: "actions" }, reject),
      awaiting ? cliLine(cliCommand("reject", op), "cli-reject") : null, out));
  const history = h("section", { class: "history" }, h("h2", {}, "History"));
  add(main, history);
  try {
    const page = await loadHistory(id);
    add(history, ...timeline(page.entries, page.dropped, page.history_expired_at));
  } catch (error) {
    add(history, errorBox(error, "Reading the history"));
  }
}
