"""What the side-effect targets saw during a verification, and who caused it.

Every request that reaches a target (a write to a team's table, a call to the class C or D fake,
a class D intent) becomes an :class:`Action`, attributed to the :class:`Execution` (one claim of
one operation: tenant, operation, fence) whose handler code made it. The attribution is the
handler's thread: the rig wraps the handler so that its phases (``on_claim``, ``reconcile``,
``run``) push the execution on a thread-local stack. A rescuer that runs *inside* a paused
zombie's call (the checks pause a worker by running the takeover right there, on a manual
clock) pushes its own execution on top, so every action is still attributed to its author.

:class:`TargetLog` is also where faults are injected, at the target boundary: an
:class:`Interceptor` can run something *before* an action (pause: let another worker take over),
*after* it landed (crash), or lose its answer after it landed. ``before`` may perform the action
early (:meth:`Pending.run`), e.g. when a rescuer has just claimed and not yet written.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasefence.worker import Job

#: Kinds of action. ``write`` and ``call`` are side effects when they land; ``bookkeeping`` is a
#: class-B fence raise or prune (only ``lf_`` attributes); ``intent`` is class D's intent record.
WRITE, BOOKKEEPING, CALL, INTENT, LOOKUP = "write", "bookkeeping", "call", "intent", "lookup"
#: Outcomes: the target accepted it, refused it (a failed condition), or recognized a repeat.
LANDED, REFUSED, DEDUPLICATED = "landed", "refused", "deduplicated"


@dataclass(eq=False)
class Execution:
    """One claim of one operation, seen through its handler."""

    tenant_id: str
    operation_id: str
    fence: int
    worker_id: str
    job: Job
    seq: int
    #: What its reconcile answered ("done", "not_done", "unknown"), if it reconciled.
    reconciled: str | None = None
    #: The handler has no reconcile of its own (the runtime parks such takeovers unknown).
    reconcile_missing: bool = False
    #: When its reconcile answered (the log's order), if it reconciled.
    reconciled_seq: int | None = None

    @property
    def lost(self) -> bool:
        """The runtime told it that it lost ownership (a refused heartbeat or fenced write)."""
        return self.job.cancelled.is_set()

    def matches(self, tenant_id: str, operation_id: str, fence: int | None = None) -> bool:
        return (
            self.tenant_id == tenant_id
            and self.operation_id == operation_id
            and (fence is None or self.fence == fence)
        )


@dataclass(eq=False)
class Action:
    """One request that reached a target."""

    seq: int
    execution: Execution | None
    phase: str
    target: str  # "table <name>", "provider", "gateway", "intent"
    kind: str
    items: tuple[str, ...]  # the items written (tables), or the idempotency key (provider)
    fenced: bool | None  # the request carried a fence condition (None: not applicable)
    held: bool | None = None  # the execution still held its claim when the request was made
    after_lost: bool = False  # ... after it had been told it lost ownership
    outcome: str = "pending"
    answer_lost: bool = False
    #: When it was performed (the log's order): later than ``seq`` for a request held by a pause.
    performed_seq: int = 0

    @property
    def effect(self) -> bool:
        return self.kind in (WRITE, CALL) and self.outcome == LANDED

    def describe(self) -> str:
        what = f"{self.kind} to {self.target}" if self.kind != INTENT else "intent record"
        notes = [self.outcome]
        if self.fenced is False and self.kind == WRITE:
            notes.append("no fence condition")
        if self.held is False:
            notes.append("claim no longer held")
        if self.after_lost:
            notes.append("after LostOwnership")
        if self.answer_lost:
            notes.append("answer lost")
        return f"{what} ({', '.join(notes)})"


@dataclass(eq=False)
class Interceptor:
    match: Callable[[Action], bool]
    before: Callable[[Action, Pending], None] | None = None
    after: Callable[[Action], None] | None = None
    lose_answer: bool = False
    fired: list[Action] = field(default_factory=list)


class Pending:
    """An action not yet performed: :meth:`run` performs it once, under its author's name."""

    def __init__(
        self,
        log: TargetLog,
        action: Action,
        perform: Callable[[], Any],
        classify: Callable[[Any, BaseException | None], str],
        holds: Callable[[Execution], bool] | None,
    ) -> None:
        self.log = log
        self.action = action
        self._perform = perform
        self._classify = classify
        self._holds = holds
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        if self.done:
            return
        self.done = True
        action = self.action
        execution = action.execution
        if execution is not None:
            action.after_lost = execution.lost
            if self._holds is not None:
                action.held = self._holds(execution)
        with self.log.acting_as(execution, action.phase):
            try:
                self.result = self._perform()
            except Exception as error:  # noqa: BLE001 - recorded, then raised as it was
                self.error = error
        action.outcome = self._classify(self.result, self.error)
        action.performed_seq = self.log.next_seq()


class TargetLog:
    """The actions of one verification, in order, and the faults planned at the targets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = itertools.count(1)
        self._local = threading.local()
        self.actions: list[Action] = []
        self.executions: list[Execution] = []
        self._interceptors: list[Interceptor] = []

    def next_seq(self) -> int:
        return next(self._seq)

    # ------------------------------------------------------------ attribution

    def _stack(self) -> list[tuple[Execution | None, str]]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextlib.contextmanager
    def acting_as(self, execution: Execution | None, phase: str) -> Iterator[None]:
        """Everything this thread does inside is attributed to ``execution`` (in ``phase``)."""
        stack = self._stack()
        stack.append((execution, phase))
        try:
            yield
        finally:
            stack.pop()

    def current(self) -> tuple[Execution | None, str]:
        stack = self._stack()
        return stack[-1] if stack else (None, "")

    def add_execution(self, execution: Execution) -> None:
        with self._lock:
            self.executions.append(execution)

    # ------------------------------------------------------------ faults at the boundary

    def intercept(
        self,
        match: Callable[[Action], bool],
        before: Callable[[Action, Pending], None] | None = None,
        after: Callable[[Action], None] | None = None,
        lose_answer: bool = False,
    ) -> Interceptor:
        """Plan a fault for the first action that ``match`` accepts (once)."""
        hook = Interceptor(match, before, after, lose_answer)
        with self._lock:
            self._interceptors.append(hook)
        return hook

    def clear_interceptors(self) -> None:
        with self._lock:
            self._interceptors.clear()

    def act(
        self,
        target: str,
        kind: str,
        items: tuple[str, ...],
        fenced: bool | None,
        perform: Callable[[], Any],
        classify: Callable[[Any, BaseException | None], str],
        lost_answer: Callable[[], BaseException],
        holds: Callable[[Execution], bool] | None = None,
    ) -> Any:
        """Record an action, apply a planned fault, perform it, return its result (or raise its
        error) exactly as the target answered, unless the fault loses the answer."""
        execution, phase = self.current()
        action = Action(self.next_seq(), execution, phase, target, kind, items, fenced)
        with self._lock:
            self.actions.append(action)
            hook = next((h for h in self._interceptors if h.match(action)), None)
            if hook is not None:
                self._interceptors.remove(hook)
                hook.fired.append(action)
        pending = Pending(self, action, perform, classify, holds)
        if hook is not None and hook.before is not None:
            hook.before(action, pending)
        pending.run()
        if hook is not None and pending.error is None:
            if hook.lose_answer:
                action.answer_lost = True
                raise lost_answer()
            if hook.after is not None and action.outcome == LANDED:
                hook.after(action)
        if pending.error is not None:
            raise pending.error
        return pending.result

    # ------------------------------------------------------------ reading

    def of(self, tenant_id: str, operation_id: str) -> list[Action]:
        return [
            a
            for a in self.actions
            if a.execution is not None and a.execution.matches(tenant_id, operation_id)
        ]

    def executions_of(self, tenant_id: str, operation_id: str) -> list[Execution]:
        return [e for e in self.executions if e.matches(tenant_id, operation_id)]
