"""The go/no-go report: the nine controls of the Lease-Plus-Fence design, per job type of a
tenant, each with the evidence leasefence holds, and go or no-go.

All nine must hold for a job type to be "go"; nothing is scored or summed. Controls 1-4, 6 and 8
are properties of leasefence itself (the same for every job type: the evidence says where they
come from and which tests attack them). Controls 5, 7 and 9 need facts only an operator can
declare, so they hold only for a job type whose catalogue entry declares them: its target class
(5), its owner, its runbook and an alert route for the deployment's alarms (7), its owner for the
retention and erasure plan (9). A job type that was enqueued but never catalogued is no-go.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from leasefence.catalogue import JobTypeEntry
from leasefence.model import TargetClass

DAY_MS = 86_400_000

#: What each target class honestly allows (README, "Target classes").
CLASS_ALLOWS = {
    TargetClass.A: "completion and the business write commit in one transaction "
    "(complete_with): a stale fence cannot commit either",
    TargetClass.B: "the target rejects a lower fence inside its own conditional write "
    "(FencedTable): a stale holder's write is refused there",
    TargetClass.C: "no fence at the target: dedupe by an idempotency key with a lookup, "
    "reconcile before every retry; a duplicate is prevented only as far as the target dedupes",
    TargetClass.D: "no fence and no dedupe at the target: exactly one attempt (max_attempts 1), "
    "an ambiguous outcome is parked as unknown, never retried blindly",
}

#: The deployment's alarms that fire for any job type (service-wide, not per job type).
ALARMS = ("UnknownEnteredAlarm", "OldestUnknownAlarm", "QuarantineRateAlarm", "OldestDueAlarm")


@dataclass(frozen=True)
class Control:
    number: int
    name: str
    go: bool
    evidence: str

    def to_public(self) -> dict[str, Any]:
        return {"control": self.number, "name": self.name, "go": self.go, "evidence": self.evidence}


@dataclass(frozen=True)
class JobTypeControls:
    job_type: str
    entry: JobTypeEntry | None
    controls: list[Control]

    @property
    def go(self) -> bool:
        return all(c.go for c in self.controls)

    def to_public(self) -> dict[str, Any]:
        return {
            "job_type": self.job_type,
            "catalogued": self.entry is not None,
            "version": None if self.entry is None else self.entry.version,
            "go": self.go,
            "controls": [c.to_public() for c in self.controls],
        }


def _days(ms: int | None) -> str:
    return "forever" if ms is None else f"{ms // DAY_MS} days"


def assess_job_type(
    job_type: str,
    entry: JobTypeEntry | None,
    *,
    identity_retention_ms: int | None,
    payload_retention_ms: int,
    alarm_topic: str | None,
) -> JobTypeControls:
    spec = None if entry is None else entry.spec
    where = "" if entry is None else f" (catalogue version {entry.version})"
    missing_entry = "not in the catalogue: nobody declared it"

    if spec is None:
        c5 = Control(
            5,
            "target enforces the fence, or class C/D with its limits",
            False,
            f"no target class recorded: {missing_entry}; each enqueue names its own class",
        )
    else:
        c5 = Control(
            5,
            "target enforces the fence, or class C/D with its limits",
            True,
            f"class {spec.target_class.value}{where}: {CLASS_ALLOWS[spec.target_class]}",
        )

    gaps = []
    if spec is None:
        gaps.append(missing_entry)
    else:
        if not spec.owner:
            gaps.append("no owner")
        if not spec.runbook_url:
            gaps.append("no runbook_url")
    if not alarm_topic:
        gaps.append("no alert route (this deployment has no alarm topic: LEASEFENCE_ALARM_TOPIC)")
    known = []
    if spec is not None:
        known.append(f"at most {spec.max_attempts} attempts{where}")
        if spec.owner:
            known.append(f"owner {spec.owner}")
        if spec.runbook_url:
            known.append(f"runbook {spec.runbook_url}")
    if alarm_topic:
        known.append(f"alarms {', '.join(ALARMS)} (service-wide) publish to {alarm_topic}")
    known.append("failed_terminal and quarantined exist; unknown waits for an operator")
    c7 = Control(
        7,
        "terminal failure and quarantine, bounded attempts, named owner, runbook, alert routes",
        not gaps,
        "; ".join(known + [f"missing: {g}" for g in gaps] if gaps else known),
    )

    retention = (
        f"payloads deleted {_days(payload_retention_ms)} after the operation ends, identities "
        f"kept {_days(identity_retention_ms)}; POST /v1/operations/{{id}}/erase and tenant erasure "
        "delete on request; logs carry keyed hashes of ids, never payloads"
    )
    owner = None if spec is None else spec.owner
    c9 = Control(
        9,
        "data minimization, retention and deletion plan with an owner",
        bool(owner),
        f"{retention}; "
        + (
            f"owner {owner}"
            if owner
            else f"missing: {'no owner' if spec is not None else missing_entry}"
        ),
    )
    schema = (
        ""
        if spec is None or spec.payload_schema is None
        else (f"; inline payloads are checked against the entry's JSON Schema{where}")
    )
    controls = [
        Control(
            1,
            "identity is durable and tenant-scoped",
            True,
            "table key (tenant_id, operation_id): the tenant comes from the token only; "
            f"identity kept {_days(identity_retention_ms)} after the end (contract tests with "
            "colliding ids across tenants)",
        ),
        Control(
            2,
            "identity bound to an immutable payload hash; changed payload refused",
            True,
            "payload_hash (SHA-256 of RFC 8785 JSON) is fixed at enqueue; the same id with "
            f"another hash is 409 payload_conflict and changes nothing{schema}",
        ),
        Control(
            3,
            "claim is atomic across concurrent workers",
            True,
            "one conditional write pinned to fence, attempts and state raises the fence by "
            "exactly one (concurrency tests with many claimers: no double claim)",
        ),
        Control(
            4,
            "every state change is a conditional mutation on the fence",
            True,
            "heartbeat, complete, fail, unknown and quarantine are conditional on state and "
            "fence inside the write (no read-compare-then-write)",
        ),
        c5,
        Control(
            6,
            "ambiguous outcomes go to reconciliation or unknown",
            True,
            "every claim after the first attempt has reconcile_required; a lapsed final "
            "attempt is parked unknown by the sweeper, never retried or marked succeeded",
        ),
        c7,
        Control(
            8,
            "acknowledged only after the durable record commits",
            True,
            "a 2xx answers only after the conditional put committed; an inline payload is "
            "stored before the record that points at it",
        ),
        c9,
    ]
    return JobTypeControls(job_type, entry, controls)


def assess(engine: Any, tenant_id: str, alarm_topic: str | None) -> list[JobTypeControls]:
    """Every job type of the tenant (catalogued, or ever enqueued), sorted by name."""
    entries = {e.job_type: e for e in engine.catalogue.list(tenant_id)}
    names = sorted(set(entries) | set(engine.job_types(tenant_id)))
    return [
        assess_job_type(
            name,
            entries.get(name),
            identity_retention_ms=engine.identity_retention_ms,
            payload_retention_ms=engine.payload_retention_ms,
            alarm_topic=alarm_topic,
        )
        for name in names
    ]
