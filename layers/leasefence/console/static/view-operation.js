// One operation: its facts (agreeing with its history), class advice, intent and checkpoint, the
// actions its state allows (each with its CLI command), the resolve panel when parked, history.

import { SCOPES, advice, api, has, jobTypes } from "./core.js";
import { action, add, age, badge, confirmDialog, errorBox, facts, fill, fmtTime, h, intentText, json, link, needs, operationPage, ownerRunbook, toast } from "./render.js";
import { cliCommand, cliLine, refusal } from "./safety.js";
import { resolveForm } from "./resolve.js";
import { route } from "./router.js";
import { loadHistory, timeline } from "./timeline.js";

export function leaseText(op) {
  if (!op.lease_expires_at) return "–";
  const left = new Date(op.lease_expires_at).getTime() - Date.now();
  return `${fmtTime(op.lease_expires_at)} (${left > 0 ? `expires ${age(op.lease_expires_at)}` : `lapsed ${age(op.lease_expires_at)}`})`;
}


// What cancel and erase say before they act (each behind a confirmation), and their route.
const CONFIRMED = {
  cancel: {
    title: "Cancel", yes: "Cancel the operation", done: "cancelled",
    body: () => h("p", {}, "It ends ", badge("cancelled"), " and will never run. Only an operation no worker ever claimed (or one awaiting approval) can be cancelled."),
  },
  erase: {
    title: "Erase", yes: "Erase", done: "erased",
    body: () => [h("p", {}, "Deletes its stored payload and free text (reasons, notes, checkpoint, the intent's description). Its identity, hash, fences and state are kept."),
      h("p", {}, h("strong", {}, "This cannot be undone."))],
  },
};

// Asks, then POSTs /v1/operations/{id}/{act}; the API's refusal shown in `out`.
export async function confirmedAction(act, op, out, after) {
  const spec = CONFIRMED[act];
  if (!(await confirmDialog(`${spec.title} ${op.operation_id}?`, spec.body(), spec.yes))) return;
  try {
    await api("POST", `/v1/operations/${encodeURIComponent(op.operation_id)}/${act}`, {});
    toast(`${op.operation_id} ${spec.done}`);
    after();
  } catch (error) {
    fill(out, errorBox(error, `${spec.title} refused`));
  }
}

// Every page of the history (null: this token may not read it).
async function wholeHistory(op) {
  if (!has(SCOPES.operate) && !(has(SCOPES.approve) && op.enqueued_by)) return null;
  let page = await loadHistory(op.operation_id);
  const first = page;
  const entries = [...page.entries];
  while (page.next_cursor) {
    page = await loadHistory(op.operation_id, page.next_cursor);
    entries.push(...page.entries);
  }
  return { ...first, entries };
}

// The facts the item does not keep but the history records, so that the page never contradicts
// its own timeline: who enqueued it (kept on the item only under the approval gate), who claimed
// it last, and the last reason or note written.
export function fromHistory(op, entries) {
  const list = entries || [];
  const enqueue = list.find((e) => e.transition === "enqueue");
  const claims = list.filter((e) => e.transition === "claim" || e.transition === "takeover");
  const reasons = list.filter((e) => e.reason);
  return {
    enqueuedBy: op.enqueued_by || (enqueue && enqueue.actor) || null,
    claimedBy: claims.length ? claims.at(-1).actor : op.lease_owner || null,
    lastReason: reasons.length ? reasons.at(-1) : null,
  };
}

function actionsOf(op, out, reload) {
  const offered = [
    ["cancel", "Cancel…", [SCOPES.produce], () => confirmedAction("cancel", op, out, reload)],
    ["erase", "Erase…", [SCOPES.operate], () => confirmedAction("erase", op, out, reload)],
  ];
  return offered.map(([act, label, scopes, onclick]) => action(label, scopes, onclick, { "data-test": act, refused: refusal(op, act) }));
}

function cliOf(op) {
  const acts = ["cancel", "erase"].filter((act) => !refusal(op, act));
  if (refusal(op, "approve") === null) acts.push("approve", "reject");
  if (!acts.length) return null;
  return h("details", { class: "cli-list", "data-test": "cli-commands" }, h("summary", {}, "The same from the command line"),
    acts.map((act) => cliLine(cliCommand(act, op), `cli-${act}`)));
}

export async function viewOperation(main, id) {
  const op = await operationPage(main, "Operation", id);
  if (op === null) return;
  const [classes, catalogue, read] = await Promise.all([
    advice().catch(() => ({})),
    has(SCOPES.operate) ? jobTypes() : Promise.resolve({}),
    wholeHistory(op).then((page) => ({ page }), (error) => ({ error })),
  ]);
  const classAdvice = classes[op.target_class];
  const entry = catalogue[op.job_type];
  const derived = fromHistory(op, read.page && read.page.entries);
  const out = h("div", { "data-test": "action-result" });
  const reload = () => route();
  const actions = h("div", { class: "actions" }, actionsOf(op, out, reload),
    op.state === "awaiting_approval" ? h("a", { class: "button primary", href: link(["approval", op.operation_id]) }, "Review for approval") : null,
    h("a", { class: "button", href: link(["op", op.operation_id]) }, "Reload"));
  const last = derived.lastReason;
  add(main,
    h("p", {}, badge(op.state), " ", h("span", { class: "muted" }, `${op.job_type} · class ${op.target_class} · updated ${age(op.updated_at)}`),
      has(SCOPES.operate) ? [" · ", ownerRunbook(op.job_type, entry)] : null),
    actions, cliOf(op), out,
    h("div", { class: "columns" },
      h("section", {}, h("h2", {}, "State"), facts([
        ["State", badge(op.state), "op-state"],
        ["Fence", String(op.fence), "op-fence"],
        ["Attempts", `${op.attempts} of ${op.max_attempts}`],
        ["Lease owner", op.lease_owner, "op-lease-owner"],
        ["Lease expires", leaseText(op), "op-lease-expires"],
        ["Claimed by", derived.claimedBy, "op-claimed-by"],
        ["Outcome", op.outcome_code, "op-outcome"],
        ["Reason", op.reason, "op-reason"],
        last && last.reason !== op.reason ? ["Last note", `${last.reason} (${last.transition} by ${last.actor || "–"})`, "op-last-note"] : null,
        ["Job type", `${op.job_type}${op.job_type_version ? ` (version ${op.job_type_version})` : ""}`],
        ["Created", fmtTime(op.created_at)],
        ["Updated", fmtTime(op.updated_at)],
        ["Enqueued by", derived.enqueuedBy, "op-enqueued-by"],
        op.approval_expires_at ? ["Approval until", fmtTime(op.approval_expires_at)] : null,
        op.approved_by ? ["Approved by", op.approved_by] : null,
        ["Payload", `${op.payload_state}${op.payload_ref ? ` · ${op.payload_ref}` : ""}`],
        ["Payload hash", h("code", { class: "hash" }, op.payload_hash)],
        op.erased_at ? ["Erased", fmtTime(op.erased_at)] : null,
      ])),
      h("section", {}, h("h2", {}, `Class ${op.target_class}`),
        classAdvice ? [h("p", { "data-test": "class-advice" }, h("strong", {}, `${classAdvice.name}. `), classAdvice.guarantee),
          h("p", {}, h("strong", {}, "Reconcile: "), classAdvice.reconcile)] : null,
        h("h2", {}, "Intent"), op.intent ? h("p", { "data-test": "op-intent" }, intentText(op)) : h("p", { class: "muted" }, "none recorded"),
        h("h2", {}, "Checkpoint"), h("div", { "data-test": "op-checkpoint" }, op.checkpoint === null || op.checkpoint === undefined ? h("p", { class: "muted" }, "none") : json(op.checkpoint)))));
  if (refusal(op, "resolve") === null) add(main, resolveForm(op, classAdvice, () => route(), entry));
  const history = h("section", { class: "history" }, h("h2", {}, "History"));
  add(main, history);
  if (read.error) add(history, errorBox(read.error, "Reading the history"));
  else if (read.page === null) add(history, needs(SCOPES.operate, "The history"));
  else {
    const page = read.page;
    add(history, ...timeline(page.entries, page.dropped, page.history_expired_at));
    if (!page.entries.length && !page.history_expired_at) add(history, h("p", { class: "muted" }, "Nothing recorded yet (history trails the operation by about a second)."));
  }
}
