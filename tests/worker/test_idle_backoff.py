"""An idle worker over HTTP backs off (issue 24: each idle poll is a billed request); an
in-process worker keeps its fixed idle wait; work resets the backoff."""

from __future__ import annotations

from leasefence.client import LeaseFenceClient
from leasefence.errors import Unavailable
from leasefence.worker import EngineBackend, FunctionHandler, Worker
from leasefence.worker.http_backend import IDLE_MAX_SLEEP_MS, HttpBackend

HANDLERS = {"refund": FunctionHandler(lambda _job: "ok")}


def _http_worker(**kwargs) -> Worker:
    client = LeaseFenceClient("http://127.0.0.1:9", "token", retries=0)
    return Worker(HttpBackend(client, "acme"), HANDLERS, idle_sleep_ms=1_000, **kwargs)


def test_an_idle_http_worker_doubles_its_wait_up_to_the_cap_with_jitter() -> None:
    worker = _http_worker()
    assert worker.idle_max_sleep_ms == IDLE_MAX_SLEEP_MS == 20_000
    for idle_polls, ceiling in ((1, 1_000), (2, 2_000), (3, 4_000), (5, 16_000), (6, 20_000), (60, 20_000)):
        waits = [worker.idle_wait_ms(idle_polls) for _ in range(200)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), (idle_polls, min(waits), max(waits))
        assert max(waits) - min(waits) > ceiling / 10  # drawn, not fixed: workers do not poll in step
    # Backed off, the mean wait is three quarters of the cap (what the cost model assumes).
    mean = sum(worker.idle_wait_ms(60) for _ in range(4_000)) / 4_000
    assert abs(mean - 0.75 * IDLE_MAX_SLEEP_MS) < 0.05 * IDLE_MAX_SLEEP_MS


def test_in_process_workers_and_an_explicit_setting_keep_a_fixed_wait(engine) -> None:
    in_process = Worker(EngineBackend(engine, ["acme"]), HANDLERS, idle_sleep_ms=1_000)
    assert in_process.idle_max_sleep_ms is None
    assert {in_process.idle_wait_ms(n) for n in (1, 5, 50)} == {1_000}
    fixed = _http_worker(idle_max_sleep_ms=0)  # turned off for this worker
    assert {fixed.idle_wait_ms(n) for n in (1, 5, 50)} == {1_000}
    slower = _http_worker(idle_max_sleep_ms=60_000)
    assert 30_000 <= slower.idle_wait_ms(40) <= 60_000


class _Scripted(Worker):
    """A worker whose polls find work or not as scripted; records the idle counts it waits on."""

    def __init__(self, script: list[bool | str]) -> None:
        super().__init__(HttpBackend(LeaseFenceClient("http://127.0.0.1:9", "t", retries=0), "acme"), HANDLERS)
        self.script = list(script)
        self.waited_after: list[int] = []

    def run_once(self) -> bool:
        if not self.script:
            self.stop()
            return False
        step = self.script.pop(0)
        if step == "unavailable":
            raise Unavailable("the claim's answer was lost")
        return bool(step)

    def idle_wait_ms(self, idle_polls: int) -> float:
        self.waited_after.append(idle_polls)
        return 0


def test_a_claim_resets_the_backoff() -> None:
    worker = _Scripted([False, False, False, True, False, False, True, True, False])
    worker.run()
    # The last wait is the one after the poll that stopped the worker (it returns at once).
    assert worker.waited_after == [1, 2, 3, 1, 2, 1, 2]


def test_a_claim_that_met_unavailable_is_asked_again_after_the_shortest_wait() -> None:
    """Over HTTP the answer of a claim that was made may be lost (``Unavailable``): the next
    claim sends the same token and must reach it within its lease, which may be shorter than the
    backoff's cap. So an ``Unavailable`` claim is retried after the first wait, not the
    backed-off one, and the backoff starts over."""
    worker = _Scripted([False, False, False, False, "unavailable", False, False])
    worker.run()
    assert worker.waited_after == [1, 2, 3, 4, 1, 1, 2, 3]
    # The first wait is short whatever the backoff had reached (at most idle_sleep_ms).
    assert Worker.idle_wait_ms(worker, 1) <= worker.idle_sleep_ms
