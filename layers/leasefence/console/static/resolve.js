// The resolve panel of a parked operation (unknown or quarantined), the same on the operation page
// and in triage: the facts a decision needs (intent, checkpoint, the last attempt's reason, the job
// type's owner and runbook), what each choice means for its target class, a required note, the
// dangerous choice never primary and confirmed by its risk, and each choice's CLI command.

import { SCOPES, api, has, uuid } from "./core.js";
import { add, confirmDialog, errorBox, facts, fill, h, intentText, json, needs, ownerRunbook, toast } from "./render.js";
import { cliCommand, cliLine, primaryResolution, risk } from "./safety.js";

export const RESOLUTIONS = [
  ["requeue", "Requeue", "run it again (fresh attempt budget, next claim reconciles)"],
  ["succeeded", "Mark succeeded", "the side effect happened"],
  ["failed_terminal", "Mark failed", "it did not happen, and must not run again"],
];

// What the panel shows before any choice (the operation's facts as the page read them).
export function decisionFacts(op, catalogueEntry) {
  return facts([
    ["Intent", intentText(op) || h("span", { class: "muted" }, "none recorded"), "resolve-intent"],
    ["Checkpoint", op.checkpoint === null || op.checkpoint === undefined ? h("span", { class: "muted" }, "none") : json(op.checkpoint), "resolve-checkpoint"],
    ["Last attempt's reason", op.reason, "resolve-reason"],
    ["Attempts", `${op.attempts} of ${op.max_attempts} · fence ${op.fence}`],
    ["Job type", [`${op.job_type} · `, ownerRunbook(op.job_type, catalogueEntry)]],
  ]);
}

export function resolveForm(op, classAdvice, onDone, catalogueEntry) {
  const note = h("textarea", { id: `note-${op.operation_id}`, rows: 2, required: true, maxlength: 1024, "data-test": "resolve-note",
    placeholder: "What you checked, and why this resolution (kept on the operation and in its history)" });
  const out = h("div", { "aria-live": "polite" });
  const primary = primaryResolution(op, classAdvice);
  const commands = [];
  const choices = RESOLUTIONS.map(([value, label, short]) => {
    const explain = classAdvice ? classAdvice.resolutions[value] : short;
    const danger = risk(op, value, classAdvice);
    const button = h("button", { type: "button", class: value === primary ? "primary" : danger ? "risky" : "",
      "data-test": `resolve-${value}`, "data-risky": danger ? "true" : null,
      "aria-describedby": `explain-${value}-${op.fence}`, onclick: async () => {
        fill(out, );
        if (!note.value.trim()) {
          add(out, h("p", { class: "error", role: "alert" }, "A note is required: say what you checked."));
          note.focus();
          return;
        }
        if (danger && !(await confirmDialog(`${label} ${op.operation_id} despite the risk?`,
          [h("p", { "data-test": "confirm-risk" }, danger),
            op.intent ? h("p", {}, "Intent on record: ", h("strong", { "data-test": "confirm-intent" }, intentText(op)), ".") : null],
          `${label} anyway`))) return;
        button.disabled = true;
        try {
          const { data } = await api("POST", `/v1/operations/${encodeURIComponent(op.operation_id)}/resolve`,
            { resolution: value, note: note.value.trim(), request_token: uuid() });
          toast(`${op.operation_id}: ${value} → ${data.operation.state}`);
          onDone(data.operation);
        } catch (error) {
          add(out, errorBox(error, "Resolve refused"));
        } finally {
          button.disabled = false;
        }
      } }, label);
    const command = cliLine(cliCommand("resolve", op, { resolution: value }), `cli-resolve-${value}`);
    commands.push([value, command]);
    return h("div", { class: "choice" }, button,
      h("p", { id: `explain-${value}-${op.fence}`, class: "explain", "data-test": `explain-${value}` }, h("strong", {}, `${short}. `), explain),
      danger ? h("p", { class: "risk", "data-test": `risk-${value}` }, h("strong", {}, "Risk: "), danger) : null,
      command);
  });
  // The commands follow the note as it is typed.
  note.addEventListener("input", () => {
    for (const [value, line] of commands) {
      line.querySelector("code").textContent = cliCommand("resolve", op, { resolution: value, note: note.value.trim() });
    }
  });
  const gated = !has(SCOPES.operate);
  return h("section", { class: "resolve", "data-test": "resolve" },
    h("h2", {}, `Resolve this ${op.state} operation`),
    decisionFacts(op, catalogueEntry),
    classAdvice ? h("p", { class: "advice" }, h("strong", {}, `Class ${op.target_class} (${classAdvice.name}): `), classAdvice.reconcile) : null,
    gated ? needs(SCOPES.operate, "Resolving") : [
      h("label", { for: note.id }, "Note (required)"), note, h("div", { class: "choices" }, choices), out],
  );
}
