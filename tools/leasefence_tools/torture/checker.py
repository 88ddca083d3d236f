"""The checker: reads the final table, the targets' own records, the histories and the published
events, and judges them.

Each rule of the composed run is a pure function of what it judges (a history, one operation's
events, the fences a target committed, ...) returning ``(kind, detail)`` pairs, so each can be
fed a violating record on its own (``tests/tools/torture/test_torture_checker.py``); :func:`check`
gathers the records and applies them.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from leasefence.client_batch import ROUND_LISTS
from leasefence.engine import Engine
from leasefence.keys import FIRST_OPERATION_ID
from leasefence.model import TERMINAL_STATES, Operation, State, TargetClass, Transition
from leasefence.streams.events import detail_type
from leasefence.targets.idempotent_api import idempotency_key
from leasefence_tools.testing.kits import (
    FencedTableKit,
    IdempotentApiKit,
    Kit,
    SameTableKit,
    SingleShotKit,
)
from leasefence_tools.torture.indeterminate import indeterminate_rule
from leasefence_tools.torture.settings import FINAL_STATES, Key, Report, Settings, payload_hash

Finding = tuple[str, str]


# ---------------------------------------------------------------------------------- rules


def _seq(entry: dict[str, Any]) -> int:
    return int(entry["seq"] if "seq" in entry else entry["sequence"])


def history_rule(
    entries: list[dict[str, Any]], dropped: int, final_seq: int, expired: bool = False
) -> list[Finding]:
    """Every sequence once, in order, with no gap, up to the operation's own ``seq``.

    A history starts at 1 (the enqueue) or at an erasure (which replaces it); a bounded history
    keeps its first entry and the newest ones and counts the ``dropped`` ones in between. An
    ``expired`` one may be empty (:func:`history_expiry_rule` judges when it expired)."""
    if final_seq < 1:
        return []
    if not entries:
        if expired:  # judged by history_expiry_rule
            return []
        return [("history_missing", f"no history for an operation at seq {final_seq}")]
    seqs = [_seq(e) for e in entries]
    found: list[Finding] = []
    if len(set(seqs)) != len(seqs):
        found.append(("history_duplicate", f"sequences {seqs}"))
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        found.append(("history_order", f"sequences {seqs}"))
    first = seqs[0]
    if first != 1 and entries[0].get("transition") != Transition.ERASE.value:
        found.append(("history_gap", f"starts at {first} with {entries[0].get('transition')}"))
    expected = [first, *range(first + 1 + dropped, final_seq + 1)]
    if seqs != expected:
        missing = sorted(set(expected) - set(seqs))
        found.append(
            (
                "history_gap",
                f"sequences {seqs} (dropped {dropped}), operation at seq {final_seq}: "
                f"missing {missing[:10]}",
            )
        )
    return found


def history_expiry_rule(
    expired_at: int | None,
    entries: list[dict[str, Any]],
    item: dict[str, Any],
    retention_ms: int,
) -> list[Finding]:
    """A history may expire (the slim ended record: the payload purge removes it once the
    payload retention after the operation's end is over), but only an ended operation's, only
    past that retention, and what follows the expiry can only be an erasure's entry."""
    if expired_at is None:
        return []
    if item.get("state") not in {s.value for s in TERMINAL_STATES}:
        return [("history_expired_early", f"expired at {expired_at} while {item.get('state')}")]
    if not entries:
        ended = int(item.get("updated_at", 0))  # no transition since the end: the end
        if expired_at < ended + retention_ms:
            return [
                (
                    "history_expired_early",
                    f"expired {expired_at - ended} ms after the end, retention {retention_ms} ms",
                )
            ]
        return []
    if entries[0].get("transition") != Transition.ERASE.value or _entry_at(entries[0]) < expired_at:
        return [("history_expired_early", f"entries {[_seq(e) for e in entries]} after expiry")]
    return []


def _first_seq(entries: list[dict[str, Any]]) -> int:
    return _seq(entries[0]) if entries else 2**62


def with_kept(kept: list[dict[str, Any]], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An expired history's entries as read before it expired (``kept``), then what was written
    after (an erasure's entry)."""
    return [e for e in kept if _seq(e) < _first_seq(entries)] + entries


def _entry_at(entry: dict[str, Any]) -> int:
    return int(entry.get("at", 0))


def history_content_rule(entries: list[dict[str, Any]], item: dict[str, Any]) -> list[Finding]:
    """Each entry follows from the one before it (the history in the item derives what a write
    did not know from it): a next entry's previous state is its state, fences never go down, and
    the newest entry is the operation as it is (state, fence, attempts)."""
    found: list[Finding] = []
    for a, b in itertools.pairwise(entries):
        if _seq(b) == _seq(a) + 1 and b.get("previous_state") != a.get("state"):
            found.append(
                (
                    "history_content",
                    f"seq {_seq(b)} from {b.get('previous_state')}, seq {_seq(a)} left it "
                    f"{a.get('state')}",
                )
            )
        if int(b.get("fence", 0)) < int(a.get("fence", 0)):
            found.append(("history_content", f"fence down at seq {_seq(b)}"))
    if entries and _seq(entries[-1]) == int(item.get("seq", 0)):
        last = entries[-1]
        shown = (last.get("state"), last.get("fence"), last.get("attempt"))
        actual = (item.get("state"), int(item.get("fence", 0)), int(item.get("attempts", 0)))
        if shown != actual:
            found.append(("history_content", f"newest entry {shown}, operation {actual}"))
    return found


def event_order_rule(sequences: list[int]) -> list[Finding]:
    """One operation's events, as published: deduplicated by sequence (delivery is at least once),
    their first deliveries come in sequence order."""
    firsts: list[int] = []
    seen: set[int] = set()
    for seq in sequences:
        if seq not in seen:
            seen.add(seq)
            firsts.append(seq)
    if any(b < a for a, b in itertools.pairwise(firsts)):
        return [("events_out_of_order", f"published in the order {sequences}")]
    return []


def event_delivery_rule(entries: list[dict[str, Any]], published: set[int]) -> list[Finding]:
    """Every transition of the history that publishes an event has one (at least once)."""
    missing = [
        _seq(e)
        for e in entries
        if detail_type(Transition(e["transition"]), {"state": e.get("state")}) is not None
        and _seq(e) not in published
    ]
    return [("event_missing", f"no event for sequences {missing}")] if missing else []


def fence_order_rule(commits: list[int]) -> list[Finding]:
    """Class B: the fences a target applied for one operation, in commit order, never go down."""
    highest = 0
    for fence in commits:
        if fence < highest:
            return [
                (
                    "lower_fence_accepted",
                    f"committed fences {commits}: {fence} after {highest}",
                )
            ]
        highest = max(highest, fence)
    return []


def single_call_rule(calls: int) -> list[Finding]:
    """Class D: at most one call per operation."""
    return [("class_d_called_twice", f"{calls} calls")] if calls > 1 else []


def approval_rule(approved: str | None, executed: list[str]) -> list[Finding]:
    """An approval-required operation runs only after an approval, and only the bytes approved:
    ``executed`` are the hashes of the payloads its handlers loaded."""
    if approved is None:
        return (
            [("ran_unapproved", f"ran {len(executed)} time(s) without an approval")]
            if executed
            else []
        )
    other = sorted({h for h in executed if h != approved})
    if other:
        return [
            (
                "approval_released_other_bytes",
                f"approved {approved[:19]}..., executed {[h[:19] + '...' for h in other]}",
            )
        ]
    return []


def approver_rule(self_approved: bool, mismatch_approved: bool, enqueued_by: Any) -> list[Finding]:
    """An approval is never given by the operation's enqueuer, nor for another hash; and the
    enqueuer is always recorded (else self-approval cannot be decided)."""
    found: list[Finding] = []
    if self_approved:
        found.append(("self_approved", "its enqueuer approved it"))
    if mismatch_approved:
        found.append(("approved_other_hash", "an approval naming another hash was accepted"))
    if not enqueued_by:
        found.append(("approval_without_enqueuer", "awaited approval with no enqueuer recorded"))
    return found


def cancel_rule(state: str, attempts: int) -> list[Finding]:
    """Cancel only before any attempt."""
    if state == State.CANCELLED and attempts > 0:
        return [("cancelled_after_attempt", f"cancelled after {attempts} attempt(s)")]
    return []


def _lost_claim_rule(lost: dict[str, Any], got: Any, at: int) -> list[Finding]:
    """A claim whose answer was lost, sent again with its token at ``at``: answered the same
    claim (``got``: ``[operation, fence]``) while it holds."""
    if lost.get("token") is None:
        return []  # no token: nothing can recognize it (issue 21 case 8)
    if got != [lost["operation_id"], lost["fence"]] and at < lost["lease_expires_at"]:
        return [
            (
                "lost_claim_not_recognized",
                f"claim {lost['operation_id']} fence {lost['fence']} sent again with its "
                f"token got {got}",
            )
        ]
    return []


def retry_rule(record: dict[str, Any]) -> list[Finding]:
    """A command sent again after its answer was lost answers as the first one did.

    * a claim with a ``claim_token``: the same claim (operation and fence), while it holds;
      each claim of a claim batch (``claims``) alike, from its item's answer;
    * a catalogue ``PUT``: ``changed`` tells the truth about the first try;
    * an operation command: not refused, when nothing happened to the operation in between
      (its state, fence and ``updated_at`` are still what the lost answer said)."""
    if "claim" in record:
        return _lost_claim_rule(record["claim"], record.get("retry_claim"), record["at"])
    if "claims" in record:  # a claim batch: item by item
        return [
            finding
            for lost in record["claims"]
            for finding in _lost_claim_rule(lost, lost.get("retry_claim"), record["at"])
        ]
    if "changed" in record:
        if record["changed"] and not record.get("retry_changed"):
            return [("retry_untruthful", f"{record['path']}: changed, then changed false")]
        return []
    status, retry_status = record["status"], record["retry_status"]
    if (
        200 <= status < 300
        and 400 <= retry_status < 500
        and retry_status != 429
        and record.get("snapshot") is not None
        and record["snapshot"] == record.get("operation")
    ):
        return [
            (
                "retry_refused",
                f"{record['method']} {record['path']}: {status}, then {retry_status} with "
                f"nothing changed in between",
            )
        ]
    return []


def claim_token_rule(expected: bool, without_token: int) -> list[Finding]:
    """Once claim tokens are expected (``Settings.claim_tokens``), every HTTP claim carries one."""
    if expected and without_token:
        return [("claim_without_token", f"{without_token} HTTP claims carried no claim_token")]
    return []


def healthy_lease_rule(slow_jobs: list[dict[str, Any]]) -> list[Finding]:
    """Healthy jobs keep their leases: per kind of worker and whether the job type's maximum cut
    the lease asked for, fewer than three in four of the long jobs that kept calling ``progress``
    saw their lease lapse while they did (at least four of them: a loaded machine can starve a
    renewal now and then; a renewal interval longer than the granted lease starves them all).
    A job whose lease was gone before it began (``late_start``) says nothing about renewals, and
    neither does a lapse whose renewals were all sent in time (``renewal_late`` false: the
    answers came late on a loaded machine; the runtime did its part)."""
    groups: dict[tuple[str, bool], list[bool]] = defaultdict(list)
    for job in slow_jobs:
        if not job.get("late_start"):  # its lease was gone before it began to make progress
            lapsed = bool(job["lapsed"]) and bool(job.get("renewal_late", True))
            groups[(job["backend"], bool(job["cut"]))].append(lapsed)
    found: list[Finding] = []
    for (backend, cut), lapses in sorted(groups.items()):
        if len(lapses) >= 4 and sum(lapses) * 4 >= len(lapses) * 3:
            found.append(
                (
                    "healthy_claims_lapsed",
                    f"{sum(lapses)} of {len(lapses)} healthy long jobs of {backend} workers "
                    f"({'cut' if cut else 'uncut'} lease) lost their lease",
                )
            )
    return found


# ---------------------------------------------------------------------------------- reading


def raw_operations(engine: Engine, tenants: Iterable[str]) -> dict[Key, dict[str, Any]]:
    """Every operation item of these tenants as stored (with its ``seq``), a page at a time."""
    found: dict[Key, dict[str, Any]] = {}
    for tenant in sorted(tenants):
        for partition in engine.partitions(tenant):
            start = None
            while True:
                page = engine.store.query(
                    KeyConditionExpression="tenant_id = :t AND operation_id >= :first",
                    values={":t": partition, ":first": FIRST_OPERATION_ID},
                    ConsistentRead=True,
                    start=start,
                )
                found.update({(tenant, item["operation_id"]): item for item in page.items})
                start = page.last_key
                if start is None:
                    break
    return found


def history_of(
    engine: Engine, tenant_id: str, operation_id: str
) -> tuple[list[dict[str, Any]], int, int | None]:
    """The operation's whole history through the engine's reader (every page), ``dropped``, and
    when it expired (None: it did not)."""
    entries: list[dict[str, Any]] = []
    cursor = None
    dropped = 0
    expired: int | None = None
    while True:
        page = engine.history(tenant_id, operation_id, limit=50, cursor=cursor)
        entries.extend(page.entries)
        dropped = max(dropped, page.dropped)
        expired = page.expired_at
        cursor = page.next_cursor
        if cursor is None:
            return entries, dropped, expired


class Composed:
    """What the composed run hands the checker besides the table and the kits."""

    def __init__(
        self,
        events: list[dict[str, Any]] | None,
        accounts: Any,
        approval_ops: set[Key],
    ) -> None:
        """``events``: the outcome events published (None: the run had none, events off)."""
        self.events = events
        self.accounts = accounts
        self.approval_ops = approval_ops


# ---------------------------------------------------------------------------------- check


def check(
    settings: Settings,
    report: Report,
    engine: Engine,
    kits: dict[TargetClass, Kit],
    enqueued: list[tuple[str, str, TargetClass]],
    claims: list[tuple[str, str, int]],
    composed: Composed | None = None,
) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    claimed_fences: dict[Key, list[int]] = defaultdict(list)
    for tenant, operation_id, fence in claims:
        claimed_fences[(tenant, operation_id)].append(fence)
    a_kit, b_kit, c_kit, d_kit = (kits[c] for c in TargetClass)
    assert isinstance(a_kit, SameTableKit) and isinstance(b_kit, FencedTableKit)
    assert isinstance(c_kit, IdempotentApiKit) and isinstance(d_kit, SingleShotKit)
    known_keys = set()
    items = raw_operations(engine, {t for t, _, _ in enqueued})
    rules: Counter[str] = Counter()
    histories: dict[Key, tuple[list[dict[str, Any]], int, int | None]] = {}

    def read(tenant: str, operation_id: str) -> tuple[list[dict[str, Any]], int, int | None]:
        """An operation's history, read once for every rule that judges it."""
        key = (tenant, operation_id)
        if key not in histories:
            histories[key] = history_of(engine, tenant, operation_id)
        return histories[key]

    def judge(tenant: str, operation_id: str, findings: list[Finding]) -> None:
        for kind, detail in findings:
            rules[kind] += 1
            report.violate(kind, tenant, operation_id, detail)

    for tenant, operation_id, target in enqueued:
        key = (tenant, operation_id)
        expected_hash = payload_hash(tenant, operation_id)
        item = items.get(key)
        if item is None:  # a missing row is the violation being looked for
            counts["lost"] += 1
            report.violate("lost", tenant, operation_id, "enqueued but not in the table")
            continue
        op = Operation.from_item(item)
        counts[op.state.value] += 1
        if op.state not in FINAL_STATES:
            counts["stuck"] += 1
            report.violate(
                "stuck",
                tenant,
                operation_id,
                f"still {op.state.value} (lease {op.lease_expires_at})",
            )
        if op.payload_hash != expected_hash:
            counts["cross_tenant"] += 1
            report.violate("payload_changed", tenant, operation_id, "stored payload hash changed")
        fences = claimed_fences.get(key, [])
        if (
            len(set(fences)) != len(fences)
            or any(f > op.fence for f in fences)
            or op.fence != op.attempts
        ):
            counts["fence_violations"] += 1
            report.violate(
                "fence",
                tenant,
                operation_id,
                f"claims {sorted(fences)}, final fence {op.fence}, attempts {op.attempts}",
            )
        # The target's own record, read once: class A's order, class B's ledger entry.
        if target is TargetClass.A:
            order = a_kit.order(tenant, operation_id)
            effects = a_kit.refunds(order)
        elif target is TargetClass.B:
            entry = b_kit.entry(tenant, operation_id)
            history = b_kit.history_of(entry)
            effects = len(history)
        else:
            effects = kits[target].effects(tenant, operation_id)
        if effects > 1:
            counts["duplicates"] += effects - 1
            report.violate(
                "duplicate",
                tenant,
                operation_id,
                f"{effects} side effects at a class {target.value} target",
            )
        succeeded = op.state == State.SUCCEEDED
        if succeeded and effects != 1:
            counts["missing_effects"] += 1
            report.violate(
                "missing_effect", tenant, operation_id, f"succeeded with {effects} side effects"
            )
        if target is TargetClass.A:
            refunded_by = order.get("refunded_by_fence", {}).get("N")
            if effects and (not succeeded or int(refunded_by) != op.fence):
                counts["stale_commits"] += 1
                report.violate(
                    "stale_commit",
                    tenant,
                    operation_id,
                    f"refund by fence {refunded_by}, operation fence {op.fence}",
                )
            if effects and order.get("refunded_payload", {}).get("S") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant",
                    tenant,
                    operation_id,
                    "refund carries another operation's payload",
                )
        elif target is TargetClass.B:
            if fence_order_rule(history) or any(f > op.fence for f in history):
                counts["stale_commits"] += 1
                report.violate(
                    "stale_commit",
                    tenant,
                    operation_id,
                    f"target history {history}, fence {op.fence}",
                )
            if history and entry.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "ledger entry carries another payload"
                )
        elif target is TargetClass.C:
            key_c = idempotency_key(tenant, operation_id)
            known_keys.add(key_c)
            request = c_kit.api.requests.get(key_c)
            if request is not None and request.get("payload_hash") != expected_hash:
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "provider request carries another payload"
                )
        else:
            sent = d_kit.sent[key]
            judge(tenant, operation_id, single_call_rule(sent))
            if sent and not succeeded and op.state != State.UNKNOWN:
                counts["unhonest_d"] += 1
                report.violate(
                    "ambiguous_not_unknown",
                    tenant,
                    operation_id,
                    f"called once, then {op.state.value}",
                )
            if any(h != expected_hash for h in d_kit.sent_payloads.get(key, [])):
                counts["cross_tenant"] += 1
                report.violate(
                    "cross_tenant", tenant, operation_id, "gateway call carries another payload"
                )
        if composed is not None:
            judge(tenant, operation_id, cancel_rule(op.state.value, op.attempts))
            if key in composed.approval_ops:
                judge(
                    tenant,
                    operation_id,
                    approval_rule(report.approved.get(key), report.executed.get(key, [])),
                )
                judge(
                    tenant,
                    operation_id,
                    approver_rule(
                        key in report.self_approved,
                        key in report.mismatch_approved,
                        item.get("enqueued_by"),
                    ),
                )
    indeterminate_summary = (
        _check_indeterminate(report, read, enqueued, judge) if report.calls is not None else None
    )
    stray = set(c_kit.api.executions) - known_keys
    if stray:
        counts["cross_tenant"] += len(stray)
    composed_summary: dict[str, Any] = {}
    if composed is not None:
        composed_summary = _check_composed(
            settings, report, engine, enqueued, items, composed, judge, read
        )
    faults = dict(sorted(report.faults.items()))
    summary = {
        "operations": len(enqueued),
        "faults": faults,
        "faults_total": sum(v for k, v in faults.items() if k != "sweep"),
        "states": {s.value: counts[s.value] for s in State},
        "duplicates": counts["duplicates"],
        "lost": counts["lost"],
        "cross_tenant": counts["cross_tenant"],
        "stale_commits": counts["stale_commits"],
        "fence_violations": counts["fence_violations"],
        "missing_effects": counts["missing_effects"],
        "stuck": counts["stuck"],
        "unknown": counts[State.UNKNOWN.value],
        "violations": len(report.violations),
        "seed": settings.seed,
    }
    if composed is not None:
        summary["composed"] = {**composed_summary, "rules": dict(sorted(rules.items()))}
    if indeterminate_summary is not None:
        summary["indeterminate"] = indeterminate_summary
    summary["violation_kinds"] = dict(sorted(Counter(v["kind"] for v in report.violations).items()))
    summary["first_violations"] = first_of_each_kind(report.violations)
    return summary


def first_of_each_kind(violations: list[dict[str, Any]], limit: int = 12) -> list[dict[str, Any]]:
    """The first violation of each kind (in the order they were found), at most ``limit``."""
    seen: dict[str, dict[str, Any]] = {}
    for violation in violations:
        seen.setdefault(violation["kind"], violation)
    return list(seen.values())[:limit]


def _check_composed(
    settings: Settings,
    report: Report,
    engine: Engine,
    enqueued: list[tuple[str, str, TargetClass]],
    items: dict[Key, dict[str, Any]],
    composed: Composed,
    judge: Any,
    read: Any,
) -> dict[str, Any]:
    """The rules over histories, events, shared class-B items, retried commands and leases."""
    published: dict[Key, list[int]] = defaultdict(list)
    for detail in composed.events or []:
        published[(detail["tenant_id"], detail["operation_id"])].append(_seq(detail))
    histories = 0
    expired_histories = 0
    expired_unread = 0
    for tenant, operation_id, _target in enqueued:
        key = (tenant, operation_id)
        item = items.get(key)
        if item is None:
            continue
        # Every history, with outcome events or without (the history is in the item).
        entries, dropped, expired = read(tenant, operation_id)
        histories += 1
        final_seq = int(item.get("seq", 0))
        judge(tenant, operation_id, history_rule(entries, dropped, final_seq, expired is not None))
        judge(
            tenant,
            operation_id,
            history_expiry_rule(expired, entries, item, engine.payload_retention_ms),
        )
        judge(tenant, operation_id, history_content_rule(entries, item))
        kept = report.histories_kept.get(key)
        if expired is not None:
            expired_histories += 1
            if kept is None:
                expired_unread += 1  # expired before the checker read it: not judged
            else:
                # What it held before it expired, judged against the item as it was then;
                # the events below cover those entries and any after (an erasure's).
                kept_entries, kept_dropped, kept_item = kept
                kept_seq = int(kept_item.get("seq", 0))
                judge(tenant, operation_id, history_rule(kept_entries, kept_dropped, kept_seq))
                judge(tenant, operation_id, history_content_rule(kept_entries, kept_item))
                entries = with_kept(kept_entries, entries)
        if composed.events is not None:
            judge(tenant, operation_id, event_order_rule(published.get(key, [])))
            judge(tenant, operation_id, event_delivery_rule(entries, set(published.get(key, []))))
    # Shared class-B items: every operation's postings, in each account's commit order.
    postings = 0
    if composed.accounts is not None:
        for account in composed.accounts.account_keys():
            by_operation: dict[Key, list[int]] = defaultdict(list)
            for key, fence in composed.accounts.postings(account):
                by_operation[key].append(fence)
                postings += 1
            for (tenant, operation_id), fences in sorted(by_operation.items()):
                judge(tenant, operation_id, fence_order_rule(fences))
    for record in report.retries:
        tenant = str(record.get("client", "")).partition("-")[2] or "*"
        judge(tenant, str(record.get("path", "*")), retry_rule(record))
    judge("*", "*", healthy_lease_rule(report.slow_jobs))
    judge("*", "*", claim_token_rule(settings.claim_tokens, report.counts["claims_without_token"]))
    lapsed = Counter(
        f"{j['backend']}_{'cut' if j['cut'] else 'uncut'}_"
        + ("late_start" if j.get("late_start") else "lapsed" if j["lapsed"] else "kept")
        for j in report.slow_jobs
    )
    waits = sorted(
        j["longest_renewal_wait_ms"]
        for j in report.slow_jobs
        if j["backend"] == "http" and "longest_renewal_wait_ms" in j and not j.get("late_start")
    )
    return {
        "histories_checked": histories,
        "histories_expired": expired_histories,
        "histories_expired_unread": expired_unread,
        "events_published": len(composed.events or []),
        "account_postings": postings,
        "retried_after_lost_answer": len(report.retries),
        "claim_answers_lost": len(report.lost_claims),
        "approval_operations": len(composed.approval_ops),
        "approved": len(report.approved),
        "slow_jobs": dict(sorted(lapsed.items())),
        # How long HTTP long jobs waited for a renewal at worst (ms: median, slowest).
        "http_renewal_waits_ms": [waits[len(waits) // 2], waits[-1]] if waits else [],
        "batched": batched_summary(report.counts),
        "counts": dict(sorted(report.counts.items())),
        "errors": list(report.errors),
    }


def batched_summary(counts: Counter[str]) -> dict[str, Any]:
    """What went through the batched HTTP workers: the lifecycles they ended (their closing
    write a batch item), the claims they made, and the batch requests sent per route with their
    items (more items than requests: calls of several workers shared a request)."""
    routes = sorted(k.partition(":")[2] for k in counts if k.startswith("batch_requests:"))
    return {
        "lifecycles": counts["batched_finishes"],
        "claims": counts["batched_claims"],
        "requests": {r: counts[f"batch_requests:{r}"] for r in routes},
        "items": {r: counts[f"batch_items:{r}"] for r in routes},
        "round_items": {k: counts[f"round_items:{k}"] for k in ROUND_LISTS},
    }


def _check_indeterminate(
    report: Report,
    read: Any,
    enqueued: list[tuple[str, str, TargetClass]],
    judge: Any,
) -> dict[str, Any]:
    """Each operation's calls and history, judged by
    :func:`~leasefence_tools.torture.indeterminate.indeterminate_rule` (histories with
    indeterminate calls). What a history no longer shows is not judged, and counted: the entries
    before an erasure (it replaces the history: only the calls sent after it are judged), a
    history compacted past its bound (entries dropped), one that expired before it was read."""
    named, unnamed = report.calls.by_operation()
    not_judged: Counter[str] = Counter()
    judged = tried = most = over_bound = 0
    for tenant, operation_id, _target in enqueued:
        key = (tenant, operation_id)
        entries, dropped, expired = read(tenant, operation_id)
        if expired is not None:
            kept = report.histories_kept.get(key)
            if kept is None:
                not_judged["expired_unread"] += 1
                continue
            entries = with_kept(kept[0], entries)
            dropped = max(dropped, kept[1])
        if dropped:
            not_judged["compacted"] += 1
            continue
        calls = named.get(key, [])
        erasures = [i for i, e in enumerate(entries) if e.get("transition") == Transition.ERASE]
        erased_at = 0
        if erasures:  # what the calls sent before did is gone (they may have acted after it)
            entries = entries[erasures[-1] :]
            erased_at = _entry_at(entries[0])
            calls = [c for c in calls if c.kind != "enqueue" and c.completed >= erased_at]
            not_judged["before_erasure"] += 1
        verdict = indeterminate_rule(
            calls,
            entries,
            payload_hash(tenant, operation_id),
            unnamed.get(tenant, ()),
            answers_from=erased_at,
        )
        if verdict.over_bound:
            over_bound += 1
            continue
        judged += 1
        tried += verdict.resolutions_tried
        most = max(most, verdict.indeterminate)
        judge(tenant, operation_id, verdict.findings)
    return {
        "calls": report.calls.rates(),
        "operations_judged": judged,
        "resolutions_tried": tried,
        "most_indeterminate_in_one_operation": most,
        "over_bound": over_bound,
        "not_judged": dict(sorted(not_judged.items())),
    }
