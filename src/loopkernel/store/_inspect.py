"""The queries only the web inspector asks (``Client``'s read helpers compose them): a
run's forks, one task's events, when each event was journaled, when each task ran, how
many runs there are of each status, and a run's graph without its journal. A base of
``SQLStore`` (``_engine``), over its ``_call``; the dialects share them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from loopkernel.graph import Event, GraphState
from loopkernel.ids import RunId
from loopkernel.store._codec import TASK_COLUMNS, event_from_row, run_page_filter, task_from_row

if TYPE_CHECKING:
    from loopkernel.store._engine import Cursor, How
    from loopkernel.store._protocol import RunInfo

__all__ = ["InspectorReads"]

T = TypeVar("T")

TASK_EVENTS = (
    "SELECT seq, kind, task_id, data FROM events WHERE run_id = ? AND seq IN "
    "(SELECT seq FROM events WHERE run_id = ? AND task_id = ?) ORDER BY seq"
)
"""One task's events: the seqs from the covering index ``events_by_task``, the rows by the
primary key (SQLite, without statistics, would rather scan the run's whole journal by its
primary key than look rows up from an index that does not cover them)."""


class InspectorReads:
    """What the inspector reads beyond the ``Store`` protocols."""

    async def _call(
        self,
        body: Callable[[Cursor], T],
        how: How = "statement",
        *,
        sync: bool = True,
        bulk: bool = False,
    ) -> T:
        raise NotImplementedError  # ``SQLStore._call``

    async def run_counts(self, app: str | None = None) -> dict[str, int]:
        """How many runs there are of each status (of one app), one ``GROUP BY``."""
        where, params = run_page_filter(None, app, None, "?")
        sql = f"SELECT status, COUNT(*) FROM runs{where} GROUP BY status"
        rows = await self._call(lambda cur: cur.all(sql, tuple(params)))
        return {str(row[0]): int(row[1]) for row in rows}

    async def forks_of(self, run_id: RunId) -> list[tuple[RunId, int]]:
        """``(run, seq)`` of the runs forked from ``run_id``."""
        sql = "SELECT run_id, source_seq FROM forks WHERE source_run = ? ORDER BY run_id"
        rows = await self._call(lambda cur: cur.all(sql, (run_id,)))
        return [(RunId(r[0]), int(r[1])) for r in rows]

    async def task_events(self, run_id: RunId, task_id: str) -> list[Event]:
        """The events of one task, filtered by the database (``events_by_task``)."""
        args = (run_id, run_id, task_id)
        rows = await self._call(lambda cur: cur.all(TASK_EVENTS, args))
        return [event_from_row(run_id, row) for row in rows]

    async def event_times(self, run_id: RunId, after: int = 0) -> dict[int, float]:
        """When each event after ``after`` was journaled (seq -> epoch seconds)."""
        sql = "SELECT seq, created_at FROM events WHERE run_id = ? AND seq > ? ORDER BY seq"
        rows = await self._call(lambda cur: cur.all(sql, (run_id, after)))
        return {int(r[0]): float(r[1]) for r in rows}

    async def task_times(
        self, run_id: RunId, task_id: str | None = None
    ) -> dict[str, tuple[float | None, float | None]]:
        """task -> (when its latest attempt started, when its finishing event was
        journaled), epoch seconds or ``None``; every task, or the one ``task_id``."""
        sql = (
            "SELECT t.task_id, t.started_at, e.created_at FROM tasks t LEFT JOIN events e "
            "ON e.run_id = t.run_id AND e.seq = t.done_seq WHERE t.run_id = ?"
        )
        args: tuple[Any, ...] = (run_id,)
        if task_id is not None:
            sql, args = sql + " AND t.task_id = ?", (run_id, task_id)
        rows = await self._call(lambda cur: cur.all(sql, args))
        return {
            str(r[0]): (
                None if r[1] is None else float(r[1]),
                None if r[2] is None else float(r[2]),
            )
            for r in rows
        }

    async def graph_of(self, info: RunInfo) -> GraphState:
        """The run's graph (``load_run``'s ``state``: its tasks and edges) as of now, with
        the status ``info`` read; without ``load_run``'s scan of the whole journal for
        unplanned events (28 ms a read at 10,000 events), which a hub polling a long run
        does not need."""
        tasks_sql = f"SELECT {TASK_COLUMNS} FROM tasks WHERE run_id = ? ORDER BY task_id"
        edges_sql = "SELECT src, dst FROM edges WHERE run_id = ? ORDER BY src, dst"
        key = (info.run_id,)
        tasks, edges = await self._call(
            lambda cur: (cur.all(tasks_sql, key), cur.all(edges_sql, key)), "snapshot"
        )
        state = GraphState(
            run_id=info.run_id,
            app=info.app,
            params=info.params,
            status=info.status,
            verdict=info.verdict,
        )
        for row in tasks:
            task = task_from_row(row)
            state.tasks[task.task_id] = task
        state.link(edges)
        return state
