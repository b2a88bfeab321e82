"""The values of the graph: task and run states, tasks, events.

Everything here is a frozen value that may enter the journal. No I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from loopkernel.ids import RunId, TaskId

__all__ = [
    "JSON",
    "TERMINAL_RUN",
    "TERMINAL_TASK",
    "Event",
    "EventKind",
    "RunStatus",
    "TaskSpec",
    "TaskState",
    "check_json",
    "legal_transition",
]

JSON: TypeAlias = Any
"""A value that ``json.dumps`` accepts: dict, list, str, int, float, bool or None."""

EvidenceScope: TypeAlias = Literal["all", "ancestors"]

_strict = json.JSONEncoder(allow_nan=False).encode


def check_json(value: JSON) -> None:
    """Raise ``TypeError`` or ``ValueError`` unless ``value`` is JSON (no NaN, no infinity):
    ``json.dumps(value, allow_nan=False)`` without building an encoder per call."""
    if value is not None:
        _strict(value)


class TaskState(StrEnum):
    PENDING = "pending"
    READY = "ready"
    WAITING = "waiting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_TASK = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})

_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.READY, TaskState.WAITING, TaskState.CANCELLED}),
    TaskState.READY: frozenset({TaskState.RUNNING, TaskState.WAITING, TaskState.CANCELLED}),
    TaskState.WAITING: frozenset({TaskState.READY, TaskState.CANCELLED}),
    # running -> ready is crash recovery, running -> waiting a policy parking a tool call;
    # the executor is their one caller: no patch op produces them.
    TaskState.RUNNING: frozenset(
        {
            TaskState.SUCCEEDED,
            TaskState.FAILED,
            TaskState.CANCELLED,
            TaskState.READY,
            TaskState.WAITING,
        }
    ),
    TaskState.SUCCEEDED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.CANCELLED: frozenset(),
}


def legal_transition(old: TaskState, new: TaskState) -> bool:
    """Whether a task may move from ``old`` to ``new``. Terminal states never change."""
    return new in _TRANSITIONS[old]


class RunStatus(StrEnum):
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"


TERMINAL_RUN = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.ESCALATED, RunStatus.CANCELLED}
)


class EventKind(StrEnum):
    RUN_STARTED = "run_started"
    TASK_COMPLETED = "task_completed"
    TASK_FAILED = "task_failed"
    LATE_RESULT_DISCARDED = "late_result_discarded"
    APPROVAL_REQUIRED = "approval_required"
    HUMAN_INPUT = "human_input"
    CANCEL_REQUESTED = "cancel_requested"
    TRIPWIRE = "tripwire"
    TOOL_RESTARTED = "tool_restarted"
    TIMER_FIRED = "timer_fired"
    """A waiting task's wake-up time came (``GraphPatch.sleep``, an approval's timeout):
    journaled once per wait, then answered by the kernel (docs/operations.md)."""
    RUN_RESUMED = "run_resumed"
    """An operator resumed the run, or made it as a fork, from the web inspector: who
    (``by``), what (``action``: ``resume`` or ``fork``; a fork's ``source`` and ``at``).
    For the record: unplanned, it wakes nobody and changes nothing."""
    RUN_FINISHED = "run_finished"


UNPLANNED_EVENTS = frozenset({EventKind.RUN_FINISHED, EventKind.RUN_RESUMED})
"""Events no planner sees: ``run_finished`` closes the journal; ``run_resumed`` records
who resumed or forked the run."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskSpec:
    """What a planner asks for when it adds a task."""

    task_id: str
    """Unique in the run."""
    skill: str
    """The name of a worker in the registry."""
    input: JSON = field(default=None)
    """JSON input handed to the worker."""
    evidence_scope: EvidenceScope = "all"
    """``ancestors``: the worker sees only its transitive predecessors' results."""

    def to_json(self) -> dict[str, JSON]:
        return {
            "task_id": self.task_id,
            "skill": self.skill,
            "input": self.input,
            "evidence_scope": self.evidence_scope,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """An ordered fact about a run."""

    run_id: RunId
    """The run it belongs to."""
    seq: int
    """Position in the run's journal, from 1, without gaps."""
    kind: EventKind
    """What happened."""
    task_id: TaskId | None = None
    """The task it concerns, if any."""
    data: JSON = None
    """Kind-specific detail: a result, an error, a human's payload."""
