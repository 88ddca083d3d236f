"""One claim token, one claim (issue 33): a claim-next resent with its token while the first
request still runs never claims a second operation.

Each thread runs what one API function invocation runs for ``POST /v1/claims`` (the handler parses
and calls this one engine method), on the real engine over the embedded endpoint (one request at
a time, as DynamoDB serializes writes of one item). The first request is stalled at a chosen
point (its client blocks before that request) until the resend has answered."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from leasefence import Engine, State

T = "acme"
H = "sha256:" + "5" * 64
OPERATIONS = 12


class Stalling:
    """``client``, blocking once before the first request ``stall_at`` picks, until released."""

    def __init__(self, client, stall_at):
        self._client, self._stall_at = client, stall_at
        self.stalled, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**request):
            if not self.stalled.is_set() and self._stall_at(name, request):
                self.stalled.set()
                assert self.release.wait(30), "the resend never answered"
            return method(**request)

        return call


def _claim_write(name, request):
    return name == "update_item" and "claimed_from = #state" in request.get("UpdateExpression", "")


def _marker_write(name, request):
    return name == "update_item" and "claimed_op" in request.get("UpdateExpression", "")


@pytest.mark.parametrize(
    "stall_at",
    [_claim_write, _marker_write],
    ids=["between-marker-and-claim-write", "before-the-marker"],
)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_claim_next_resent_while_the_first_runs_claims_one_operation(ddb, spec, clock, stall_at, seed):
    setup = Engine(client=ddb, spec=spec, clock=clock)
    for i in range(OPERATIONS):
        setup.enqueue(T, f"op-{i:02d}", "refund", H)
    stalling = Stalling(ddb, stall_at)
    first = Engine(client=stalling, spec=spec, clock=clock, rng=random.Random(seed))
    resend = Engine(client=ddb, spec=spec, clock=clock, rng=random.Random(seed + 100))

    def claim(engine):
        return engine.claim_next(T, "w1", lease_ms=30_000, claim_token="tok-1")

    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(claim, first)
        assert stalling.stalled.wait(30)
        try:
            again = claim(resend)
        finally:
            stalling.release.set()
        answered = running.result(30)
    claimed = [
        op for op in (setup.get(T, f"op-{i:02d}") for i in range(OPERATIONS)) if op.state == State.CLAIMED
    ]
    assert len(claimed) == 1, [(op.operation_id, op.fence) for op in claimed]
    assert again is not None and answered is not None
    # Both requests answer the one claim (the same fence: no attempt spent twice).
    assert (again.operation_id, again.fence) == (answered.operation_id, answered.fence)
    assert (claimed[0].operation_id, claimed[0].fence, claimed[0].attempts) == (again.operation_id, 1, 1)
    assert sum(setup.get(T, f"op-{i:02d}").attempts for i in range(OPERATIONS)) == 1
    # And the token stays spent on that claim: sent once more, it answers the same claim.
    assert claim(resend) == again
