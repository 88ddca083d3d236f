// The API and who is signed in: the state every view shares, the token's scopes, and one call to
// the HTTP API (its error body kept whole, a 401 handed to the sign-in page).

export const BASE = location.pathname.replace(/\/console\/?$/, "");
export const SCOPES = {
  produce: "leasefence/produce",
  work: "leasefence/work",
  operate: "leasefence/operate",
  approve: "leasefence/approve",
};
export const STATES = [
  "queued", "claimed", "awaiting_approval", "unknown", "quarantined",
  "succeeded", "failed_terminal", "cancelled",
];
export const PARKED = new Set(["unknown", "quarantined"]);
export const TOKEN_KEY = "leasefence.console.token";

export const state = { token: null, claims: null, config: null, advice: null, poll: null, view: null };

// What a 401 does (set by the entry module: back to the sign-in page).
export const hooks = { unauthorized: () => {} };

export function b64url(bytes) {
  let text = "";
  for (const b of new Uint8Array(bytes)) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function decodeJwt(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = part + "=".repeat((4 - (part.length % 4)) % 4);
    const bytes = Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return null;
  }
}

export function scopesOf(claims) {
  const raw = claims && claims.scope;
  if (Array.isArray(raw)) return new Set(raw.map(String));
  return new Set(String(raw || "").replace(/^\[|\]$/g, "").split(/\s+/).filter(Boolean));
}

export function has(scope) {
  return scopesOf(state.claims).has(scope);
}

export function who(claims) {
  return (claims && (claims.sub || claims.client_id || claims.username)) || "(nobody)";
}


export function uuid() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return b64url(crypto.getRandomValues(new Uint8Array(16)));
}

// ------------------------------------------------------------------------------ the API

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || (body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "error";
    this.body = body;
  }
}

export async function api(method, path, body) {
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
    if (response.status === 401) hooks.unauthorized(`The API refused the token: ${failure.message}`);
    throw failure;
  }
  return { status: response.status, data, text };
}


export async function advice() {
  if (!state.advice) {
    const { data } = await api("GET", "/v1/target-classes");
    state.advice = Object.fromEntries(data.target_classes.map((c) => [c.target_class, c]));
  }
  return state.advice;
}

// The catalogue's entries by job type (owner, runbook, approval summary), read at most once a
// minute; {} when the token may not read the catalogue.
export async function jobTypes() {
  const now = Date.now();
  if (!state.jobTypes || now - state.jobTypes.at > 60000) {
    let entries = [];
    try { entries = (await api("GET", "/v1/job-types")).data.job_types; } catch { entries = []; }
    state.jobTypes = { at: now, byName: Object.fromEntries(entries.map((j) => [j.job_type, j])) };
  }
  return state.jobTypes.byName;
}
