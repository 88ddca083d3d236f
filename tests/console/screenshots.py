"""Screenshots of the operator console's main views, from a real ``leasefence local --samples``
in Debian's Chromium: ``make screenshots`` (or ``python tests/console/screenshots.py [DIR]``)
writes ``docs/console/*.png``, which docs/console.md shows. Run it again after changing the page.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.support.browser import browser, local_stack

ROOT = Path(__file__).resolve().parents[2]
#: name -> (who signs in, scopes, view, what must be on the page before the shot, scroll to)
VIEWS = {
    "operations": ("dev:console", "produce work operate approve", "/operations", "[data-test=op-row]"),
    "operation": ("dev:console", "produce work operate approve", "/op/sync-4001", "[data-test=history-entry]"),
    "triage": ("dev:console", "produce work operate approve", "/triage", "[data-test=triage-row]"),
    "resolve": ("dev:console", "produce work operate approve", "/op/email-2001", "[data-test=resolve]"),
    "approvals": ("approver-1", "approve", "/approvals", "[data-test=summary][data-state=shown]"),
    "approval": ("approver-1", "approve", "/approval/refund-1001", "[data-test=seen-hash]"),
    "dashboard": ("dev:console", "produce work operate approve", "/dashboard", "[data-test=dash-table]"),
    "catalogue": ("dev:console", "produce work operate approve", "/catalogue", "[data-test=controls]"),
    "settings": ("dev:console", "produce work operate approve", "/settings", "[data-test=strict]"),
    "read-only": ("producer-2", "produce", "/op/receipt-5001", "[data-test=erase]"),
}


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work, local_stack(Path(work)) as local, browser() as chromium:
        context = chromium.new_context(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
        page = context.new_page()
        for name, (sub, scopes, view, ready) in VIEWS.items():
            page.goto(local.link(sub, scopes, view=view))
            page.wait_for_selector(ready, timeout=20_000)
            page.wait_for_timeout(300)  # the live refresh's first answer
            page.evaluate("document.activeElement && document.activeElement.blur()")
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
        context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "console"))
