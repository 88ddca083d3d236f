// Routing: the view named by the URL's fragment (the entry module registers the views by name).

import { state } from "./core.js";
import { errorBox, fill, h, parseHash } from "./render.js";
import { stopPolling } from "./live.js";

// name -> (main, parts, params) => Promise; the entry module fills it.
export const views = {};
// Set by the entry module: the sign-in page, and taking a token from the link.
export const hooks = { signIn: () => {}, tokenFromFragment: () => false };

export async function route() {
  stopPolling();
  hooks.tokenFromFragment();
  if (!state.token) return hooks.signIn();
  const { parts, params } = parseHash();
  const view = parts[0] || "operations";
  state.view = view;
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === view || (view === "op" && a.dataset.view === "operations") ||
        (view === "approval" && a.dataset.view === "approvals")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const main = document.getElementById("main");
  try {
    await (views[view] || views.operations)(main, parts, params);
  } catch (error) {
    fill(main, h("h1", {}, "Something went wrong"), errorBox(error));
  }
  const heading = main.querySelector("h1");
  if (heading && route.focus) { heading.setAttribute("tabindex", "-1"); heading.focus(); }
  route.focus = true;
}
