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
from loopkernel.ids import RunId


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


def test_a_second_store_in_one_process_keeps_the_first_ones_view_of_the_wal(
    tmp_path: Path,
) -> None:
    """``loopkernel serve`` holds two stores on one file (the inspector's and the timer
    waker's). Opening the second once read the file's header with Python's own ``open``,
    whose ``close`` dropped every POSIX lock this process held on the file: another
    process closing after a write then took itself for the last connection and reset the
    WAL under the first store, which from then on saw no new run and called the (sound)
    file malformed."""
    from loopkernel.testing import run_cli

    db = tmp_path / "runs.db"
    args = ["run", "speculation", "--scenario", "fast", "--quiet", "--run-id"]
    assert run_cli([*args, "one"], db=db).returncode == 0

    async def go() -> None:
        first, second = SQLiteStore(db, create=False), SQLiteStore(db, create=False)
        await first.open()
        assert (await first.get_run(RunId("one"))).status.value == "succeeded"
        await second.open()
        try:
            for run_id in ("two", "three", "four"):
                done = await asyncio.to_thread(run_cli, [*args, run_id], db=db)
                assert done.returncode == 0, done.stderr
                assert (await first.get_run(RunId(run_id))).status.value == "succeeded"
                assert (await second.get_run(RunId(run_id))).status.value == "succeeded"
            assert {r.run_id for r in await first.list_runs()} == {"one", "two", "three", "four"}
        finally:
            await second.close()
            await first.close()

    asyncio.run(go())


def test_the_wal_is_folded_in_as_it_grows_though_commits_never_checkpoint(
    tmp_path: Path,
) -> None:
    # A commit that runs on the loop must never checkpoint there (a checkpoint fsyncs), so
    # automatic checkpoints are off and the store's thread folds the WAL in past 4 MiB:
    # a long run's WAL stays bounded, with every step in the database.
    db = tmp_path / "runs.db"
    wal = tmp_path / "runs.db-wal"
    sizes: list[int] = []

    class Watching(Chain):
        def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
            if wal.exists():
                sizes.append(wal.stat().st_size)
            return super().on_completed(snapshot, event)

    async def go() -> None:
        store = SQLiteStore(db, synchronous="normal")
        await store.open()
        with sqlite3.connect(db) as conn:  # the writer's connection has them off
            assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        kernel = Kernel(store, Watching(3000), {"w": _work})
        started = await kernel.start(app="t")
        assert (await kernel.run(started.run_id)).status.value == "succeeded"
        folds.append(store.wal_folds)
        await store.close()

    folds: list[int] = []
    asyncio.run(go())
    # A step writes about eight pages (seven, and the pointer map of a file made with
    # auto_vacuum = INCREMENTAL): some 80 MB of journal went through a WAL that stayed
    # near 4 MiB, folded in once per 4 MiB or so (15 times), not at every look of the
    # thread's (one write in 64, ~110 here) once the file had passed 4 MiB: the file is
    # cut back to 4 MiB when it is written again from its start. The peak is 4 MiB and
    # the writes of one look's period (6.46 MB measured; 6.27 MB before the pointer map).
    assert len(sizes) > 2900
    assert max(sizes) < 7 * 1024 * 1024, max(sizes)
    assert 1 <= folds[0] <= 30, folds
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM tasks WHERE state = 'succeeded'").fetchone() == (
            3000,
        )
