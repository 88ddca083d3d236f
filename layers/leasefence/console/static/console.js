// The leasefence operator console: one module, no framework, no dependency, nothing loaded from
// anywhere but this API. Every piece of data comes from the HTTP API with the signed-in person's
// bearer token, so the page can do nothing the API would refuse to that token; a refusal is shown
// with the API's own error body.

const BASE = location.pathname.replace(/\/console\/?$/, "");
const SCOPES = {
  produce: "leasefence/produce",
  work: "leasefence/work",
  operate: "leasefence/operate",
  approve: "leasefence/approve",
};
const STATES = [
  "queued", "claimed", "awaiting_approval", "unknown", "quarantined",
  "succeeded", "failed_terminal", "cancelled",
];
const PARKED = new Set(["unknown", "quarantined"]);
const RESOLUTIONS = [
  ["requeue", "Requeue", "run it again (fresh attempt budget, next claim reconciles)"],
  ["succeeded", "Mark succeeded", "the side effect happened"],
  ["failed_terminal", "Mark failed", "it did not happen, and must not run again"],
];
const POLL_MS = 5000;
const POLL_MAX_MS = 60000;
const TOKEN_KEY = "leasefence.console.token";
const PKCE_KEY = "leasefence.console.pkce";

const state = { token: null, claims: null, config: null, advice: null, poll: null, view: null };

// ------------------------------------------------------------------------------ small helpers

function h(tag, attrs, ...children) {
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
function add(el, ...children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function fill(el, ...children) {
  el.replaceChildren();
  return add(el, ...children);
}

function b64url(bytes) {
  let text = "";
  for (const b of new Uint8Array(bytes)) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function decodeJwt(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = part + "=".repeat((4 - (part.length % 4)) % 4);
    const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

function scopesOf(claims) {
  const raw = claims && claims.scope;
  if (Array.isArray(raw)) return new Set(raw.map(String));
  return new Set(String(raw || "").replace(/^\[|\]$/g, "").split(/\s+/).filter(Boolean));
}

function has(scope) {
  return scopesOf(state.claims).has(scope);
}

function who(claims) {
  return (claims && (claims.sub || claims.client_id || claims.username)) || "(nobody)";
}

function fmtTime(value) {
  if (!value) return "–";
  const d = new Date(value);
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

function age(value, now = Date.now()) {
  if (!value) return "–";
  let s = Math.round((now - new Date(value).getTime()) / 1000);
  const future = s < 0;
  s = Math.abs(s);
  const text = s < 60 ? `${s}s` : s < 3600 ? `${Math.floor(s / 60)}m ${s % 60}s`
    : s < 86400 ? `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
    : `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
  return future ? `in ${text}` : `${text} ago`;
}

function badge(value, kind = "state") {
  return h("span", { class: `badge ${kind}-${String(value).replace(/[^a-z_-]/gi, "")}` }, value);
}

function json(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

function toast(text) {
  const el = document.getElementById("toast");
  el.textContent = text;
  el.classList.add("shown");
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => el.classList.remove("shown"), 4000);
}

function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return b64url(crypto.getRandomValues(new Uint8Array(16)));
}

// ------------------------------------------------------------------------------ the API

class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || (body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "error";
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(BASE + path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit",
    });
  } catch (error) {
    throw new ApiError(0, { error: { code: "network", message: `the API cannot be reached (${error.message})` } });
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  if (!response.ok) {
    const failure = new ApiError(response.status, data);
    if (response.status === 401) signedOut(`The API refused the token: ${failure.message}`);
    throw failure;
  }
  return { status: response.status, data, text };
}

function errorBox(error, context) {
  const body = error.body ? JSON.stringify(error.body) : "";
  return h("div", { class: "error", role: "alert", "data-test": "api-error" },
    h("strong", {}, context ? `${context}: ` : "", error.status ? `${error.status} ${error.code}` : error.code),
    " ", error.message,
    body ? h("details", {}, h("summary", {}, "The API's answer"), h("pre", { class: "json" }, body)) : null);
}

async function advice() {
  if (!state.advice) {
    const { data } = await api("GET", "/v1/target-classes");
    state.advice = Object.fromEntries(data.target_classes.map((c) => [c.target_class, c]));
  }
  return state.advice;
}

// ------------------------------------------------------------------------------ sign-in

async function loadConfig() {
  try {
    const response = await fetch(`${BASE}/console/config.json`, { cache: "no-store" });
    state.config = await response.json();
  } catch {
    state.config = { sign_in: "token", oidc: null };
  }
}

function takeToken(token, quiet) {
  const claims = decodeJwt(token);
  if (!claims) {
    if (!quiet) toast("That is not a JWT.");
    return false;
  }
  state.token = token;
  state.claims = claims;
  sessionStorage.setItem(TOKEN_KEY, token);
  return true;
}

function signedOut(message) {
  state.token = null;
  state.claims = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stopPolling();
  renderWho();
  renderSignIn(message);
}

async function oidcEndpoints() {
  const oidc = state.config.oidc;
  if (oidc.authorization_endpoint && oidc.token_endpoint) return oidc;
  const issuer = oidc.issuer.replace(/\/$/, "");
  const response = await fetch(`${issuer}/.well-known/openid-configuration`);
  const found = await response.json();
  return {
    ...oidc,
    authorization_endpoint: oidc.authorization_endpoint || found.authorization_endpoint,
    token_endpoint: oidc.token_endpoint || found.token_endpoint,
    logout_endpoint: oidc.logout_endpoint || found.end_session_endpoint,
  };
}

function redirectUri() {
  return location.origin + location.pathname;
}

async function startOidc() {
  const oidc = await oidcEndpoints();
  const verifier = b64url(crypto.getRandomValues(new Uint8Array(32)));
  const challenge = b64url(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  const nonce = b64url(crypto.getRandomValues(new Uint8Array(16)));
  sessionStorage.setItem(PKCE_KEY, JSON.stringify({ verifier, state: nonce, hash: location.hash }));
  const url = new URL(oidc.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code", client_id: oidc.client_id, redirect_uri: redirectUri(),
    scope: oidc.scopes, state: nonce, code_challenge: challenge, code_challenge_method: "S256",
  }).toString();
  location.assign(url.toString());
}

async function finishOidc(params) {
  const saved = JSON.parse(sessionStorage.getItem(PKCE_KEY) || "null");
  sessionStorage.removeItem(PKCE_KEY);
  history.replaceState(null, "", location.pathname + ((saved && saved.hash) || "#/operations"));
  if (params.get("error")) throw new Error(`${params.get("error")}: ${params.get("error_description") || ""}`);
  if (!saved || saved.state !== params.get("state")) throw new Error("the sign-in answer does not match the request (state)");
  const oidc = await oidcEndpoints();
  const response = await fetch(oidc.token_endpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code", client_id: oidc.client_id, code: params.get("code"),
      redirect_uri: redirectUri(), code_verifier: saved.verifier,
    }).toString(),
  });
  const data = await response.json();
  if (!response.ok || !data.access_token) throw new Error(data.error_description || data.error || "no access token");
  takeToken(data.access_token, false);
}

async function signOut() {
  const oidc = state.config && state.config.oidc;
  signedOut("Signed out.");
  if (oidc && state.config.sign_in === "oidc") {
    const endpoints = await oidcEndpoints().catch(() => oidc);
    if (endpoints.logout_endpoint) {
      const url = new URL(endpoints.logout_endpoint);
      url.search = new URLSearchParams({
        client_id: oidc.client_id, logout_uri: redirectUri(), post_logout_redirect_uri: redirectUri(),
      }).toString();
      location.assign(url.toString());
    }
  }
}

function renderWho() {
  const box = document.getElementById("who");
  fill(box, );
  if (!state.claims) return;
  const scopes = [...scopesOf(state.claims)].map((s) => s.replace(/^leasefence\//, ""));
  const exp = state.claims.exp ? new Date(state.claims.exp * 1000) : null;
  add(box, 
    // The identity the API records (sub); a person's user name beside it when the token has one.
    h("span", { "data-test": "who", title: state.claims.username ? `sub ${who(state.claims)}` : "" },
      h("strong", {}, state.claims.username && state.claims.username !== who(state.claims) ? state.claims.username : who(state.claims))),
    h("span", { class: "muted" }, " · tenant "), h("strong", { "data-test": "tenant" }, state.claims.tenant_id || "(none)"),
    h("span", { class: "scopes", "data-test": "scopes", title: exp ? `token expires ${fmtTime(exp)}` : "" },
      scopes.length ? scopes.map((s) => badge(s, "scope")) : badge("no scopes", "scope")),
    h("button", { type: "button", class: "link", onclick: signOut }, "Sign out"));
}

function renderSignIn(message) {
  const main = document.getElementById("main");
  const oidc = state.config && state.config.sign_in === "oidc";
  const input = h("textarea", { id: "token-input", rows: 4, "aria-label": "Bearer token", placeholder: "eyJ…" });
  fill(main, h("section", { class: "signin" },
    h("h1", {}, "Sign in"),
    message ? h("p", { class: "notice", role: "alert" }, message) : null,
    oidc ? h("p", {}, h("button", { type: "button", class: "primary", id: "oidc-sign-in", onclick: () => startOidc().catch((e) => toast(e.message)) },
      "Sign in with your identity provider")) : null,
    h("p", { class: "muted" }, oidc ? "Or paste a bearer token:" :
      "Locally, the link `leasefence local` prints signs you in. Or paste a bearer token (`leasefence token --tenant dev --sub alice`):"),
    input,
    h("p", {}, h("button", { type: "button", id: "token-sign-in", onclick: () => {
      if (takeToken(input.value.trim(), false)) { renderWho(); route(); }
    } }, "Use this token"))));
}

// ------------------------------------------------------------------------------ routing and polling

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/operations";
  const [path, query] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { parts, params: new URLSearchParams(query || "") };
}

function link(parts, params) {
  const path = "#/" + parts.map(encodeURIComponent).join("/");
  const query = params ? new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString() : "";
  return query ? `${path}?${query}` : path;
}

function stopPolling() {
  if (state.poll) clearTimeout(state.poll.timer);
  state.poll = null;
}

// Calls refresh now and then again every POLL_MS while the view is shown; after a failure the
// wait doubles (up to POLL_MAX_MS), and a hidden page is not polled.
function poll(refresh) {
  stopPolling();
  const handle = { delay: POLL_MS, timer: null, live: true };
  state.poll = handle;
  const tick = async () => {
    if (state.poll !== handle) return;
    if (handle.live && document.visibilityState !== "hidden") {
      try {
        await refresh();
        handle.delay = POLL_MS;
      } catch (error) {
        handle.delay = Math.min(handle.delay * 2, POLL_MAX_MS);
        const status = document.querySelector("[data-test=live-status]");
        if (status) status.textContent = `refresh failed (${error.message}); retrying in ${handle.delay / 1000}s`;
      }
    }
    if (state.poll === handle) handle.timer = setTimeout(tick, handle.delay);
  };
  handle.timer = setTimeout(tick, handle.delay);
  return handle;
}

function liveToggle() {
  const box = h("input", { type: "checkbox", id: "live", checked: true, onchange: () => {
    if (state.poll) state.poll.live = box.checked;
  } });
  return h("span", { class: "live" }, box, h("label", { for: "live" }, " Live"),
    h("span", { class: "muted", "data-test": "live-status" }, ""));
}

function liveStamp() {
  const status = document.querySelector("[data-test=live-status]");
  if (status) status.textContent = ` updated ${new Date().toLocaleTimeString()}`;
}

// A link that carries a token in its fragment (what `leasefence local` prints): take the token,
// take it out of the address bar at once, and go on to "view" (optional).
function tokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (!fragment.get("token")) return false;
  takeToken(fragment.get("token"), false);
  const next = (fragment.get("view") || "/operations").replace(/^#?\/?/, "/");
  history.replaceState(null, "", location.pathname + location.search + "#" + next);
  renderWho();
  return true;
}

async function route() {
  stopPolling();
  tokenFromFragment();
  if (!state.token) return renderSignIn();
  const { parts, params } = parseHash();
  const view = parts[0] || "operations";
  state.view = view;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === view || (view === "op" && a.dataset.view === "operations") ||
        (view === "approval" && a.dataset.view === "approvals")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  const views = {
    operations: () => viewOperations(main, params),
    op: () => viewOperation(main, parts.slice(1).join("/")),
    triage: () => viewTriage(main),
    approvals: () => viewApprovals(main),
    approval: () => viewApproval(main, parts.slice(1).join("/")),
    catalogue: () => viewCatalogue(main),
    settings: () => viewSettings(main),
  };
  try {
    await (views[view] || views.operations)();
  } catch (error) {
    fill(main, h("h1", {}, "Something went wrong"), errorBox(error));
  }
  const heading = main.querySelector("h1");
  if (heading && route.focus) { heading.setAttribute("tabindex", "-1"); heading.focus(); }
  route.focus = true;
}

function needs(scope, what) {
  return h("p", { class: "notice", "data-test": "needs-scope" },
    `${what} needs the scope ${scope}; this token has ${[...scopesOf(state.claims)].join(", ") || "none"}.`);
}

// An action button: disabled, with the reason shown next to it, when the token lacks every scope
// that would open it.
function action(label, scopes, onclick, attrs = {}) {
  const missing = !scopes.some((s) => has(s));
  const reasonId = `why-${uuid()}`;
  const button = h("button", { type: "button", ...attrs, disabled: missing || attrs.disabled, "aria-describedby": missing ? reasonId : null, onclick }, label);
  return missing
    ? h("span", { class: "gated" }, button, h("span", { class: "why", id: reasonId }, `needs ${scopes.join(" or ")}`))
    : button;
}

function confirmDialog(title, body, yes) {
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

// ------------------------------------------------------------------------------ operations

function opLink(op) {
  return h("a", { href: link(["op", op.operation_id]), class: "opid", "data-test": "op-link" }, op.operation_id);
}

function opRow(op, now) {
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

function opTable(ops, empty) {
  const now = Date.now();
  return h("table", { class: "ops", "data-test": "op-table" },
    h("thead", {}, h("tr", {}, ["Operation", "Job type", "State", "Class", "Fence", "Attempts", "Updated", "Outcome / reason"].map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ops.length ? ops.map((op) => opRow(op, now)) : h("tr", {}, h("td", { colspan: 8, class: "muted" }, empty))));
}

function toLocalInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

const FILTERS = ["state", "job_type", "target_class", "updated_after", "updated_before", "q", "limit", "cursor"];

function filterQuery(params, withState = true) {
  const query = new URLSearchParams();
  for (const name of FILTERS) {
    if (!withState && (name === "state" || name === "cursor" || name === "limit")) continue;
    const value = params.get(name);
    if (value) query.set(name, value);
  }
  return query;
}

async function viewOperations(main, params) {
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
    for (const name of ["state", "job_type", "target_class", "q", "limit"]) next[name] = (data.get(name) || "").trim();
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
        const ops = page.data.operations;
        fill(results, opTable(ops, page.data.next_cursor
          ? "Nothing matched in this page of the tenant's operations; the next page may hold more."
          : "No operation matches."));
        fill(pager, 
          params.get("cursor") ? h("button", { type: "button", onclick: () => history.back() }, "Previous page") : null,
          page.data.next_cursor ? h("a", { class: "button", "data-test": "next-page",
            href: link(["operations"], { ...Object.fromEntries(filterQuery(params)), cursor: page.data.next_cursor }) }, "Next page") : null,
          h("span", { class: "muted" }, ` ${ops.length} shown, in id order`));
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

// ------------------------------------------------------------------------------ one operation

function facts(rows) {
  return h("dl", { class: "facts" }, rows.filter(Boolean).map(([k, v, test]) => [
    h("dt", {}, k), h("dd", test ? { "data-test": test } : {}, v === null || v === undefined || v === "" ? "–" : v)]));
}

function leaseText(op) {
  if (!op.lease_expires_at) return "–";
  const left = new Date(op.lease_expires_at).getTime() - Date.now();
  return `${fmtTime(op.lease_expires_at)} (${left > 0 ? `expires ${age(op.lease_expires_at)}` : `lapsed ${age(op.lease_expires_at)}`})`;
}

async function loadHistory(id, cursor) {
  const query = new URLSearchParams({ limit: "50" });
  if (cursor) query.set("cursor", cursor);
  return (await api("GET", `/v1/operations/${encodeURIComponent(id)}/history?${query}`)).data;
}

function timeline(entries, dropped, expiredAt) {
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

function resolveForm(op, classAdvice, onDone) {
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

async function cancelOp(op, out, after) {
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

async function eraseOp(op, out, after) {
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

async function viewOperation(main, id) {
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

// ------------------------------------------------------------------------------ triage

async function viewTriage(main) {
  fill(main, h("h1", {}, "Triage"),
    h("p", { class: "muted" }, "Operations nothing automatic will move: an operator decides. Oldest first."));
  if (!has(SCOPES.operate)) { add(main, needs(SCOPES.operate, "Triage")); return; }
  const classes = await advice().catch(() => ({}));
  const body = h("div", {}, liveToggle());
  add(main, body);
  const sections = {};
  for (const s of ["unknown", "quarantined"]) {
    sections[s] = h("section", { "data-test": `queue-${s}` });
    add(body, sections[s]);
  }
  const open = new Set();
  const fingerprints = {};
  const render = async () => {
    for (const s of ["unknown", "quarantined"]) {
      const { data, text } = await api("GET", `/v1/operations?state=${s}&limit=200`);
      if (fingerprints[s] === text || sections[s].contains(document.activeElement) && fingerprints[s]) continue;
      fingerprints[s] = text;
      const ops = data.operations.sort((a, b) => a.updated_at.localeCompare(b.updated_at));
      const now = Date.now();
      const rows = ops.map((op) => {
        const detail = h("tr", { class: "detail", hidden: !open.has(op.operation_id) },
          h("td", { colspan: 7 }, resolveForm(op, classes[op.target_class], () => { open.delete(op.operation_id); fingerprints[s] = null; render(); })));
        const toggle = h("button", { type: "button", "aria-expanded": String(open.has(op.operation_id)), "data-test": "triage-open", onclick: () => {
          const shown = detail.hidden;
          detail.hidden = !shown;
          toggle.setAttribute("aria-expanded", String(shown));
          if (shown) { open.add(op.operation_id); detail.querySelector("textarea")?.focus(); } else open.delete(op.operation_id);
        } }, "Resolve…");
        return [h("tr", { "data-test": "triage-row", "data-id": op.operation_id },
          h("td", {}, opLink(op)), h("td", {}, op.job_type), h("td", { class: "num" }, op.target_class),
          h("td", { title: fmtTime(op.updated_at), "data-test": "age" }, age(op.updated_at, now)),
          h("td", { class: "num" }, `${op.attempts}/${op.max_attempts}`),
          h("td", { class: "clip" }, op.reason || "–"), h("td", {}, toggle)), detail];
      });
      fill(sections[s], h("h2", {}, badge(s), ` ${ops.length}${data.next_cursor ? "+" : ""}`),
        ops.length ? h("table", { class: "ops" },
          h("thead", {}, h("tr", {}, ["Operation", "Job type", "Class", "Parked", "Attempts", "Reason", ""].map((c) => h("th", { scope: "col" }, c)))),
          h("tbody", {}, rows)) : h("p", { class: "muted" }, `Nothing is ${s}.`));
    }
    liveStamp();
  };
  try { await render(); } catch (error) { add(body, errorBox(error, "Listing")); }
  poll(render);
}

// ------------------------------------------------------------------------------ approvals

async function viewApprovals(main) {
  fill(main, h("h1", {}, "Approvals"),
    h("p", { class: "muted" }, "Operations waiting for a person: nothing claims them until approved."));
  if (!has(SCOPES.approve) && !has(SCOPES.operate)) { add(main, needs(SCOPES.approve, "The approvals inbox")); return; }
  if (!has(SCOPES.approve)) add(main, needs(SCOPES.approve, "Approving or rejecting"));
  const list = h("div", { "data-test": "approvals" });
  add(main, liveToggle(), list);
  let shown = "";
  const render = async () => {
    const { data, text } = await api("GET", "/v1/operations?state=awaiting_approval&limit=200");
    if (text !== shown) {
      shown = text;
      const now = Date.now();
      const ops = data.operations.sort((a, b) => (a.approval_expires_at || "").localeCompare(b.approval_expires_at || ""));
      fill(list, ops.length ? h("table", { class: "ops" },
        h("thead", {}, h("tr", {}, ["Operation", "Job type", "Requested by", "Requested", "Deadline", ""].map((c) => h("th", { scope: "col" }, c)))),
        h("tbody", {}, ops.map((op) => h("tr", { "data-test": "approval-row", "data-id": op.operation_id },
          h("td", {}, h("a", { href: link(["approval", op.operation_id]), class: "opid" }, op.operation_id)),
          h("td", {}, op.job_type), h("td", {}, op.enqueued_by || "–"),
          h("td", { title: fmtTime(op.created_at) }, age(op.created_at, now)),
          h("td", { title: fmtTime(op.approval_expires_at) }, age(op.approval_expires_at, now)),
          h("td", {}, h("a", { class: "button", href: link(["approval", op.operation_id]) }, "Review")))))) :
        h("p", { class: "muted" }, "Nothing awaits approval."));
    }
    liveStamp();
  };
  try { await render(); } catch (error) { add(list, errorBox(error, "Listing")); }
  poll(render);
}

function readable(value) {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    return h("table", { class: "payload" }, h("tbody", {}, Object.entries(value).map(([k, v]) => h("tr", {},
      h("th", { scope: "row" }, k),
      h("td", {}, v !== null && typeof v === "object" ? json(v) : String(v))))));
  }
  return json(value);
}

async function viewApproval(main, id) {
  fill(main, h("h1", {}, h("span", { class: "muted" }, "Approve "), h("span", { "data-test": "op-title" }, id)));
  let op;
  try {
    op = (await api("GET", `/v1/operations/${encodeURIComponent(id)}`)).data;
  } catch (error) {
    add(main, errorBox(error, "Reading the operation"));
    return;
  }
  const out = h("div", { "data-test": "action-result" });
  const payloadBox = h("section", {}, h("h2", {}, "Payload"));
  let seenHash = null;
  try {
    const { text } = await api("GET", `/v1/operations/${encodeURIComponent(id)}/payload`);
    // The hash of exactly the bytes shown (RFC 8785 canonical JSON, as stored): what an approval binds.
    seenHash = "sha256:" + [...new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)))]
      .map((b) => b.toString(16).padStart(2, "0")).join("");
    add(payloadBox, readable(JSON.parse(text)),
      h("details", {}, h("summary", {}, "As stored (canonical JSON)"), h("pre", { class: "json" }, text)));
  } catch (error) {
    add(payloadBox, errorBox(error, "Reading the payload"));
  }
  const matches = seenHash !== null && seenHash === op.payload_hash;
  const note = h("textarea", { id: "reject-note", rows: 2, maxlength: 1024, "data-test": "reject-note", placeholder: "Why it is rejected (kept as the operation's reason)" });
  const awaiting = op.state === "awaiting_approval";
  const approve = action("Approve this payload", [SCOPES.approve], async () => {
    fill(out, );
    try {
      const { data } = await api("POST", `/v1/operations/${encodeURIComponent(id)}/approve`, { payload_hash: seenHash || op.payload_hash });
      toast(`${id} approved: ${data.operation.state}`);
      add(out, h("p", { class: "ok", "data-test": "approved" }, `Approved by ${data.operation.approved_by}: it is ${data.operation.state}.`));
      setTimeout(() => { if (parseHash().parts[1] === id) route(); }, 1500);
    } catch (error) {
      add(out, errorBox(error, "Approval refused"));
    }
  }, { class: "primary", "data-test": "approve", disabled: !awaiting || seenHash === null });
  const reject = action("Reject", [SCOPES.approve], async () => {
    fill(out, );
    if (!note.value.trim()) {
      add(out, h("p", { class: "error", role: "alert" }, "Say why in the note before rejecting."));
      note.focus();
      return;
    }
    try {
      const { data } = await api("POST", `/v1/operations/${encodeURIComponent(id)}/reject`, { note: note.value.trim() });
      toast(`${id} rejected`);
      add(out, h("p", { class: "ok", "data-test": "rejected" }, `Rejected: it is ${data.operation.state}.`));
    } catch (error) {
      add(out, errorBox(error, "Rejection refused"));
    }
  }, { class: "danger", "data-test": "reject", disabled: !awaiting });
  add(main, 
    h("p", {}, badge(op.state), " ", h("span", { class: "muted" }, `${op.job_type} · class ${op.target_class}`), " ",
      h("a", { href: link(["op", id]) }, "Operation details and history")),
    facts([
      ["Requested by", op.enqueued_by, "requester"],
      ["Requested", `${fmtTime(op.created_at)} (${age(op.created_at)})`],
      ["Deadline", op.approval_expires_at ? `${fmtTime(op.approval_expires_at)} (${age(op.approval_expires_at)})` : "–", "deadline"],
      ["Payload hash", h("code", { class: "hash", "data-test": "payload-hash" }, op.payload_hash)],
      ["Shown payload hashes to", seenHash ? h("span", {}, h("code", { class: "hash", "data-test": "seen-hash" }, seenHash), " ",
        matches ? badge("matches", "check") : badge("differs", "warn")) : "–"],
      op.approved_by ? ["Approved by", op.approved_by] : null,
      op.reason ? ["Reason", op.reason] : null,
    ]),
    payloadBox,
    h("section", { class: "decide" }, h("h2", {}, "Decide"),
      awaiting ? null : h("p", { class: "notice" }, `It is ${op.state}: nothing to decide.`),
      h("p", { class: "muted" }, "Approving sends the hash of the payload shown above: if the payload changed since, the API refuses it (payload_mismatch). You cannot approve what you enqueued."),
      h("div", { class: "actions" }, approve), h("label", { for: "reject-note" }, "Note"), note, h("div", { class: "actions" }, reject), out));
  const history = h("section", { class: "history" }, h("h2", {}, "History"));
  add(main, history);
  try {
    const page = await loadHistory(id);
    add(history, ...timeline(page.entries, page.dropped, page.history_expired_at));
  } catch (error) {
    add(history, errorBox(error, "Reading the history"));
  }
}

// ------------------------------------------------------------------------------ catalogue and settings

async function viewCatalogue(main) {
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

async function viewSettings(main) {
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

// ------------------------------------------------------------------------------ start

async function start() {
  await loadConfig();
  const query = new URLSearchParams(location.search);
  let message = null;
  if (tokenFromFragment()) {
    // signed in from the link
  } else if (query.get("code") || query.get("error")) {
    try { await finishOidc(query); } catch (error) { message = `Sign-in failed: ${error.message}`; }
  } else if (sessionStorage.getItem(TOKEN_KEY)) {
    takeToken(sessionStorage.getItem(TOKEN_KEY), true);
  }
  if (state.claims && state.claims.exp && state.claims.exp * 1000 < Date.now()) {
    signedOut("Your token expired: sign in again.");
    return;
  }
  renderWho();
  window.addEventListener("hashchange", route);
  if (!state.token) { renderSignIn(message); return; }
  route.focus = false;
  await route();
}

document.addEventListener("keydown", (event) => {
  if (event.key === "/" && !/INPUT|TEXTAREA|SELECT/.test(document.activeElement.tagName)) {
    const search = document.querySelector("[data-test=filter-text]");
    if (search) { event.preventDefault(); search.focus(); }
  }
});

start();
