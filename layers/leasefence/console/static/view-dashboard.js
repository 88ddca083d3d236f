// The fleet at a glance: per job type, over the last hours, lifecycles ended per minute by outcome,
// the oldest queued and oldest parked ages, unknown and quarantined parks per hour, approvals
// waiting. Computed in the page from the tenant's operations (GET /v1/operations, the pages read
// at most MAX_PAGES x 500 operations: "complete" says whether that was all of them), refreshed
// live; docs/console.md says what it costs and what CloudWatch shows instead on AWS.

import { SCOPES, api, has } from "./core.js";
import { liveStamp, liveToggle, poll } from "./live.js";
import { add, errorBox, fill, h, link, needs } from "./render.js";

const MAX_PAGES = 10;
const OUTCOMES = ["succeeded", "failed_terminal", "cancelled"];
const BUCKETS = 12;

async function readAll() {
  const ops = [];
  let cursor = null;
  for (let page = 0; page < MAX_PAGES; page += 1) {
    const query = new URLSearchParams({ limit: "500" });
    if (cursor) query.set("cursor", cursor);
    const { data } = await api("GET", `/v1/operations?${query}`);
    ops.push(...data.operations);
    cursor = data.next_cursor;
    if (!cursor) return { ops, complete: true };
  }
  return { ops, complete: false };
}

function emptyFigures() {
  return { ended: Object.fromEntries(OUTCOMES.map((o) => [o, 0])), unknown: 0, quarantined: 0, parkedNow: 0,
    approvals: 0, queued: 0, oldestQueued: null, oldestParked: null, buckets: Array.from({ length: BUCKETS }, () => ({ succeeded: 0, failed_terminal: 0, cancelled: 0 })) };
}

// The figures of `ops` at `now` over the last `hours`: overall and per job type.
export function figures(ops, now, hours) {
  const since = now - hours * 3600 * 1000;
  const span = (now - since) / BUCKETS;
  const all = emptyFigures();
  const byType = {};
  for (const op of ops) {
    const updated = new Date(op.updated_at).getTime();
    const mine = (byType[op.job_type] = byType[op.job_type] || emptyFigures());
    for (const f of [all, mine]) {
      if (OUTCOMES.includes(op.state) && updated >= since) {
        f.ended[op.state] += 1;
        f.buckets[Math.min(BUCKETS - 1, Math.floor((updated - since) / span))][op.state] += 1;
      }
      if (op.state === "unknown" || op.state === "quarantined") {
        f.parkedNow += 1;
        if (updated >= since) f[op.state] += 1;
        f.oldestParked = f.oldestParked === null ? updated : Math.min(f.oldestParked, updated);
      }
      if (op.state === "awaiting_approval") f.approvals += 1;
      if (op.state === "queued") {
        f.queued += 1;
        f.oldestQueued = f.oldestQueued === null ? updated : Math.min(f.oldestQueued, updated);
      }
    }
  }
  return { all, byType };
}

function seconds(from, now) {
  return from === null ? "–" : `${Math.round((now - from) / 1000)} s`;
}

function perMinute(count, hours) {
  return (count / (hours * 60)).toFixed(2);
}

function row(name, f, now, hours, test) {
  const ended = OUTCOMES.reduce((n, o) => n + f.ended[o], 0);
  return h("tr", { "data-test": test, "data-job-type": name },
    h("th", { scope: "row" }, name),
    OUTCOMES.map((o) => h("td", { class: "num", "data-figure": `ended-${o}` }, String(f.ended[o]))),
    h("td", { class: "num", "data-figure": "per-minute" }, perMinute(ended, hours)),
    h("td", { class: "num", "data-figure": "unknown" }, String(f.unknown)),
    h("td", { class: "num", "data-figure": "quarantined" }, String(f.quarantined)),
    h("td", { class: "num", "data-figure": "parked-now" }, String(f.parkedNow)),
    h("td", { class: "num", "data-figure": "approvals" }, String(f.approvals)),
    h("td", { class: "num", "data-figure": "queued" }, String(f.queued)),
    h("td", { class: "num", "data-figure": "oldest-queued" }, seconds(f.oldestQueued, now)),
    h("td", { class: "num", "data-figure": "oldest-parked" }, seconds(f.oldestParked, now)));
}

function timelineTable(f, now, hours) {
  const span = (hours * 60) / BUCKETS;
  const max = Math.max(1, ...f.buckets.map((b) => OUTCOMES.reduce((n, o) => n + b[o], 0)));
  return h("table", { class: "ops", "data-test": "dash-timeline" },
    h("thead", {}, h("tr", {}, ["Minutes ago", ...OUTCOMES.map((o) => `${o} / min`), ""].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, f.buckets.map((b, i) => {
      const total = OUTCOMES.reduce((n, o) => n + b[o], 0);
      return h("tr", {},
        h("td", {}, `${Math.round(hours * 60 - (i + 1) * span)}–${Math.round(hours * 60 - i * span)}`),
        OUTCOMES.map((o) => h("td", { class: "num" }, (b[o] / span).toFixed(2))),
        h("td", {}, h("span", { class: "bar", "aria-hidden": "true" }, "█".repeat(Math.round((total / max) * 20)))));
    })));
}

export async function viewDashboard(main, params) {
  const hours = Math.min(48, Math.max(1, Number(params.get("hours")) || 3));
  fill(main, h("h1", {}, "Dashboard"),
    h("p", { class: "muted" }, `The last ${hours} hours, per job type, from this tenant's operations as the API lists them. `,
      [1, 3, 12, 24].map((n) => [h("a", { href: link(["dashboard"], { hours: String(n) }), class: n === hours ? "current" : "" }, `${n} h`), " "])));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "The dashboard")); return; }
  const body = h("div", { "data-test": "dashboard" });
  add(main, liveToggle(), body);
  const render = async () => {
    const { ops, complete } = await readAll();
    const now = Date.now();
    const { all, byType } = figures(ops, now, hours);
    const head = h("thead", {}, h("tr", {}, ["Job type", "Succeeded", "Failed", "Cancelled", "Ended / min", "Unknown parks", "Quarantines",
      "Parked now", "Approvals waiting", "Queued", "Oldest queued", "Oldest parked"].map((c) => h("th", { scope: "col" }, c))));
    fill(body,
      h("p", { class: "muted", "data-test": "dash-coverage" }, `${ops.length} operations read${complete ? " (all of them)" : ` (the first ${ops.length}: figures are lower bounds)`}.`),
      h("table", { class: "ops", "data-test": "dash-table" }, head,
        h("tbody", {}, row("all", all, now, hours, "dash-all"),
          Object.keys(byType).sort().map((name) => row(name, byType[name], now, hours, "dash-type")))),
      h("h2", {}, "Lifecycles ended per minute, by outcome"), timelineTable(all, now, hours));
    liveStamp();
  };
  try { await render(); } catch (error) { add(body, errorBox(error, "Reading the operations")); }
  poll(render);
}
