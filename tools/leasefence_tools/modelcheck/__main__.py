"""``python -m leasefence_tools.modelcheck``: explore every interleaving at a bound and print the
distinct states, the time and whether the search finished with every invariant held; with
``--mutations``, run each re-introduced bug at its bound and print the counterexample found."""

from __future__ import annotations

import argparse
import logging
import resource
import signal
import sys
import time
from pathlib import Path

from leasefence_tools.modelcheck.checkpoint import Checkpoint
from leasefence_tools.modelcheck.explorer import explore
from leasefence_tools.modelcheck.memo import MemoClient
from leasefence_tools.modelcheck.mutations import LARGE_MUTATIONS, MUTATIONS
from leasefence_tools.modelcheck.protocol import Bound
from leasefence_tools.modelcheck.symmetry import NONE, OPS, WORKERS_ONLY, abstractable
from leasefence_tools.modelcheck.world import World


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasefence_tools.modelcheck")
    parser.add_argument("--kinds", default="bd", help="one letter per operation: b, d, g, r")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--clock-jumps", type=int, default=1)
    parser.add_argument("--lost-answers", type=int, default=1)
    parser.add_argument("--requeues", type=int, default=1, help="per operation")
    parser.add_argument(
        "--total-requeues", type=int, default=None, help="in all (default: --requeues each)"
    )
    parser.add_argument(
        "--erases", type=int, default=None, help="erasures in all (default: each operation once)"
    )
    parser.add_argument(
        "--inflight", type=int, default=0, help="claim-next requests resent while they run"
    )
    parser.add_argument("--no-erase", action="store_true")
    parser.add_argument("--no-cancel", action="store_true")
    parser.add_argument(
        "--symmetry",
        choices=(OPS, WORKERS_ONLY, NONE),
        default=OPS,
        help="ids renamed into one state: workers and operations of one kind (ops), workers"
        " only (exact), or none",
    )
    parser.add_argument(
        "--exact-histories",
        action="store_true",
        help="every history entry's details in a state's digest (default: its transitions only,"
        " and none once its operation ended, when the bound has no history room or size limit)",
    )
    parser.add_argument("--max-states", type=int, default=None)
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="a file the search is saved to as it goes (and on SIGINT or SIGTERM), and taken up"
        " from when it exists",
    )
    parser.add_argument(
        "--checkpoint-every", type=float, default=300.0, help="seconds between two saves"
    )
    parser.add_argument("--mutations", action="store_true", help="run the mutations instead")
    args = parser.parse_args(argv)
    # Every explored step is a real engine call: its log lines (a lost ownership, a refusal)
    # are the search's ordinary business, printed thousands of times; the summary says what
    # matters.
    logging.disable(logging.WARNING)
    with World() as world:
        if args.mutations:
            missed = 0
            for mutation in (*MUTATIONS, *LARGE_MUTATIONS):
                with mutation.apply():
                    result = explore(mutation.bound, world=world, symmetry=args.symmetry)
                print(f"== {mutation.name} ({mutation.finding})\n{result.summary()}\n")
                missed += result.violation is None and not result.dead_ends
            return 1 if missed else 0
        bound = Bound(
            kinds=tuple(args.kinds),
            workers=args.workers,
            attempts=args.attempts,
            clock_jumps=args.clock_jumps,
            lost_answers=args.lost_answers,
            requeues=args.requeues,
            total_requeues=args.total_requeues,
            erases=args.erases,
            erase=not args.no_erase,
            cancel=not args.no_cancel,
            inflight=args.inflight,
        )
        started = time.perf_counter()

        def progress(states: int, left: int) -> None:
            seconds = time.perf_counter() - started
            print(
                f"  {states} states, {left} left to expand, {seconds:.0f} s,"
                f" peak memory {_peak_mb()} MB",
                file=sys.stderr,
            )

        abstract = not args.exact_histories and abstractable(bound)
        checkpoint = None
        if args.checkpoint is not None:
            checkpoint = Checkpoint(args.checkpoint, every_s=args.checkpoint_every)
            for signum in (signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, lambda *_: setattr(checkpoint, "stop", True))
        result = explore(
            bound,
            world=world,
            max_states=args.max_states,
            progress=progress,
            symmetry=args.symmetry,
            checkpoint=checkpoint,
            abstract=abstract,
        )
        client = world.client
        hits = client.hits if isinstance(client, MemoClient) else 0
    print(result.summary())
    print(f"symmetry: {args.symmetry}")
    print(f"histories in the digest: {'transitions only' if abstract else 'exact'}")
    print(f"store requests: {client.requests}, answered from the memo: {hits}")
    print(f"peak memory (resident): {_peak_mb()} MB")
    if not result.finished and result.violation is None:
        print("stopped before the end of the bound: NOT exhaustive")
        if args.checkpoint is not None:
            print(f"saved to {args.checkpoint}: the same command takes it up")
    return 0 if result.finished and result.violation is None and not result.dead_ends else 1


def _peak_mb() -> int:
    """This process's largest resident set so far, in MB (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


if __name__ == "__main__":
    sys.exit(main())
