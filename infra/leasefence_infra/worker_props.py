"""The optional worker function of a ``LeaseFenceService``: its props and their checks.

The worker (``functions/worker/handler.py``) runs the engine in process. The table's stream
invokes it as soon as work becomes claimable (an enqueue, an immediate retry, a requeue: stream
dispatch, :mod:`leasefence_infra.dispatch`); and every minute (by default) EventBridge Scheduler
starts a drain that claims and runs jobs for the listed tenants until nothing is claimable or less
than one lease plus a margin of its time is left: the safety net that finds delayed retries,
expired leases and whatever the stream path missed.
Your job handlers live in a module named by ``handlers`` (``package.module:ATTRIBUTE``, a mapping
of job type to handler); see ``infra/README.md`` ("Worker") for how to ship your own. The
function itself, its role and its schedule: :mod:`leasefence_infra.worker`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler

from leasefence.limits import MAX_ID_LENGTH
from leasefence.settings import WORKER_DISPATCH_MODES
from leasefence.streams import filters, mappings

from .assets import functions_dir as shipped_functions_dir
from .assets import has_module
from .environment import RESERVED_ENV

#: ``functions/worker/handler.py``: the Lambda entry point (always from the functions asset).
WORKER_HANDLER = "worker.handler.lambda_handler"
#: The handler stops claiming when less than one lease plus this is left of the invocation
#: (``MARGIN_MS`` in ``functions/worker/handler.py``; a test keeps the two equal).
WORKER_MARGIN_SECONDS = 5
#: Lambda's maximum timeout.
MAX_TIMEOUT_SECONDS = 900
#: ``LEASEFENCE_WORKER_TENANTS`` at most (Lambda allows 4 KB of environment variables in all).
MAX_TENANTS_CHARS = 2048

#: The stream mapping's defaults (``leasefence.streams.mappings.worker``, which says why).
_STREAM = mappings.worker(None)
#: A batch's jobs run side by side, one thread each: at most this many per invocation.
MAX_STREAM_BATCH = 100
#: Lambda: at most 10 concurrent batches per shard.
MAX_PARALLELIZATION = 10
#: Lambda: an event source mapping's filter pattern has at most 4096 characters.
MAX_FILTER_PATTERN_CHARS = 4096

_HANDLERS_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class WorkerProps:
    """The worker function of :class:`~leasefence_infra.LeaseFenceService` (optional).

    Each field is documented where it is declared (and in ``docs/reference/construct-props.md``).
    """

    handlers: str
    """`package.module:ATTRIBUTE`: a mapping of job type to handler (`LEASEFENCE_WORKER_HANDLERS`)."""
    tenants: Sequence[str]
    """The tenants this fleet claims for, at least one (`LEASEFENCE_WORKER_TENANTS`). The worker's
    role reaches every tenant's operations regardless (see `infra/README.md`)."""
    code: lambda_.Code | None = None
    """A layer `Code` holding your handler package under `python/` (e.g.
    `leasefence_infra.bundling.package_layer_code`). Default: none; the module is looked up in
    the shipped `functions/` asset the other functions use (checked at synth). The entry point
    is always `worker.handler.lambda_handler` from that asset."""
    lease_seconds: int = 60
    """Lease of each claim (`LEASEFENCE_WORKER_LEASE_SECONDS`), default 60."""
    timeout: Duration | None = None
    """Function timeout, default 5 minutes; must exceed one lease plus the handler's 5 s margin."""
    schedule: scheduler.ScheduleExpression | None = None
    """Default `rate(1 minute)`; each tick starts one drain (overlapping drains are safe: every
    claim is a conditional write)."""
    business_tables: Sequence[dynamodb.ITable] = ()
    """Class A tables: ConditionCheckItem/PutItem/UpdateItem/DeleteItem (transaction items)."""
    fenced_tables: Sequence[dynamodb.ITable] = ()
    """Class B target tables: UpdateItem/GetItem."""
    environment: Mapping[str, str] = field(default_factory=dict)
    """Extra variables for your handler module (e.g. the names of those tables); may not replace a
    variable the construct sets."""
    memory_mb: int = 512
    """Memory of the worker function in MB, default 512 (its vCPU share grows with it)."""
    lost_ownership_alarm_threshold: int = 5
    """`LostOwnership` events in 15 minutes that raise the alarm, default 5."""
    stream_batch_size: int = _STREAM.batch_size
    """Records per stream invocation, default 10 (1-100): a batch's jobs run side by side, one
    thread each, so it is also how many jobs one invocation runs at once; with no batching
    window a record is delivered as soon as Lambda's poll of its shard sees it."""
    stream_parallelization: int = _STREAM.parallelization_factor
    """Batches of one stream shard processed at once, default 10 (1-10, Lambda's most): one
    tenant's records (one partition key) stay in order in one of them, so a shard hands the
    worker at most `stream_parallelization x stream_batch_size` jobs at once; the drain takes
    the rest."""
    max_concurrency: int | None = None
    """Reserved concurrency of the worker function (stream batches and drains together), default
    none: a stream mapping has no concurrency limit of its own (Lambda's maximum concurrency is
    for SQS sources) and is bounded by shards x `stream_parallelization`; reserve it to cap what
    the worker does to your downstream systems (and to keep that much of the account's
    concurrency for it). A throttled batch is retried by the mapping; the drain still finds work
    whose record went to the failure queue."""
    stream_readers: int = 1
    """Leasefence's readers of the table's stream, default 1 (DynamoDB Streams serves two per
    shard): one mapping whose function (this one) dispatches work and publishes outcome events
    and history (`leasefence.streams.mappings.shared`), so the second reader is yours (a Pipe,
    an analytics function); a publishing failure never holds dispatch (`docs/constructs.md`,
    "The table's stream"). This function's role then also holds the publisher's grants
    (`PutItem`/`UpdateItem`/`DeleteItem` on the table, the bus), and so do your handlers
    (`docs/constructs.md`, "What the worker's role can reach"). 2: the worker's and the
    publisher's mappings side by side (each with its own settings, function and role; no reader
    left). Switching between 1 and 2 updates the worker's mapping in place
    (`docs/constructs.md`, "Upgrading from two mappings")."""
    stream_dispatch: str = "run"
    """How a job the stream announces is run, default `"run"`: inside the stream batch, so one
    shard runs at most `stream_parallelization x stream_batch_size` jobs at once. `"invoke"`:
    the batch claims each job and hands the claim to an asynchronous invocation of this function
    (`leasefence.worker.handoff`); batches take milliseconds and the function's concurrency
    (`max_concurrency`, else the account's) bounds the jobs instead (`docs/scale.md`)."""

    @property
    def timeout_or_default(self) -> Duration:
        return self.timeout if self.timeout is not None else Duration.minutes(5)

    @property
    def schedule_or_default(self) -> scheduler.ScheduleExpression:
        return (
            self.schedule
            if self.schedule is not None
            else scheduler.ScheduleExpression.rate(Duration.minutes(1))
        )

    @property
    def module(self) -> str:
        return self.handlers.partition(":")[0]

    def stream_mapping(self, events: bool) -> mappings.StreamMapping:
        """The worker's stream mapping with these settings: ``mappings.shared`` (one reader; with
        ``events``, the service's outcome events, it also passes what the publisher publishes),
        or ``mappings.worker(tenants)`` (``stream_readers=2``)."""
        if self.stream_readers == 1:
            return mappings.shared(
                self.stream_batch_size, self.stream_parallelization, events, self.tenants
            )
        return replace(
            mappings.worker(self.tenants),
            batch_size=self.stream_batch_size,
            parallelization_factor=self.stream_parallelization,
        )


def validate_worker(
    props: WorkerProps,
    functions_dir: Path | None = None,
    reserved_env: Sequence[str] = RESERVED_ENV,
) -> None:
    """Refuse, at synth, a worker that could never run or would run for the wrong tenants.

    ``functions_dir``: the shipped handlers (default: :func:`leasefence_infra.assets.functions_dir`).
    """
    if functions_dir is None:
        functions_dir = shipped_functions_dir()
    if not isinstance(props, WorkerProps):
        raise TypeError("worker must be a WorkerProps")
    if not isinstance(props.handlers, str) or not _HANDLERS_RE.match(props.handlers):
        raise ValueError(
            f"worker.handlers must be 'package.module:ATTRIBUTE', got {props.handlers!r}"
        )

    tenants = props.tenants
    if isinstance(tenants, str) or not tenants:
        raise ValueError("worker.tenants must be a list of at least one tenant id")
    for tenant in tenants:
        if (
            not isinstance(tenant, str)
            or not 1 <= len(tenant) <= MAX_ID_LENGTH
            or _CONTROL_RE.search(tenant)
        ):
            raise ValueError(
                f"worker.tenants: {tenant!r} is not a tenant id "
                f"(1-{MAX_ID_LENGTH} characters, no control characters)"
            )
        if "," in tenant:
            raise ValueError(
                f"worker.tenants: {tenant!r} contains a comma (the list is passed comma-separated)"
            )
        if tenant != tenant.strip():
            raise ValueError(f"worker.tenants: {tenant!r} has leading or trailing whitespace")
    if len(set(tenants)) != len(tenants):
        raise ValueError("worker.tenants lists a tenant twice")
    if len(",".join(tenants)) > MAX_TENANTS_CHARS:
        raise ValueError(
            f"worker.tenants: more than {MAX_TENANTS_CHARS} characters comma-separated; Lambda allows "
            "4 KB of environment in all: split the tenants over several workers (constructs)"
        )

    if (
        isinstance(props.lease_seconds, bool)
        or not isinstance(props.lease_seconds, int)
        or props.lease_seconds < 1
    ):
        raise ValueError("worker.lease_seconds must be a whole number of seconds, at least 1")
    timeout_s = props.timeout_or_default.to_seconds()
    if timeout_s > MAX_TIMEOUT_SECONDS:
        raise ValueError(
            f"worker.timeout must be at most {MAX_TIMEOUT_SECONDS} s (Lambda's maximum)"
        )
    if timeout_s <= props.lease_seconds + WORKER_MARGIN_SECONDS:
        raise ValueError(
            f"worker.timeout ({timeout_s:g} s) must exceed one lease ({props.lease_seconds} s) plus the "
            f"handler's {WORKER_MARGIN_SECONDS} s margin, or the worker never claims anything"
        )
    if props.schedule is not None and not isinstance(props.schedule, scheduler.ScheduleExpression):
        raise TypeError("worker.schedule must be an aws_scheduler.ScheduleExpression")
    if not 128 <= props.memory_mb <= 10240:
        raise ValueError("worker.memory_mb must be from 128 to 10240")
    if props.lost_ownership_alarm_threshold < 1:
        raise ValueError("worker.lost_ownership_alarm_threshold must be at least 1")
    for name, low, high in (
        ("stream_batch_size", 1, MAX_STREAM_BATCH),
        ("stream_parallelization", 1, MAX_PARALLELIZATION),
    ):
        value = getattr(props, name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"worker.{name} must be a whole number from {low} to {high}")
    if props.stream_readers not in (1, 2) or isinstance(props.stream_readers, bool):
        raise ValueError(
            "worker.stream_readers must be 1 (one mapping: dispatch and publishing) or 2 "
            "(DynamoDB Streams serves two readers per shard)"
        )
    if props.stream_dispatch not in WORKER_DISPATCH_MODES:
        raise ValueError(
            f"worker.stream_dispatch must be one of {', '.join(map(repr, WORKER_DISPATCH_MODES))}"
        )
    concurrency = props.max_concurrency
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError("worker.max_concurrency must be a whole number, at least 1 (or None)")
    pattern = filters.filter_criteria(filters.dispatch_filters(tenants))["Filters"][0]["Pattern"]
    if len(pattern) > MAX_FILTER_PATTERN_CHARS:
        raise ValueError(
            f"worker.tenants make a stream filter of {len(pattern)} characters, over Lambda's "
            f"{MAX_FILTER_PATTERN_CHARS}: split the tenants over several workers (constructs)"
        )

    clashes = sorted(set(props.environment) & set(reserved_env))
    if clashes:
        raise ValueError(f"worker.environment may not replace what the construct sets: {clashes}")
    for key, value in props.environment.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("worker.environment must map str to str")

    for name, tables in (
        ("business_tables", props.business_tables),
        ("fenced_tables", props.fenced_tables),
    ):
        if isinstance(tables, (str, bytes)) or len({id(t) for t in tables}) != len(tables):
            raise ValueError(f"worker.{name} must be a list of distinct tables")

    top = props.module.split(".")[0]
    shipped = {
        p.stem if p.suffix == ".py" else p.name
        for p in functions_dir.iterdir()
        if (p.is_dir() or p.suffix == ".py") and not p.name.startswith("__")
    }
    if props.code is None:
        # The module must be in the functions asset (the only code besides the layers).
        if not has_module(functions_dir, props.module):
            raise ValueError(
                f"worker.handlers names {props.module!r}, which is not in {functions_dir}; ship your "
                "module with worker.code (e.g. package_layer_code('src/your_pkg'))"
            )
    elif top in shipped or top == "leasefence":
        # The function's own code (/var/task) and the core layer come first on sys.path.
        raise ValueError(
            f"worker.handlers: the package {top!r} would be shadowed by "
            f"{'the core layer' if top == 'leasefence' else 'the functions asset'}; rename it"
        )
