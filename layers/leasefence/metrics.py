"""The name of every metric leasefence emits, in one enum shared with the alarms.

The engine, the worker runtime, the stream functions, the targets, the payload store and the
sweeper emit these names through a :data:`MetricSink` (in Lambda, one Powertools EMF count per
call: :func:`leasefence.observability.record_event`); the constructs
(``leasefence_infra.monitoring``) build their dashboard and alarms from the same members, so a
renamed metric cannot leave an alarm reading nothing. :class:`Metric` is a ``StrEnum``: a member
is its name wherever a ``str`` is expected.

Standard library only: the CDK app imports it without the runtime's dependencies.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

#: Called with (metric name, value) for every domain event worth counting.
MetricSink = Callable[[str, float], None]


def no_metrics(_name: str, _value: float) -> None:
    """A sink that records nothing (the default where no sink is given)."""


class Metric(StrEnum):
    """Every emitted metric name. Counts unless the member's comment names another unit."""

    # -- the engine (API, worker and sweeper functions alike) --------------------------------
    CLAIMS = "Claims"
    CLAIM_REPLAYS = "ClaimReplays"
    TAKEOVERS = "Takeovers"
    REPLAYS = "Replays"
    PAYLOAD_CONFLICTS = "PayloadConflicts"
    STALE_FENCE_REJECTIONS = "StaleFenceRejections"
    UNKNOWN_PARKED = "UnknownParked"
    QUARANTINED = "Quarantined"
    APPROVALS = "Approvals"
    REJECTIONS = "Rejections"
    APPROVAL_MISMATCHES = "ApprovalMismatches"
    CANCELLATIONS = "Cancellations"
    ERASURES = "Erasures"
    TENANT_ERASURE_STEPS = "TenantErasureSteps"
    # -- the engine's housekeeping (sweeper) -------------------------------------------------
    SWEPT_TO_UNKNOWN = "SweptToUnknown"
    APPROVALS_EXPIRED = "ApprovalsExpired"
    PAYLOADS_PURGED = "PayloadsPurged"
    TTLS_CLEARED = "TtlsCleared"
    #: Seconds (maximum): the oldest operation parked ``unknown``.
    OLDEST_UNKNOWN_AGE_SECONDS = "OldestUnknownAgeSeconds"
    #: Seconds (maximum): the oldest due operation of any tenant and job type.
    OLDEST_DUE_AGE_SECONDS = "OldestDueAgeSeconds"
    # -- the API -----------------------------------------------------------------------------
    #: Milliseconds: how long a claim request took.
    CLAIM_LATENCY = "ClaimLatency"
    # -- the payload store (API, worker and sweeper) -----------------------------------------
    PAYLOAD_ACCESS_DENIED = "PayloadAccessDenied"
    # -- the worker runtime (leasefence.worker) ----------------------------------------------
    HEARTBEATS = "Heartbeats"
    HEARTBEATS_SKIPPED_NO_PROGRESS = "HeartbeatsSkippedNoProgress"
    HEARTBEAT_ERRORS = "HeartbeatErrors"
    STALLED_CLAIMS = "StalledClaims"
    LOST_OWNERSHIP = "LostOwnership"
    ABANDONED_AFTER_LOST_OWNERSHIP = "AbandonedAfterLostOwnership"
    ABANDONED_STORE_UNAVAILABLE = "AbandonedStoreUnavailable"
    STORE_RETRIES = "StoreRetries"
    RECONCILES = "Reconciles"
    PAYLOAD_MISSING = "PayloadMissing"
    # -- stream dispatch (leasefence.worker.dispatch) ----------------------------------------
    STREAM_DISPATCHED = "StreamDispatched"
    STREAM_DISPATCH_TAKEN = "StreamDispatchTaken"
    STREAM_DISPATCH_DEFERRED = "StreamDispatchDeferred"
    STREAM_DISPATCH_FAILED = "StreamDispatchFailed"
    STREAM_HANDED_OFF = "StreamHandedOff"
    STREAM_HANDOFF_FAILED = "StreamHandoffFailed"
    # -- the publisher (leasefence.streams.publisher) ----------------------------------------
    HISTORY_ENTRIES = "HistoryEntries"
    HISTORY_COMPACTIONS = "HistoryCompactions"
    EVENTS_PUBLISHED = "EventsPublished"
    PUBLISH_FAILURES_KEPT = "PublishFailuresKept"
    # -- fenced targets (leasefence.targets.fenced_table) ------------------------------------
    INCONSISTENT_CLAIMS_REFUSED = "InconsistentClaimsRefused"
    STALE_TARGET_WRITES_REJECTED = "StaleTargetWritesRejected"
    TARGET_HORIZON_REFUSALS = "TargetHorizonRefusals"
    TARGET_PRUNES = "TargetPrunes"
    TARGET_PRUNES_REFUSED = "TargetPrunesRefused"
    TARGET_PRUNES_FAILED = "TargetPrunesFailed"
    TARGET_ENTRIES_PRUNED = "TargetEntriesPruned"
    # -- shadow mode (leasefence.shadow, in the adopter's own process) -----------------------
    SHADOW_GAPS = "ShadowGaps"
    SHADOW_EXECUTIONS = "ShadowExecutions"
    SHADOW_CONFLICTS = "ShadowConflicts"
    SHADOW_DUPLICATES = "ShadowDuplicates"
    SHADOW_CLAIMS = "ShadowClaims"
    SHADOW_OVERTAKEN = "ShadowOvertaken"
    SHADOW_RECORDED = "ShadowRecorded"
    SHADOW_MISCONFIGURED = "ShadowMisconfigured"
