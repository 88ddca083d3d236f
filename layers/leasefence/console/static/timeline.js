// An operation's history as a timeline (takeovers marked: the fence rose past a lapsed holder).

import { api } from "./core.js";
import { badge, fmtTime, h } from "./render.js";

export async function loadHistory(id, cursor) {
  const query = new URLSearchParams({ limit: "50" });
  if (cursor) query.set("cursor", cursor);
  return (await api("GET", `/v1/operations/${encodeURIComponent(id)}/history?${query}`)).data;
}

export function timeline(entries, dropped, expiredAt) {
  let fence = null;
  const items = entries.map((e) => {
    const raised = fence !== null && e.fence > fence;
    fence = e.fence;
    return h("li", { class: `entry t-${e.transition}`, "data-test": "history-entry", "data-transition": e.transition },
      h("div", { class: "when" }, h("span", { class: "seq" }, `#${e.sequence}`), " ", fmtTime(e.time)),
      h("div", { class: "what" },
        badge(e.transition, "transition"), " ",
        e.previous_state ? [badge(e.previous_state), " → "] : null, badge(e.state), " ",
        h("span", { class: `fence${raised ? " raised" : ""}`, title: raised ? "the fence rose" : "" }, `fence ${e.fence}`), " ",
        h("span", { class: "muted" }, `attempt ${e.attempt}`)),
      h("div", { class: "who" }, "by ", h("strong", {}, e.actor || "–"),
        e.transition === "takeover" ? h("span", { class: "takeover", "data-test": "takeover" }, ` took over from ${e.previous_actor || "a lapsed holder"} (its lease lapsed; its writes under fence ${e.fence - 1} are refused)`) : null),
      e.outcome_code ? h("div", {}, "outcome ", h("code", {}, e.outcome_code)) : null,
      e.reason ? h("div", { class: "reason" }, e.reason) : null,
      e.available_at ? h("div", { class: "muted" }, `claimable again ${fmtTime(e.available_at)}`) : null);
  });
  return [
    dropped ? h("p", { class: "muted" }, `${dropped} older entries were dropped to keep the history bounded (the first entry is kept).`) : null,
    expiredAt ? h("p", { class: "muted", "data-test": "history-expired" }, `history expired ${fmtTime(expiredAt)} (kept for the payload retention after the operation ended; its identity stays)`) : null,
    h("ol", { class: "timeline", "data-test": "timeline" }, items),
  ];
}
