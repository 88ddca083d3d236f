"""The SDK's batches: :class:`ItemResult` (one item's answer, as its one-at-a-time call would
have given it) and :class:`BatchCalls`, the batch methods of
:class:`~leasefence.client.LeaseFenceClient` (``POST /v1/batch/...``, 25 items a request)."""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from leasefence import otel
from leasefence.answer_errors import answer_error
from leasefence.errors import LeaseFenceError
from leasefence.limits import MAX_BATCH_ITEMS, MAX_TRIAGE_ITEMS
from leasefence.resources import Claim, EnqueueResult, Operation, from_json

T = TypeVar("T")


def parse_time(value: str | None) -> datetime | None:
    """A time as the API writes it (ISO 8601, ``Z`` for UTC)."""
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class ItemResult(Generic[T]):
    """One item's answer in a batch: what its one-at-a-time call would have answered. ``status``
    is that call's HTTP status; ``value`` its result (None on an error), ``error`` the typed
    error that call would have raised (None on success)."""

    operation_id: str | None  # a claim item that claimed nothing: None
    status: int
    value: T | None
    error: LeaseFenceError | None

    @property
    def ok(self) -> bool:
        return self.error is None

    def result(self) -> T:
        """The value, or the item's error raised (as the one-at-a-time call would)."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def _item_result(data: Mapping[str, Any], read: Callable[[Any], T]) -> ItemResult[T]:
    status, body = int(data["status"]), data["body"]
    if 200 <= status < 300:
        return ItemResult(data["operation_id"], status, read(body), None)
    raw = json.dumps(body, separators=(",", ":")).encode()
    return ItemResult(data["operation_id"], status, None, answer_error(status, raw))


def _operation(body: Any) -> Operation:
    return Operation.from_json(body["operation"])


def _lease_expiry(body: Any) -> datetime:
    return parse_time(body["lease_expires_at"])  # type: ignore[return-value]


#: The lists of a round (``POST /v1/batch/work``), in the order the server makes them.
ROUND_LISTS = ("finish", "heartbeat", "claim")


def _tokened(items: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Claim items, each with its claim token (a fresh one where it has none)."""
    return [{**item, "claim_token": item.get("claim_token") or uuid.uuid4().hex} for item in items]


def _claimed(item: Mapping[str, Any], answer: ItemResult[Any]) -> ItemResult[Claim | None]:
    """A claim item's result: its :class:`Claim` (knowing the token it was sent with), or None
    when nothing was claimable."""
    claim = None
    if answer.value is not None:
        claim = Claim.from_json(answer.value["claim"], claim_token=item["claim_token"])
    return ItemResult(answer.operation_id, answer.status, claim, answer.error)


@dataclass(frozen=True)
class WorkResults:
    """The answer of :meth:`BatchCalls.work_batch`: one result per item of each list sent."""

    finish: list[ItemResult[Operation]]
    heartbeat: list[ItemResult[datetime]]
    claim: list[ItemResult[Claim | None]]


class BatchCalls:
    """The batch methods; the client supplies :meth:`request`."""

    if TYPE_CHECKING:

        def request(
            self,
            method: str,
            path: str,
            body: Any = ...,
            idempotent: bool = True,
            *,
            deadline: float | None = None,
            try_timeout: float | None = None,
            headers: dict[str, str] | None = None,
        ) -> tuple[int, Any]: ...

    def _batch(
        self,
        route: str,
        items: Iterable[Mapping[str, Any]],
        read: Callable[[Any], T],
        deadline: float | None = None,
        try_timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> builtins.list[ItemResult[T]]:
        """``items`` sent :data:`~leasefence.limits.MAX_BATCH_ITEMS` to a request, in order;
        every item is safe to repeat (its one-at-a-time route's replay), so a lost answer is
        resent whole and each item gets its own answer again."""
        pending = [dict(item) for item in items]
        results: builtins.list[ItemResult[T]] = []
        for start in range(0, len(pending), MAX_BATCH_ITEMS):
            chunk = pending[start : start + MAX_BATCH_ITEMS]
            data = self.request(
                "POST",
                f"/v1/batch/{route}",
                {"items": chunk},
                deadline=deadline,
                try_timeout=try_timeout,
                headers=headers,
            )[1]
            results.extend(_item_result(r, read) for r in data["results"])
        return results

    def claim_batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
    ) -> builtins.list[ItemResult[Claim | None]]:
        """Make several claims (25 a request): each item holds the body ``claim`` sends
        (``worker_id``, optional ``lease_seconds``, ``job_types``, ``operation_id``,
        ``claim_token``: a fresh one when it has none). Each value is a :class:`Claim`, or None
        when nothing was claimable (status 204). Every item carries its own claim token, so a
        lost answer is resent whole and each claim that was made is answered again."""
        sent = _tokened(items)
        answers = self._batch("claim", sent, lambda body: body, deadline, try_timeout)
        return [_claimed(item, answer) for item, answer in zip(sent, answers, strict=True)]

    def enqueue_batch(
        self, items: Iterable[Mapping[str, Any]]
    ) -> builtins.list[ItemResult[EnqueueResult]]:
        """Record several operations (25 a request): each item holds the body ``enqueue`` sends
        (``operation_id``, ``job_type``, ``payload`` or ``payload_ref`` + ``payload_hash``,
        optional ``max_attempts``, ``target_class``). One result per item, in order: a refusal
        (a payload conflict, say) is that item's ``error``; the other items are recorded. The
        current trace context goes with them (``traceparent``), as with ``enqueue``."""
        with otel.producer_span(None):
            trace_context = otel.current_trace_context()
            headers = trace_context.headers() if trace_context is not None else None
            return self._batch(
                "enqueue", items, lambda body: from_json(EnqueueResult, body), headers=headers
            )

    def heartbeat_batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
    ) -> builtins.list[ItemResult[datetime]]:
        """Renew several leases (25 a request): each item holds ``operation_id`` and the body
        ``heartbeat`` sends (``fence``, ``worker_id``, optional ``lease_seconds``,
        ``checkpoint``, ``intent``). Each value is that lease's new expiry; a
        :class:`StaleFence` error: stop that job."""
        return self._batch("heartbeat", items, _lease_expiry, deadline, try_timeout)

    def finish_batch(
        self, items: Iterable[Mapping[str, Any]]
    ) -> builtins.list[ItemResult[Operation]]:
        """Finish several claims (25 a request): each item holds ``action`` (``complete``,
        ``fail``, ``unknown`` or ``quarantine``), ``operation_id`` and the body that call sends
        (``fence`` and ``outcome_code``; or ``retryable``, ``reason``, optional
        ``retry_after_seconds``; or ``reason``)."""
        return self._batch("finish", items, _operation)

    def work_batch(
        self,
        finish: Iterable[Mapping[str, Any]] = (),
        heartbeat: Iterable[Mapping[str, Any]] = (),
        claim: Iterable[Mapping[str, Any]] = (),
        *,
        deadline: float | None = None,
        try_timeout: float | None = None,
    ) -> WorkResults:
        """A worker fleet's round trip in one request (``POST /v1/batch/work``, up to 25 items
        in each list, at least one item): the ``finish`` items (as :meth:`finish_batch` takes
        them), then the ``heartbeat`` items (as :meth:`heartbeat_batch`), then the ``claim``
        items (as :meth:`claim_batch`: a fresh claim token for an item without one). Answered
        with each list's results, in order; every item is safe to repeat, so a lost answer is
        resent whole."""
        claims = _tokened(claim)
        body = {"finish": list(finish), "heartbeat": list(heartbeat), "claim": claims}
        data = self.request(
            "POST", "/v1/batch/work", body, deadline=deadline, try_timeout=try_timeout
        )[1]
        return WorkResults(
            [_item_result(r, _operation) for r in data["finish"]],
            [_item_result(r, _lease_expiry) for r in data["heartbeat"]],
            [
                _claimed(item, _item_result(r, lambda b: b))
                for item, r in zip(claims, data["claim"], strict=True)
            ],
        )

    def triage(
        self,
        action: str,
        items: Iterable[Mapping[str, Any]],
        note: str = "",
        *,
        resolution: str | None = None,
        accept_risks: Iterable[str] = (),
        request_token: str | None = None,
    ) -> builtins.list[ItemResult[Operation]]:
        """One operator decision for several operations (``POST /v1/batch/triage``, 100 a
        request): ``action`` ``resolve`` (with ``resolution``), ``requeue`` or ``cancel``; each
        item holds ``operation_id`` and what you saw of it, ``expected_state`` and
        ``expected_fence`` (an operation that moved on since is answered :class:`StaleFence`
        in its place). ``accept_risks``: ids to requeue despite their class's risk (class D
        with an intent on record; else refused in their place). The request's token is sent
        with every request, so a lost answer is resent whole and each item done is a replay."""
        token = request_token or uuid.uuid4().hex
        risky = set(accept_risks)
        pending = [dict(item) for item in items]
        results: builtins.list[ItemResult[Operation]] = []
        for start in range(0, len(pending), MAX_TRIAGE_ITEMS):
            chunk = pending[start : start + MAX_TRIAGE_ITEMS]
            body: dict[str, Any] = {"action": action, "note": note, "request_token": token}
            if resolution is not None:
                body["resolution"] = resolution
            named = sorted(risky & {str(item["operation_id"]) for item in chunk})
            if named:
                body["accept_risks"] = named
            data = self.request("POST", "/v1/batch/triage", {**body, "items": chunk})[1]
            results.extend(_item_result(r, _operation) for r in data["results"])
        return results
