// The resolve panel of a parked operation (unknown or quarantined): what each choice means for
// its target class, a required note.

import { SCOPES, api, has, uuid } from "./core.js";
import { add, errorBox, fill, h, needs, toast } from "./render.js";

export const RESOLUTIONS = [
  ["requeue", "Requeue", "run it again (fresh attempt budget, next claim reconciles)"],
  ["succeeded", "Mark succeeded", "the side effect happened"],
  ["failed_terminal", "Mark failed", "it did not happen, and must not run again"],
];

export function resolveForm(op, classAdvice, onDone) {
  const note = h("textarea", { id: `note-${op.operation_id}`, rows: 2, required: true, maxlength: 1024, "data-test": "resolve-note",
    placeholder: "What you checked, and why this resolution (kept on the operation and in its history)" });
  const out = h("div", { "aria-live": "polite" });
  const choices = RESOLUTIONS.map(([value, label, short]) => {
    const explain = classAdvice ? classAdvice.resolutions[value] : short;
    const button = h("button", { type: "button", class: value === "requeue" ? "primary" : "", "data-test": `resolve-${value}`,
      "aria-describedby": `explain-${value}-${op.fence}`, onclick: async () => {
        fill(out, );
        if (!note.value.trim()) {
          add(out, h("p", { class: "error", role: "alert" }, "A note is required: say what you checked."));
          note.focus();
          return;
        }
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
    return h("div", { class: "choice" }, button,
      h("p", { id: `explain-${value}-${op.fence}`, class: "explain", "data-test": `explain-${value}` }, h("strong", {}, `${short}. `), explain));
  });
  const gated = !has(SCOPES.operate);
  return h("section", { class: "resolve", "data-test": "resolve" },
    h("h2", {}, `Resolve this ${op.state} operation`),
    classAdvice ? h("p", { class: "advice" }, h("strong", {}, `Class ${op.target_class} (${classAdvice.name}): `), classAdvice.reconcile) : null,
    gated ? needs(SCOPES.operate, "Resolving") : [
      h("label", { for: note.id }, "Note (required)"), note, h("div", { class: "choices" }, choices), out],
  );
}
