"""SQLite-only behaviour: schema versions, and storage that grows with the work."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from loopkernel import (
    BasePlanner,
    Event,
    GraphPatch,
    Kernel,
    Snapshot,
    SQLiteStore,
    TaskContext,
    TaskSpec,
)
from loopkernel.errors import SchemaTooNew


def test_a_database_from_a_newer_loopkernel_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    asyncio.run(SQLiteStore(db).open())
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(SchemaTooNew, match="Upgrade loopkernel"):
        asyncio.run(SQLiteStore(db).open())


class Chain(BasePlanner):
    def __init__(self, n: int) -> None:
        self.n = n

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="t0", skill="w", input={"pad": "x" * 200}))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = len(snapshot.tasks)
        if i == self.n:
            return GraphPatch().finish("succeeded")
        spec = TaskSpec(task_id=f"t{i}", skill="w", input={"pad": "x" * 200})
        return GraphPatch().add(spec, after=[f"t{i - 1}"])


async def _work(ctx: TaskContext) -> object:
    return {"echo": ctx.input}


def _journal_bytes(db: Path, n: int) -> int:
    async def go() -> int:
        store = SQLiteStore(db, synchronous="normal")
        await store.open()
        kernel = Kernel(store, Chain(n), {"w": _work})
        started = await kernel.start(app="t")
        await kernel.run(started.run_id)
        await store.close()
        with sqlite3.connect(db) as conn:
            return (
                sum(
                    conn.execute(f"SELECT SUM(LENGTH(data)) FROM {t}").fetchone()[0] or 0
                    for t in ("events",)
                )
                + conn.execute("SELECT SUM(LENGTH(ops)) FROM patches").fetchone()[0]
            )

    return asyncio.run(go())


def test_the_journal_grows_linearly_not_with_snapshots_of_the_state(tmp_path: Path) -> None:
    small = _journal_bytes(tmp_path / "a.db", 100)
    large = _journal_bytes(tmp_path / "b.db", 400)
    # Four times the work, about four times the journal (whole-state snapshots would be ~16x).
    assert 3.5 < large / small < 4.5
