"""Tripwires, the policy that bundles them with a budget, and the two places it is consulted.

::

    Policy(budget=Budget(...), tripwires=Tripwires(...))
      .check_call(ToolCall, Usage)   the tool layer, before every call: None (send it), an
                                     approval reason (park the task), or an escalation raised
      .guard(clock)                  a PolicyGuard: the executor's PatchGuard, on every patch

Pure: no I/O, no clock of its own (one is injected), imports nothing above ``graph``. It
raises only ``BudgetExceeded`` and ``TripwireFired``; parking a task is the caller's move
(the policy returns the reason), since the signal that parks lives in the executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias

from loopkernel.errors import TripwireFired, UsageError
from loopkernel.graph import JSON, Add, Event, Finish, GraphPatch, Task, TaskState
from loopkernel.ids import RunId, TaskId
from loopkernel.policy._budget import Budget, Usage

__all__ = [
    "Clock",
    "IrreversibleMode",
    "Policy",
    "PolicyGuard",
    "ToolCall",
    "Tripwires",
    "verify_streak",
]

Clock: TypeAlias = Callable[[], float]
"""Seconds on a monotonic scale; tests pass a fake one."""

IrreversibleMode: TypeAlias = Literal["approve", "escalate", "allow"]
"""What an unapproved irreversible call does: park its task, stop the run, or go ahead."""

_MODES: frozenset[str] = frozenset({"approve", "escalate", "allow"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Tripwires:
    """Conditions that stop a run (``escalated``) or park a task for a human."""

    irreversible: IrreversibleMode = "approve"
    """An irreversible tool call without approval: ``approve`` parks the task ``waiting``,
    ``escalate`` stops the run, ``allow`` sends it."""
    verify_stuck_after: int | None = 3
    """Failed verifications in a row that stop the run; ``None`` never stops it."""
    verify_skills: frozenset[str] = frozenset({"verify"})
    """Skills whose tasks are verifications: a result ``{"passed": false}`` or a failed task
    counts as a failed verification, ``{"passed": true}`` ends the streak."""

    def __post_init__(self) -> None:
        if self.irreversible not in _MODES:
            raise UsageError(
                f"Tripwires.irreversible must be one of {', '.join(sorted(_MODES))}, "
                f"not {self.irreversible!r}"
            )
        n = self.verify_stuck_after
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise UsageError(f"Tripwires.verify_stuck_after must be >= 1 or None, not {n!r}")
        if isinstance(self.verify_skills, str):
            raise UsageError("Tripwires.verify_skills must be a set of skill names, not a str")
        object.__setattr__(self, "verify_skills", frozenset(self.verify_skills))

    def check_verify(self, failures_in_a_row: int) -> None:
        """Raise ``TripwireFired`` once ``failures_in_a_row`` reaches ``verify_stuck_after``."""
        n = self.verify_stuck_after
        if n is not None and failures_in_a_row >= n:
            raise TripwireFired(
                f"verification failed {failures_in_a_row} times in a row "
                f"(verify_stuck_after={n}); the loop is stuck, a human must look",
                tripwire="verify_stuck",
                maximum=n,
                observed=failures_in_a_row,
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call as the policy sees it, before it is sent."""

    tool: str
    """The tool's name."""
    effect: str
    """``read_only``, ``idempotent`` or ``irreversible``."""
    arguments: Mapping[str, JSON] = field(default_factory=dict)
    """The arguments; ``arguments[cost_key]`` (if a number) is the call's expected cost."""
    approved: bool = False
    """A human approved the task making the call (it was parked and resumed)."""
    run_id: str = ""
    """The run (for messages)."""
    task_id: str = ""
    """The task (for messages)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """A run's budget and tripwires; consulted on every patch and before every tool call."""

    budget: Budget = field(default_factory=Budget)
    """Limits; ``Budget()`` limits nothing."""
    tripwires: Tripwires = field(default_factory=Tripwires)
    """What stops a run or parks a task."""
    cost_key: str = "cost_usd"
    """Where money is read: a tool call's argument (its price) and a task result's field
    (what it spent)."""
    estimate_key: str = "est_cost_usd"
    """The input field of a task a patch adds that says what the task expects to spend."""

    # -- tool calls ------------------------------------------------------------------------

    def approval_reason(self, call: ToolCall) -> str | None:
        """Why ``call`` must wait for a human, or ``None``; raises if it must not happen."""
        if call.effect != "irreversible" or call.approved:
            return None
        mode = self.tripwires.irreversible
        if mode == "allow":
            return None
        reason = f"{call.tool} is irreversible; a human must approve it before it is sent"
        if mode == "escalate":
            raise TripwireFired(
                reason.replace("a human must approve", "policy forbids sending"),
                tripwire="irreversible",
                tool=call.tool,
            )
        return reason

    def check_call(self, call: ToolCall, usage: Usage) -> str | None:
        """Before ``call`` is sent. Returns ``None`` (send it) or the reason a human must
        approve it first; raises ``BudgetExceeded`` / ``TripwireFired`` to stop the run.

        Budgets come first: a call the run cannot afford is not worth a human's time.
        """
        self.budget.check_tool_calls(usage.tool_calls)
        self.budget.check_spend(usage.spent_usd, self.price(call.arguments))
        return self.approval_reason(call)

    def price(self, arguments: Mapping[str, JSON]) -> float:
        """A call's expected cost: ``arguments[cost_key]`` when it is a number, else 0."""
        return _money(arguments.get(self.cost_key))

    def spent(self, tasks: Mapping[TaskId, Task]) -> float:
        """What finished tasks report spending: the sum of ``result[cost_key]``."""
        return sum(
            _money(t.result.get(self.cost_key))
            for t in tasks.values()
            if t.state is TaskState.SUCCEEDED and isinstance(t.result, dict)
        )

    # -- patches ---------------------------------------------------------------------------

    def guard(self, clock: Clock = time.monotonic) -> PolicyGuard:
        """This policy as the executor's ``PatchGuard``."""
        return PolicyGuard(self, clock=clock)

    # -- as run parameters -----------------------------------------------------------------

    def to_json(self) -> dict[str, JSON]:
        """The flat form an app keeps in its run parameters."""
        b, t = self.budget, self.tripwires
        return {
            "max_usd": b.max_usd,
            "max_tool_calls": b.max_tool_calls,
            "max_tasks": b.max_tasks,
            "max_wall_seconds": b.max_wall_seconds,
            "irreversible": t.irreversible,
            "verify_stuck_after": t.verify_stuck_after,
        }

    @classmethod
    def from_json(cls, data: JSON) -> Policy:
        """Parse ``to_json()``'s form strictly; missing keys take the defaults."""
        if not isinstance(data, dict):
            raise UsageError(f"a policy is a JSON object, not {type(data).__name__}")
        budget_keys = {"max_usd", "max_tool_calls", "max_tasks", "max_wall_seconds"}
        trip_keys = {"irreversible", "verify_stuck_after"}
        if extra := sorted(set(data) - budget_keys - trip_keys):
            known = ", ".join(sorted(budget_keys | trip_keys))
            raise UsageError(f"unknown policy key(s) {', '.join(extra)} (known: {known})")
        try:
            budget = Budget(**{k: v for k, v in data.items() if k in budget_keys})
            tripwires = Tripwires(**{k: v for k, v in data.items() if k in trip_keys})
        except TypeError as exc:
            raise UsageError(f"bad policy: {exc}") from None
        return cls(budget=budget, tripwires=tripwires)


class PolicyGuard:
    """The executor's ``PatchGuard``: checks every planned patch against the policy.

    - ``max_tasks``: the graph with the patch's new tasks;
    - ``max_usd``: what finished tasks spent plus what the new tasks expect to spend
      (their ``input[estimate_key]``), whenever a patch adds tasks;
    - ``max_wall_seconds``: since this guard first saw the run in this process, so a run
      resumed after a human's answer is not charged for the days it sat parked;
    - ``verify_stuck_after``: failed verifications in a row, unless the patch finishes the run.

    A violation raises; the executor journals the patch as rejected by ``policy`` and stops
    the run ``escalated`` with the error's verdict, once.
    """

    def __init__(self, policy: Policy, *, clock: Clock = time.monotonic) -> None:
        self.policy = policy
        self.clock = clock
        self._started: dict[str, float] = {}

    def check_patch(self, snapshot: _Snapshot, event: Event, patch: GraphPatch) -> None:
        budget, tripwires = self.policy.budget, self.policy.tripwires
        started = self._started.setdefault(str(snapshot.run_id), self.clock())
        budget.check_wall(self.clock() - started)
        adds = [op.task for op in patch.ops if isinstance(op, Add)]
        finishes = any(isinstance(op, Finish) for op in patch.ops)
        if adds:
            budget.check_tasks(len(snapshot.tasks) + len(adds))
            estimate = sum(
                _money(spec.input.get(self.policy.estimate_key))
                for spec in adds
                if isinstance(spec.input, dict)
            )
            budget.check_spend(self.policy.spent(snapshot.tasks), estimate)
        if not finishes:
            tripwires.check_verify(verify_streak(snapshot.tasks.values(), tripwires.verify_skills))


class _Snapshot(Protocol):
    """What ``check_patch`` reads of the planner's snapshot."""

    @property
    def run_id(self) -> RunId: ...
    @property
    def tasks(self) -> dict[TaskId, Task]: ...


def verify_streak(tasks: Iterable[Task], skills: Collection[str]) -> int:
    """Failed verifications in a row at the end of the run, in the order they finished."""
    done = sorted(
        (
            t
            for t in tasks
            if t.skill in skills
            and t.done_seq is not None
            and t.state in (TaskState.SUCCEEDED, TaskState.FAILED)
        ),
        key=lambda t: t.done_seq or 0,
    )
    streak = 0
    for task in reversed(done):
        passed = isinstance(task.result, dict) and task.result.get("passed") is True
        if task.state is TaskState.SUCCEEDED and passed:
            break
        if task.state is TaskState.FAILED or (
            isinstance(task.result, dict) and task.result.get("passed") is False
        ):
            streak += 1
        else:
            break
    return streak


def _money(value: JSON) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value)
