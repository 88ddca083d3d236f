// Shared rendering: elements, badges, times, facts, the error box, the confirmation dialog, links
// within the console, and the action button gated on scopes.

import { api, has, scopesOf, state, uuid } from "./core.js";

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// Appends children to el: arrays flattened, null, undefined and false left out.
export function add(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function fill(el, ...children) {
  el.replaceChildren();
  return add(el, ...children);
}

export function fmtTime(value) {
  if (!value) return "–";
  const d = new Date(value);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function age(value, now = Date.now()) {
  if (!value) return "–";
  let s = Math.round((now - new Date(value).getTime()) / 1000);
  const future = s < 0;
  s = Math.abs(s);
  const text = s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m ${s % 60}s`
    : s < 86400 ? `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
    : `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  return future ? `in ${text}` : `${text} ago`;
}

export function badge(value, kind = "state") {
  return h("span", { class: `badge ${kind}-${String(value).replace(/[^a-z_-]/gi, "")}` }, value);
}

export function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

export function toast(text) {
  const el = document.getElementById("toast");
  el.textContent = text;
  el.classList.add("shown");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => el.classList.remove("shown"), 4000);
}

export function errorBox(error, context) {
  const body = error.body ? JSON.stringify(error.body) : "";
  return h("div", { class: "error", role: "alert", "data-test": "api-error" },
    h("strong", {}, context ? `${context}: ` : "", error.status ? `${error.status} ${error.code}` : error.code),
    " ", error.message,
    body ? h("details", {}, h("summary", {}, "The API's answer"), h("pre", { class: "json" }, body)) : null);
}

export function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/operations";
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

export function link(parts, params) {
  const path = "#/" + parts.map(encodeURIComponent).join("/");
  const query = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString() : "";
  return query ? `${path}?${query}` : path;
}

export function needs(scope, what) {
  return h("p", { class: "notice", "data-test": "needs-scope" },
    `${what} needs the scope ${scope}; this token has ${[...scopesOf(state.claims)].join(", ") || "none"}.`);
}

// An action button: disabled, with the reason shown next to it, when the token lacks every scope
// that would open it, or when the operation's state makes the API refuse it (attrs.refused: why).
export function action(label, scopes, onclick, attrs = {}) {
  const { refused, ...rest } = attrs;
  const missing = !scopes.some((s) => has(s));
  const why = missing ? `needs ${scopes.join(" or ")}` : refused || null;
  const reasonId = `why-${uuid()}`;
  const button = h("button", { type: "button", ...rest, disabled: Boolean(why) || rest.disabled, "aria-describedby": why ? reasonId : null, onclick }, label);
  return why
    ? h("span", { class: "gated" }, button, h("span", { class: "why", id: reasonId, "data-test": "why" }, why))
    : button;
}

export function confirmDialog(title, body, yes) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  fill(document.getElementById("confirm-body"), ...[body].flat());
  const yesButton = document.getElementById("confirm-yes");
  const noButton = document.getElementById("confirm-no");
  yesButton.textContent = yes;
  return new Promise((resolve) => {
    const done = (value) => {
      yesButton.onclick = noButton.onclick = dialog.oncancel = null;
      dialog.close();
      resolve(value);
    };
    yesButton.onclick = () => done(true);
    noButton.onclick = () => done(false);
    dialog.oncancel = (event) => { event.preventDefault(); done(false); };
    dialog.showModal();
    noButton.focus();
  });
}

export function facts(rows) {
  return h("dl", { class: "facts" }, rows.filter(Boolean).map(([k, v, test]) => [
    h("dt", {}, k), h("dd", test ? { "data-test": test } : {}, v === null || v === undefined || v === "" ? "–" : v)]));
}


export function opLink(op) {
  return h("a", { href: link(["op", op.operation_id]), class: "opid", "data-test": "op-link" }, op.operation_id);
}

// The job type's owner and runbook, from its catalogue entry (links out).
export function ownerRunbook(jobType, entry) {
  if (!entry) return h("span", { class: "muted", "data-test": "owner-runbook" }, "not catalogued: no owner or runbook on record");
  return h("span", { "data-test": "owner-runbook" }, "owner ", h("strong", { "data-test": "owner" }, entry.owner || "–"), " · ",
    entry.runbook_url ? h("a", { href: entry.runbook_url, rel: "noreferrer noopener", target: "_blank", "data-test": "runbook" }, "runbook") : "no runbook");
}

// An operation's intent in words (class D: what the holder was about to do, under which fence).
export function intentText(op) {
  return op.intent ? `"${op.intent.what}" under fence ${op.intent.fence}` : null;
}

// One operation's page: its heading, and the operation read (null: the API's refusal is shown).
export async function operationPage(main, title, id) {
  fill(main, h("h1", {}, h("span", { class: "muted" }, `${title} `), h("span", { "data-test": "op-title" }, id)));
  try {
    return (await api("GET", `/v1/operations/${encodeURIComponent(id)}`)).data;
  } catch (error) {
    add(main, errorBox(error, "Reading the operation"));
    return null;
  }
}
