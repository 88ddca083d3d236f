// Live refresh: a view's refresh every few seconds while it is shown, slower after a failure.

import { state } from "./core.js";
import { h } from "./render.js";

const POLL_MS = 5000;
const POLL_MAX_MS = 60000;

export function stopPolling() {
  if (state.poll) clearTimeout(state.poll.timer);
  state.poll = null;
}

// Calls refresh now and then again every POLL_MS while the view is shown; after a failure the
// wait doubles (up to POLL_MAX_MS), and a hidden page is not polled.
export function poll(refresh) {
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

export function liveToggle() {
  const box = h("input", { type: "checkbox", id: "live", checked: true, onchange: () => {
    if (state.poll) state.poll.live = box.checked;
  } });
  return h("span", { class: "live" }, box, h("label", { for: "live" }, " Live"),
    h("span", { class: "muted", "data-test": "live-status" }, ""));
}

export function liveStamp() {
  const status = document.querySelector("[data-test=live-status]");
  if (status) status.textContent = ` updated ${new Date().toLocaleTimeString()}`;
}

// A link that carries a token in its fragment (what `leasefence local` prints): take the token,
