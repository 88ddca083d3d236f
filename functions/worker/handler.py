"""The worker function: runs jobs as the table's stream announces them, and drains on a schedule.

Three triggers, one function (the event's shape tells them apart):

* a batch of DynamoDB stream records. With ``LEASEFENCE_PUBLISHER_FAILURES`` set (the default
  deployment: one mapping, :func:`leasefence.streams.mappings.shared`) the batch is routed
  (:mod:`leasefence.worker.stream_router`): records of work that became claimable now are claimed and
  started, then the publisher's records are published, neither consumer's failure reaching the
  other. Without it (``WorkerProps(stream_readers=2)``: the worker's own mapping, filtered to
  claimable work) each record's operation is claimed by name and run
  (:mod:`leasefence.worker.dispatch`), with a partial batch response (Powertools batch
  utility): a record that cannot be handled is reported by its sequence number, retried from
  there, and in the end sent to the mapping's on-failure destination; the records after it are
  still processed. ``LEASEFENCE_WORKER_DISPATCH=invoke``: a claimed job is handed to an
  asynchronous invocation of this function (:mod:`leasefence.worker.handoff`) instead of run
  inside the batch;
* such an invocation (``{"leasefence_claim": ...}``): runs the claim it carries;
* the schedule (the safety net for delayed retries and expired leases): drains claims for the
  remaining invocation time, stopping at the first empty poll.

Runs the handlers of the module named in ``LEASEFENCE_WORKER_HANDLERS`` (``package.module:NAME``,
a mapping of job type to handler) for the tenants in ``LEASEFENCE_WORKER_TENANTS`` (comma
separated; the drain takes them in turn, so no tenant starves another). It stops claiming when
less than one lease plus a margin of the invocation is left, so a job never outlives its
function; one that is cut short anyway is safe (its fence still guards the targets, and the next
claim reconciles).

:data:`FIRST_EVENT_IMPORTS`: what the first event imports (the engine and the payload store, boto3
with them, the worker runtime, the stream dispatch and Powertools' batch utility; the job handlers
module is yours and not counted); with SnapStart they are imported before the snapshot
(:func:`leasefence.snapstart.preload`), and the benchmark reports the import with and without them.
"""

from __future__ import annotations

import importlib
import os

from leasefence.observability import logger, metrics, record_event, tracer
from leasefence.settings import runtime
from leasefence.snapstart import after_restore, preload
from leasefence.streams.batch import process_records

FIRST_EVENT_IMPORTS = preload(
    "leasefence.engine",
    "leasefence.payloads",
    "leasefence.worker",
    "leasefence.worker.dispatch",
    "leasefence.worker.handoff",
    "leasefence.streams.publisher",
    "leasefence.worker.stream_router",
    "aws_lambda_powertools.utilities.batch",
)

#: Stop claiming when less than one lease plus this margin of the invocation is left.
MARGIN_MS = 5_000
#: The function's own environment variables, by the setting they fill (read by
#: :meth:`leasefence.settings.Settings.from_env`); the first two are required.
ENVIRONMENT = {
    "worker_handlers": "LEASEFENCE_WORKER_HANDLERS",
    "worker_tenants": "LEASEFENCE_WORKER_TENANTS",
    "worker_lease_seconds": "LEASEFENCE_WORKER_LEASE_SECONDS",
    "worker_idle_ms": "LEASEFENCE_WORKER_IDLE_MS",
}

# (runtime, worker, stream dispatch, stream router or None)
_built: tuple[object, object, object, object] | None = None


def load_handlers(spec: str):
    module_name, _, attribute = spec.partition(":")
    handlers = getattr(importlib.import_module(module_name), attribute or "HANDLERS")
    if not handlers:
        raise ValueError(f"{spec} defines no handlers")
    return handlers


def build_worker():
    from leasefence.worker import EngineBackend, Worker

    rt = runtime()
    rt.prepare()
    settings = rt.settings
    if not settings.worker_handlers:
        raise ValueError(
            f"{ENVIRONMENT['worker_handlers']} must name the handlers (package.module:NAME)"
        )
    if not settings.worker_tenants:
        raise ValueError(
            f"{ENVIRONMENT['worker_tenants']} must name at least one tenant (comma separated)"
        )
    # The backend loads payloads with Engine.payload: PayloadMissing (purged, erased, the object
    # gone) is raised, never None, and the runtime quarantines the operation instead of running
    # the handler without its input. A payload store that refuses access (a role, bucket policy
    # or KMS key fault) is Unavailable instead: no quarantine, no fail write, PayloadAccessDenied.
    return Worker(
        EngineBackend(rt.engine, settings.worker_tenants),
        load_handlers(settings.worker_handlers),
        lease_ms=settings.worker_lease_seconds * 1000,
        idle_sleep_ms=settings.worker_idle_ms,
        events=record_event,
    )


def _current():
    """The worker, its stream dispatch and (one stream reader) the router, built once per
    configuration (a container's)."""
    global _built
    rt = runtime()
    if _built is None or _built[0] is not rt:
        from leasefence.worker.dispatch import StreamDispatch

        worker = build_worker()
        settings = rt.settings
        handoff = None
        if settings.worker_dispatch == "invoke":
            from leasefence.worker.handoff import lambda_handoff

            handoff = lambda_handoff(
                lambda: rt.client("lambda"),
                _function_name(),
                os.environ.get("AWS_LAMBDA_FUNCTION_VERSION"),
            )
        dispatch = StreamDispatch(
            worker, rt.engine, settings.worker_tenants, count=record_event, handoff=handoff
        )
        _built = (
            rt,
            worker,
            dispatch,
            _router(rt, dispatch) if settings.publisher_failures else None,
        )
    return _built[1], _built[2], _built[3]


def _function_name() -> str:
    """This function's own name (Lambda sets it), whose asynchronous invocations run claims."""
    return os.environ.get("AWS_LAMBDA_FUNCTION_NAME") or "leasefence-worker"


def _router(rt, dispatch):
    """The stream router of one reader: this dispatch and the publisher, whose failures are kept
    in the publisher's on-failure bucket."""
    from leasefence.streams import kept
    from leasefence.streams.publisher import Publisher
    from leasefence.worker.stream_router import PUBLISH_ATTEMPTS, StreamRouter

    settings = rt.settings
    publisher = Publisher(
        rt.engine.store, lambda: rt.client("events"), settings.event_bus, count=record_event
    )
    function = _function_name()

    def keep(records):
        kept.put_kept(
            rt.client("s3"),
            settings.publisher_failures,
            records,
            mapping_id=f"{function}-publishing",
            function_arn=function,
            condition="PublishingFailed",
            attempts=PUBLISH_ATTEMPTS,
        )

    return StreamRouter(
        dispatch, publisher.handle, keep, count=record_event, events=settings.event_bus is not None
    )


@after_restore
def _new_worker_identity() -> None:
    """SnapStart: a worker built before the snapshot would carry the same worker id in every
    restored instance; the next invocation builds a new one."""
    global _built
    _built = None


def drain(worker, context):
    processed = {"jobs": 0}
    # Claim only while a whole lease still fits in the invocation; idle polls end the drain.
    while context.get_remaining_time_in_millis() > worker.lease_ms + MARGIN_MS:
        if not worker.run_once():
            break
        processed["jobs"] += 1
    logger.info("drain finished", extra=processed)
    return processed


def on_stream(dispatch, event, context):
    """Claim each record's operation (a failure is reported for that record), then run the
    claimed jobs side by side before answering."""
    claims = []

    def claim(raw_event):
        outcome, granted = dispatch.claim(raw_event, context.get_remaining_time_in_millis)
        if granted is not None:
            claims.append(granted)
        return outcome

    return process_records(event, context, claim, then=lambda: dispatch.run(claims))


@logger.inject_lambda_context(log_event=False, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(raise_on_empty_metrics=False)
def lambda_handler(event, context):
    worker, dispatch, router = _current()
    from leasefence.worker.handoff import CLAIM_EVENT

    if "Records" in event:
        if router is not None:
            return router.handle(event, context.get_remaining_time_in_millis)
        return on_stream(dispatch, event, context)
    if CLAIM_EVENT in event:
        return run_handed_off(dispatch, event)
    return drain(worker, context)


def run_handed_off(dispatch, event):
    """Run the claim a stream batch handed to this invocation (the ``invoke`` dispatch mode)."""
    from leasefence.worker.handoff import claim_from_event

    dispatch.run_handed_off(claim_from_event(event))
    return {"ran": 1}
