"""``leasefence shadow report``: what leasefence would have refused, from a shadow tenant's
operations (see :mod:`leasefence.shadow`).

Per job type: the operations the existing path ran, how many executions leasefence would have
run (its claims), and the executions it would have refused, with examples: ``duplicate`` (it
would not have started them: another execution held the operation or had finished it),
``overtaken`` (they ran on after another execution had taken over: their writes would have been
refused) and ``conflict`` (same id, another payload: refused at enqueue). Executions the wrapper
could not report (leasefence unreachable) are counted where they happened, as ``ShadowGaps``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from leasefence.shadow import CONFLICT, DUPLICATE, OVERTAKEN, RUN_PREFIX, RunRecord

KINDS = (DUPLICATE, OVERTAKEN, CONFLICT)


class RefusedExecution(BaseModel):
    operation_id: str
    execution_id: str
    fence: int | None = Field(description="the claim it held (overtaken), if any")
    seen_state: str | None = Field(description="the operation's state when it was refused")
    at_ms: int


class Refusals(BaseModel):
    count: int = 0
    operations: int = Field(0, description="distinct operations among them")
    examples: list[RefusedExecution] = Field(default_factory=list)


class JobTypeShadow(BaseModel):
    job_type: str
    operations: int = Field(description="operations the existing path ran")
    claims: int = Field(description="executions leasefence would have run (its claims)")
    ran_more_than_once: int = Field(description="operations with an execution refused below")
    duplicate: Refusals
    overtaken: Refusals
    conflict: Refusals


class ShadowReport(BaseModel):
    tenant: str
    job_types: list[JobTypeShadow]

    @property
    def clean(self) -> bool:
        """Nothing the existing path ran would have been refused: the comparison is clean."""
        return all(j.ran_more_than_once == 0 and j.conflict.count == 0 for j in self.job_types)

    def text(self) -> str:
        lines = [f"shadow report for {self.tenant}"]
        if not self.job_types:
            lines.append("no shadow operations yet")
        for job in self.job_types:
            lines.append(
                f"{job.job_type}: {job.operations} operations, {job.claims} claims; "
                f"{job.ran_more_than_once} ran more than once: {job.duplicate.count} duplicate, "
                f"{job.overtaken.count} overtaken, {job.conflict.count} conflicting executions"
            )
            for kind, refusals in (
                (DUPLICATE, job.duplicate),
                (OVERTAKEN, job.overtaken),
                (CONFLICT, job.conflict),
            ):
                for example in refusals.examples:
                    held = f" (held fence {example.fence})" if example.fence is not None else ""
                    lines.append(
                        f"  {kind:<9} {example.operation_id}  execution {example.execution_id}"
                        f"{held}, operation was {example.seen_state or '?'}"
                    )
                if refusals.count > len(refusals.examples):
                    lines.append(f"  {kind:<9} ... {refusals.count - len(refusals.examples)} more")
        lines.append(
            "clean: nothing would have been refused"
            if self.clean
            else "not clean: leasefence would have refused the executions above"
        )
        return "\n".join(lines)


def build_report(
    tenant: str, operations: Iterable[Any], max_examples: int | None = 10
) -> ShadowReport:
    """The report over a shadow tenant's operations (engine or SDK ``Operation`` objects)."""
    jobs: dict[str, list[Any]] = defaultdict(list)
    records: dict[str, dict[str, list[RunRecord]]] = defaultdict(lambda: defaultdict(list))
    for op in operations:
        record = (
            RunRecord.from_ref(op.payload_ref) if op.operation_id.startswith(RUN_PREFIX) else None
        )
        if record is None:
            jobs[op.job_type].append(op)
        elif record.kind in KINDS:
            records[op.job_type][record.kind].append(record)
    result = []
    for job_type in sorted(set(jobs) | set(records)):
        by_kind = records[job_type]
        refused = [r for kind in (DUPLICATE, OVERTAKEN) for r in by_kind[kind]]
        result.append(
            JobTypeShadow(
                job_type=job_type,
                operations=len(jobs[job_type]),
                claims=sum(int(op.attempts) for op in jobs[job_type]),
                ran_more_than_once=len({r.operation_id for r in refused}),
                duplicate=_refusals(by_kind[DUPLICATE], max_examples),
                overtaken=_refusals(by_kind[OVERTAKEN], max_examples),
                conflict=_refusals(by_kind[CONFLICT], max_examples),
            )
        )
    return ShadowReport(tenant=tenant, job_types=result)


def _refusals(records: list[RunRecord], max_examples: int | None) -> Refusals:
    ordered = sorted(records, key=lambda r: (r.at_ms, r.operation_id, r.execution_id))
    shown = ordered if max_examples is None else ordered[:max_examples]
    return Refusals(
        count=len(records),
        operations=len({r.operation_id for r in records}),
        examples=[
            RefusedExecution(
                operation_id=r.operation_id,
                execution_id=r.execution_id,
                fence=r.fence,
                seen_state=r.seen_state,
                at_ms=r.at_ms,
            )
            for r in shown
        ],
    )
