"""Domain errors. Everything the engine raises derives from :class:`LeaseFenceError`.

Each error carries the contract's error ``code`` and HTTP ``status`` so the API maps them in one
place, and so does the client SDK in reverse.
"""

from __future__ import annotations

from typing import Any


class LeaseFenceError(Exception):
    code = "internal_error"
    status = 500
    retryable = False

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.code)
        self.message = message or self.code
        self.details = details


class Unauthorized(LeaseFenceError):
    """Missing, malformed, badly signed or expired token (or one without a tenant)."""

    code = "unauthorized"
    status = 401


class Forbidden(LeaseFenceError):
    """A valid token without the route's scope (or a caller the deployment refuses)."""

    code = "forbidden"
    status = 403


class InvalidInput(LeaseFenceError):
    code = "invalid_request"
    status = 422


class ItemTooLarge(InvalidInput):
    """The store refused a write that would pass its item size limit (400 KB on DynamoDB). Every
    item leasefence writes is bounded below it (:mod:`leasefence.item_budget`); an update of an
    operation refused for size all the same is sent again once the history made room
    (:attr:`leasefence.store.Store.make_room`)."""


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"
    status = 413


class NotFound(LeaseFenceError):
    code = "not_found"
    status = 404


class PayloadMissing(LeaseFenceError):
    """The operation's inline payload is gone (purged after its retention, erased, its object
    deleted, or bytes that do not match its hash). A store that refuses access is not this but
    :class:`PayloadAccessDenied`.

    Never a silent ``None``: a job cannot run without its input. The worker runtime quarantines
    an operation whose payload is missing (an operator decides); the API answers 410."""

    code = "payload_missing"
    status = 410


class PayloadConflict(LeaseFenceError):
    """Same ``(tenant_id, operation_id)``, different payload hash. Nothing was changed."""

    code = "payload_conflict"
    status = 409


class PayloadMismatch(LeaseFenceError):
    """An approval named another payload hash than the operation's: the approver saw other
    content. Nothing was changed."""

    code = "payload_mismatch"
    status = 409


class SelfApproval(LeaseFenceError):
    """An approver tried to approve an operation enqueued under its own identity."""

    code = "forbidden"
    status = 403


class InlinePayloadRequired(InvalidInput):
    """A job type that requires approval refuses payloads by reference: an approval binds the
    bytes leasefence stores (and the approver can read), never content it has not seen."""

    code = "inline_payload_required"
    status = 422


class IdentityRequired(LeaseFenceError):
    """An operation that needs an approval records who enqueued it (that identity can never
    approve it): a caller that names nobody cannot enqueue one. Nothing was written."""

    code = "forbidden"
    status = 403


class StaleFence(LeaseFenceError):
    """The fence no longer holds the claim: stop, do not retry, start no new side effect."""

    code = "stale_fence"
    status = 409


class TargetRefused(LeaseFenceError):
    """A side-effect target refused a write: its own guard failed, or it has seen a higher fence."""

    code = "target_refused"
    status = 409


class UnknownJobType(InvalidInput):
    """A strict tenant refuses job types that are not in its catalogue."""

    code = "unknown_job_type"
    status = 422


class VersionConflict(LeaseFenceError):
    """A catalogue write named an ``expected_version`` that is not the entry's: someone else
    changed it first. Nothing was written."""

    code = "version_conflict"
    status = 409


class InvalidTransition(LeaseFenceError):
    code = "invalid_transition"
    status = 409


class AlreadyAttempted(InvalidTransition):
    """A cancel of an operation that a worker claimed before (it is queued again after a retry,
    a takeover or an operator's requeue): its side effect may have happened, so only a worker's
    reconcile or an operator may end it. Nothing was changed."""

    code = "already_attempted"
    status = 409


class TenantErasing(LeaseFenceError):
    """The tenant is being erased (``erase-tenant`` holds it until it finished): nothing new is
    accepted for it meanwhile. Nothing was written."""

    code = "tenant_erasing"
    status = 409


class TooManyJobTypes(InvalidInput):
    """A new job type would take the tenant's job-type directory past its limit
    (:data:`leasefence.limits.MAX_JOB_TYPES`). Nothing was written."""

    code = "too_many_job_types"
    status = 422


class Unavailable(LeaseFenceError):
    """Throttling or a transient store failure. Safe to retry: every write is fenced or replayable."""

    code = "unavailable"
    status = 503
    retryable = True


class PayloadAccessDenied(Unavailable):
    """The payload store refused to read or write a payload object: S3 ``AccessDenied``, a KMS
    key fault (``KMS.*``: disabled, pending deletion, no ``kms:Decrypt``), an archived object
    (``InvalidObjectState``), or credentials S3 does not accept. A bucket policy, role or key
    misconfiguration that an operator fixes, never a missing payload: like any
    :class:`Unavailable` it answers 503 ``unavailable`` and the worker neither quarantines the job
    nor fails it. Counted as ``PayloadAccessDenied`` (alarmed). Only a missing object (S3
    ``NoSuchKey``, 404) is :class:`PayloadMissing`."""


class StoreMisconfigured(LeaseFenceError):
    code = "store_misconfigured"
    status = 500
