// The tenant's settings (strict job types) and the deployment's retention.

import { SCOPES, api, has } from "./core.js";
import { add, confirmDialog, errorBox, facts, fill, h, needs, toast } from "./render.js";

export async function viewSettings(main) {
  fill(main, h("h1", {}, "Settings"));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "The tenant's settings")); return; }
  const { data } = await api("GET", "/v1/settings");
  const out = h("div", {});
  const strict = h("input", { type: "checkbox", id: "strict", checked: data.strict_job_types, "data-test": "strict" });
  strict.addEventListener("change", async () => {
    const wanted = strict.checked;
    const ok = await confirmDialog(wanted ? "Turn strict mode on?" : "Turn strict mode off?",
      h("p", {}, wanted ? "Enqueues of job types that are not in the catalogue will be refused (422 unknown_job_type) within a few seconds."
        : "Enqueues of uncatalogued job types will be accepted again."), wanted ? "Turn on" : "Turn off");
    if (!ok) { strict.checked = !wanted; return; }
    fill(out, );
    try {
      const answer = await api("PUT", "/v1/settings", { strict_job_types: wanted });
      strict.checked = answer.data.strict_job_types;
      toast(`strict mode ${answer.data.strict_job_types ? "on" : "off"}`);
    } catch (error) {
      strict.checked = !wanted;
      add(out, errorBox(error, "Refused"));
    }
  });
  const days = (n) => (n === null || n === undefined ? "forever" : `${n} days`);
  add(main, 
    h("section", {}, h("h2", {}, "This tenant"),
      h("p", {}, strict, h("label", { for: "strict" }, " Strict job types: refuse enqueues of job types not in the catalogue")), out),
    h("section", {}, h("h2", {}, "This deployment (read-only)"), facts([
      ["Identity retention", days(data.identity_retention_days), "identity-retention"],
      ["Payload retention", days(data.payload_retention_days)],
    ]), h("p", { class: "muted" }, "Set by the deployment (construct props identity_retention_days, payload_retention_days).")));
}
