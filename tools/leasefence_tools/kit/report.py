"""The verification report: one go/no-go per check with its evidence, as JSON and as text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from leasefence_tools.kit.evidence import Action

Verdict = Literal["go", "no-go"]


class ActionRecord(BaseModel):
    """One request that reached a target, and whose claim sent it."""

    seq: int
    tenant_id: str | None
    operation_id: str | None
    fence: int | None
    phase: str
    target: str
    kind: str
    items: list[str]
    fenced: bool | None
    held: bool | None = Field(description="the sender still held its claim when it was made")
    after_lost_ownership: bool
    outcome: str
    answer_lost: bool
    performed_seq: int = Field(description="when it reached the target (after a pause: later)")

    @classmethod
    def of(cls, action: Action) -> ActionRecord:
        execution = action.execution
        return cls(
            seq=action.seq,
            tenant_id=None if execution is None else execution.tenant_id,
            operation_id=None if execution is None else execution.operation_id,
            fence=None if execution is None else execution.fence,
            phase=action.phase,
            target=action.target,
            kind=action.kind,
            items=list(action.items),
            fenced=action.fenced,
            held=action.held,
            after_lost_ownership=action.after_lost,
            outcome=action.outcome,
            answer_lost=action.answer_lost,
            performed_seq=action.performed_seq,
        )


class CheckResult(BaseModel):
    name: str
    title: str
    verdict: Verdict
    why: str = Field(description="one sentence: what held (go) or what went wrong (no-go)")
    problems: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    actions: list[ActionRecord] = Field(default_factory=list)
    seconds: float = 0.0

    @property
    def go(self) -> bool:
        return self.verdict == "go"


class VerifyReport(BaseModel):
    handlers: str
    job_type: str
    target_class: str
    fixture: str
    lease_ms: int
    verdict: Verdict
    checks: list[CheckResult]
    seconds: float

    @property
    def go(self) -> bool:
        return self.verdict == "go"

    def check(self, name: str) -> CheckResult:
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def no_go(self) -> list[str]:
        return [c.name for c in self.checks if not c.go]

    def text(self, evidence: bool = True) -> str:
        """What the command prints: a line per check, its evidence, and the verdict."""
        lines = [
            f"leasefence verify: job type {self.job_type!r} (class {self.target_class}), "
            f"handlers {self.handlers}, fixture {self.fixture}"
        ]
        width = max(len(c.name) for c in self.checks) if self.checks else 0
        for check in self.checks:
            mark = "GO   " if check.go else "NO-GO"
            lines.append(f"{mark}  {check.name:<{width}}  {check.title}")
            lines.append(f"       {' ' * width}  {'why' if not check.go else 'held'}: {check.why}")
            if evidence:
                lines += [f"       {' ' * width}  - {line}" for line in check.evidence]
        failed = self.no_go
        if failed:
            lines.append(
                f"verdict: NO-GO ({len(failed)} of {len(self.checks)} checks: {', '.join(failed)})"
            )
        else:
            lines.append(f"verdict: GO ({len(self.checks)} of {len(self.checks)} checks)")
        return "\n".join(lines)
