"""A small Python SDK for the leasefence HTTP API (standard library only).

::

    from leasefence.client import LeaseFenceClient

    lf = LeaseFenceClient("http://127.0.0.1:8765", token)
    lf.enqueue("order-42", "charge", payload={"amount": 1200})
    claim = lf.claim("worker-1", lease_seconds=30)
    if claim:
        ...  # act under claim.fence
        lf.complete(claim.operation_id, claim.fence, "charged")

Callers inside AWS use the service's IAM API (the construct's ``iam_tenant``) with SigV4 instead
of a token: one client per scope, its base URL the IAM API's with the scope's prefix::

    work = LeaseFenceClient(f"{iam_api_url}/work", signer=sigv4_signer("eu-west-1"))
    claim = work.claim("worker-1")

Errors are the domain's own classes (:mod:`leasefence.errors`, plus ``Unauthorized`` and
``Forbidden``), chosen by the answer's ``error.code``; each carries the HTTP ``status``. An
answer API Gateway writes itself (``{"message": "..."}``, without the service's ``error`` object:
its JWT authorizer's 401, a scope's 403, its 429 and its 5xx) or a body that is not JSON becomes
the same classes by its status (:data:`leasefence.answer_errors.GATEWAY_CODES`: 429 and every 5xx are
:class:`~leasefence.errors.Unavailable`, retryable), marked ``details["answered_by"] ==
"gateway"``.

Retries (exponential backoff with full jitter, ``Retry-After`` honoured) are limited to what is
safe to repeat:

* reads, ``enqueue`` (a repeat after a lost answer comes back as a replay: ``created=False``),
  ``erase`` (erasing again is harmless), ``heartbeat`` and the fenced finishes
  (``complete``/``fail``/``unknown``/``quarantine``: the same fence repeating the same
  transition gets its answer again) retry on connection failures, lost answers, 429 and 5xx;
* ``claim`` sends a claim token (one per call, or the caller's ``claim_token``) and retries
  like the above with the same token: a resend of a claim that was made answers that same claim
  (same fence, no attempt spent) while it holds. A try waits ``timeout`` (10 s) and the API
  function up to 29 s, so a slow claim is resent while the first request still runs: safe, as
  one token makes at most one claim (the resend answers the first one's claim, or 503 "in
  progress", retried like any 503);
* ``resolve`` is not idempotent (a repeated requeue could undo a later claim's view), so it
  retries only when the request surely did not run: a refused connection or a 429 from the
  gateway.

A call bounded by a lease (``claim`` and ``heartbeat`` take ``deadline``, a
:func:`time.monotonic` instant, and ``try_timeout``, seconds) waits at most ``try_timeout`` for
each try's answer and makes no try, and no backoff, past ``deadline``: an answer that comes after
the lease it renews has lapsed is worth nothing, and a lost one must leave time for another try
(the worker over HTTP bounds each by the lease it holds: :mod:`leasefence.worker.http_backend`).
"""

from __future__ import annotations

import builtins
import http.client
import json
import random
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from leasefence import otel
from leasefence.answer_errors import answer_error
from leasefence.api.errors import Forbidden, Unauthorized
from leasefence.client_batch import BatchCalls, ItemResult, WorkResults, parse_time
from leasefence.errors import (
    LeaseFenceError,
    Unavailable,
)
from leasefence.resources import (
    Claim,
    EnqueueResult,
    HistoryEntry,
    HistoryPage,
    Operation,
    OperationPage,
    from_json,
)

__all__ = [
    "Claim",
    "EnqueueResult",
    "Forbidden",
    "HistoryEntry",
    "HistoryPage",
    "ItemResult",
    "JobType",
    "LeaseFenceClient",
    "Operation",
    "OperationPage",
    "Unauthorized",
    "WorkResults",
    "sigv4_signer",
]

_MISSING: Any = object()
T = TypeVar("T")
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: The headers of the request being sent (beside the client's own), for :meth:`_once`.
_HEADERS: ContextVar[dict[str, str]] = ContextVar("leasefence_request_headers", default={})  # noqa: B039 - never mutated


@dataclass(frozen=True)
class JobType:
    """A catalogue entry (``spec``: its declared fields, as ``put_job_type`` takes them)."""

    job_type: str
    version: int
    spec: dict[str, Any]
    updated_at: datetime
    updated_by: str | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobType:
        meta = ("job_type", "version", "updated_at", "updated_by")
        return cls(
            job_type=data["job_type"],
            version=int(data["version"]),
            spec={k: v for k, v in data.items() if k not in meta},
            updated_at=parse_time(data["updated_at"]),  # type: ignore[arg-type]
            updated_by=data.get("updated_by"),
        )


def sigv4_signer(region: str, credentials: Any = None) -> Callable[[urllib.request.Request], None]:
    """Sign requests for the IAM API with SigV4 (service ``execute-api``): ``credentials`` are
    botocore credentials (default: the environment's chain, refreshed as they expire, so a
    function's role). botocore is in the Lambda runtime and comes with boto3."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    if credentials is None:
        import botocore.session

        credentials = botocore.session.get_session().get_credentials()
        if credentials is None:
            raise Unauthorized("no AWS credentials found to sign requests with")

    def sign(request: urllib.request.Request) -> None:
        frozen = (
            credentials.get_frozen_credentials()
            if hasattr(credentials, "get_frozen_credentials")
            else credentials
        )
        signed = AWSRequest(
            method=request.get_method(),
            url=request.full_url,
            data=request.data,
            headers=dict(request.header_items()),
        )
        SigV4Auth(frozen, "execute-api", region).add_auth(signed)
        for name, value in signed.headers.items():
            if name.lower() in ("authorization", "x-amz-date", "x-amz-security-token"):
                request.add_header(name, value)

    return sign


class _NotSent(Exception):
    """The connection was refused: the request never reached the server."""


class LeaseFenceClient(BatchCalls):
    """One API base URL and one bearer token."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        user_agent: str = "leasefence-client/1",
        signer: Callable[[urllib.request.Request], None] | None = None,
    ) -> None:
        # urllib also opens file: and ftp: URLs; a client of this API has no business with them.
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http:// or https:// URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.user_agent = user_agent
        #: Signs each request just before it is sent (:func:`sigv4_signer`: the IAM API).
        self.signer = signer
        self._rng = random.Random()

    # ------------------------------------------------------------------ transport

    def _once(
        self, method: str, path: str, body: Any, timeout: float
    ) -> tuple[int, dict[str, str], bytes]:
        data = (
            None
            if body is _MISSING
            else json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
        )
        request = urllib.request.Request(self.base_url + path, data=data, method=method)  # noqa: S310 - http(s), checked in __init__
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", self.user_agent)
        for name, value in _HEADERS.get().items():  # the request's own (request(headers=...))
            request.add_header(name, value)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        if self.signer is not None:
            self.signer(request)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - as above
                return response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as error:
            with error:
                return error.code, dict(error.headers.items()), error.read()
        except urllib.error.URLError as error:
            if isinstance(error.reason, ConnectionRefusedError):
                raise _NotSent() from error
            raise

    def _delay(self, attempt: int, headers: dict[str, str] | None) -> float:
        retry_after = (headers or {}).get("Retry-After") or (headers or {}).get("retry-after")
        if retry_after:
            try:
                return min(self.max_backoff, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return self._rng.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))

    def request(
        self,
        method: str,
        path: str,
        body: Any = _MISSING,
        idempotent: bool = True,
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """``(status, decoded JSON or None)`` for a 2xx; raises the mapped error otherwise.

        ``try_timeout`` (seconds) bounds the wait for each try's answer (at most the client's
        ``timeout``); ``deadline`` (a :func:`time.monotonic` instant) bounds the whole call: no
        try and no backoff past it (:class:`Unavailable` then)."""
        attempt = 0
        while True:
            timeout = min(self.timeout, try_timeout or self.timeout)
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    raise Unavailable("no answer from the API within the time the lease leaves")
            answer_headers: dict[str, str] | None = None
            try:
                sent = _HEADERS.set(headers or {})
                try:
                    status, answer_headers, raw = self._once(method, path, body, timeout)
                finally:
                    _HEADERS.reset(sent)
            except _NotSent as error:
                if attempt < self.retries and self._backoff(attempt, None, deadline):
                    attempt += 1
                    continue
                raise Unavailable(
                    "the API is unreachable (connection refused)"
                ) from error.__cause__
            except (OSError, http.client.HTTPException) as error:
                # Sent, answer lost: only a request that is safe to repeat is repeated.
                if idempotent and attempt < self.retries and self._backoff(attempt, None, deadline):
                    attempt += 1
                    continue
                raise Unavailable(f"no answer from the API ({type(error).__name__})") from error
            if (
                status in _RETRY_STATUSES
                and attempt < self.retries
                and (idempotent or status == 429)
                and self._backoff(attempt, answer_headers, deadline)
            ):
                attempt += 1
                continue
            if 200 <= status < 300:
                return status, (json.loads(raw) if raw else None)
            raise self._error(status, raw, answer_headers)

    def _backoff(
        self, attempt: int, headers: dict[str, str] | None, deadline: float | None
    ) -> bool:
        """Sleep before try ``attempt + 1``; False (no sleep) when it would end past
        ``deadline``: no try is left then."""
        delay = self._delay(attempt, headers)
        if deadline is not None and time.monotonic() + delay >= deadline:
            return False
        time.sleep(delay)
        return True

    @staticmethod
    def _error(status: int, raw: bytes, headers: dict[str, str] | None = None) -> LeaseFenceError:
        return answer_error(status, raw, headers)

    @staticmethod
    def _id(operation_id: str) -> str:
        return quote(operation_id, safe="")

    # ------------------------------------------------------------------ routes

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/health")[1]

    def enqueue(
        self,
        operation_id: str,
        job_type: str,
        payload: Any = _MISSING,
        *,
        payload_ref: str | None = None,
        payload_hash: str | None = None,
        max_attempts: int | None = None,
        target_class: str | None = None,
    ) -> EnqueueResult:
        """Record an operation. ``created`` is False for a replay (including the repeat of a
        request whose first answer was lost)."""
        body: dict[str, Any] = {"operation_id": operation_id, "job_type": job_type}
        if payload is not _MISSING:
            body["payload"] = payload
        if payload_ref is not None:
            body["payload_ref"] = payload_ref
        if payload_hash is not None:
            body["payload_hash"] = payload_hash
        if max_attempts is not None:
            body["max_attempts"] = max_attempts
        if target_class is not None:
            body["target_class"] = target_class
        with otel.producer_span(job_type):  # its context goes as the traceparent header
            trace_context = otel.current_trace_context()
            headers = trace_context.headers() if trace_context is not None else None
            answer = self.request("POST", "/v1/operations", body, headers=headers)[1]
        return from_json(EnqueueResult, answer)

    def get(self, operation_id: str) -> Operation:
        return Operation.from_json(
            self.request("GET", f"/v1/operations/{self._id(operation_id)}")[1]
        )

    def list(
        self,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: str,
    ) -> OperationPage:
        """A page of operations; ``filters``: ``job_type``, ``target_class``, ``updated_after``,
        ``updated_before`` (RFC 3339), ``q`` (text in the id, job type or reason)."""
        query = {
            k: v
            for k, v in {"state": state, "limit": limit, "cursor": cursor, **filters}.items()
            if v is not None
        }
        path = "/v1/operations" + (f"?{urlencode(query)}" if query else "")
        return from_json(OperationPage, self.request("GET", path)[1])

    def iter_operations(
        self, state: str | None = None, page_size: int = 100
    ) -> Iterator[Operation]:
        cursor = None
        while True:
            page = self.list(state=state, limit=page_size, cursor=cursor)
            yield from page.operations
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def claim(
        self,
        worker_id: str,
        lease_seconds: int | None = None,
        job_types: builtins.list[str] | None = None,  # list alone: the method above
        operation_id: str | None = None,
        claim_token: str | None = None,
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
    ) -> Claim | None:
        """A claim, or None when nothing is claimable.

        The request carries a claim token (``claim_token``, else a new one for this call) and
        is retried after a lost answer (a dropped connection, a 5xx) with the same token: if
        the first request claimed, the resend answers that same claim (same fence, no attempt
        spent) while it holds; a resend while the first request still runs never makes a second
        claim (503 "in progress" until it can answer the first one's, retried). To resend
        yourself after :class:`Unavailable`, call again with the same ``worker_id``,
        ``claim_token`` and arguments. ``deadline`` and ``try_timeout`` bound the call by the
        lease (see the module's docstring)."""
        token = claim_token if claim_token is not None else uuid.uuid4().hex
        body: dict[str, Any] = {"worker_id": worker_id, "claim_token": token}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if job_types is not None:
            body["job_types"] = list(job_types)
        if operation_id is not None:
            body["operation_id"] = operation_id
        status, data = self.request(
            "POST", "/v1/claims", body, deadline=deadline, try_timeout=try_timeout
        )
        if status == 204 or not data:
            return None
        return Claim.from_json(data["claim"], claim_token=token)

    def heartbeat(
        self,
        operation_id: str,
        fence: int,
        worker_id: str,
        lease_seconds: int | None = None,
        checkpoint: Any = _MISSING,
        intent: str | None = None,
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
    ) -> datetime:
        """Extend the lease; returns the new expiry. :class:`StaleFence`: stop working.

        ``intent`` (class D): record, under this fence, that a side effect is about to start;
        every later claim of the operation carries it as ``Claim.intent``. ``deadline`` and
        ``try_timeout`` bound the call by the lease it renews (see the module's docstring)."""
        body: dict[str, Any] = {"fence": fence, "worker_id": worker_id}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if checkpoint is not _MISSING:
            body["checkpoint"] = checkpoint
        if intent is not None:
            body["intent"] = intent
        path = f"/v1/operations/{self._id(operation_id)}/heartbeat"
        data = self.request("POST", path, body, deadline=deadline, try_timeout=try_timeout)[1]
        return parse_time(data["lease_expires_at"])  # type: ignore[return-value]

    def _finish(
        self, operation_id: str, action: str, body: dict[str, Any], idempotent: bool = True
    ) -> Operation:
        data = self.request(
            "POST", f"/v1/operations/{self._id(operation_id)}/{action}", body, idempotent=idempotent
        )[1]
        return Operation.from_json(data["operation"])

    def complete(self, operation_id: str, fence: int, outcome_code: str) -> Operation:
        return self._finish(
            operation_id, "complete", {"fence": fence, "outcome_code": outcome_code}
        )

    def fail(
        self,
        operation_id: str,
        fence: int,
        retryable: bool,
        reason: str,
        retry_after_seconds: int | None = None,
    ) -> Operation:
        body: dict[str, Any] = {"fence": fence, "retryable": retryable, "reason": reason}
        if retry_after_seconds is not None:
            body["retry_after_seconds"] = retry_after_seconds
        return self._finish(operation_id, "fail", body)

    def unknown(self, operation_id: str, fence: int, reason: str) -> Operation:
        return self._finish(operation_id, "unknown", {"fence": fence, "reason": reason})

    def quarantine(self, operation_id: str, fence: int, reason: str) -> Operation:
        return self._finish(operation_id, "quarantine", {"fence": fence, "reason": reason})

    def payload(self, operation_id: str) -> Any:
        """The inline payload as enqueued (:class:`NotFound` for by-reference payloads,
        :class:`PayloadMissing` once it was purged or erased: never None)."""
        return self.request("GET", f"/v1/operations/{self._id(operation_id)}/payload")[1]

    def erase(self, operation_id: str) -> Operation:
        """Erase the operation's payload and free text, keeping its identity (needs the operate
        scope). Refused with :class:`InvalidTransition` while it is claimed. Erasing again is
        harmless, so a lost answer is retried."""
        return self._finish(operation_id, "erase", {})

    def approve(self, operation_id: str, payload_hash: str) -> Operation:
        """Approve an operation awaiting approval (needs the approve scope): it becomes queued.
        ``payload_hash`` is the hash of the payload you saw: another one raises
        :class:`PayloadMismatch` (409) and changes nothing; approving an operation your own
        identity enqueued raises :class:`Forbidden` (403), approved already or not; once its
        payload was erased, :class:`PayloadMissing` (410). Approving again is a replay, so a lost
        answer is retried."""
        return self._finish(operation_id, "approve", {"payload_hash": payload_hash})

    def reject(self, operation_id: str, note: str = "") -> Operation:
        """Reject an operation awaiting approval (needs the approve scope): it ends
        failed_terminal with outcome ``rejected``. Rejecting again is a replay."""
        return self._finish(operation_id, "reject", {"note": note})

    def cancel(self, operation_id: str) -> Operation:
        """Withdraw a queued operation no worker ever claimed, or one awaiting approval (needs the
        produce scope): it ends ``cancelled``. One queued again after an attempt raises
        :class:`AlreadyAttempted` (409 ``already_attempted``, a kind of
        :class:`InvalidTransition`); a claimed or ended one raises :class:`InvalidTransition`.
        Cancelling again is a replay."""
        return self._finish(operation_id, "cancel", {})

    def history(
        self, operation_id: str, limit: int | None = None, cursor: str | None = None
    ) -> HistoryPage:
        """One page of the operation's history, oldest first (needs the operate scope): each
        transition's entry is there as soon as its answer is (written with it)."""
        query = {k: v for k, v in {"limit": limit, "cursor": cursor}.items() if v is not None}
        path = f"/v1/operations/{self._id(operation_id)}/history" + (
            f"?{urlencode(query)}" if query else ""
        )
        data = self.request("GET", path)[1]
        return from_json(HistoryPage, data)

    def iter_history(self, operation_id: str, page_size: int = 50) -> Iterator[HistoryEntry]:
        cursor = None
        while True:
            page = self.history(operation_id, limit=page_size, cursor=cursor)
            yield from page.entries
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def resolve(self, operation_id: str, resolution: str, note: str = "") -> Operation:
        """Operator decision for an unknown or quarantined operation. Retried after a lost answer:
        the request carries a token of its own, so the retry is answered as a replay."""
        body = {"resolution": resolution, "note": note, "request_token": uuid.uuid4().hex}
        return self._finish(operation_id, "resolve", body)

    # ------------------------------------------------------------------ job types (operate scope)

    def list_job_types(self) -> builtins.list[JobType]:
        return [JobType.from_json(e) for e in self.request("GET", "/v1/job-types")[1]["job_types"]]

    def get_job_type(self, job_type: str) -> JobType:
        return JobType.from_json(self.request("GET", f"/v1/job-types/{self._id(job_type)}")[1])

    def put_job_type(
        self, job_type: str, spec: dict[str, Any], expected_version: int | None = None
    ) -> tuple[JobType, bool]:
        """Declare a job type; ``(entry, changed)``. Declaring the same again changes nothing,
        so a lost answer is retried; the request carries a token of its own, so ``changed`` is
        true when this call changed the entry, even if the answer came from a retry."""
        body = {**spec, "request_token": uuid.uuid4().hex}
        if expected_version is not None:
            body["expected_version"] = expected_version
        data = self.request("PUT", f"/v1/job-types/{self._id(job_type)}", body)[1]
        return JobType.from_json(data["job_type"]), bool(data["changed"])

    def delete_job_type(self, job_type: str, expected_version: int | None = None) -> JobType:
        """Remove a job type (a repeat is 404, so a lost answer is not retried)."""
        query = "" if expected_version is None else f"?expected_version={expected_version}"
        path = f"/v1/job-types/{self._id(job_type)}{query}"
        return JobType.from_json(self.request("DELETE", path, idempotent=False)[1])

    def settings(self) -> dict[str, Any]:
        return self.request("GET", "/v1/settings")[1]

    def set_strict_job_types(self, strict: bool) -> dict[str, Any]:
        return self.request("PUT", "/v1/settings", {"strict_job_types": strict})[1]

    def state_counts(self, limit: int | None = None, **filters: str) -> dict[str, Any]:
        """``{"counts": {state: n}, "total", "examined", "complete"}`` (the list's filters but
        ``state``)."""
        query = {k: v for k, v in {"limit": limit, **filters}.items() if v is not None}
        return self.request("GET", "/v1/state-counts" + (f"?{urlencode(query)}" if query else ""))[
            1
        ]

    def target_classes(self) -> builtins.list[dict[str, Any]]:
        """What each target class guarantees and what each resolution means for it."""
        return self.request("GET", "/v1/target-classes")[1]["target_classes"]

    def controls(self) -> dict[str, Any]:
        """The go/no-go report: ``{"go": bool, "job_types": [...]}`` (see the API reference)."""
        return self.request("GET", "/v1/controls")[1]
