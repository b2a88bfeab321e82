"""The graph model, patches and their validation. Pure: no I/O, imports nothing above it."""

from loopkernel.graph._model import (
    JSON,
    TERMINAL_RUN,
    TERMINAL_TASK,
    UNPLANNED_EVENTS,
    Event,
    EventKind,
    RunStatus,
    TaskSpec,
    TaskState,
    legal_transition,
)
from loopkernel.graph._patch import Add, Cancel, Connect, Finish, GraphPatch, Op, Resume, Wait
from loopkernel.graph._replay import History, state_at
from loopkernel.graph._state import Delta, GraphState, Task, TaskTable, validate
from loopkernel.graph._verdict import Verdict, VerdictKind

__all__ = [
    "JSON",
    "TERMINAL_RUN",
    "TERMINAL_TASK",
    "UNPLANNED_EVENTS",
    "Add",
    "Cancel",
    "Connect",
    "Delta",
    "Event",
    "EventKind",
    "Finish",
    "GraphPatch",
    "GraphState",
    "History",
    "Op",
    "Resume",
    "RunStatus",
    "Task",
    "TaskSpec",
    "TaskState",
    "TaskTable",
    "Verdict",
    "VerdictKind",
    "Wait",
    "legal_transition",
    "state_at",
    "validate",
]
