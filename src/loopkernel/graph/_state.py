"""The materialized graph of one run, and the pure validation of patches against it.

``validate(state, patch, skills)`` returns a ``Delta`` or raises ``PatchRejected``; it never
mutates anything. ``GraphState.apply(delta)`` is the only mutation, and the store writes
the same delta in the same step, so memory and disk never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Final, TypeVar, assert_never, overload

from loopkernel.errors import PatchRejected
from loopkernel.graph._model import (
    JSON,
    TERMINAL_RUN,
    TERMINAL_TASK,
    EvidenceScope,
    RunStatus,
    TaskState,
    check_json,
    legal_transition,
)
from loopkernel.graph._patch import Add, Cancel, Connect, Finish, GraphPatch, Resume, Wait
from loopkernel.ids import ID_PATTERN, RunId, TaskId, valid_id

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values

__all__ = ["Delta", "GraphState", "Task", "TaskTable", "validate"]

_T = TypeVar("_T")


class _Keep(Enum):
    """``Task.evolve``'s "leave this field as it is" (``None`` is a value a field can take)."""

    KEEP = "keep"


_KEEP: Final = _Keep.KEEP  # a global's lookup is cheaper than the enum class attribute's


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    """A node of the graph, as the store keeps it."""

    task_id: TaskId
    """Unique in its run."""
    skill: str
    """The worker that runs it."""
    input: JSON = None
    """JSON input."""
    evidence_scope: EvidenceScope = "all"
    """Which results the worker may see."""
    state: TaskState = TaskState.PENDING
    """Where it is in its life."""
    result: JSON = None
    """The worker's return value, once succeeded."""
    error: JSON = None
    """``{"type", "message"}`` once failed."""
    attempts: int = 0
    """How many times a worker started it (more than one only after a crash)."""
    wait_reason: str | None = None
    """Why it waits for a human."""
    human_input: JSON = None
    """What the human answered when it was resumed."""
    wait_epoch: int = 0
    """How many times it was parked; an approval names the epoch it answers."""
    done_seq: int | None = None
    """The seq of the event that made it terminal."""
    wake_at: float | None = None
    """While it waits on a timer: when it wakes (seconds since the epoch). A time, so not
    in the state digest."""

    def evolve(
        self,
        *,
        task_id: TaskId | _Keep = _Keep.KEEP,
        skill: str | _Keep = _Keep.KEEP,
        input: JSON | _Keep = _Keep.KEEP,
        evidence_scope: EvidenceScope | _Keep = _Keep.KEEP,
        state: TaskState | _Keep = _Keep.KEEP,
        result: JSON | _Keep = _Keep.KEEP,
        error: JSON | _Keep = _Keep.KEEP,
        attempts: int | _Keep = _Keep.KEEP,
        wait_reason: str | _Keep | None = _Keep.KEEP,
        human_input: JSON | _Keep = _Keep.KEEP,
        wait_epoch: int | _Keep = _Keep.KEEP,
        done_seq: int | _Keep | None = _Keep.KEEP,
        wake_at: float | _Keep | None = _Keep.KEEP,
    ) -> Task:
        """This task with the fields given changed: ``dataclasses.replace`` at about a
        third of its cost (14,000 instructions a call against 40,000, callgrind). The
        executor re-makes every task three or four times in its life, so this is on the
        hot path: no ``**kwargs`` dict, no field introspection, no ``__init__`` (``Task``
        has no validation to skip), and each slot written through its own descriptor
        rather than the frozen ``__setattr__``. The field-by-field lines below and the
        setters after the class are spelled out on purpose: a loop over the fields costs
        what this saves (``tests/graph/test_task.py`` keeps them complete)."""
        new: Task = _new(Task)
        _task_id(new, self.task_id if task_id is _KEEP else task_id)
        _skill(new, self.skill if skill is _KEEP else skill)
        _input(new, self.input if input is _KEEP else input)
        _evidence_scope(new, self.evidence_scope if evidence_scope is _KEEP else evidence_scope)
        _state(new, self.state if state is _KEEP else state)
        _result(new, self.result if result is _KEEP else result)
        _error(new, self.error if error is _KEEP else error)
        _attempts(new, self.attempts if attempts is _KEEP else attempts)
        _wait_reason(new, self.wait_reason if wait_reason is _KEEP else wait_reason)
        _human_input(new, self.human_input if human_input is _KEEP else human_input)
        _wait_epoch(new, self.wait_epoch if wait_epoch is _KEEP else wait_epoch)
        _done_seq(new, self.done_seq if done_seq is _KEEP else done_seq)
        _wake_at(new, self.wake_at if wake_at is _KEEP else wake_at)
        return new


_new = object.__new__
# Each field's slot descriptor's setter: the frozen dataclass's ``__setattr__`` refuses
# writes, and these are what ``object.__setattr__`` would reach, without its lookup.
_task_id = vars(Task)["task_id"].__set__
_skill = vars(Task)["skill"].__set__
_input = vars(Task)["input"].__set__
_evidence_scope = vars(Task)["evidence_scope"].__set__
_state = vars(Task)["state"].__set__
_result = vars(Task)["result"].__set__
_error = vars(Task)["error"].__set__
_attempts = vars(Task)["attempts"].__set__
_wait_reason = vars(Task)["wait_reason"].__set__
_human_input = vars(Task)["human_input"].__set__
_wait_epoch = vars(Task)["wait_epoch"].__set__
_done_seq = vars(Task)["done_seq"].__set__
_wake_at = vars(Task)["wake_at"].__set__


@dataclass(frozen=True, kw_only=True, slots=True)
class Delta:
    """What a patch (or an event) changes: whole new task values, new edges, the run's end."""

    tasks: tuple[Task, ...] = ()
    """New or changed tasks, in their new form."""
    new_task_ids: frozenset[TaskId] = frozenset()
    """Which of ``tasks`` are new."""
    edges: tuple[tuple[TaskId, TaskId], ...] = ()
    """New edges ``(src, dst)``."""
    finish: tuple[RunStatus, JSON] | None = None
    """``(status, verdict)`` when the patch finishes the run."""
    cancelled_running: tuple[TaskId, ...] = ()
    """Tasks that were running and are cancelled: the executor cancels them in flight."""

    def with_tasks(self, tasks: tuple[Task, ...]) -> Delta:
        """This delta with ``tasks`` instead: ``dataclasses.replace`` without its reading
        of the fields, once a step (``tests/graph/test_task.py`` keeps it complete)."""
        return Delta(
            tasks=tasks,
            new_task_ids=self.new_task_ids,
            edges=self.edges,
            finish=self.finish,
            cancelled_running=self.cancelled_running,
        )


class TaskTable(dict[TaskId, Task]):
    """``GraphState.tasks`` once the executor evicted succeeded tasks from memory
    (``ExecutionConfig(keep_finished=N)``, ``GraphState.evict``): the tasks in memory, and
    how many live elsewhere. A mapping of every task all the same (``table[id]``, ``get``,
    ``in``, iterating, ``len``), so what a planner or a worker sees is the same either way.

    Where the evicted ones live, and reading them back, is not the graph's: graph code
    asks for them only through the four ``evicted_*`` methods, which here know none (this
    table holds no I/O). The executor supplies the table that reads them back from its
    store (``executor/_spill.py``'s ``ArchivedTasks``). ``resident()`` is what is in memory.
    """

    __slots__ = ("evicted",)

    def __init__(self, *args: Mapping[TaskId, Task]) -> None:
        super().__init__(*args)
        self.evicted = 0
        """How many tasks live only outside memory."""

    # -- what a subclass supplies ----------------------------------------------------------

    def evicted_task(self, task_id: TaskId) -> Task | None:
        """The evicted task ``task_id``, or ``None``."""
        return None

    def evicted_tasks(self) -> list[Task]:
        """Every task as last committed (the evicted ones among them)."""
        return []

    def evicted_edges(self, task_id: TaskId) -> tuple[list[TaskId], list[TaskId]]:
        """``(predecessors, successors)`` of an evicted task."""
        return [], []

    def all_evicted_edges(self) -> list[tuple[TaskId, TaskId]]:
        """Every committed edge ``(src, dst)`` of the run."""
        return []

    # -- the mapping -----------------------------------------------------------------------

    def __missing__(self, key: TaskId) -> Task:
        task = self.evicted_task(key) if self.evicted else None
        if task is None:
            raise KeyError(key)
        return task

    @overload
    def get(self, key: TaskId, default: None = None, /) -> Task | None: ...
    @overload
    def get(self, key: TaskId, default: Task, /) -> Task: ...
    @overload
    def get(self, key: TaskId, default: _T, /) -> Task | _T: ...
    def get(self, key: TaskId, default: object = None, /) -> object:
        task = dict.get(self, key)
        if task is None and self.evicted:
            task = self.evicted_task(key)
        return default if task is None else task

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if not (self.evicted and isinstance(key, str)):
            return False
        return self.evicted_task(TaskId(key)) is not None

    def __len__(self) -> int:
        return dict.__len__(self) + self.evicted

    def __iter__(self) -> Iterator[TaskId]:
        return iter(self._everything()) if self.evicted else dict.__iter__(self)

    def keys(self) -> dict_keys[TaskId, Task]:
        return self._everything().keys() if self.evicted else dict.keys(self)

    def values(self) -> dict_values[TaskId, Task]:
        return self._everything().values() if self.evicted else dict.values(self)

    def items(self) -> dict_items[TaskId, Task]:
        return self._everything().items() if self.evicted else dict.items(self)

    def resident(self) -> dict_values[TaskId, Task]:
        """The tasks in memory: every task that is not finished, and some that are."""
        return dict.values(self)

    def _everything(self) -> dict[TaskId, Task]:
        everything = {t.task_id: t for t in self.evicted_tasks()}
        everything.update(dict.items(self))  # memory is newer than the last commit
        return everything


@dataclass(kw_only=True)
class GraphState:
    """The run's graph in memory: the planner's snapshot and the executor's working copy."""

    run_id: RunId
    app: str
    params: JSON
    status: RunStatus = RunStatus.RUNNING
    verdict: JSON = None
    tasks: dict[TaskId, Task] = field(default_factory=dict)
    """By id. A plain dict, until the executor evicts finished tasks: then a ``TaskTable``,
    which reads them back (so read a task through ``tasks``, never from a copy of it)."""
    preds: dict[TaskId, list[TaskId]] = field(default_factory=dict)
    """Predecessors of the tasks in memory (``predecessors()`` also reads evicted ones)."""
    succs: dict[TaskId, list[TaskId]] = field(default_factory=dict)
    """Successors of the tasks in memory (``successors()`` also reads evicted ones)."""

    # -- reading ---------------------------------------------------------------------------

    def task(self, task_id: str) -> Task:
        return self.tasks[TaskId(task_id)]

    def get(self, task_id: str) -> Task | None:
        return self.tasks.get(TaskId(task_id))

    def in_state(self, *states: TaskState) -> list[Task]:
        if TaskState.SUCCEEDED not in states:
            return [t for t in self.resident() if t.state in states]  # none of them evicted
        return [t for t in self.tasks.values() if t.state in states]

    def finished_count(self) -> int:
        """How many tasks have finished, without reading evicted ones back (all succeeded)."""
        tasks = self.tasks
        evicted = tasks.evicted if isinstance(tasks, TaskTable) else 0
        return evicted + sum(1 for t in self.resident() if t.state in TERMINAL_TASK)

    def resident(self) -> Iterable[Task]:
        """The tasks in memory: all but the succeeded ones the executor evicted."""
        tasks = self.tasks
        return tasks.resident() if isinstance(tasks, TaskTable) else tasks.values()

    def predecessors(self, task_id: str) -> list[TaskId]:
        found = self.preds.get(TaskId(task_id))
        if found is None:  # none, or the task was evicted with its lists
            return self._evicted_edges(task_id)[0] if isinstance(self.tasks, TaskTable) else []
        return found

    def successors(self, task_id: str) -> list[TaskId]:
        found = self.succs.get(TaskId(task_id))
        if found is None:
            return self._evicted_edges(task_id)[1] if isinstance(self.tasks, TaskTable) else []
        return found

    def _evicted_edges(self, task_id: str) -> tuple[list[TaskId], list[TaskId]]:
        tasks = self.tasks
        if isinstance(tasks, TaskTable) and tasks.evicted and not dict.__contains__(tasks, task_id):
            return tasks.evicted_edges(TaskId(task_id))
        return [], []

    def startable(self, task_id: TaskId) -> bool:
        """Ready, and every predecessor has succeeded."""
        tasks = self.tasks
        if tasks[task_id].state is not TaskState.READY:
            return False
        for p in self.preds.get(task_id, ()):  # noqa: SIM110 - no generator: once a step
            if tasks[p].state is not TaskState.SUCCEEDED:
                return False
        return True

    def ancestors(self, task_id: TaskId) -> set[TaskId]:
        preds = self.preds
        tasks = self.tasks
        if isinstance(tasks, TaskTable) and tasks.evicted:
            # Through evicted tasks: every committed edge at once (one read, where a read
            # per task would scan the edges each time), then the lists in memory, which
            # are newer.
            preds = {}
            for src, dst in tasks.all_evicted_edges():
                preds.setdefault(dst, []).append(src)
            preds.update(self.preds)
        seen: set[TaskId] = set()
        stack = list(preds.get(task_id, ()))
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(preds.get(node, ()))
        return seen

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_RUN

    # -- changing --------------------------------------------------------------------------

    def apply(self, delta: Delta) -> None:
        for task in delta.tasks:
            self.tasks[task.task_id] = task
        if delta.edges:
            self.link(delta.edges)
        if delta.finish is not None:
            self.status, self.verdict = delta.finish

    def link(self, edges: Iterable[tuple[TaskId, TaskId]]) -> None:
        """Add edges between tasks already in ``tasks``, keyed by the tasks' own id strings.

        A long run keeps every edge for its life, so they are kept small: an edge names
        the task's id object rather than a copy of its text, and a node's first neighbour
        gets a list of exactly one item (``setdefault(k, []).append`` would make a spare
        empty list per edge and grow each new one to four slots).
        """
        tasks, succs, preds = self.tasks, self.succs, self.preds
        for a, b in edges:
            # An id missing from memory is an evicted task's: read back in first, so that
            # the edge joins whole lists (a succeeded task may gain a successor).
            one = dict.get(tasks, a) or self._revive(a)
            two = dict.get(tasks, b) or self._revive(b)
            src = a if one is None else one.task_id
            dst = b if two is None else two.task_id
            if (after := succs.get(src)) is None:
                succs[src] = [dst]
            else:
                after.append(dst)
            if (before := preds.get(dst)) is None:
                preds[dst] = [src]
            else:
                before.append(src)

    def _revive(self, task_id: TaskId) -> Task | None:
        tasks = self.tasks
        if not (isinstance(tasks, TaskTable) and tasks.evicted):
            return None
        task = tasks.evicted_task(task_id)
        if task is None:
            return None
        before, after = tasks.evicted_edges(task_id)
        dict.__setitem__(tasks, task_id, task)
        tasks.evicted -= 1
        if before:
            self.preds[task_id] = before
        if after:
            self.succs[task_id] = after
        return task

    def evict(self, task_ids: Iterable[TaskId]) -> None:
        """Drop finished tasks from memory, with their edge lists. ``tasks`` must be a
        ``TaskTable`` that reads them back (the executor's, which knows where they are).
        Only for succeeded tasks whose successors are all finished and whose last state
        the store has committed: nothing can change them any more, and no cycle check
        walks through them (it starts at a task that has not started, and everything
        after such a task has not succeeded)."""
        tasks = self.tasks
        if not isinstance(tasks, TaskTable) or type(tasks) is TaskTable:
            raise TypeError("evict needs a TaskTable that reads evicted tasks back")
        for tid in task_ids:
            del tasks[tid]
            self.preds.pop(tid, None)
            self.succs.pop(tid, None)
            tasks.evicted += 1

    def promotions(
        self,
        candidates: Iterable[TaskId],
        overlay: Mapping[TaskId, Task],
        extra_preds: Mapping[TaskId, list[TaskId]] | None = None,
    ) -> list[Task]:
        """Pending candidates whose predecessors all succeeded, promoted to ``ready``.

        ``overlay`` holds task values not applied yet, ``extra_preds`` edges not applied yet.
        """
        out: list[Task] = []
        for tid in candidates:
            task = overlay.get(tid) or self.tasks[tid]
            if task.state is not TaskState.PENDING:
                continue
            preds = [*self.preds.get(tid, ()), *(extra_preds or {}).get(tid, ())]
            if all((overlay.get(p) or self.tasks[p]).state is TaskState.SUCCEEDED for p in preds):
                out.append(task.evolve(state=TaskState.READY))
        return out


_NO_CHANGE = Delta()


def validate(state: GraphState, patch: GraphPatch, skills: Collection[str]) -> Delta:
    """Check ``patch`` against ``state``; return what it changes, or raise ``PatchRejected``.

    Pure: ``state`` is not touched. Rules are named in the error's ``rule`` attribute.
    """
    if not patch.ops:  # "wait for more events": the most common answer, and no change
        return _NO_CHANGE
    changed: dict[TaskId, Task] = {}
    new_ids: set[TaskId] = set()
    new_edges: list[tuple[TaskId, TaskId]] = []
    extra_succs: dict[TaskId, list[TaskId]] = {}
    extra_preds: dict[TaskId, list[TaskId]] = {}
    finish: tuple[RunStatus, JSON] | None = None
    cancelled_running: list[TaskId] = []

    def reject(index: int, rule: str, message: str) -> PatchRejected:
        return PatchRejected(f"op {index}: {message} [{rule}]", op=index, rule=rule)

    known = state.tasks.get  # dict's own, or TaskTable's once tasks were evicted

    def current(tid: TaskId) -> Task | None:
        return changed.get(tid) or known(tid)

    def require(index: int, tid: TaskId) -> Task:
        task = current(tid)
        if task is None:
            raise reject(index, "unknown_task", f"no task {tid!r} in this run")
        return task

    def move(index: int, task: Task, new: TaskState, **changes: JSON) -> Task:
        if not legal_transition(task.state, new):
            raise reject(
                index,
                "illegal_transition",
                f"task {task.task_id!r} cannot go from {task.state} to {new}",
            )
        moved = task.evolve(state=new, **changes)
        changed[task.task_id] = moved
        return moved

    def reaches(start: TaskId, goal: TaskId) -> bool:
        seen: set[TaskId] = set()
        stack = [start]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node in seen:
                continue
            seen.add(node)
            stack.extend(state.succs.get(node, ()))
            stack.extend(extra_succs.get(node, ()))
        return False

    if state.finished:
        raise reject(0, "run_finished", f"run {state.run_id} is already {state.status}")

    for i, op in enumerate(patch.ops):
        if finish is not None:
            raise reject(i, "after_finish", "no op may follow finish")
        match op:
            case Add(task=spec):
                tid = TaskId(spec.task_id)
                if not valid_id(tid):
                    raise reject(
                        i, "bad_task_id", f"task id {str(tid)[:40]!r} does not match {ID_PATTERN}"
                    )
                if current(tid) is not None:
                    raise reject(i, "duplicate_task", f"task {tid!r} already exists")
                if spec.skill not in skills:
                    raise reject(
                        i,
                        "unknown_skill",
                        f"skill {spec.skill!r} is not in the worker registry "
                        f"(known: {', '.join(sorted(skills)) or 'none'})",
                    )
                try:
                    check_json(spec.input)
                except (TypeError, ValueError) as exc:
                    raise reject(i, "input_not_json", f"input of {tid!r}: {exc}") from None
                changed[tid] = Task(
                    task_id=tid,
                    skill=spec.skill,
                    input=spec.input,
                    evidence_scope=spec.evidence_scope,
                )
                new_ids.add(tid)
            case Connect(src=src, dst=dst):
                a, b = require(i, src), require(i, dst)
                if src == dst or reaches(dst, src):
                    raise reject(i, "cycle", f"edge {src!r} -> {dst!r} would close a cycle")
                if (src, dst) in new_edges or dst in state.succs.get(src, ()):
                    raise reject(i, "duplicate_edge", f"edge {src!r} -> {dst!r} exists")
                if b.state is TaskState.RUNNING or b.state in TERMINAL_TASK:
                    raise reject(
                        i, "dst_started", f"task {dst!r} is already {b.state}; it can't wait now"
                    )
                if a.state in (TaskState.FAILED, TaskState.CANCELLED):
                    raise reject(
                        i,
                        "dead_predecessor",
                        f"task {src!r} is {a.state}, so {dst!r} could never run",
                    )
                new_edges.append((src, dst))
                extra_succs.setdefault(src, []).append(dst)
                extra_preds.setdefault(dst, []).append(src)
            case Cancel(task_id=tid):
                task = require(i, tid)
                if task.state is TaskState.RUNNING:
                    cancelled_running.append(tid)
                move(i, task, TaskState.CANCELLED)
            case Wait(task_id=tid, reason=reason, until=until, seconds=seconds):
                task = require(i, tid)
                if seconds is not None:
                    raise reject(
                        i,
                        "unresolved_timer",
                        f"wait of {tid!r} gives seconds={seconds}; the executor turns a "
                        "duration into until= before validating",
                    )
                if until is not None and not math.isfinite(until):
                    raise reject(i, "bad_timer", f"wait of {tid!r}: until must be finite")
                if task.state is TaskState.RUNNING:
                    raise reject(
                        i,
                        "illegal_transition",
                        f"task {tid!r} is running; a patch parks only pending or ready tasks",
                    )
                move(
                    i,
                    task,
                    TaskState.WAITING,
                    wait_reason=reason,
                    wait_epoch=task.wait_epoch + 1,
                    wake_at=until,
                )
            case Resume(task_id=tid, payload=payload):
                task = require(i, tid)
                if task.state is not TaskState.WAITING:
                    raise reject(i, "not_waiting", f"task {tid!r} is {task.state}, not waiting")
                move(i, task, TaskState.READY, human_input=payload, wake_at=None)
            case Finish(status=status, verdict=verdict):
                finish = (RunStatus(status), verdict)
                # Evicted tasks have all succeeded: the tasks in memory are the ones to end.
                for task in [*state.resident(), *(changed[t] for t in new_ids)]:
                    task = current(task.task_id) or task
                    if task.state not in TERMINAL_TASK:
                        if task.state is TaskState.RUNNING:
                            cancelled_running.append(task.task_id)
                        changed[task.task_id] = task.evolve(state=TaskState.CANCELLED)
            case _:
                assert_never(op)

    for task in state.promotions(new_ids, changed, extra_preds):
        changed[task.task_id] = task

    return Delta(
        tasks=tuple(changed.values()),
        new_task_ids=frozenset(new_ids),
        edges=tuple(new_edges),
        finish=finish,
        cancelled_running=tuple(cancelled_running),
    )
