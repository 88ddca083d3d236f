"""The worker backend over the HTTP API (a worker that holds an API token, not IAM access).

The same handlers run unchanged: fenced writes become API calls, and the SDK's typed errors are
the engine's (a 409 ``stale_fence`` is :class:`~leasefence.errors.StaleFence`), so lost-ownership
mode works the same way, a 410 ``payload_missing`` is
:class:`~leasefence.errors.PayloadMissing` and a 503 ``unavailable`` (a payload store that refuses
access included) is :class:`~leasefence.errors.Unavailable`, as in-process.

The API never names the tenant (it is the token's), but targets derive their per-operation
identity from ``(tenant_id, operation_id)``, so the backend is told the token's tenant.

The worker's :class:`~leasefence.model.Claim` carries what the server GRANTED: its ``lease_ms``
and ``claimed_at`` come from the answer (a job type's ``max_lease_seconds`` may have cut the lease
the worker asked for), never from the request, so the runtime renews within the granted lease and
a class-B target records the server's claim time.

A claim answer carries the payload leasefence stores for the operation (``Claim.payload``), so
:meth:`HttpBackend.load_payload` makes no request for it; it falls back to ``GET .../payload``
when the answer has none (a by-reference payload, a server older than the field).

Each claim request carries a claim token. The SDK resends it after a lost answer; when the SDK
gives up (:class:`~leasefence.errors.Unavailable`), the backend keeps that token and sends it
with the worker's next claim, so a claim that was made meanwhile is answered again (same fence,
no attempt spent) instead of being left to lapse. A resend while the first request still runs is
safe (one claim token, one claim: it answers the claim the first makes, or 503 "in progress");
after :data:`CLAIM_TOKEN_PATIENCE_S` of such answers the token is given up for a new one.

Every claim and heartbeat is bounded by the lease (issue 34: one lost heartbeat answer waited
out the SDK's 10 s timeout and its retries, and a 6 s lease lapsed before the next try): each
try waits at most a third of the lease for its answer, and no try (nor the SDK's backoff) starts
after the lease the worker holds has run out. A claim counts from the lease asked for (the
granted one is not known yet); a heartbeat from the end of the lease as last renewed, which the
backend keeps per claim from the moment it sent the request that granted or renewed it (never
later than the server's own count).

With ``batched=True`` (a busy fleet of workers sharing one backend), the claims, renewals and
closing writes go through the batch routes (``POST /v1/batch/claim``, ``/heartbeat``,
``/finish``), each claim with its own claim token:
calls made at about the same time by the backend's workers share one request
(:class:`~leasefence.worker.coalesce.Coalescer`), each keeping its own answer and error, and the
runtime renews every lease it holds at the same instants (:attr:`HttpBackend.aligned_renewals`),
so the fleet sends one heartbeat request per interval instead of one per lease. Without it
every call is its own request, as before.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from leasefence.client import Claim as HttpClaim
from leasefence.client import ItemResult, LeaseFenceClient
from leasefence.client import Operation as HttpOperation
from leasefence.client_batch import ROUND_LISTS
from leasefence.errors import LeaseFenceError, Unavailable
from leasefence.limits import MAX_BATCH_ITEMS
from leasefence.model import Claim, TargetClass
from leasefence.tracecontext import TraceContext
from leasefence.validation import MISSING
from leasefence.worker.coalesce import Coalescer

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(moment: datetime) -> int:
    """Exact integer milliseconds (float seconds times 1000 can come out one ms short)."""
    return (moment - _EPOCH) // timedelta(milliseconds=1)


#: How far an idle worker over HTTP backs off between polls (``Worker.idle_wait_ms``): each idle
#: poll is an API request and a function invocation, so a worker that finds nothing slows down
#: to one poll every 15 s on average (10 to 20 s between polls once backed off) instead of every
#: second; the first claim after that resets it. A job enqueued while the fleet is idle waits up
#: to this long to be claimed.
IDLE_MAX_SLEEP_MS = 20_000
#: How long (seconds from its first send) the backend keeps sending an unanswered claim token:
#: twice API Gateway's 30 s integration limit, so no request with it can still be running after
#: it. A resend that finds the first request's claim still undecided is answered 503 "in
#: progress" (one claim token, one claim): past this, that first request is gone, and a new token
#: lets the worker claim again.
CLAIM_TOKEN_PATIENCE_S = 60.0

#: How long the first claim, renewal or closing write of a batch waits for the fleet's others
#: (``batched=True``): renewals are aligned, so a few ms gather them all; claims and closing
#: writes that come within it share a request.
BATCH_WINDOW_S = 0.02


class HttpBackend:
    #: Workers over this backend back off while idle (see :data:`IDLE_MAX_SLEEP_MS`).
    idle_max_sleep_ms: int | None = IDLE_MAX_SLEEP_MS

    def __init__(self, client: LeaseFenceClient, tenant_id: str, batched: bool = False) -> None:
        self.client = client
        self.tenant_id = tenant_id
        #: Calls go through the fleet's shared round requests (``POST /v1/batch/work``).
        self.batched = batched
        #: Renew at shared instants, so that the renewals of one interval share a request.
        self.aligned_renewals = batched
        #: Batched: the fleet's closes, renewals and claims of one moment, in one request.
        self._rounds: Coalescer[tuple[str, dict[str, Any]], ItemResult[Any]] | None = None
        if batched:
            self._rounds = Coalescer(self._send_round, MAX_BATCH_ITEMS, BATCH_WINDOW_S)
        #: Per thread: the claim a closing write is to carry (:meth:`claiming_next`).
        self._next = threading.local()
        #: Per worker id: the claim a closing request made for it (None: it found nothing),
        #: answered by its next :meth:`claim_next` without a request.
        self._ready: dict[str, Claim | None] = {}
        #: Per worker id: the token of a claim request whose answer never came, sent again next
        #: (within :data:`CLAIM_TOKEN_PATIENCE_S` of its first send, the second element), with
        #: the ``after`` it was first sent with (where its marker is).
        self._unanswered: dict[str, tuple[str, float, str | None]] = {}
        #: Per claim (operation id, fence): when its lease ends, as far as this worker can count
        #: on it (:func:`time.monotonic`): the send time of the request that granted or renewed
        #: it, plus the lease granted. Bounds the next heartbeat.
        self._lease_ends: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def _send_round(
        self,
        items: list[tuple[str, dict[str, Any]]],
        deadline: float | None,
        try_timeout: float | None,
    ) -> list[ItemResult[Any]]:
        """One ``POST /v1/batch/work`` for the round's items (``(kind, body)``: ``finish``,
        ``heartbeat`` or ``claim``), each answered with its own result, in the items' order."""
        lists: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ROUND_LISTS}
        for kind, body in items:
            lists[kind].append(body)
        answer = self.client.work_batch(**lists, deadline=deadline, try_timeout=try_timeout)
        results = {kind: iter(getattr(answer, kind)) for kind in lists}
        return [next(results[kind]) for kind, _ in items]

    def _claim(self, claim: HttpClaim, worker_id: str, lease_ms: int) -> Claim:
        """The worker's claim from the answer: the lease and claim time as GRANTED.
        ``lease_ms`` (what was asked for) is used only with a server that does not state the
        granted lease (older than these fields)."""
        lease_expires_at = _ms(claim.lease_expires_at)
        if claim.lease_ms is not None:
            lease_ms = claim.lease_ms
        elif claim.lease_seconds is not None:
            lease_ms = claim.lease_seconds * 1000
        claimed_at = None if claim.claimed_at is None else _ms(claim.claimed_at)
        return Claim(
            tenant_id=self.tenant_id,
            operation_id=claim.operation_id,
            job_type=claim.job_type,
            fence=claim.fence,
            attempts=claim.attempts,
            lease_expires_at=lease_expires_at,
            lease_ms=lease_ms,
            payload_ref=claim.payload_ref,
            payload_hash=claim.payload_hash,
            target_class=TargetClass(claim.target_class),
            reconcile_required=claim.reconcile_required,
            checkpoint=claim.checkpoint,
            takeover=claim.attempts > 1,
            worker_id=worker_id,
            intent=claim.intent,
            claimed_at=claimed_at,
            payload=claim.payload,
            trace_context=TraceContext.from_headers(claim.traceparent, claim.tracestate),
        )

    def claim_next(
        self, worker_id: str, lease_ms: int, job_types: Iterable[str] | None = None
    ) -> Claim | None:
        with self._lock:
            if worker_id in self._ready:  # made with this worker's last closing write
                return self._ready.pop(worker_id)
        item, sent, first_sent = self._claim_item(worker_id, lease_ms, job_types)
        lease_seconds = item["lease_seconds"]
        bounds = (sent + lease_seconds, lease_seconds / 3)

        def asked() -> HttpClaim | None:
            if self._rounds is not None:
                return self._rounds.submit(("claim", item), *bounds).result()
            return self.client.claim(
                worker_id,
                lease_seconds=lease_seconds,
                job_types=item.get("job_types"),
                claim_token=item["claim_token"],
                deadline=bounds[0],
                try_timeout=bounds[1],
            )

        return self._claim_answered(worker_id, sent, first_sent, lease_seconds, asked)

    def _claim_item(
        self,
        worker_id: str,
        lease_ms: int,
        job_types: Iterable[str] | None,
        after: str | None = None,
    ) -> tuple[dict[str, Any], float, float]:
        """The body of this worker's next claim, with its claim token (the unanswered one again,
        if any, with the ``after`` it was sent with), the time it is sent and when its token was
        first sent. ``after``: the operation the same request closes (the token's marker is then
        kept with that operation's payload: :meth:`_finish`)."""
        sent = time.monotonic()
        with self._lock:
            token, first_sent, after = self._unanswered.get(worker_id) or (
                uuid.uuid4().hex,
                sent,
                after,
            )
            self._unanswered[worker_id] = (token, first_sent, after)
        item: dict[str, Any] = {
            "worker_id": worker_id,
            "lease_seconds": max(1, lease_ms // 1000),
            "claim_token": token,
        }
        if after is not None:
            item["after"] = after
        if job_types is not None:
            item["job_types"] = list(job_types)
        return item, sent, first_sent

    def _claim_answered(
        self,
        worker_id: str,
        sent: float,
        first_sent: float,
        lease_seconds: int,
        answered: Callable[[], HttpClaim | None],
    ) -> Claim | None:
        """The claim ``answered()`` gives, as GRANTED; its token kept for the next claim while
        the request may still have claimed (:class:`Unavailable`, within
        :data:`CLAIM_TOKEN_PATIENCE_S`), dropped otherwise."""
        try:
            claim = answered()
        except Unavailable:
            self._claim_unanswered(worker_id, first_sent)
            raise  # the token stays (while it may still be running): the next claim resends it
        except Exception:
            with self._lock:
                self._unanswered.pop(worker_id, None)
            raise
        with self._lock:
            self._unanswered.pop(worker_id, None)
        if claim is None:
            return None
        granted = self._claim(claim, worker_id, lease_seconds * 1000)
        self._lease_renewed(granted, sent, granted.lease_ms)
        return granted

    def _claim_unanswered(self, worker_id: str, first_sent: float) -> None:
        """A claim request got no answer: its token is sent again with the worker's next claim,
        unless it was first sent :data:`CLAIM_TOKEN_PATIENCE_S` ago (no request with it can
        still be running)."""
        if time.monotonic() - first_sent >= CLAIM_TOKEN_PATIENCE_S:
            with self._lock:
                self._unanswered.pop(worker_id, None)

    @contextlib.contextmanager
    def claiming_next(
        self, worker_id: str, lease_ms: int, job_types: Iterable[str] | None
    ) -> Iterator[None]:
        """Batched: the closing writes this thread makes within carry the worker's next claim
        in their request (``POST /v1/batch/work``); :meth:`claim_next` then answers it without
        a request. The claim's outcome is kept whatever the close's (a refused close still
        hands over the claim made with it)."""
        self._next.ask = (worker_id, lease_ms, job_types)
        try:
            yield
        finally:
            self._next.ask = None

    def take_ready(self, worker_id: str) -> Claim | None:
        """The claim a closing request made for this worker and nobody took yet (a worker that
        stops runs it rather than let its lease lapse), or None."""
        with self._lock:
            return self._ready.pop(worker_id, None)

    def claim_operation(
        self, worker_id: str, operation_id: str, lease_ms: int, job_types: Iterable[str] | None
    ) -> Claim | None:
        """Claim one named operation if it is claimable now (``POST /v1/claims`` with its
        ``operation_id``), None if not: the claim as GRANTED, its lease counted as
        :meth:`claim_next` counts it (a decorated record handler claims what it enqueued)."""
        lease_seconds = max(1, lease_ms // 1000)
        sent = time.monotonic()
        claim = self.client.claim(
            worker_id,
            lease_seconds=lease_seconds,
            job_types=list(job_types) if job_types is not None else None,
            operation_id=operation_id,
            deadline=sent + lease_seconds,
            try_timeout=lease_seconds / 3,
        )
        if claim is None:
            return None
        granted = self._claim(claim, worker_id, lease_seconds * 1000)
        self._lease_renewed(granted, sent, granted.lease_ms)
        return granted

    def _lease_renewed(self, claim: Claim, sent: float, lease_ms: int) -> None:
        """The claim's lease runs (at least) ``lease_ms`` from ``sent``; leases that ran out are
        forgotten (a claim given up is closed by no one)."""
        with self._lock:
            for key in [k for k, end in self._lease_ends.items() if end <= sent]:
                del self._lease_ends[key]
            self._lease_ends[(claim.operation_id, claim.fence)] = sent + lease_ms / 1000

    def heartbeat(
        self,
        claim: Claim,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
        intent: str | None = None,
    ) -> int:
        kwargs: dict[str, Any] = {}
        if lease_ms is not None:
            kwargs["lease_seconds"] = max(1, lease_ms // 1000)
        if checkpoint is not MISSING:
            kwargs["checkpoint"] = checkpoint
        if intent is not None:
            kwargs["intent"] = intent
        sent = time.monotonic()
        with self._lock:
            lease_ends = self._lease_ends.get((claim.operation_id, claim.fence))
        # A claim this backend did not make: its whole lease, from now.
        deadline = lease_ends if lease_ends is not None else sent + claim.lease_ms / 1000
        if self._rounds is not None:
            item = {
                "operation_id": claim.operation_id,
                "fence": claim.fence,
                "worker_id": claim.worker_id,
                **kwargs,
            }
            renewal = ("heartbeat", item)
            expires = self._rounds.submit(renewal, deadline, claim.lease_ms / 3000).result()
        else:
            expires = self.client.heartbeat(
                claim.operation_id,
                claim.fence,
                claim.worker_id,
                deadline=deadline,
                try_timeout=claim.lease_ms / 3000,
                **kwargs,
            )
        # Renewed for the lease asked for, which the server may cut: never counted as longer than
        # the claim's own.
        self._lease_renewed(claim, sent, min(lease_ms or claim.lease_ms, claim.lease_ms))
        return _ms(expires)

    def _finish(self, claim: Claim, action: str, body: dict[str, Any]) -> HttpOperation | None:
        """Through the fleet's shared round request when batched (its item's error raised),
        with this worker's next claim when :meth:`claiming_next` asks for it: the operation as
        the write left it; None when not batched: the caller makes its one-at-a-time call."""
        if self._rounds is None:
            return None
        close = (
            "finish",
            {"action": action, "operation_id": claim.operation_id, "fence": claim.fence, **body},
        )
        ask = getattr(self._next, "ask", None)
        with self._lock:
            if ask is not None and ask[0] in self._ready:
                ask = None  # a try before this one (its close answered 503) made the next claim
        if ask is None:
            return self._rounds.submit(close).result()
        worker_id, lease_ms, job_types = ask
        # A close that ends the job names it in the claim (its marker rides with the payload's
        # expiry); one that leaves it live (a retry, a park) does not: it may be closed again.
        ends = action == "complete" or (action == "fail" and body.get("retryable") is False)
        item, sent, first_sent = self._claim_item(
            worker_id, lease_ms, job_types, after=claim.operation_id if ends else None
        )
        lease_seconds = item["lease_seconds"]
        try:
            closed, claimed = self._rounds.submit_all(
                [close, ("claim", item)], sent + lease_seconds, lease_seconds / 3
            )
        except Unavailable:  # the request: the claim's token is kept for the next try
            self._claim_unanswered(worker_id, first_sent)
            raise
        with contextlib.suppress(LeaseFenceError):  # a refused claim: the next claim asks again
            ready = self._claim_answered(worker_id, sent, first_sent, lease_seconds, claimed.result)
            with self._lock:
                self._ready[worker_id] = ready
        return closed.result()

    def complete(self, claim: Claim, outcome_code: str) -> None:
        if self._finish(claim, "complete", {"outcome_code": outcome_code}) is None:
            self.client.complete(claim.operation_id, claim.fence, outcome_code)

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None:
        self._failed(claim, retryable, reason, retry_after_ms)

    def _failed(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None
    ) -> HttpOperation:
        """:meth:`fail`, answered with the operation as it left it (final, or queued again)."""
        seconds = None if retry_after_ms is None else -(-retry_after_ms // 1000)
        body: dict[str, Any] = {"retryable": retryable, "reason": reason}
        if seconds is not None:
            body["retry_after_seconds"] = seconds
        operation = self._finish(claim, "fail", body)
        if operation is not None:
            return operation
        return self.client.fail(
            claim.operation_id, claim.fence, retryable, reason, retry_after_seconds=seconds
        )

    def park_unknown(self, claim: Claim, reason: str) -> None:
        if self._finish(claim, "unknown", {"reason": reason}) is None:
            self.client.unknown(claim.operation_id, claim.fence, reason)

    def quarantine(self, claim: Claim, reason: str) -> None:
        if self._finish(claim, "quarantine", {"reason": reason}) is None:
            self.client.quarantine(claim.operation_id, claim.fence, reason)

    def load_payload(self, claim: Claim) -> Any:
        """The payload the claim answer carried (no request), else ``GET .../payload`` (a
        by-reference payload, one the server could not read when it answered, or a server older
        than the claim's ``payload``): :class:`~leasefence.errors.PayloadMissing` on 410
        ``payload_missing``, :class:`~leasefence.errors.Unavailable` on 503 ``unavailable``,
        :class:`~leasefence.errors.NotFound` on 404."""
        carried = getattr(claim, "payload", None)  # a payload is never null: None is "not carried"
        if carried is not None:
            return carried
        return self.client.payload(claim.operation_id)
