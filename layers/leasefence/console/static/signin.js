// Signing in: a token from the link's fragment or pasted, or OpenID Connect (authorization code
// with PKCE); who is signed in, in the header; signing out.

import { BASE, TOKEN_KEY, b64url, decodeJwt, scopesOf, state, who } from "./core.js";
import { stopPolling } from "./live.js";
import { add, badge, fill, fmtTime, h, toast } from "./render.js";
import { route } from "./router.js";

const PKCE_KEY = "leasefence.console.pkce";

export async function loadConfig() {
  try {
    const response = await fetch(`${BASE}/console/config.json`, { cache: "no-store" });
    state.config = await response.json();
  } catch {
    state.config = { sign_in: "token", oidc: null };
  }
}

export function takeToken(token, quiet) {
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

export function signedOut(message) {
  state.token = null;
  state.claims = null;
  sessionStorage.removeItem(TOKEN_KEY);
  stopPolling();
  renderWho();
  renderSignIn(message);
}

export async function oidcEndpoints() {
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

export function redirectUri() {
  return location.origin + location.pathname;
}

export async function startOidc() {
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

export async function finishOidc(params) {
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

export async function signOut() {
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

export function renderWho() {
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

export function renderSignIn(message) {
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


// A link that carries a token in its fragment (what `leasefence local` prints): take the token,
// take it out of the address bar at once, and go on to "view" (optional).
export function tokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.replace(/^#/, ""));
  if (!fragment.get("token")) return false;
  takeToken(fragment.get("token"), false);
  const next = (fragment.get("view") || "/operations").replace(/^#?\/?/, "/");
  history.replaceState(null, "", location.pathname + location.search + "#" + next);
  renderWho();
  return true;
}
