"""``python -m leasefence_tools.torture``: the torture run with every switch (``leasefence torture``
takes the common ones)."""

from __future__ import annotations

import argparse
import sys

from leasefence_tools.torture.run import main
from leasefence_tools.torture.settings import Settings


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasefence_tools.torture", description=__doc__)
    parser.add_argument("--operations", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument(
        "--no-compose",
        dest="compose",
        action="store_false",
        help="one feature at a time (no HTTP workers, catalogue, approvals, publisher...)",
    )
    parser.add_argument(
        "--no-claim-tokens",
        dest="claim_tokens",
        action="store_false",
        help="do not expect every HTTP claim to carry a claim_token (an SDK from before them)",
    )
    parser.add_argument(
        "--no-indeterminate",
        dest="indeterminate",
        action="store_false",
        help="lose no answer on purpose and judge no history of indeterminate calls",
    )
    parser.add_argument("--no-months", dest="months", action="store_false")
    parser.add_argument(
        "--no-events",
        dest="events",
        action="store_false",
        help="outcome events off, as deployed by default: the publisher's mapping passes only "
        "the records of operations enqueued before (no publisher compacts a history)",
    )
    parser.add_argument(
        "--operation-shards",
        type=int,
        default=0,
        help="write shards of the table per tenant (1: the bare tenant id; default 0: the "
        "default layout, each tenant's counts recorded at its first enqueue)",
    )
    parser.add_argument(
        "--batched-fleet",
        type=int,
        default=Settings.batched_fleet,
        help="worker threads of each batched HTTP worker (every other HTTP worker; 0: none)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=0.0,
        help="wall-clock budget in seconds (default: 300 plus 1.5 per operation composed, 0.75 not)",
    )
    args = parser.parse_args(argv)
    return main(
        operations=args.operations,
        seed=args.seed,
        workers=args.workers,
        compose=args.compose,
        claim_tokens=args.claim_tokens,
        months=args.months,
        indeterminate=args.indeterminate,
        timeout_s=args.timeout_s,
        operation_shards=args.operation_shards,
        batched_fleet=args.batched_fleet,
        events=args.events,
    )


if __name__ == "__main__":
    sys.exit(cli())
