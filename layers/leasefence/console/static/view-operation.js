// One operation: its facts, class advice, intent and checkpoint, actions, history.

import { PARKED, SCOPES, advice, api, has } from "./core.js";
import { action, add, age, badge, confirmDialog, errorBox, facts, fill, fmtTime, h, json, link, needs, toast } from "./render.js";
import { resolveForm } from "./resolve.js";
import { route } from "./router.js";
import { loadHistory, timeline } from "./timeline.js";

export function leaseText(op) {
  if (!op.lease_expires_at) return "–";
  const left = new Date(op.lease_expires_at).getTime() - Date.now();
  return `${fmtTime(op.lease_expires_at)} (${left > 0 ? `expires ${age(op.lease_expires_at)}` : `lapsed ${age(op.lease_expires_at)}`})`;
}


export async function cancelOp(op, out, after) {
  const ok = await confirmDialog(`Cancel ${op.operation_id}?`,
    h("p", {}, "It ends ", badge("cancelled"), " and will never run. Only an operation no worker ever claimed (or one awaiting approval) can be cancelled."),
    "Cancel the operation");
  if (!ok) return;
  try {
    await api("POST", `/v1/operations/${encodeURIComponent(op.operation_id)}/cancel`, {});
    toast(`${op.operation_id} cancelled`);
    after();
  } catch (error) {
    fill(out, errorBox(error, "Cancel refused"));
  }
}

export async function eraseOp(op, out, after) {
  const ok = await confirmDialog(`Erase ${op.operation_id}?`,
    [h("p", {}, "Deletes its stored payload and free text (reasons, notes, checkpoint, the intent's description). Its identity, hash, fences and state are kept."),
      h("p", {}, h("strong", {}, "This cannot be undone."))],
    "Erase");
  if (!ok) return;
  try {
    await api("POST", `/v1/operations/${encodeURIComponent(op.operation_id)}/erase`, {});
    toast(`${op.operation_id} erased`);
    after();
  } catch (error) {
    fill(out, errorBox(error, "Erase refused"));
  }
}

export async function viewOperation(main, id) {
  fill(main, h("h1", {}, h("span", { class: "muted" }, "Operation "), h("span", { "data-test": "op-title" }, id)));
  let op;
  try {
    op = (await api("GET", `/v1/operations/${encodeURIComponent(id)}`)).data;
  } catch (error) {
    add(main, errorBox(error, "Reading the operation"));
    return;
  }
  const classes = await advice().catch(() => ({}));
  const classAdvice = classes[op.target_class];
  const out = h("div", { "data-test": "action-result" });
  const reload = () => route();
  const actions = h("div", { class: "actions" },
    action("Cancel…", [SCOPES.produce], () => cancelOp(op, out, reload), { "data-test": "cancel" }),
    action("Erase…", [SCOPES.operate], () => eraseOp(op, out, reload), { "data-test": "erase" }),
    op.state === "awaiting_approval" ? h("a", { class: "button primary", href: link(["approval", op.operation_id]) }, "Review for approval") : null,
    h("a", { class: "button", href: link(["op", op.operation_id]) }, "Reload"));
  add(main, 
    h("p", {}, badge(op.state), " ", h("span", { class: "muted" }, `${op.job_type} · class ${op.target_class} · updated ${age(op.updated_at)}`)),
    actions, out,
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "State"), facts([
        ["State", badge(op.state), "op-state"],
        ["Fence", String(op.fence), "op-fence"],
        ["Attempts", `${op.attempts} of ${op.max_attempts}`],
        ["Lease owner", op.lease_owner, "op-lease-owner"],
        ["Lease expires", leaseText(op), "op-lease-expires"],
        ["Outcome", op.outcome_code, "op-outcome"],
        ["Reason", op.reason, "op-reason"],
        ["Job type", `${op.job_type}${op.job_type_version ? ` (version ${op.job_type_version})` : ""}`],
        ["Created", fmtTime(op.created_at)],
        ["Updated", fmtTime(op.updated_at)],
        ["Enqueued by", op.enqueued_by],
        op.approval_expires_at ? ["Approval until", fmtTime(op.approval_expires_at)] : null,
        op.approved_by ? ["Approved by", op.approved_by] : null,
        ["Payload", `${op.payload_state}${op.payload_ref ? ` · ${op.payload_ref}` : ""}`],
        ["Payload hash", h("code", { class: "hash" }, op.payload_hash)],
        op.erased_at ? ["Erased", fmtTime(op.erased_at)] : null,
      ])),
      h("section", {}, h("h2", {}, `Class ${op.target_class}`),
        classAdvice ? [h("p", { "data-test": "class-advice" }, h("strong", {}, `${classAdvice.name}. `), classAdvice.guarantee),
          h("p", {}, h("strong", {}, "Reconcile: "), classAdvice.reconcile)] : null,
        h("h2", {}, "Intent"), op.intent ? h("p", { "data-test": "op-intent" }, `"${op.intent.what}" under fence ${op.intent.fence}`) : h("p", { class: "muted" }, "none recorded"),
        h("h2", {}, "Checkpoint"), h("div", { "data-test": "op-checkpoint" }, op.checkpoint === null || op.checkpoint === undefined ? h("p", { class: "muted" }, "none") : json(op.checkpoint)))));
  if (PARKED.has(op.state)) add(main, resolveForm(op, classAdvice, () => route()));
  const history = h("section", { class: "history" }, h("h2", {}, "History"));
  add(main, history);
  if (!has(SCOPES.operate) && !(has(SCOPES.approve) && op.enqueued_by)) {
    add(history, needs(SCOPES.operate, "The history"));
    return;
  }
  try {
    let page = await loadHistory(id);
    add(history, ...timeline(page.entries, page.dropped, page.history_expired_at));
    if (!page.entries.length && !page.history_expired_at) add(history, h("p", { class: "muted" }, "Nothing recorded yet (history trails the operation by about a second)."));
    while (page.next_cursor) {
      page = await loadHistory(id, page.next_cursor);
      add(history.querySelector("ol"), [...timeline(page.entries, 0).at(-1).children]);
    }
  } catch (error) {
    add(history, errorBox(error, "Reading the history"));
  }
}
