"""What the composed run adds: the HTTP API in this process, HTTP workers beside in-process ones,
a catalogue whose limits cut leases, by-reference payloads, approvals, cancels, an operator who
erases and requeues parked operations, lost answers on every command, and the stream publisher.

Nothing here decides an outcome: it drives the public surfaces (the SDK over the API function,
the worker runtime, the engine, the publisher) the way their users do, and records what the
checker (:mod:`leasefence_tools.torture.checker`) needs to judge them.
"""

from __future__ import annotations

import heapq
import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import unquote

from leasefence.client import _MISSING, LeaseFenceClient
from leasefence.engine import MISSING, Engine
from leasefence.errors import (
    InvalidTransition,
    LeaseFenceError,
    NotFound,
    PayloadMismatch,
    PayloadMissing,
    Unavailable,
)
from leasefence.model import Claim, State, TargetClass
from leasefence.payloads import PayloadStore, canonicalize
from leasefence.targets import fenced_table
from leasefence.worker import FunctionHandler, Reconciled
from leasefence.worker.http_backend import HttpBackend
from leasefence_tools.testing.faults import FaultyClient
from leasefence_tools.testing.kits import FencedTableKit, Job, Kit
from leasefence_tools.torture.chaos import SWAPPED, ChaosEvents, ChaosHooks, StoreChaos
from leasefence_tools.torture.indeterminate import INFO, batch_parts, http_answers, http_calls
from leasefence_tools.torture.settings import (
    FINAL_STATES,
    FastClock,
    Key,
    Report,
    Settings,
    chance,
    payload,
)

#: The approval-required job type (class C; by reference or inline).
APPROVAL_JOB_TYPE = "email-c-approval"
#: How long an approval stays valid (the catalogue's minimum, engine seconds).
APPROVAL_VALID_SECONDS = 60
#: The scopes of the API (:mod:`leasefence.api.security`).
PRODUCE, WORK, OPERATE, APPROVE = (
    "leasefence/produce",
    "leasefence/work",
    "leasefence/operate",
    "leasefence/approve",
)


def _ms(value: str | None) -> int | None:
    if value is None:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def catalogue(settings: Settings, cut_b: bool = True) -> dict[str, dict[str, Any]]:
    """Each tenant's catalogue. ``email-c`` and the approval type are always cut below what HTTP
    workers ask, ``ledger-b`` below what every worker asks while ``cut_b`` (the operator flips
    it), ``refund-a`` and ``sms-d`` never are."""
    cut = settings.cut_lease_seconds
    uncut = {"lease_seconds": 60, "max_lease_seconds": 900}
    limited = {"lease_seconds": cut, "max_lease_seconds": cut}
    b_cut = settings.cut_b_lease_seconds
    b_limited = {"lease_seconds": b_cut, "max_lease_seconds": b_cut}
    return {
        "refund-a": {"target_class": "A", "max_attempts": 5, **uncut},
        "ledger-b": {"target_class": "B", "max_attempts": 5, **(b_limited if cut_b else uncut)},
        "email-c": {"target_class": "C", "max_attempts": 5, **limited},
        "sms-d": {"target_class": "D", "max_attempts": 1, **uncut},
        APPROVAL_JOB_TYPE: {
            "target_class": "C",
            "max_attempts": 5,
            "approval_required": True,
            "approval_valid_seconds": APPROVAL_VALID_SECONDS,
            **limited,
        },
    }


class ExternalStore:
    """The producers' own store, for payloads enqueued by reference (``ext://tenant/operation``)."""

    PREFIX = "ext://"

    def __init__(self) -> None:
        self.objects: dict[Key, bytes] = {}
        self.lock = threading.Lock()

    def put(self, key: Key, value: Any, replace: bool = False) -> tuple[str, str]:
        """Store the operation's object (kept as it is if it exists, unless ``replace``);
        returns its reference and the hash of ``value``."""
        canonical = canonicalize(value)
        with self.lock:
            if replace:
                self.objects[key] = canonical.body
            else:
                self.objects.setdefault(key, canonical.body)
        return f"{self.PREFIX}{key[0]}/{key[1]}", canonical.hash

    def owns(self, ref: str | None) -> bool:
        return bool(ref) and str(ref).startswith(self.PREFIX)

    def load(self, claim: Claim) -> Any:
        with self.lock:
            data = self.objects.get((claim.tenant_id, claim.operation_id))
        if data is None:
            raise PayloadMissing("the producer's object is gone")
        return json.loads(data)


# ---------------------------------------------------------------------------------- the API


class InProcessApi:
    """API Gateway (the JWT authorizer's claims given) and the API function, in this process.

    The function runs as the local stack runs it (``leasefence.api.app.handle``: scope gate,
    validated resolver, routes) over the torture's own engine (its clock, its store faults) and
    payload store, in ``environments`` execution environments at once, as Lambda runs several:
    a request takes a free one, which handles one request at a time. Each environment has its
    own copy of the routes module (its own resolver), as each Lambda instance has its own
    interpreter; Powertools keeps the request being resolved in a class attribute every resolver
    shares, so each environment's resolver is given the request it resolves as its own (an
    instance attribute, which is what its routes and middlewares read)."""

    def __init__(
        self,
        engine: Engine,
        payloads: PayloadStore,
        table: str,
        bucket: str,
        environments: int = 6,
    ) -> None:
        import importlib.util
        import logging
        import queue

        # The API's Powertools logger sets the "leasefence" logger's level when first imported:
        # keep the one the run was given (the torture silences expected failures).
        level = logging.getLogger("leasefence").level
        from leasefence import settings as runtime_settings
        from leasefence.api import app as api_app
        from leasefence.api import routes

        logging.getLogger("leasefence").setLevel(level)
        runtime = runtime_settings.install(
            runtime_settings.Settings(table_name=table, payload_bucket=bucket)
        )
        runtime._engine = engine
        runtime._payloads = payloads
        self._runtime = runtime
        self.free: queue.Queue[Any] = queue.Queue()
        for number in range(environments):
            spec = importlib.util.spec_from_file_location(
                f"leasefence.api._torture_routes_{number}", routes.__file__
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            # Its metrics would never be flushed here.
            vars(module)["record_claim_latency"] = lambda _ms: None
            self.free.put(_own_request(module.app))
        self._current = threading.local()
        self._module = api_app
        self._original = api_app.resolver
        api_app.resolver = self._resolver

    def _resolver(self) -> Any:
        app = getattr(self._current, "app", None)
        return app if app is not None else self._original()

    def respond(
        self, method: str, target: str, body: bytes | None, claims: dict[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        from leasefence_tools.local.server import LambdaContext, _from_result, http_api_event

        headers = [("content-type", "application/json")] if body else []
        event = http_api_event(method, target, headers, body, claims)
        app = self.free.get()
        self._current.app = app
        try:
            result = self._module.handle(event, LambdaContext("leasefence-api", 30_000))
        finally:
            self._current.app = None
            self.free.put(app)
        status, answer_headers, raw = _from_result(result)
        return status, dict(answer_headers), raw

    def close(self) -> None:
        from leasefence import settings as runtime_settings

        self._module.resolver = self._original
        runtime_settings.reset(only=self._runtime)


def _own_request(app: Any) -> Any:
    """Make ``app`` (a Powertools resolver) keep the request it resolves as its own attribute
    (Powertools also sets it on the shared class, where another environment would read it)."""
    resolve = app.resolve

    def resolve_own(event: Any, context: Any) -> Any:
        app.current_event = app._to_proxy_event(event)
        app.lambda_context = context
        return resolve(event, context)

    app.resolve = resolve_own
    return app


class Http:
    """The SDK's transport to :class:`InProcessApi`, losing some answers after the request ran;
    pairs each lost answer with the retry that follows it (for the checker)."""

    def __init__(
        self,
        api: InProcessApi,
        settings: Settings,
        report: Report,
        clock: FastClock,
        observer: Engine,
    ) -> None:
        self.api, self.settings, self.report = api, settings, report
        self.clock, self.observer = clock, observer

    def client(
        self, name: str, tenant_id: str, scopes: Iterable[str], subject: str | None
    ) -> ApiClient:
        claims: dict[str, Any] = {"tenant_id": tenant_id, "scope": " ".join(scopes)}
        if subject is not None:
            claims["sub"] = subject
        return ApiClient(self, name, tenant_id, claims)

    def lost(
        self, client: ApiClient, method: str, path: str, body: Any, status: int, raw: bytes
    ) -> dict[str, Any]:
        answer = _json(raw)
        record = {"client": client.name, "method": method, "path": path, "status": status}
        self.report.fault("http_answer_lost")
        if path == "/v1/claims" and status == 200 and answer:
            record["claim"] = self._lost_claim(client, answer["claim"], body)
        elif _claim_items(path, body) and status == 200 and answer:
            # Each claim the batch made, judged item by item when the batch is sent again.
            record["claims"] = [
                {**self._lost_claim(client, result["body"]["claim"], item), "item": index}
                for index, (item, result) in enumerate(
                    zip(_claim_items(path, body), _claim_results(path, answer), strict=False)
                )
                if result["status"] == 200
            ]
        elif isinstance(answer, dict) and isinstance(answer.get("operation"), dict):
            operation = answer["operation"]
            record["operation"] = {
                "state": operation["state"],
                "fence": int(operation["fence"]),
                "updated_at": _ms(operation["updated_at"]),
            }
        elif isinstance(answer, dict) and "changed" in answer:
            record["changed"] = bool(answer["changed"])
        return record

    def _lost_claim(
        self, client: ApiClient, claim: dict[str, Any], sent: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A claim made by a request whose answer was lost (noted, and kept for the report)."""
        lost = {
            "tenant_id": client.tenant_id,
            "operation_id": claim["operation_id"],
            "fence": int(claim["fence"]),
            "lease_expires_at": _ms(claim["lease_expires_at"]),
            "token": (sent or {}).get("claim_token"),
        }
        self.report.note(
            client.tenant_id, claim["operation_id"], f"claim answer lost, fence {claim['fence']}"
        )
        with self.report.lock:
            self.report.lost_claims.append(lost)
        return lost

    def retried(
        self,
        client: ApiClient,
        lost: dict[str, Any],
        status: int,
        raw: bytes,
        body: Any = None,
        path: str | None = None,
    ) -> None:
        """The request whose answer was lost, sent again: what it answered this time. A claim
        batch's ``body`` (the request sent again, to ``path``; None: the lost one's own items,
        in their order) places each claim by its token."""
        answer = _json(raw)
        entry = {**lost, "retry_status": status, "at": self.clock()}
        if "claim" in lost:
            claim = (answer or {}).get("claim") if status == 200 else None
            entry["retry_claim"] = (
                None if claim is None else [claim["operation_id"], int(claim["fence"])]
            )
        elif "claims" in lost:  # a claim batch: what each item that had claimed answers now
            carried = path or lost["path"]
            results = _claim_results(carried, answer) if status == 200 else []
            tokens = [(item or {}).get("claim_token") for item in _claim_items(carried, body)]
            judged, unanswered = [], []
            for claimed in lost["claims"]:
                index = claimed["item"]
                if body is not None:
                    index = tokens.index(claimed["token"]) if claimed["token"] in tokens else -1
                if _item_busy(results, index):
                    # The item answered 5xx or 429 (its own store was busy, the batch ran out
                    # of time): no answer yet, as a busy one-at-a-time claim; the worker sends
                    # its token again in a later batch, and that answer is the one compared.
                    unanswered.append(claimed)
                else:
                    judged.append({**claimed, "retry_claim": _item_claim(results, index)})
            entry["claims"] = judged
            if unanswered:
                client.await_claims(lost, unanswered)
            if not judged:
                return
        elif "changed" in lost:
            entry["retry_changed"] = bool((answer or {}).get("changed"))
        elif "operation" in lost and 400 <= status < 500:
            # Refused: did anything happen to the operation since the lost answer?
            parts = lost["path"].split("/")
            try:
                now = self.observer.get(client.tenant_id, unquote(parts[3]))
                entry["snapshot"] = {
                    "state": now.state.value,
                    "fence": now.fence,
                    "updated_at": now.updated_at,
                }
            except NotFound:
                pass
        with self.report.lock:
            self.report.retries.append(entry)


def _item_busy(results: list[Any], index: int) -> bool:
    """Whether a claim batch's item ``index`` answered 5xx or 429 (no answer: it may run again)."""
    result = results[index] if 0 <= index < len(results) else None
    status = result.get("status") if isinstance(result, dict) else None
    return isinstance(status, int) and (status >= 500 or status == 429)


def _item_claim(results: list[Any], index: int) -> list[Any] | None:
    """``[operation, fence]`` of the claim a claim batch's item ``index`` answered, or None."""
    result = results[index] if 0 <= index < len(results) else None
    if not isinstance(result, dict) or result.get("status") != 200:
        return None
    claim = result["body"]["claim"]
    return [claim["operation_id"], int(claim["fence"])]


def _claim_items(path: str, body: Any) -> list[Any]:
    """The claim items of a batch body (``POST /v1/batch/claim``'s items, ``/work``'s
    ``claim``; none for any other request)."""
    return [
        item for route, _, items in batch_parts(path, body) if route == "claim" for item in items
    ]


def _claim_results(path: str, answer: Any) -> list[Any]:
    """The results that answer :func:`_claim_items`, in their order."""
    places = [where for route, where, _ in batch_parts(path, {}) if route == "claim"]
    results = answer.get(places[0]) if places and isinstance(answer, dict) else None
    return results if isinstance(results, list) else []


def _count_batch(report: Report, path: str, body: Any) -> None:
    """Batch requests and their items, per route (the run's report shows they were sent)."""
    route = path.removeprefix("/v1/batch/")
    if route != path:
        report.count(f"batch_requests:{route}")
        parts = batch_parts(path, body)
        report.count(f"batch_items:{route}", sum(len(items) for _, _, items in parts))
        if route == "work":  # a round: what it carried, by kind
            for kind, _, items in parts:
                report.count(f"round_items:{kind}", len(items))


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class ApiClient(LeaseFenceClient):
    """The SDK (retries, typed errors) over :class:`Http` instead of a socket."""

    def __init__(self, http: Http, name: str, tenant_id: str, claims: dict[str, Any]) -> None:
        super().__init__("http://torture.invalid", None, retries=4, backoff=0.002, max_backoff=0.05)
        self.http, self.name, self.tenant_id, self.claims = http, name, tenant_id, claims
        self.pending: dict[tuple[str, str, str], dict[str, Any]] = {}
        #: Per claim token: a lost claim batch's claim whose item its resend answered 5xx or 429
        #: (the lost record, holding that one claim), compared when a batch carries it again.
        self.awaiting: dict[str, dict[str, Any]] = {}
        self.sent: Counter[tuple[str, str, str]] = Counter()
        self.lock = threading.Lock()

    def await_claims(self, lost: dict[str, Any], claims: list[dict[str, Any]]) -> None:
        """``claims`` of the lost claim batch ``lost`` got no answer from its resend (their items
        answered 5xx or 429): the next claim batch carrying each one's token answers it."""
        with self.lock:
            for claimed in claims:
                if claimed["token"] is not None:
                    self.awaiting[claimed["token"]] = {**lost, "claims": [claimed]}

    def _once(
        self,
        method: str,
        path: str,
        body: Any,
        timeout: float | None = None,  # noqa: ARG002 - in-process: an answer never waits
    ) -> tuple[int, dict[str, str], bytes]:
        data = None if body is _MISSING else json.dumps(body, separators=(",", ":")).encode()
        request = (method, path, data.decode() if data else "")
        settings, report = self.http.settings, self.http.report
        with self.lock:
            lost_before = self.pending.pop(request, None)
            self.sent[request] += 1
            nth = self.sent[request]
        if settings.claim_tokens:
            claims = [body] if path == "/v1/claims" else _claim_items(path, body)
            untokened = sum(1 for c in claims if "claim_token" not in (c or {}))
            if untokened:
                report.count("claims_without_token", untokened)
        _count_batch(report, path, body)
        log = report.calls
        calls = [] if log is None else http_calls(self.name, self.tenant_id, method, path, body)
        lost = None
        if calls:
            for _, call in calls:
                log.begin(call)
            lost = log.lose_together([call for _, call in calls])
            if lost == "before":  # the request never reaches the API; the client cannot tell
                for _, call in calls:
                    log.end(call, INFO)
                raise ConnectionResetError("injected: the request was lost")
        status, headers, raw = self.http.api.respond(method, path, data, self.claims)
        tokens = {(item or {}).get("claim_token") for item in _claim_items(path, body)}
        with self.lock:  # before lost_before's: a claim it leaves unanswered waits for the next
            awaited = [self.awaiting.pop(t) for t in tokens if t in self.awaiting]
        if lost_before is not None:
            if status >= 500 or status == 429:  # busy: no answer yet, the next try is compared
                with self.lock:
                    self.pending.setdefault(request, lost_before)
            else:
                self.http.retried(self, lost_before, status, raw)
        for lost_claim in awaited:  # a claim whose resent item got no answer, carried again
            if status >= 500 or status == 429:
                self.await_claims(lost_claim, lost_claim["claims"])
            else:
                self.http.retried(self, lost_claim, status, raw, body, path)
        if calls:
            if lost is None:  # a batch's answer is judged item by item
                http_answers(log, calls, status, _json(raw))
            else:  # it ran; its answer is lost (every item's, in a batch)
                for _, call in calls:
                    log.end(call, INFO)
        if (lost == "after" and status < 500) or (
            not calls
            and method != "GET"
            and status < 500
            and chance(settings.seed, "http-lost", self.name, *request, nth)
            < settings.http_lost_rate
        ):
            record = self.http.lost(
                self, method, path, body if isinstance(body, dict) else None, status, raw
            )
            with self.lock:
                self.pending[request] = record
            raise ConnectionResetError("injected: the answer was lost")
        if lost == "after":  # a 5xx or a 429 whose answer was lost: no answer either way
            raise ConnectionResetError("injected: the answer was lost")
        return status, headers, raw


class TortureHttpBackend(HttpBackend):
    """The worker runtime's HTTP backend, unchanged, plus what the checker needs: every claim a
    worker received, every operation it finished, and payloads by reference from the
    producers' store. ``batched``: the backend of a fleet of workers whose claims, renewals and
    closing writes share batch requests (``POST /v1/batch/...``); what its workers claim and
    finish is counted (``batched_claims``, ``batched_finishes``)."""

    def __init__(
        self,
        client: ApiClient,
        tenant_id: str,
        report: Report,
        claims: list[tuple[str, str, int]],
        finished: Callable[[str, str], None],
        parked: Callable[[str, str], None],
        external: ExternalStore,
        batched: bool = False,
    ) -> None:
        super().__init__(client, tenant_id, batched=batched)
        self.report, self.claims = report, claims
        self.finished, self.parked, self.external = finished, parked, external

    def _closed(self, claim: Claim) -> None:
        if self.batched:
            self.report.count("batched_finishes")
        self.finished(claim.tenant_id, claim.operation_id)

    def claim_next(
        self, worker_id: str, lease_ms: int, job_types: Iterable[str] | None = None
    ) -> Claim | None:
        return self._received(super().claim_next(worker_id, lease_ms, job_types), worker_id)

    def take_ready(self, worker_id: str) -> Claim | None:
        return self._received(super().take_ready(worker_id), worker_id)

    def _received(self, claim: Claim | None, worker_id: str) -> Claim | None:
        """A claim handed to a worker: recorded for the checker."""
        if claim is not None:
            self.report.note(
                claim.tenant_id, claim.operation_id, f"claimed fence {claim.fence} by {worker_id}"
            )
            with self.report.lock:
                self.claims.append((claim.tenant_id, claim.operation_id, claim.fence))
            if self.batched:
                self.report.count("batched_claims")
        return claim

    def heartbeat(
        self,
        claim: Claim,
        lease_ms: int | None = None,
        checkpoint: Any = MISSING,
        intent: str | None = None,
    ) -> int:
        self.report.renewal_sent(claim.tenant_id, claim.operation_id, claim.fence)
        return super().heartbeat(claim, lease_ms, checkpoint, intent)

    def complete(self, claim: Claim, outcome_code: str) -> None:
        super().complete(claim, outcome_code)
        self._closed(claim)

    def fail(
        self, claim: Claim, retryable: bool, reason: str, retry_after_ms: int | None = None
    ) -> None:
        """As the backend's own, but told the state it left (final or queued again)."""
        operation = self._failed(claim, retryable, reason, retry_after_ms)
        if State(operation.state) in FINAL_STATES:
            self._closed(claim)

    def park_unknown(self, claim: Claim, reason: str) -> None:
        super().park_unknown(claim, reason)
        self._closed(claim)
        self.parked(claim.tenant_id, claim.operation_id)

    def quarantine(self, claim: Claim, reason: str) -> None:
        super().quarantine(claim, reason)
        self._closed(claim)

    def load_payload(self, claim: Claim) -> Any:
        if self.external.owns(claim.payload_ref):
            return self.external.load(claim)
        return super().load_payload(claim)


# ---------------------------------------------------------------------------------- class B


class AccountLedgerKit(FencedTableKit):
    """Class B with shared items: each operation posts to two accounts (items many operations
    write, like a tenant's balance and a platform's fee account: its tenant's, then the one
    every tenant's operations write), each keeping at most ``max_entries`` fence entries (pruned, with a
    horizon), and then writes its own ledger entry. Each account keeps its postings
    (``"tenant|operation:fence"``) in commit order: the checker reads from them whether an
    account ever accepted a lower fence of an operation after a higher one."""

    def __init__(
        self, client: Any, table: str, tenants: list[str], max_entries: int, **kwargs: Any
    ) -> None:
        super().__init__(client, table, **kwargs)
        self.accounts = fenced_table.FencedTable(
            client, table, events=self.events, max_entries=max_entries
        )
        self.tenants = tenants

    @staticmethod
    def accounts_of(tenant_id: str) -> list[dict[str, str]]:
        return [{"pk": f"account|{tenant_id}"}, {"pk": "account|all"}]

    def account_keys(self) -> list[dict[str, str]]:
        return [{"pk": "account|all"}, *({"pk": f"account|{t}"} for t in self.tenants)]

    def postings(self, key: dict[str, str]) -> list[tuple[Key, int]]:
        """``((tenant, operation), fence)`` of every posting the account applied, in commit
        order."""
        item = self.accounts.read(key) or {}
        found = []
        for posting in item.get("postings", []):
            identity, _, fence = str(posting).rpartition(":")
            tenant_id, _, operation_id = identity.partition("|")
            found.append(((tenant_id, operation_id), int(fence)))
        return found

    def handler(self) -> FunctionHandler:
        def on_claim(job: Job) -> None:
            self.table.raise_fence(job, self._key(job.tenant_id, job.operation_id))
            for account in self.accounts_of(job.tenant_id):
                self.accounts.raise_fence(job, account)

        def run(job: Job) -> str:
            self.hooks.before(job)
            for account in self.accounts_of(job.tenant_id):
                self.accounts.write(
                    job,
                    account,
                    {},
                    append={"postings": [f"{job.tenant_id}|{job.operation_id}:{job.fence}"]},
                )
            self.table.write(
                job,
                self._key(job.tenant_id, job.operation_id),
                {"status": "posted", "by_fence": job.fence, "payload_hash": job.claim.payload_hash},
                append={"history": [job.fence]},
            )
            self.hooks.after(job)
            return "posted"

        def reconcile(job: Job) -> Reconciled:
            item = self.table.read(self._key(job.tenant_id, job.operation_id)) or {}
            return (
                Reconciled.done("posted")
                if item.get("status") == "posted"
                else Reconciled.not_done()
            )

        return FunctionHandler(run, reconcile, on_claim)


# ---------------------------------------------------------------------------------- actors


class Actors:
    """Producers, approvers and the operator: actions at given wall-clock moments, in one
    thread (a racing action gets a thread of its own).

    * approvals (:meth:`approval`): most approve with the hash they were shown; some first try a
      wrong hash, some are first tried by the enqueuer itself, some are rejected, some come
      after the approval window (racing the sweeper's expiry), some race a cancel; by the time
      some by-reference payloads are approved, their producer has replaced the bytes behind the
      reference;
    * cancels (:meth:`cancel`) soon after an enqueue, racing the claims;
    * the operator (:meth:`tick`): each ``unknown`` operation it meets is erased (at
      ``erase_parked_rate``) and then requeued (``resolve requeue``, sent again when its answer
      is lost), some requeued ones cancelled right away; and the class-B job type's maximum
      lease flipped between cut and uncut every ``catalogue_flip_s``.
    """

    def __init__(
        self,
        settings: Settings,
        report: Report,
        clock: FastClock,
        http: Http,
        tenants: list[str],
        hooks: ChaosHooks,
        external: ExternalStore,
        window_add: Callable[[str, str], None],
        window_done: Callable[[str, str], None],
        observer: Engine,
    ) -> None:
        self.settings, self.report, self.clock = settings, report, clock
        self.hooks, self.external, self.observer = hooks, external, observer
        self.window_add, self.window_done = window_add, window_done
        seed = settings.seed
        self.producers = {
            t: http.client(f"producer-{t}", t, [PRODUCE], f"producer:{t}") for t in tenants
        }
        self.anonymous = {t: http.client(f"anonymous-{t}", t, [PRODUCE], None) for t in tenants}
        self.approvers = {
            t: http.client(f"approver-{t}", t, [APPROVE], f"approver:{t}") for t in tenants
        }
        # The producer's own identity holding the approve scope too: a self-approval attempt.
        self.selves = {t: http.client(f"self-{t}", t, [APPROVE], f"producer:{t}") for t in tenants}
        self.operators = {
            t: http.client(f"operator-{t}", t, [OPERATE], f"operator:{t}") for t in tenants
        }
        self.seed = seed
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.parked: list[Key] = []
        self._handled: set[Key] = set()
        self._cut_b = True
        self._next_flip = time.monotonic() + settings.catalogue_flip_s
        self.racers: list[threading.Thread] = []

    # ------------------------------------------------------------ schedule

    def at(self, delay_s: float, action: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._order), action))
            self._changed.notify()

    def start(self) -> Actors:
        self._thread = threading.Thread(target=self._run, name="actors", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for racer in self.racers:
            racer.join(timeout=30)

    def pending(self) -> int:
        with self._changed:
            return len(self._heap)

    def _run(self) -> None:
        next_tick = time.monotonic()
        while not self._stop.is_set():
            with self._changed:
                now = time.monotonic()
                due = self._heap[0][0] if self._heap else now + 0.25
                if due > now and next_tick > now:
                    self._changed.wait(min(due, next_tick) - now)
                    continue
                action = heapq.heappop(self._heap)[2] if self._heap and due <= now else None
            try:
                if action is not None:
                    action()
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + 0.25
                    self.tick()
            except (LeaseFenceError, ConnectionError) as error:
                self._failed(error)

    def _failed(self, error: Exception) -> None:
        """An action that failed unexpectedly (counted; its first messages kept for the summary)."""
        code = getattr(error, "code", type(error).__name__)
        self.report.count(f"actor_error:{code}")
        with self.report.lock:
            if len(self.report.errors) < 10:
                self.report.errors.append(f"{code}: {error}"[:300])

    def _race(self, action: Callable[[], None]) -> None:
        racer = threading.Thread(target=self._guarded, args=(action,), daemon=True)
        self.racers.append(racer)
        racer.start()

    def _guarded(self, action: Callable[[], None]) -> None:
        try:
            action()
        except (LeaseFenceError, ConnectionError) as error:
            self._failed(error)

    # ------------------------------------------------------------ producers

    def cancel(self, tenant_id: str, operation_id: str, label: str = "") -> None:
        """A producer withdraws an operation (refused once a worker holds it or it ended)."""
        try:
            operation = self.producers[tenant_id].cancel(operation_id)
        except InvalidTransition:
            self.report.count("cancels_refused")
            return
        self.report.fault("cancel", tenant_id, operation_id, label)
        if operation.state == State.CANCELLED:
            self.report.count("cancelled")
            self.report.note(tenant_id, operation_id, f"cancelled {label}".strip())
            self.window_done(tenant_id, operation_id)

    # ------------------------------------------------------------ approvals

    def approval(self, tenant_id: str, operation_id: str, payload_hash: str, by_ref: bool) -> None:
        """What happens to one operation awaiting approval (decided by its own coin)."""
        key = (tenant_id, operation_id)
        coin = chance(self.seed, "approval", tenant_id, operation_id)
        if coin < 0.10:  # a wrong hash first: must change nothing
            wrong = canonicalize(payload(tenant_id, operation_id, "tampered")).hash
            try:
                self.approvers[tenant_id].approve(operation_id, wrong)
                with self.report.lock:
                    self.report.mismatch_approved.append(key)
            except PayloadMismatch:
                self.report.count("approvals_mismatch_refused")
            except InvalidTransition:
                pass
        elif coin < 0.25:  # the enqueuer tries to approve its own operation
            try:
                self.selves[tenant_id].approve(operation_id, payload_hash)
                with self.report.lock:
                    self.report.self_approved.append(key)
                    self.report.approved[key] = payload_hash
                self.report.note(tenant_id, operation_id, "approved by its enqueuer")
                return
            except LeaseFenceError as refused:  # 403 forbidden (SelfApproval), or closed
                self.report.count(f"self_approvals_refused:{refused.code}")
        elif coin < 0.35:
            self.reject(tenant_id, operation_id)
            return
        elif coin < 0.45:  # too late: races the sweeper's expiry
            self.at(
                self.clock.wall_seconds(APPROVAL_VALID_SECONDS * 1000) + 0.2,
                lambda: self.approve(tenant_id, operation_id, payload_hash, by_ref, "late"),
            )
            return
        elif coin < 0.55:  # a cancel races the approval
            self._race(lambda: self.cancel(tenant_id, operation_id, "racing its approval"))
        self.approve(tenant_id, operation_id, payload_hash, by_ref)

    def approve(
        self, tenant_id: str, operation_id: str, payload_hash: str, by_ref: bool, label: str = ""
    ) -> None:
        """Approve with the hash the approver was shown at the enqueue. For some operations
        enqueued by reference, the producer has replaced the bytes behind the reference by then:
        the approver cannot see them (it has the hash only), and nothing checks them."""
        key = (tenant_id, operation_id)
        if by_ref and chance(self.seed, "swap", tenant_id, operation_id) < 0.5:
            self.hooks.swapped.add(key)
            self.external.put(key, payload(tenant_id, operation_id, SWAPPED), replace=True)
            self.report.fault("swap_before_approval", tenant_id, operation_id)
        try:
            operation = self.approvers[tenant_id].approve(operation_id, payload_hash)
        except InvalidTransition:  # expired, rejected or cancelled first
            self.report.count(f"approvals_refused{'_' + label if label else ''}")
            return
        if operation.approved_by is None:
            return
        with self.report.lock:
            self.report.approved[key] = payload_hash
        self.report.count(f"approved{'_' + label if label else ''}")
        self.report.note(tenant_id, operation_id, f"approved {label}".strip())

    def reject(self, tenant_id: str, operation_id: str) -> None:
        try:
            self.approvers[tenant_id].reject(operation_id, note="torture: rejected")
        except InvalidTransition:
            return
        self.report.count("rejected")
        self.window_done(tenant_id, operation_id)

    # ------------------------------------------------------------ the operator

    def park(self, tenant_id: str, operation_id: str) -> None:
        with self._changed:
            self.parked.append((tenant_id, operation_id))

    def tick(self) -> None:
        if time.monotonic() >= self._next_flip:
            self._cut_b = not self._cut_b
            # Cut twice as long as uncut: most class-B operations run under the cut lease.
            self._next_flip = time.monotonic() + self.settings.catalogue_flip_s * (
                2 if self._cut_b else 1
            )
            spec = catalogue(self.settings, cut_b=self._cut_b)["ledger-b"]
            for operator in self.operators.values():
                _, changed = operator.put_job_type("ledger-b", spec)
                self.report.count("catalogue_flips" if changed else "catalogue_unchanged")
        with self._changed:
            batch, self.parked = self.parked[:4], self.parked[4:]
        for key in batch:
            if key in self._handled:
                continue
            self._handled.add(key)
            self.erase_and_requeue(*key)

    def erase_and_requeue(self, tenant_id: str, operation_id: str) -> None:
        """An operator's routine with a parked operation: maybe erase it (a data subject asked),
        then requeue it (the documented ``resolve requeue``); sometimes the producer cancels it
        right after."""
        if self.observer.get(tenant_id, operation_id).state != State.UNKNOWN:
            return
        operator = self.operators[tenant_id]
        if (
            chance(self.seed, "erase-parked", tenant_id, operation_id)
            < self.settings.erase_parked_rate
        ):
            # Marked first: an erasure whose every answer was lost may still have happened.
            self.hooks.erased.add((tenant_id, operation_id))
            try:
                operator.erase(operation_id)
                self.report.fault("erase_parked", tenant_id, operation_id)
            except InvalidTransition:
                self.report.count("erasures_refused")
        self.window_add(tenant_id, operation_id)
        for _ in range(3):
            try:
                operator.resolve(operation_id, "requeue", note="torture: operator requeue")
                self.report.fault("requeue", tenant_id, operation_id)
                break
            except Unavailable:  # the answer was lost (or the store busy): send it again
                continue
            except InvalidTransition:
                break
        if chance(self.seed, "cancel-requeued", tenant_id, operation_id) < 0.3:
            self._race(lambda: self.cancel(tenant_id, operation_id, "right after its requeue"))


# ---------------------------------------------------------------------------------- publisher


class PublisherRig:
    """The publisher function on the table's stream, as the local stack runs it: the event source
    mapping of :mod:`leasefence_tools.local.streams` with the publisher's own settings
    (:func:`leasefence.streams.mappings.publisher`: batch size, retries, bisection, starting
    position, on-failure destination), invoking the function's own handler
    (``functions/publisher/handler.py``, without its Powertools decorators), whose
    :class:`~leasefence.streams.publisher.Publisher` is given faults in its table writes (a
    history's compaction past its bound; the history item of an operation enqueued before the
    history moved into the item) and its ``PutEvents`` calls."""

    def __init__(self, aws: Any, settings: Settings, report: Report, table: str) -> None:
        import inspect

        from leasefence.settings import runtime
        from leasefence.store import Store
        from leasefence.streams import mappings
        from leasefence.streams.publisher import Publisher
        from leasefence_tools.local.server import load_function
        from leasefence_tools.local.streams import EventSourceMapping

        self.events = ChaosEvents(settings, report)
        chaos = StoreChaos(
            settings,
            report,
            salt="publisher",
            rate=settings.publisher_fault_rate,
            prefix="history_",
        )
        store = Store(table, client=FaultyClient(aws.client(), chaos=chaos))
        function = load_function("publisher")
        # The function builds its publisher once per runtime: this one is already built.
        vars(function)["_built"] = (
            runtime(),
            Publisher(store, lambda: self.events, "torture-bus" if settings.events else None),
        )
        self._handler = inspect.unwrap(function.lambda_handler)
        config = mappings.publisher(events=settings.events)
        destination: dict[str, Any] = {"failure_queue_url": None}
        if getattr(config, "failure_destination", "sqs") == "s3":
            aws.client("s3").create_bucket(Bucket="torture-publisher-failures")
            destination["failure_bucket"] = "torture-publisher-failures"
        else:
            destination["failure_queue_url"] = aws.client("sqs").create_queue(
                QueueName="torture-publisher-failures"
            )["QueueUrl"]
        self.mapping = EventSourceMapping(
            "publisher", config, table, aws.client, self, poll_interval_s=0.25, **destination
        )

    def invoke(self, name: str, event: dict[str, Any], timeout_ms: int | None = None) -> Any:
        """The publisher function's execution environment (what the mapping invokes)."""
        from leasefence_tools.local.server import LambdaContext

        del name
        return self._handler(event, LambdaContext("leasefence-publisher", timeout_ms or 300_000))

    def start(self) -> PublisherRig:
        self.mapping.start()
        return self

    def drain(self) -> None:
        """Stop polling, then deliver everything the stream holds."""
        self.mapping.stop()
        idle = 0
        while idle < 2:
            idle = 0 if self.mapping.poll_once() else idle + 1

    def stats(self) -> dict[str, Any]:
        s = self.mapping.stats
        return {
            "records_read": s.records_read,
            "invocations": s.invocations,
            "failed_invocations": s.failed_invocations,
            "records_to_destination": s.records_to_destination,
            "events_published": len(self.events.published),
        }


def kits_for(kits: dict[TargetClass, Kit]) -> dict[str, Kit]:
    """The kit serving each job type of :func:`catalogue`."""
    return {
        "refund-a": kits[TargetClass.A],
        "ledger-b": kits[TargetClass.B],
        "email-c": kits[TargetClass.C],
        "sms-d": kits[TargetClass.D],
        APPROVAL_JOB_TYPE: kits[TargetClass.C],
    }
