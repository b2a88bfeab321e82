"""What a waiting run waits for, and whether its owner is gone: one answer for every place
that shows a run (``run``, ``resume``, ``wait``, ``runs``, ``inspect``, the worker's log, the
inspector).

A waiting task waits for one of:

- ``timer``: a sleep (``GraphPatch.sleep``); the clock answers it at ``until``;
- ``approval``: a tool call parked for approval under an ``ApprovalTimeout``, or a wait op
  with ``on_timeout`` (a Flow's ``gate(..., timeout=)``); a human answers it before
  ``until`` (its deadline), else the timeout's action is taken;
- ``outcome unknown``: a call whose result was lost in flight; a human says whether it
  happened (``tools/_layer.py``);
- ``human``: anything else a human must answer (a ``wait`` op, an approval with no
  deadline).

A run waits on a timer (``WaitKind.TIMER``) when every waiting task does: no one is asked
for anything, and ``wait`` keeps waiting through it unless told otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from loopkernel.graph import JSON, Event, EventKind, Task, TaskState
from loopkernel.ids import RunId
from loopkernel.store import Journal, PatchRecord, RunInfo
from loopkernel.store._lease import describe_owner

__all__ = [
    "WaitKind",
    "WaitingOn",
    "clock",
    "gate_timeouts",
    "owner_note",
    "read_waits",
    "run_waits_on_timer",
    "waits_of",
]

_OUTCOME_UNKNOWN = "outcome unknown"  # the reason's prefix (loopkernel._effects)


class WaitKind(StrEnum):
    """What a waiting task waits for."""

    HUMAN = "human"
    TIMER = "timer"
    APPROVAL = "approval"
    OUTCOME_UNKNOWN = "outcome unknown"


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitingOn:
    """One waiting task, and what answers it."""

    task_id: str
    """The task."""
    kind: WaitKind
    """What it waits for."""
    reason: str
    """The reason it was parked with."""
    until: float | None = None
    """A timer's wake-up time, or an approval's deadline (seconds since the epoch)."""

    def line(self) -> str:
        """``waiting for a timer: task nap wakes at ...: a nap``, for a human."""
        why = f": {self.reason}" if self.reason else ""
        if self.kind is WaitKind.TIMER:
            return f"waiting for a timer: task {self.task_id} wakes at {_when(self.until)}{why}"
        if self.kind is WaitKind.APPROVAL:
            deadline = _when(self.until)
            return f"waiting for an approval: task {self.task_id} (deadline {deadline}){why}"
        if self.kind is WaitKind.OUTCOME_UNKNOWN:
            return f"waiting for a human (outcome unknown): task {self.task_id}{why}"
        return f"waiting for a human: task {self.task_id}{why}"

    def to_json(self) -> dict[str, object]:
        """``task_id``, ``reason`` (``None`` if none), ``kind``, ``until``."""
        return {
            "task_id": self.task_id,
            "reason": self.reason or None,
            "kind": self.kind.value,
            "until": self.until,
        }


def clock(seconds: float) -> str:
    """``2026-12-03 14:10:00 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _when(until: float | None) -> str:
    if until is None:
        return "an unknown time"
    left = until - time.time()
    return f"{clock(until)} (in {left:.0f} s)" if left > 0 else f"{clock(until)} (due)"


def waits_of(
    tasks: Iterable[Task], events: Sequence[Event], patches: Sequence[PatchRecord] = ()
) -> list[WaitingOn]:
    """What each waiting task of ``tasks`` waits for; ``events`` and ``patches``: the run's
    journal (which tells an approval's deadline from a sleep)."""
    approvals = {
        (e.task_id, e.data.get("wait_epoch"))
        for e in events
        if e.kind is EventKind.APPROVAL_REQUIRED and isinstance(e.data, dict)
    }
    gates = gate_timeouts(r.ops for r in patches if r.outcome == "applied")
    found = []
    for task in sorted(tasks, key=lambda t: t.task_id):
        if task.state is not TaskState.WAITING:
            continue
        approval = (task.task_id, task.wait_epoch) in approvals or (
            task.wake_at is not None and (task.task_id, task.wake_at) in gates
        )
        found.append(_waiting_on(task, approval))
    return found


def _waiting_on(task: Task, approval: bool) -> WaitingOn:
    reason = task.wait_reason or ""
    if reason.startswith(_OUTCOME_UNKNOWN):
        kind = WaitKind.OUTCOME_UNKNOWN
    elif task.wake_at is None:
        kind = WaitKind.HUMAN
    else:
        kind = WaitKind.APPROVAL if approval else WaitKind.TIMER
    return WaitingOn(task_id=task.task_id, kind=kind, reason=reason, until=task.wake_at)


GateKey = tuple[str, float]
"""A wait op with a deadline: its task and ``until``, as journaled."""


def gate_timeouts(patches: Iterable[JSON]) -> dict[GateKey, Literal["reject", "escalate"]]:
    """The applied wait ops with ``on_timeout`` among ``patches`` (each ``ops`` of an applied
    patch record, in journal order): ``(task_id, until)`` -> action. A task waits on one of
    them while its ``wake_at`` is that ``until`` (the later op wins; a tool call's approval,
    told by its ``approval_required`` event, goes first)."""
    found: dict[GateKey, Literal["reject", "escalate"]] = {}
    for ops in patches:
        for op in ops if isinstance(ops, list) else ():
            if not isinstance(op, dict) or op.get("op") != "wait":
                continue
            action, until = op.get("on_timeout"), op.get("until")
            if action in ("reject", "escalate") and isinstance(until, int | float):
                found[(str(op["task_id"]), float(until))] = action
    return found


def run_waits_on_timer(waits: Sequence[WaitingOn]) -> bool:
    """Whether nobody is asked for anything: every waiting task sleeps on a timer."""
    return bool(waits) and all(w.kind is WaitKind.TIMER for w in waits)


def owner_note(info: RunInfo) -> str | None:
    """``owner lost at TIME (worker 'w1')`` for a running run whose executor is gone."""
    lost = info.owner_lost_at
    if lost is None:
        return None
    return f"owner lost at {clock(lost)} ({describe_owner(info.owner)})"


async def read_waits(store: Journal, run_id: RunId) -> list[WaitingOn]:
    """What the run's waiting tasks wait for, read from ``store`` (two reads, three if a
    waiting task has a wake-up time)."""
    loaded = await store.load_run(run_id)
    waiting = loaded.state.in_state(TaskState.WAITING)
    if not waiting:
        return []
    timed = any(t.wake_at is not None for t in waiting)
    return waits_of(
        waiting, await store.events(run_id), await store.patches(run_id) if timed else []
    )
