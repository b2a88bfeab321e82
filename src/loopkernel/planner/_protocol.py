"""The planner: ``plan(snapshot, event) -> GraphPatch``, and a base class with sane defaults."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from loopkernel.graph import JSON, Event, EventKind, GraphPatch, RunStatus, Task, TaskState
from loopkernel.ids import RunId, TaskId

__all__ = ["BasePlanner", "Planner", "Proposal", "Snapshot"]


class Snapshot(Protocol):
    """The read-only view of a run a planner gets. Never mutate what it returns."""

    @property
    def run_id(self) -> RunId: ...
    @property
    def params(self) -> JSON: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def tasks(self) -> dict[TaskId, Task]: ...

    def task(self, task_id: str) -> Task: ...
    def get(self, task_id: str) -> Task | None: ...
    def in_state(self, *states: TaskState) -> list[Task]: ...
    def predecessors(self, task_id: str) -> list[TaskId]: ...
    def successors(self, task_id: str) -> list[TaskId]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Proposal:
    """A planner's answer that the kernel may refuse, with the patch to apply instead.

    The kernel runs the policy guard and ``validate()`` on ``patch``; if it passes, it is
    applied and journaled with ``planner="llm"`` (``source``); if it fails, or ``patch`` is
    ``None`` because the proposer already refused it (``reason`` set), ``fallback`` is
    checked and applied the ordinary way and journaled with ``planner="fallback"``. Either
    way the rest of the fields are journaled beside the patch (``PatchRecord.proposal``).
    The kernel knows nothing of models: any proposer can return one.
    """

    patch: GraphPatch | None
    """The proposed patch, or ``None`` when there is nothing to apply."""
    fallback: GraphPatch
    """The deterministic answer to the same event."""
    reason: str | None = None
    """Why the proposer already refused it: a named rule (``bad_json``, ``model_timeout``)."""
    detail: str | None = None
    """One line on the refusal."""
    source: str = "llm"
    """What ``planner`` says in the journal when the proposal is applied."""
    ops: object = None
    """The proposal's journal form when it parsed (kept even when refused), else ``None``."""
    raw_sha256: str | None = None
    """SHA-256 of the raw reply."""
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float | None = None


@runtime_checkable
class Planner(Protocol):
    """Answers each event with one patch (or a ``Proposal``: a patch the kernel may refuse,
    with its fallback). It may be sync or async; it must not do I/O that changes the world
    (workers do that), and for byte-identical recovery the patch applied must be a function
    of the snapshot and the event."""

    def plan(
        self, snapshot: Snapshot, event: Event
    ) -> GraphPatch | Proposal | Awaitable[GraphPatch | Proposal]: ...


class BasePlanner:
    """Dispatch on the event kind, with defaults an application overrides where it cares.

    Defaults: a failed task fails the run with the task's error as verdict; a human's
    ``approve`` resumes the task with the payload, ``reject`` cancels it; every other event
    is answered with the empty patch.
    """

    def plan(self, snapshot: Snapshot, event: Event) -> GraphPatch | Awaitable[GraphPatch]:
        match event.kind:
            case EventKind.RUN_STARTED:
                return self.on_start(snapshot, event)
            case EventKind.TASK_COMPLETED:
                return self.on_completed(snapshot, event)
            case EventKind.TASK_FAILED:
                return self.on_failed(snapshot, event)
            case EventKind.HUMAN_INPUT:
                return self.on_human_input(snapshot, event)
            case _:
                return self.on_other(snapshot, event)

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch()

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch()

    def on_failed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        error = snapshot.task(event.task_id).error or {}
        verdict = {"kind": "task_failed", "task_id": event.task_id, **error}
        return GraphPatch().finish("failed", verdict)

    def on_human_input(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        assert event.task_id is not None
        task = snapshot.get(event.task_id)
        if task is None or task.state is not TaskState.WAITING:
            return GraphPatch()
        if event.data["decision"] == "approve":
            return GraphPatch().resume(event.task_id, event.data.get("payload"))
        return GraphPatch().cancel(event.task_id)

    def on_other(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch()
