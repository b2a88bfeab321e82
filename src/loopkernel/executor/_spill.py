"""The tasks an executor evicted from memory: how they are read back, and where they are
kept when the store cannot read them back itself.

``ArchivedTasks`` is the run's ``graph.TaskTable`` once the executor evicts (``evict``):
the graph asks it for an evicted task, and it reads it from an ``Archive`` -- the store's
(SQLite) or a ``SpillArchive``. The graph never reads anything itself: the executor
supplies the table that does.

``SpillArchive``: when the store cannot read tasks back synchronously (PostgreSQL: every
read is a round trip, which the loop must not wait for).

A private temporary SQLite database (``sqlite3.connect("")``): SQLite makes its file
itself and removes it when the connection closes (on Unix it is unlinked as soon as it is
opened, so not even a ``kill -9`` leaves it behind). The executor writes a task here when
it evicts it -- a succeeded task the store has committed, which nothing can change any
more -- with its edge lists, and reads it back as an ``Archive``. The page cache is
SQLite's default 2 MiB: a long run's memory stays flat, and what does not fit is on disk.
Nothing here is the run's record: a resumed executor loads its run from the store and
spills again. Rows are pickles: this process writes them and only this process reads them.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterable, Mapping, Sequence

from loopkernel.graph import GraphState, Task, TaskTable
from loopkernel.ids import TaskId
from loopkernel.store import Archive

__all__ = ["ArchivedTasks", "SpillArchive", "evict"]


class ArchivedTasks(TaskTable):
    """A run's tasks, the evicted ones read back from ``archive`` when asked for."""

    __slots__ = ("archive",)

    def __init__(self, tasks: Mapping[TaskId, Task], archive: Archive) -> None:
        super().__init__(tasks)
        self.archive = archive
        """Where the evicted tasks are read back from."""

    def evicted_task(self, task_id: TaskId) -> Task | None:
        return self.archive.task(task_id)

    def evicted_tasks(self) -> list[Task]:
        return self.archive.tasks()

    def evicted_edges(self, task_id: TaskId) -> tuple[list[TaskId], list[TaskId]]:
        return self.archive.edges(task_id)

    def all_evicted_edges(self) -> list[tuple[TaskId, TaskId]]:
        return self.archive.all_edges()


def evict(state: GraphState, task_ids: Iterable[TaskId], archive: Archive) -> None:
    """``state.evict(task_ids)``, its tasks made an ``ArchivedTasks`` reading ``archive``
    first (at the first eviction they are a plain dict)."""
    tasks = state.tasks
    if isinstance(tasks, ArchivedTasks):
        tasks.archive = archive
    else:
        state.tasks = ArchivedTasks(tasks, archive)
    state.evict(task_ids)


class SpillArchive:
    """An ``Archive`` of the tasks this executor evicted, in a temporary database."""

    def __init__(self) -> None:
        self._db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = OFF")  # gone with the process anyway
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("CREATE TABLE tasks (task_id TEXT PRIMARY KEY, task, preds, succs)")

    def keep(
        self,
        tasks: Iterable[Task],
        preds: Mapping[TaskId, Sequence[TaskId]],
        succs: Mapping[TaskId, Sequence[TaskId]],
    ) -> None:
        """Write ``tasks`` (about to leave memory) with their edge lists, as they are now: a
        task read back into memory to gain an edge is written again when it leaves."""
        rows = [
            (
                task.task_id,
                pickle.dumps(task),
                pickle.dumps(list(preds.get(task.task_id, ()))),
                pickle.dumps(list(succs.get(task.task_id, ()))),
            )
            for task in tasks
        ]
        self._db.executemany("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?)", rows)

    def task(self, task_id: TaskId) -> Task | None:
        row = self._db.execute("SELECT task FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return None if row is None else _task(row[0])

    def tasks(self) -> list[Task]:
        return [_task(row[0]) for row in self._db.execute("SELECT task FROM tasks ORDER BY 1")]

    def edges(self, task_id: TaskId) -> tuple[list[TaskId], list[TaskId]]:
        row = self._db.execute("SELECT preds, succs FROM tasks WHERE task_id = ?", (task_id,))
        found = row.fetchone()
        if found is None:
            return [], []
        return pickle.loads(found[0]), pickle.loads(found[1])

    def all_edges(self) -> list[tuple[TaskId, TaskId]]:
        """The edges that touch an evicted task (those between tasks in memory are in the
        graph's own lists, which ``GraphState`` reads after these)."""
        edges: set[tuple[TaskId, TaskId]] = set()
        for tid, before, after in self._db.execute("SELECT task_id, preds, succs FROM tasks"):
            me = TaskId(tid)
            edges.update((src, me) for src in pickle.loads(before))
            edges.update((me, dst) for dst in pickle.loads(after))
        return sorted(edges)

    def close(self) -> None:
        self._db.close()


def _task(blob: bytes) -> Task:
    task = pickle.loads(blob)
    assert isinstance(task, Task)
    return task
