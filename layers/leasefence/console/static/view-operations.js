// The operations list: filters, counts per state, paging, live refresh.

import { STATES, SCOPES, api, has } from "./core.js";
import { liveStamp, liveToggle, poll } from "./live.js";
import { add, age, badge, errorBox, fill, fmtTime, h, link, needs, opLink } from "./render.js";

export function opRow(op, now) {
  return h("tr", { "data-test": "op-row", "data-id": op.operation_id },
    h("td", {}, opLink(op)),
    h("td", {}, op.job_type),
    h("td", {}, badge(op.state)),
    h("td", { class: "num" }, op.target_class),
    h("td", { class: "num" }, op.fence),
    h("td", { class: "num" }, `${op.attempts}/${op.max_attempts}`),
    h("td", { title: fmtTime(op.updated_at) }, age(op.updated_at, now)),
    h("td", { class: "clip" }, op.outcome_code || op.reason || ""));
}

export function opTable(ops, empty) {
  const now = Date.now();
  return h("table", { class: "ops", "data-test": "op-table" },
    h("thead", {}, h("tr", {}, ["Operation", "Job type", "State", "Class", "Fence", "Attempts", "Updated", "Outcome / reason"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ops.length ? ops.map((op) => opRow(op, now)) : h("tr", {}, h("td", { colspan: 8, class: "muted" }, empty))));
}

export function toLocalInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

// How a page may be ordered, always within the page: the API lists a tenant write shard by write
// shard (64 for a new tenant), each in id order, so no order holds across pages.
const URGENCY = ["unknown", "quarantined", "awaiting_approval", "claimed", "queued", "failed_terminal", "succeeded", "cancelled"];
export const ORDERS = {
  id: ["id", "in id order, within this page (pages follow the tenant's write shards)",
    (a, b) => (a.operation_id < b.operation_id ? -1 : a.operation_id > b.operation_id ? 1 : 0)],
  oldest: ["oldest first", "oldest change first, within this page", (a, b) => a.updated_at.localeCompare(b.updated_at)],
  state: ["by state", "parked first, then by state, oldest first within each, within this page",
    (a, b) => URGENCY.indexOf(a.state) - URGENCY.indexOf(b.state) || a.updated_at.localeCompare(b.updated_at)],
};

export const FILTERS = ["state", "job_type", "target_class", "updated_after", "updated_before", "q", "limit", "cursor"];

export function filterQuery(params, withState = true) {
  const query = new URLSearchParams();
  for (const name of FILTERS) {
    if (!withState && (name === "state" || name === "cursor" || name === "limit")) continue;
    const value = params.get(name);
    if (value) query.set(name, value);
  }
  return query;
}

export async function viewOperations(main, params) {
  fill(main, h("h1", {}, "Operations"));
  if (!has(SCOPES.operate)) {
    add(main, needs(SCOPES.operate, "Listing every operation"),
      has(SCOPES.approve) ? h("p", {}, "You can approve: see ", h("a", { href: "#/approvals" }, "Approvals"), ".") : null);
    return;
  }
  const form = h("form", { class: "filters", "data-test": "filters", onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = {};
    for (const name of ["state", "job_type", "target_class", "q", "limit", "order"]) next[name] = (data.get(name) || "").trim();
    for (const name of ["updated_after", "updated_before"]) {
      const value = data.get(name);
      next[name] = value ? new Date(value).toISOString() : "";
    }
    location.hash = link(["operations"], next);
  } },
    h("label", {}, "State ", h("select", { name: "state" }, h("option", { value: "" }, "any"),
      STATES.map((s) => h("option", { value: s, selected: params.get("state") === s }, s)))),
    h("label", {}, "Job type ", h("input", { name: "job_type", value: params.get("job_type") || "", size: 14, list: "job-types" })),
    h("label", {}, "Class ", h("select", { name: "target_class" }, h("option", { value: "" }, "any"),
      ["A", "B", "C", "D"].map((c) => h("option", { value: c, selected: params.get("target_class") === c }, c)))),
    h("label", {}, "Updated after ", h("input", { type: "datetime-local", name: "updated_after", value: toLocalInput(params.get("updated_after")) })),
    h("label", {}, "before ", h("input", { type: "datetime-local", name: "updated_before", value: toLocalInput(params.get("updated_before")) })),
    h("label", {}, "Text ", h("input", { type: "search", name: "q", value: params.get("q") || "", placeholder: "id, job type or reason", size: 18, "data-test": "filter-text" })),
    h("label", {}, "Page ", h("select", { name: "limit" }, ["25", "50", "100", "200"].map((n) => h("option", { value: n, selected: (params.get("limit") || "50") === n }, n)))),
    h("label", {}, "Order ", h("select", { name: "order", "data-test": "order" }, Object.entries(ORDERS).map(([value, [label]]) =>
      h("option", { value, selected: (params.get("order") || "id") === value }, label)))),
    h("button", { type: "submit", class: "primary", "data-test": "apply-filters" }, "Apply"),
    h("a", { href: "#/operations", class: "button" }, "Clear"));
  const counts = h("div", { class: "counts", "data-test": "counts", "aria-label": "Operations per state" });
  const results = h("div", { "data-test": "results" });
  const pager = h("div", { class: "pager" });
  add(main, form, h("datalist", { id: "job-types" }), h("div", { class: "bar" }, counts, liveToggle()), results, pager);
  api("GET", "/v1/job-types").then(({ data }) => {
    const list = main.querySelector("#job-types");
    if (list) fill(list, ...data.job_types.map((j) => h("option", { value: j.job_type })));
  }).catch(() => {});

  let shown = "";
  const refresh = async () => {
    const [page, tally] = await Promise.all([
      api("GET", `/v1/operations?${filterQuery(params)}`),
      api("GET", `/v1/state-counts?${filterQuery(params, false)}`),
    ]);
    const total = tally.data.total;
    fill(counts, 
      h("a", { href: link(["operations"], { ...Object.fromEntries(filterQuery(params, false)), state: "" }), class: `count${params.get("state") ? "" : " current"}` },
        "all ", h("strong", {}, `${total}${tally.data.complete ? "" : "+"}`)),
      STATES.map((s) => h("a", {
        href: link(["operations"], { ...Object.fromEntries(filterQuery(params, false)), state: s }),
        class: `count${params.get("state") === s ? " current" : ""}`, "data-test": `count-${s}`,
      }, badge(s), " ", h("strong", {}, `${tally.data.counts[s]}${tally.data.complete ? "" : "+"}`))));
    const fingerprint = page.text;
    if (fingerprint !== shown) {
      const focusInside = results.contains(document.activeElement);
      if (!focusInside || !shown) {
        shown = fingerprint;
        const [, orderText, compare] = ORDERS[params.get("order")] || ORDERS.id;
        const ops = compare ? [...page.data.operations].sort(compare) : page.data.operations;
        fill(results, opTable(ops, page.data.next_cursor
          ? "Nothing matched in this page of the tenant's operations; the next page may hold more."
          : "No operation matches."));
        fill(pager, 
          params.get("cursor") ? h("button", { type: "button", onclick: () => history.back() }, "Previous page") : null,
          page.data.next_cursor ? h("a", { class: "button", "data-test": "next-page",
            href: link(["operations"], { ...Object.fromEntries(filterQuery(params)), cursor: page.data.next_cursor, order: params.get("order") }) }, "Next page") : null,
          h("span", { class: "muted", "data-test": "order-text" }, ` ${ops.length} shown, ${orderText}`));
      }
    }
    liveStamp();
  };
  try {
    await refresh();
  } catch (error) {
    fill(results, errorBox(error, "Listing"));
  }
  poll(refresh);
}
