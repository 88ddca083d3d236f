"""Histories with indeterminate operations, checked the way Jepsen's Elle checks them.

Every ``enqueue``, ``claim``, ``complete`` and ``resolve`` a client of the torture run sends is a
:class:`Call`: invoked, then ``ok`` (answered), ``fail`` (refused: it did not take effect) or
``info`` (no answer: it may or may not have taken effect, and the client cannot tell). The chaos
layer loses answers on purpose (:meth:`CallLog.lose`: at ``Settings.lost_answer_rate``, half of
them before the request runs, half after it committed); a busy store or a 5xx is an ``info``
too. After an ``info`` the client either gives up that request (the logical process is retired
for it) or follows the documented recovery, and the call says which (:attr:`Call.recovery`):

* ``enqueue``: sent again (a replay: same id and payload);
* ``claim``: sent again with its ``claim_token`` (the same claim while it holds, no attempt
  spent);
* ``complete``: retried by the same fence (recognized as done);
* ``resolve``: in process, sent again (a replay of the same decision is recognized from the
  item); over HTTP the operator's next try is a new request (a new ``request_token``): the
  first one's process is retired.

A batch request (``POST /v1/batch/...``, :func:`http_calls`) is one call per item of these kinds:
one coin loses its answer, which makes every item ``info``; an answer is judged item by item
(:func:`http_answers`).

The checker (:func:`indeterminate_rule`) knows nothing from inside: per operation it takes the
calls that could have touched it and its stored history, and accepts them only if SOME
resolution of the indeterminate calls explains them. For each subset of the ``info`` calls taken
as applied (at most :data:`MAX_INDETERMINATE` of them per operation, so at most 2**12 subsets;
per operation, so resolutions never multiply across operations) it asks for a matching in which
each entry of the history made by these kinds of call (the enqueue, each claim or takeover, the
completion, each resolve or requeue) has exactly one producer among the applied calls (the ``ok``
ones that say they acted, and the subset), each call of the subset produced one entry, every
producer ran while its entry was written (the entry's time within the call's invocation and
answer) with the entry's fence, worker and payload, and every answer tells the truth about the
history: a replay or a retry answered ``ok`` finds its entry written before its answer, a
completion retried by the same fence is never answered stale once the completion is written,
the same payload is never answered as a conflict, another payload never accepted.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from leasefence.client_batch import ROUND_LISTS
from leasefence.errors import LeaseFenceError, Unavailable
from leasefence.model import Transition
from leasefence.payloads import canonicalize
from leasefence.stored import stored_id
from leasefence_tools.torture.settings import Key, chance

T = TypeVar("T")

OK, FAIL, INFO = "ok", "fail", "info"
KINDS = ("enqueue", "claim", "complete", "resolve")
#: The documented recovery each kind of client follows after an ``info`` (or ``retired``).
REPLAY, RESEND_TOKEN, SAME_FENCE, RESEND, RETIRED = (
    "replay",
    "resend_token",
    "same_fence",
    "resend",
    "retired",
)
#: The most indeterminate calls judged for one operation (2**12 resolutions at most).
MAX_INDETERMINATE = 12

Finding = tuple[str, str]


@dataclass
class Call:
    """One client call as the client saw it (never what happened inside)."""

    kind: str  # enqueue | claim | complete | resolve
    process: str  # the logical client: a worker id, a producer, an operator
    tenant_id: str
    operation_id: str | None  # a claim names its operation only in its answer
    recovery: str
    invoked: int = 0  # engine ms
    completed: int = 0
    outcome: str = INFO
    fence: int | None = None  # complete: the claim's; claim: the one answered
    token: str | None = None  # claim_token, resolve's request token (or its decision)
    payload_hash: str | None = None  # enqueue
    resolution: str | None = None  # resolve
    answer: str = ""  # ok: created | replay | claimed | none | done; fail: the error code
    number: int = 0

    def chain(self) -> tuple[Any, ...]:
        """The logical request this call belongs to: calls of one chain are resends of each
        other, and at most one of them takes effect."""
        if self.kind == "enqueue":
            return (self.kind, self.operation_id, self.payload_hash)
        if self.kind == "claim":
            return (self.kind, self.process, self.token)
        if self.kind == "complete":
            return (self.kind, self.operation_id, self.fence)
        return (self.kind, self.operation_id, self.token)

    def brief(self) -> str:
        said = f" {self.answer}" if self.answer else ""
        fence = f" fence {self.fence}" if self.fence is not None else ""
        return f"#{self.number} {self.kind}{fence} by {self.process[:24]} {self.outcome}{said}"


@dataclass
class CallLog:
    """Every recorded call, and the chaos layer's coin for losing an answer."""

    seed: int
    rate: float
    clock: Callable[[], int]
    #: Another rate for some kinds of call (rare ones).
    rate_of: dict[str, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    lost: Counter[str] = field(default_factory=Counter)  # per kind
    lost_before: Counter[str] = field(default_factory=Counter)
    sent: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, call: Call) -> Call:
        call.invoked = self.clock()
        with self.lock:
            call.number = len(self.calls)
            self.calls.append(call)
        return call

    def lose(self, call: Call) -> str | None:
        """Whether the chaos layer loses this call's answer: ``"before"`` (the request never
        runs), ``"after"`` (it runs, its answer is lost) or None. A coin per (call, how many
        times such a request was sent), so a resend can lose its answer too. Random tokens are
        left out: a seed loses nearly the same answers in every run."""
        subject = (call.kind, call.process, call.tenant_id, call.operation_id)
        with self.lock:
            self.sent[subject] += 1
            nth = self.sent[subject]
        rate = self.rate_of.get(call.kind, self.rate)
        if chance(self.seed, "indeterminate", *subject, call.fence, nth) >= rate:
            return None
        before = chance(self.seed, "indeterminate-when", *subject, call.fence, nth) < 0.5
        with self.lock:
            self.lost[call.kind] += 1
            self.lost_before[call.kind] += before
        return "before" if before else "after"

    def lose_together(self, calls: list[Call]) -> str | None:
        """:meth:`lose` for one request carrying several calls (a batch): one coin, the first
        call's; a lost answer is every call's (each counted as lost)."""
        lost = self.lose(calls[0])
        if lost is not None:
            with self.lock:
                for call in calls[1:]:
                    self.lost[call.kind] += 1
                    self.lost_before[call.kind] += lost == "before"
        return lost

    def end(self, call: Call, outcome: str, answer: str = "") -> None:
        call.completed = self.clock()
        call.outcome, call.answer = outcome, answer

    def run(self, call: Call, send: Callable[[], T], answer: Callable[[T], str]) -> T:
        """Send ``send`` as ``call`` (in process): record what the client saw, and lose the
        answer when the coin says so (:class:`Unavailable`, as a store whose answer was lost)."""
        self.begin(call)
        lost = self.lose(call)
        if lost == "before":
            self.end(call, INFO)
            raise Unavailable("injected: the request was lost before it ran")
        try:
            result = send()
        except Unavailable:
            self.end(call, INFO)
            raise
        except LeaseFenceError as refused:
            self.end(call, FAIL, refused.code)
            raise
        except BaseException:  # anything else is no answer either
            self.end(call, INFO)
            raise
        said = answer(result)
        if lost == "after":
            self.end(call, INFO)
            raise Unavailable("injected: the answer was lost after the request ran")
        if call.kind == "claim" and result is not None:
            call.operation_id = getattr(result, "operation_id", None)
            call.fence = getattr(result, "fence", None)
        self.end(call, OK, said)
        return result

    def rates(self) -> dict[str, dict[str, Any]]:
        """Per kind of call: how many were sent, how many lost their answer (``info``), and of
        those how many the chaos layer lost (before or after the request ran)."""
        with self.lock:
            sent = Counter(c.kind for c in self.calls)
            info = Counter(c.kind for c in self.calls if c.outcome == INFO)
        return {
            kind: {
                "calls": sent[kind],
                "indeterminate": info[kind],
                "rate": round(info[kind] / sent[kind], 4) if sent[kind] else 0.0,
                "lost_by_chaos": self.lost[kind],
                "lost_before_running": self.lost_before[kind],
            }
            for kind in KINDS
        }

    def by_operation(self) -> tuple[dict[Key, list[Call]], dict[str, list[Call]]]:
        """The calls naming an operation, per operation; and the claims that name none (an
        ``info`` claim: its operation is unknown), per tenant."""
        named: dict[Key, list[Call]] = {}
        unnamed: dict[str, list[Call]] = {}
        with self.lock:
            calls = list(self.calls)
        for call in calls:
            if call.operation_id is not None:
                named.setdefault((call.tenant_id, call.operation_id), []).append(call)
            elif call.kind == "claim" and call.outcome == INFO:
                unnamed.setdefault(call.tenant_id, []).append(call)
        return named, unnamed


def format_rates(rates: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{kind} {r['rate']:.1%} ({r['indeterminate']:,} of {r['calls']:,})"
        for kind, r in rates.items()
    )


# ---------------------------------------------------------------------------------- the rule


_PRODUCES = {
    "enqueue": {Transition.ENQUEUE.value},
    "claim": {Transition.CLAIM.value, Transition.TAKEOVER.value},
    "complete": {Transition.COMPLETE.value},
    "resolve": {Transition.RESOLVE.value, Transition.REQUEUE.value},
}
_KIND_OF = {t: kind for kind, ts in _PRODUCES.items() for t in ts}


def _at(entry: dict[str, Any]) -> int:
    return int(entry.get("at", 0))


def _may_produce(call: Call, entry: dict[str, Any], payload_hash: str | None) -> bool:
    """Whether ``call``, had it taken effect, could have written ``entry``."""
    if _KIND_OF.get(str(entry.get("transition"))) != call.kind:
        return False
    if not call.invoked <= _at(entry) <= call.completed:
        return False
    if call.kind == "enqueue":
        return call.payload_hash == payload_hash
    if call.kind == "claim":
        if entry.get("actor") != stored_id(call.process):
            return False
        return call.outcome == INFO or call.fence == int(entry.get("fence", -1))
    if call.kind == "complete":
        return call.fence == int(entry.get("fence", -1))
    requeue = entry.get("transition") == Transition.REQUEUE.value
    return (call.resolution == "requeue") == requeue


def _says_it_acted(call: Call) -> bool:
    """An ``ok`` answer that can only mean this call took effect (not a replay or a retry)."""
    return call.outcome == OK and call.kind == "enqueue" and call.answer == "created"


def _truthful(call: Call, entries: list[dict[str, Any]], payload_hash: str | None) -> str | None:
    """Whether an answer tells the truth about the history (whatever resolution): the reason if
    not. Judged on the entries written by the answer's time."""
    written = [e for e in entries if _KIND_OF.get(str(e.get("transition"))) == call.kind]
    before_answer = [e for e in written if _at(e) <= call.completed]
    if call.kind == "enqueue":
        same = call.payload_hash == payload_hash
        if call.outcome == OK and not same:
            return "another payload was accepted"
        if call.outcome == FAIL and call.answer == "payload_conflict" and same:
            return "the same payload was answered as a conflict"
        if call.outcome == OK and call.answer == "replay" and not before_answer:
            return "answered as a replay before any enqueue was written"
    elif call.kind == "complete":
        done = [e for e in before_answer if int(e.get("fence", -1)) == call.fence]
        if call.outcome == OK and not done:
            return f"answered done, no completion by fence {call.fence} written"
        if call.outcome == FAIL and call.answer in ("stale_fence", "not_found") and done:
            return f"answered {call.answer} though the completion by fence {call.fence} was written"
    elif call.kind == "claim" and call.outcome == OK:
        mine = [
            e
            for e in before_answer
            if int(e.get("fence", -1)) == call.fence and e.get("actor") == stored_id(call.process)
        ]
        if not mine:
            return f"answered a claim with fence {call.fence} that the history does not hold"
    elif call.kind == "resolve" and call.outcome == OK and not before_answer:
        return "answered a resolution the history does not hold"
    return None


def _matching(
    entries: list[dict[str, Any]],
    producers: list[Call],
    must_use: set[int],
    payload_hash: str | None,
) -> bool:
    """Whether each entry can be given its own producer, every call of ``must_use`` producing
    one (backtracking: an operation's entries and calls are few)."""
    chains_used: set[tuple[Any, ...]] = set()
    used: set[int] = set()

    def assign(i: int) -> bool:
        if i == len(entries):
            return must_use <= used
        for call in producers:
            if call.number in used or call.chain() in chains_used:
                continue
            if not _may_produce(call, entries[i], payload_hash):
                continue
            used.add(call.number)
            chains_used.add(call.chain())
            if assign(i + 1):
                return True
            used.discard(call.number)
            chains_used.discard(call.chain())
        return False

    return assign(0)


@dataclass
class Judged:
    findings: list[Finding]
    resolutions_tried: int = 0
    indeterminate: int = 0
    over_bound: bool = False


def indeterminate_rule(
    calls: list[Call],
    entries: list[dict[str, Any]],
    payload_hash: str | None,
    unnamed_claims: Iterable[Call] = (),
    answers_from: int = 0,
) -> Judged:
    """Some resolution of the ``info`` calls explains this operation's calls and its history.

    ``entries``: the operation's history (as the engine's reader gives it); ``payload_hash``:
    the one it stores; ``unnamed_claims``: its tenant's ``info`` claims that name no operation
    (any of them may have claimed this one). Only the entries the four kinds of call write are
    matched (the enqueue, claims and takeovers, the completion, resolves and requeues).
    ``answers_from``: the answers of calls sent before then are not judged (an erasure replaced
    the history: what they answered about is gone; they may still have written an entry after
    it, a call can wait long for a busy API or a lagging index)."""
    relevant = [e for e in entries if str(e.get("transition")) in _KIND_OF]
    findings: list[Finding] = []
    for call in calls:
        if call.invoked < answers_from:
            continue
        wrong = _truthful(call, entries, payload_hash)
        if wrong is not None:
            findings.append(("no_resolution", f"{call.brief()}: {wrong}"))
    if findings:
        return Judged(findings)
    claimers = {e.get("actor") for e in relevant if _KIND_OF[str(e["transition"])] == "claim"}
    candidates = [
        c
        for c in unnamed_claims
        if stored_id(c.process) in claimers
        and any(_may_produce(c, e, payload_hash) for e in relevant)
    ]
    pool = [c for c in calls if c.outcome in (OK, INFO)] + candidates
    info = [
        c
        for c in pool
        if c.outcome == INFO and any(_may_produce(c, e, payload_hash) for e in relevant)
    ]
    if len(info) > MAX_INDETERMINATE:
        return Judged([], indeterminate=len(info), over_bound=True)
    acted = {c.number for c in pool if _says_it_acted(c)}
    answered = [c for c in pool if c.outcome == OK]
    tried = 0
    for size in range(len(info) + 1):
        for subset in itertools.combinations(info, size):
            tried += 1
            chosen = {c.number for c in subset}
            if _matching(relevant, answered + list(subset), acted | chosen, payload_hash):
                return Judged([], tried, len(info))
    shown = "; ".join(f"{e.get('transition')} fence {e.get('fence')} at {_at(e)}" for e in relevant)
    made = "; ".join(f"{c.brief()} [{c.invoked}, {c.completed}]" for c in pool)
    return Judged(
        [
            (
                "no_resolution",
                f"none of {tried} resolutions of {len(info)} indeterminate calls explains the "
                f"history ({shown}) by the calls ({made})",
            )
        ],
        tried,
        len(info),
    )


# ---------------------------------------------------------------------------------- clients


class RecordedEngine:
    """The engine as the torture's in-process clients call it (workers, producers, the months
    phase's operator): each ``enqueue``, ``claim_next``, ``complete``/``complete_with`` and
    ``resolve`` is a :class:`Call` whose answer the chaos layer may lose; every other method is
    the engine's own."""

    def __init__(self, engine: Any, log: CallLog) -> None:
        self._engine, self._log = engine, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def enqueue(
        self,
        tenant_id: str,
        operation_id: str,
        job_type: str,
        payload_hash: str,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        call = Call(
            "enqueue",
            f"producer:{tenant_id}",
            tenant_id,
            operation_id,
            REPLAY,
            payload_hash=payload_hash,
        )
        return self._log.run(
            call,
            lambda: self._engine.enqueue(
                tenant_id, operation_id, job_type, payload_hash, *args, **kwargs
            ),
            lambda result: "created" if result.created else "replay",
        )

    def claim_next(self, tenant_id: str, worker_id: str, *args: Any, **kwargs: Any) -> Any:
        call = Call(
            "claim", worker_id, tenant_id, None, RESEND_TOKEN, token=kwargs.get("claim_token")
        )
        return self._log.run(
            call,
            lambda: self._engine.claim_next(tenant_id, worker_id, *args, **kwargs),
            lambda claim: "none" if claim is None else "claimed",
        )

    def _complete(
        self, method: str, tenant_id: str, operation_id: str, fence: int, *args: Any
    ) -> Any:
        call = Call("complete", f"fence {fence}", tenant_id, operation_id, SAME_FENCE, fence=fence)
        send = getattr(self._engine, method)
        return self._log.run(
            call, lambda: send(tenant_id, operation_id, fence, *args), lambda _: "done"
        )

    def complete(self, tenant_id: str, operation_id: str, fence: int, *args: Any) -> Any:
        return self._complete("complete", tenant_id, operation_id, fence, *args)

    def complete_with(self, tenant_id: str, operation_id: str, fence: int, *args: Any) -> Any:
        return self._complete("complete_with", tenant_id, operation_id, fence, *args)

    def resolve(
        self, tenant_id: str, operation_id: str, resolution: Any, note: str = "", **kwargs: Any
    ) -> Any:
        # Sent again as the same decision: the engine recognizes it from the item.
        token = kwargs.get("request_token") or f"{resolution}|{note}"
        call = Call(
            "resolve",
            "operator",
            tenant_id,
            operation_id,
            RESEND,
            token=token,
            resolution=str(resolution),
        )
        return self._log.run(
            call,
            lambda: self._engine.resolve(tenant_id, operation_id, resolution, note, **kwargs),
            lambda _: "done",
        )


def http_call(process: str, tenant_id: str, method: str, path: str, body: Any) -> Call | None:
    """The :class:`Call` an SDK request over HTTP is, if it is one of the four kinds."""
    if method != "POST" or not isinstance(body, dict):
        return None
    parts = path.split("?", 1)[0].split("/")
    if path == "/v1/operations":
        given = body.get("payload_hash")
        if given is None and "payload" in body:
            given = canonicalize(body["payload"]).hash
        return Call(
            "enqueue", process, tenant_id, body.get("operation_id"), REPLAY, payload_hash=given
        )
    if path == "/v1/claims":
        return Call(
            "claim",
            str(body.get("worker_id")),
            tenant_id,
            None,
            RESEND_TOKEN,
            token=body.get("claim_token"),
        )
    if len(parts) == 5 and parts[4] == "complete":
        return Call(
            "complete", process, tenant_id, unquote(parts[3]), SAME_FENCE, fence=int(body["fence"])
        )
    if len(parts) == 5 and parts[4] == "resolve":
        # The operator's next try is a new request (a new request token): this one is retired.
        return Call(
            "resolve",
            process,
            tenant_id,
            unquote(parts[3]),
            RETIRED,
            token=body.get("request_token"),
            resolution=str(body.get("resolution")),
        )
    return None


#: The batch routes (``POST /v1/batch/<route>``): each item's one-at-a-time request.
_BATCH_PREFIX = "/v1/batch/"


def _batch_item_call(process: str, tenant_id: str, route: str, item: Any) -> Call | None:
    """The :class:`Call` one item of a batch is: the one its one-at-a-time request would be (a
    finish item only when it completes; a renewal is none)."""
    if not isinstance(item, dict):
        return None
    if route == "enqueue":
        return http_call(process, tenant_id, "POST", "/v1/operations", item)
    if route == "claim":
        return http_call(process, tenant_id, "POST", "/v1/claims", item)
    if route == "finish" and item.get("action") == "complete":
        path = f"/v1/operations/{quote(str(item.get('operation_id')), safe='')}/complete"
        return http_call(process, tenant_id, "POST", path, item)
    return None


def batch_parts(path: str, body: Any) -> list[tuple[str, str, list[Any]]]:
    """A batch request's items by kind, each ``(route, where, items)``: the batch route the items
    are of and the list of the answer that answers them. A ``POST /v1/batch/work`` body is its
    three lists, each as its own route's items, answered in the list of the same name; another
    batch its ``items``, answered in ``results``; any other request none."""
    if not path.startswith(_BATCH_PREFIX) or not isinstance(body, dict):
        return []
    route = path[len(_BATCH_PREFIX) :].split("?", 1)[0]

    def listed(name: str) -> list[Any]:
        items = body.get(name)
        return items if isinstance(items, list) else []

    if route == "work":
        return [(name, name, listed(name)) for name in ROUND_LISTS]
    return [(route, "results", listed("items"))]


def http_calls(
    process: str, tenant_id: str, method: str, path: str, body: Any
) -> list[tuple[tuple[str, int] | None, Call]]:
    """The calls an SDK request is, each with its item's place in a batch's answer (the answer's
    list and the index in it; None: the request is one call): at most one for a one-at-a-time
    request, one per item of the four kinds for a batch (``POST /v1/batch/...``)."""
    if not path.startswith(_BATCH_PREFIX):
        call = http_call(process, tenant_id, method, path, body)
        return [] if call is None else [(None, call)]
    if method != "POST":
        return []
    found: list[tuple[tuple[str, int] | None, Call]] = []
    for route, where, items in batch_parts(path, body):
        for index, item in enumerate(items):
            call = _batch_item_call(process, tenant_id, route, item)
            if call is not None:
                found.append(((where, index), call))
    return found


def http_answers(
    log: CallLog, calls: list[tuple[tuple[str, int] | None, Call]], status: int, answer: Any
) -> None:
    """Record what the client got for each call of a request: a batch answered 200 item by
    item (each item's status and body, as its one-at-a-time request's), any other answer for
    every call alike (a 5xx or a 429: none of them answered; a 4xx: none of them ran)."""
    for place, call in calls:
        if place is None or status != 200:
            http_answer(log, call, status, answer)
            continue
        where, index = place
        results = answer.get(where) if isinstance(answer, dict) else None
        if isinstance(results, list) and index < len(results):
            result = results[index]
            http_answer(log, call, int(result["status"]), result.get("body"))
        else:  # an answer without this item's result: nothing says what became of it
            log.end(call, INFO)


def http_answer(log: CallLog, call: Call, status: int, answer: Any) -> None:
    """Record what the client got: a 5xx or a 429 is no answer (``info``: it may have run)."""
    if status >= 500 or status == 429:
        log.end(call, INFO)
        return
    if status >= 300:
        error = answer.get("error") if isinstance(answer, dict) else None
        log.end(call, FAIL, str((error or {}).get("code", status)))
        return
    said = "done"
    if call.kind == "enqueue":
        said = "created" if (answer or {}).get("created") else "replay"
    elif call.kind == "claim":
        claim = (answer or {}).get("claim")
        said = "none" if not claim else "claimed"
        if claim:
            call.operation_id, call.fence = claim["operation_id"], int(claim["fence"])
    log.end(call, OK, said)
