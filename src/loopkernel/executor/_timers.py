"""Durable time: timers on waiting tasks, and approvals that nobody answers in time.

A timer is a wake-up time on a ``waiting`` task (``Task.wake_at``), set by a ``wait`` op
with ``until`` (``GraphPatch.sleep``; with ``on_timeout``, an approval's deadline: a Flow's
``gate(..., timeout=)``) or by the executor when a tool call parks a task for approval and
``ApprovalTimeout`` is set. It is journaled with what set it (the patch, or
the task row written with ``approval_required``). When the executor's clock passes it,
the executor journals ``timer_fired`` for the task and, in the same write, clears the
task's ``wake_at``: after a crash the event is planned (an unplanned event is planned
exactly once, by the unique ``(run_id, event_seq)`` of the patches) and never journaled
again. The kernel answers ``timer_fired`` itself (``planner="kernel"``):

- a sleep: ``resume(task)`` (no payload: the state digest holds no time);
- an approval's timeout (the run's ``ApprovalTimeout``, or the wait op's own ``on_timeout``,
  which ``timer_fired`` then carries), ``action="reject"``: the planner is asked as if a human had
  rejected (a ``human_input`` event with ``decision="reject"`` and
  ``payload={"by": "timeout"}``, under the timer's seq); ``action="escalate"``: the run
  finishes ``escalated`` with an ``approval_timeout`` verdict;
- a task that is no longer waiting at that wait (a human answered first): nothing.

Everything here is pure except what the executor awaits around it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from loopkernel.errors import UsageError
from loopkernel.graph import JSON, Event, EventKind, GraphPatch, Task, TaskState, Wait
from loopkernel.planner import Proposal

__all__ = [
    "ApprovalTimeout",
    "due",
    "next_wake",
    "resolve",
    "timer_event_data",
    "timer_span",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class ApprovalTimeout:
    """What happens to an approval nobody answers within ``seconds``."""

    seconds: float
    """How long a task parked for approval waits for a human."""
    action: Literal["reject", "escalate"] = "reject"
    """``reject``: as if a human had rejected (the planner decides what follows);
    ``escalate``: the run stops ``escalated``."""

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not (
            isinstance(self.seconds, int | float) and math.isfinite(self.seconds)
        ):
            raise UsageError(f"ApprovalTimeout.seconds must be a number, not {self.seconds!r}")
        if self.seconds <= 0:
            raise UsageError(f"ApprovalTimeout.seconds must be positive, not {self.seconds}")
        if self.action not in ("reject", "escalate"):
            raise UsageError(
                f"ApprovalTimeout.action must be reject or escalate, not {self.action!r}"
            )


def resolve(answer: GraphPatch | Proposal, now: float) -> GraphPatch | Proposal:
    """``answer`` with every ``wait(seconds=...)`` turned into ``wait(until=now + seconds)``."""
    if isinstance(answer, Proposal):
        patch = None if answer.patch is None else _resolve(answer.patch, now)
        return replace(answer, patch=patch, fallback=_resolve(answer.fallback, now))
    return _resolve(answer, now)


def _resolve(patch: GraphPatch, now: float) -> GraphPatch:
    for op in patch.ops:  # a loop, not any(...): no generator a step
        if isinstance(op, Wait) and op.seconds is not None:
            break
    else:
        return patch
    ops = tuple(
        replace(op, until=now + max(0.0, op.seconds), seconds=None)
        if isinstance(op, Wait) and op.seconds is not None
        else op
        for op in patch.ops
    )
    return GraphPatch(ops=ops)


def due(tasks: Iterable[Task], now: float) -> list[Task]:
    """Waiting tasks whose timer has come, by id."""
    return sorted(
        (
            t
            for t in tasks
            if t.state is TaskState.WAITING and t.wake_at is not None and t.wake_at <= now
        ),
        key=lambda t: t.task_id,
    )


def next_wake(tasks: Iterable[Task]) -> float | None:
    """The earliest timer of the waiting tasks, if any."""
    times = [t.wake_at for t in tasks if t.state is TaskState.WAITING and t.wake_at is not None]
    return min(times) if times else None


def timer_event_data(
    task: Task, approval: bool, on_timeout: Literal["reject", "escalate"] | None = None
) -> JSON:
    """``timer_fired``'s data; ``on_timeout``: the action of a wait op with a deadline (kept
    in the event, so the kernel answers it from the journal alone)."""
    data: dict[str, JSON] = {
        "wait_epoch": task.wait_epoch,
        "due": task.wake_at,
        "timer": "approval_timeout" if approval or on_timeout else "sleep",
    }
    if on_timeout is not None and not approval:
        data["on_timeout"] = on_timeout
    return data


def timer_span(event: Event, task: Task, now: float) -> dict[str, JSON]:
    """The attributes of a fired timer's span (``timer <task>``, in the execution's trace)."""
    data = event.data if isinstance(event.data, dict) else {}
    due_at = task.wake_at
    return {
        "loopkernel.run_id": event.run_id,
        "loopkernel.task_id": task.task_id,
        "loopkernel.event.seq": event.seq,
        "loopkernel.timer": data.get("timer"),
        "loopkernel.wait_epoch": task.wait_epoch,
        "loopkernel.timer.due": due_at,
        "loopkernel.timer.late_seconds": None if due_at is None else max(0.0, now - due_at),
    }


def is_approval_wait(events: Sequence[Event], task: Task) -> bool:
    """Whether the task's current wait was a tool call parked for approval."""
    return any(
        e.kind is EventKind.APPROVAL_REQUIRED
        and e.task_id == task.task_id
        and isinstance(e.data, dict)
        and e.data.get("wait_epoch") == task.wait_epoch
        for e in events
    )
