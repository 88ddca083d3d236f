"""The embedded endpoint in its own process, driven by one-line JSON commands on stdin.

``python -m leasefence_tools.bench.server`` starts the stock :class:`EmbeddedAws` (moto's server with
one lock per request, as ``leasefence local`` serves it), prints ``{"port": N}`` and then answers
one JSON line per command line:

* ``{"cmd": "populate", ...}``: write engine-built items straight into the backend (setup only;
  see :mod:`leasefence_tools.bench.harness`).
* ``{"cmd": "accelerate", "on": true|false}``: install or remove the index-query accelerator.
* ``{"cmd": "self_check"}``: compare accelerated and stock query answers on a sample table;
  ``{"cmd": "verify", ...}``: the same on a benchmark's table as it is now.

It stops when its standard input closes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any

from leasefence.clock import ManualClock
from leasefence.schema import TableSpec
from leasefence_tools.bench import harness


def _answer(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def main() -> None:
    accelerator: contextlib.ExitStack | None = None
    with harness.BenchAws() as bench:
        _answer({"port": bench.aws.port})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                cmd = request.get("cmd")
                if cmd == "populate":
                    started = time.perf_counter()
                    spec = TableSpec(
                        table_name=request["table"],
                        due_shards=request["due_shards"],
                        sweep_shards=request["sweep_shards"],
                    )
                    clock = ManualClock(request["now_ms"])
                    if request.get("kind") == "final_claim":
                        items = harness.final_claim_items(
                            spec,
                            request["tenant"],
                            request["count"],
                            clock,
                            request["lease_expires_at"],
                            prefix=request["prefix"],
                        )
                    else:
                        items = harness.engine_items(
                            spec,
                            request["tenant"],
                            request["count"],
                            clock,
                            prefix=request["prefix"],
                        )
                    bench.populate(spec.table_name, items)
                    _answer({"ok": True, "seconds": round(time.perf_counter() - started, 2)})
                elif cmd == "accelerate":
                    with bench.lock:  # never swap moto's code under a request in flight
                        if request.get("on") and accelerator is None:
                            accelerator = contextlib.ExitStack()
                            accelerator.enter_context(harness.accelerated_queries())
                        elif not request.get("on") and accelerator is not None:
                            accelerator.close()
                            accelerator = None
                    _answer({"ok": True})
                elif cmd == "verify":
                    names = {"due": ("due_pk", "due_at"), "sweep": ("sweep_pk", "sweep_at")}[
                        request["index"]
                    ]
                    compared = harness.compare(
                        bench.client(),
                        request["table"],
                        request["index"],
                        *names,
                        request["partitions"],
                        request["nows"],
                        tuple(request["limits"]),
                        max_pages=int(request.get("max_pages", 2)),
                    )
                    _answer({"ok": True, "compared": compared})
                elif cmd == "self_check":
                    _answer(
                        {
                            "ok": True,
                            "compared": harness.self_check(
                                bench, int(request.get("per_tenant", 60))
                            ),
                        }
                    )
                else:
                    _answer({"error": f"unknown command {cmd!r}"})
            except Exception as error:  # noqa: BLE001 - reported to the parent, which raises
                _answer({"error": f"{type(error).__name__}: {error}"})
        if accelerator is not None:
            accelerator.close()


if __name__ == "__main__":
    main()
