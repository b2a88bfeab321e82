"""What a finished worker means for its task, and how deltas combine: pure helpers."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Sequence

from loopkernel.errors import BudgetExceeded, LoopKernelError, TripwireFired
from loopkernel.executor._context import NeedsApproval
from loopkernel.graph import JSON, Delta, EventKind, Task, TaskState
from loopkernel.graph._model import check_json
from loopkernel.ids import TaskId

__all__ = ["event_data", "late_result", "latest", "merge_deltas", "outcome_of"]


def outcome_of(
    fut: asyncio.Task[JSON], task: Task, done_seq: int | None = None
) -> tuple[EventKind, Task]:
    """The task's new value after its worker ended: results and errors come back as values.

    ``done_seq``: the seq its event will have, when already known; a terminal task keeps it.
    """
    failed = TaskState.FAILED
    if fut.cancelled():
        error = {"type": "CancelledError", "message": "the worker was cancelled from outside"}
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    exc = fut.exception()
    if isinstance(exc, NeedsApproval):
        return EventKind.APPROVAL_REQUIRED, task.evolve(
            state=TaskState.WAITING, wait_reason=exc.reason, wait_epoch=task.wait_epoch + 1
        )
    if isinstance(exc, TripwireFired | BudgetExceeded):
        # A policy stopped the work inside the task: the run escalates, not the planner's call.
        error = exc.verdict()
        return EventKind.TRIPWIRE, task.evolve(state=failed, error=error, done_seq=done_seq)
    if exc is not None:
        if isinstance(exc, LoopKernelError):
            error = exc.verdict()
        else:
            error = {"type": type(exc).__name__, "message": str(exc)}
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    result = fut.result()
    try:
        check_json(result)
    except (TypeError, ValueError) as err:
        error = {"type": "TypeError", "message": f"worker returned a non-JSON value: {err}"}
        return EventKind.TASK_FAILED, task.evolve(state=failed, error=error, done_seq=done_seq)
    succeeded = task.evolve(state=TaskState.SUCCEEDED, result=result, done_seq=done_seq)
    return EventKind.TASK_COMPLETED, succeeded


def event_data(kind: EventKind, task: Task) -> JSON:
    if kind in (EventKind.TASK_FAILED, EventKind.TRIPWIRE):
        return {"error": task.error, "attempt": task.attempts}
    if kind is EventKind.APPROVAL_REQUIRED:
        return {"reason": task.wait_reason, "wait_epoch": task.wait_epoch}
    return {"attempt": task.attempts}


def late_result(fut: asyncio.Task[JSON]) -> JSON:
    """What a cancelled task still produced, as the journal keeps it: never the value."""
    if fut.cancelled():
        return None
    exc = fut.exception()
    if exc is not None:
        return {"outcome": "error", "type": type(exc).__name__}
    text = json.dumps(fut.result(), sort_keys=True, default=repr)
    return {
        "outcome": "result",
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        "bytes": len(text),
    }


def latest(tasks: Iterable[Task]) -> tuple[Task, ...]:
    """One value per task id, the last one given."""
    return tuple({t.task_id: t for t in tasks}.values())


def merge_deltas(deltas: Sequence[Delta]) -> Delta:
    if len(deltas) == 1:
        return deltas[0]
    tasks: dict[TaskId, Task] = {}
    new_ids: set[TaskId] = set()
    edges: list[tuple[TaskId, TaskId]] = []
    cancelled: list[TaskId] = []
    finish = None
    for d in deltas:
        for t in d.tasks:
            tasks[t.task_id] = t
        new_ids |= d.new_task_ids
        edges.extend(d.edges)
        cancelled.extend(d.cancelled_running)
        finish = d.finish or finish
    return Delta(
        tasks=tuple(tasks.values()),
        new_task_ids=frozenset(new_ids),
        edges=tuple(edges),
        finish=finish,
        cancelled_running=tuple(cancelled),
    )
