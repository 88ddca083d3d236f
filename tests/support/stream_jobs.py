"""Handlers the local stack's stream worker runs in the stream tests (LocalStack(worker_handlers=
"stream_jobs:HANDLERS")): each records when it started, so a test can tell when its job ran."""

from __future__ import annotations

import time

from leasefence.worker import Ambiguous, FunctionHandler, Job, Reconciled

#: (tenant_id, operation_id) -> [(fence, time.time() when the handler started)]
STARTED: dict[tuple[str, str], list[tuple[int, float]]] = {}
#: How long the first attempt of a ``stream-stall`` job stalls (no progress: its lease lapses).
STALL_S = 2.5


def _started(job: Job) -> None:
    STARTED.setdefault((job.tenant_id, job.operation_id), []).append((job.fence, time.time()))


def quick(job: Job) -> str:
    _started(job)
    job.progress()
    return "done"


def stall_once(job: Job) -> str:
    """The first holder stalls past its lease (a zombie); the next one completes."""
    _started(job)
    if job.fence == 1:
        time.sleep(STALL_S)
        return "zombie-done"
    return "rescued"


def ambiguous_once(job: Job) -> str:
    """The first attempt cannot tell whether it acted: unknown, for an operator."""
    _started(job)
    if job.fence == 1:
        raise Ambiguous("provider timed out")
    return "sent"


def _not_done(job: Job) -> Reconciled:
    return Reconciled.not_done()


HANDLERS = {
    "stream-quick": FunctionHandler(quick),
    "demo-receipt": FunctionHandler(
        quick
    ),  # the sample event's job type (events/worker-stream.json)
    "stream-stall": FunctionHandler(stall_once, _not_done),
    "stream-ambiguous": FunctionHandler(ambiguous_once, _not_done),
}
