"""The graph as it stood after any event: the journal replayed, purely.

The journal holds every fact and every decision: each event, and the patch that answered
it. Replaying them in seq order rebuilds the graph as the executor saw it once that
event's patch was applied. Task results are not in the events (the journal keeps the
fact of a completion, the task row keeps its value), so a replay takes each succeeded
task's result from its final row: a terminal task never changes again, so the final row
holds the value it had when it finished.

What the journal does not hold is which tasks were ``running`` at that moment (starting
a task is not an event): a task started but not finished by the replayed seq comes back
``ready``, as it would after a crash there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from loopkernel.errors import PatchRejected, UsageError
from loopkernel.graph._model import JSON, Event, EventKind, TaskState
from loopkernel.graph._patch import Add, GraphPatch
from loopkernel.graph._state import GraphState, Task, validate
from loopkernel.ids import RunId, TaskId

__all__ = ["History", "state_at"]


@dataclass(frozen=True, kw_only=True, slots=True)
class History:
    """What the journal holds of a run, for a replay: the run, its events, the patches
    that answered them, and its tasks' final results."""

    run_id: RunId
    app: str
    params: JSON
    """The run's parameters, as it was started with them."""
    events: Sequence[Event]
    patches: Iterable[tuple[int, JSON]]
    """The applied patches as ``(event_seq, ops)``."""
    results: Mapping[TaskId, JSON]
    """The final result of each succeeded task (the journal keeps the fact, the row the
    value)."""


def state_at(history: History, seq: int) -> GraphState:
    """The graph after event ``seq`` and its patch (if it had one).

    ``UsageError`` when ``seq`` is not in the journal or the journal does not replay (a
    patch rejected on replay names its seq).
    """
    run_id, events, results = history.run_id, history.events, history.results
    patches, app, params = history.patches, history.app, history.params
    if not any(e.seq == seq for e in events):
        last = max((e.seq for e in events), default=0)
        raise UsageError(f"run {run_id} has no event #{seq} (its journal ends at #{last})")
    ops_of = {event_seq: ops for event_seq, ops in patches}
    parsed = {event_seq: GraphPatch.from_json(ops) for event_seq, ops in ops_of.items()}
    skills = {op.task.skill for p in parsed.values() for op in p.ops if isinstance(op, Add)}
    state = GraphState(run_id=run_id, app=app, params=params)
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq > seq:
            break
        _apply_event(state, event, results)
        patch = parsed.get(event.seq)
        if patch is None:
            continue
        try:
            state.apply(validate(state, patch, skills))
        except PatchRejected as exc:
            raise UsageError(
                f"run {run_id}: the patch of event #{event.seq} does not replay ({exc})"
            ) from None
    return state


def _apply_event(state: GraphState, event: Event, results: Mapping[TaskId, JSON]) -> None:
    """What the executor wrote with the event: the task's new state, and promotions."""
    if event.task_id is None or event.task_id not in state.tasks:
        return
    task = state.tasks[event.task_id]
    data = event.data if isinstance(event.data, dict) else {}
    new: Task
    match event.kind:
        case EventKind.TASK_COMPLETED:
            new = replace(
                task,
                state=TaskState.SUCCEEDED,
                result=results.get(task.task_id),
                done_seq=event.seq,
                attempts=max(task.attempts, int(data.get("attempt", 1))),
            )
        case EventKind.TASK_FAILED | EventKind.TRIPWIRE:
            new = replace(
                task,
                state=TaskState.FAILED,
                error=data.get("error"),
                done_seq=event.seq,
                attempts=max(task.attempts, int(data.get("attempt", 1))),
            )
        case EventKind.APPROVAL_REQUIRED:
            new = replace(
                task,
                state=TaskState.WAITING,
                wait_reason=data.get("reason"),
                wait_epoch=int(data.get("wait_epoch", task.wait_epoch + 1)),
            )
        case _:
            return
    state.tasks[new.task_id] = new
    if new.state is TaskState.SUCCEEDED:
        for promoted in state.promotions(state.successors(new.task_id), {}):
            state.tasks[promoted.task_id] = promoted
