// The leasefence operator console, as native ES modules (no framework, no dependency, no build
// step, nothing loaded from anywhere but this API). Every piece of data comes from the HTTP API
// with the signed-in person's bearer token, so the page can do nothing the API would refuse to
// that token; a refusal is shown with the API's own error body.
//
// This entry module registers the views and starts the page. Shared: core.js (the API, the token),
// render.js (elements and widgets), live.js (refresh), router.js, signin.js, timeline.js,
// resolve.js; one module per view (view-*.js).

import { TOKEN_KEY, hooks as apiHooks, state } from "./core.js";
import { hooks, route, views } from "./router.js";
import { finishOidc, loadConfig, renderSignIn, renderWho, signedOut, takeToken, tokenFromFragment } from "./signin.js";
import { viewApproval, viewApprovals } from "./view-approvals.js";
import { viewCatalogue } from "./view-catalogue.js";
import { viewDashboard } from "./view-dashboard.js";
import { viewOperation } from "./view-operation.js";
import { viewOperations } from "./view-operations.js";
import { viewSettings } from "./view-settings.js";
import { viewTriage } from "./view-triage.js";

apiHooks.unauthorized = (message) => signedOut(message);
hooks.signIn = renderSignIn;
hooks.tokenFromFragment = tokenFromFragment;
Object.assign(views, {
  operations: (main, parts, params) => viewOperations(main, params),
  op: (main, parts) => viewOperation(main, parts.slice(1).join("/")),
  triage: (main) => viewTriage(main),
  approvals: (main) => viewApprovals(main),
  approval: (main, parts) => viewApproval(main, parts.slice(1).join("/")),
  dashboard: (main, parts, params) => viewDashboard(main, params),
  catalogue: (main) => viewCatalogue(main),
  settings: (main) => viewSettings(main),
});

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
