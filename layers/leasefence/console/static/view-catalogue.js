// The catalogue (job types) and the go/no-go report.

import { SCOPES, api, has } from "./core.js";
import { add, badge, fill, h, json, link, needs } from "./render.js";

export async function viewCatalogue(main) {
  fill(main, h("h1", {}, "Catalogue and controls"));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "The catalogue")); return; }
  const [types, controls] = await Promise.all([api("GET", "/v1/job-types"), api("GET", "/v1/controls")]);
  add(main, h("h2", {}, "Job types"), types.data.job_types.length ? h("table", { class: "ops", "data-test": "job-types" },
    h("thead", {}, h("tr", {}, ["Job type", "Version", "Class", "Attempts", "Lease (max)", "Owner", "Runbook", "Approval", "Schema"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, types.data.job_types.map((j) => h("tr", {},
      h("td", {}, h("a", { href: link(["operations"], { job_type: j.job_type }) }, j.job_type)),
      h("td", { class: "num" }, j.version), h("td", { class: "num" }, j.target_class), h("td", { class: "num" }, j.max_attempts),
      h("td", {}, `${j.lease_seconds}s (${j.max_lease_seconds}s)`), h("td", {}, j.owner || "–"),
      h("td", {}, j.runbook_url ? h("a", { href: j.runbook_url, rel: "noreferrer noopener", target: "_blank" }, "runbook") : "–"),
      h("td", {}, j.approval_required ? `required (${Math.round(j.approval_valid_seconds / 3600)} h)` : "no"),
      h("td", {}, j.payload_schema ? h("details", {}, h("summary", {}, "schema"), json(j.payload_schema)) : "–"))))) :
    h("p", { class: "muted" }, "No job type is catalogued (leasefence job-types put / apply)."));
  add(main, h("h2", {}, "Go / no-go ", controls.data.go ? badge("go", "check") : badge("no-go", "warn")),
    h("div", { "data-test": "controls" }, controls.data.job_types.map((j) => h("details", { class: "control" },
      h("summary", {}, j.go ? badge("go", "check") : badge("no-go", "warn"), ` ${j.job_type}`,
        h("span", { class: "muted" }, j.catalogued ? ` version ${j.version}` : " not catalogued"),
        h("span", { class: "muted" }, ` · ${j.controls.filter((c) => c.go).length}/9 controls hold`)),
      h("ol", {}, j.controls.map((c) => h("li", {}, c.go ? badge("holds", "check") : badge("missing", "warn"), ` ${c.name}: `, h("span", { class: "muted" }, c.evidence))))))));
}
