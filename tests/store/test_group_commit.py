"""Group commit on SQLite (``store/_writer.py``): the steps of many runs in one process
share one transaction and one fsync, and each run ends exactly as it does alone.

What is asserted is behaviour, never time: fewer commits than writes, each run's digest
equal to its solo run's, a failing write failing alone, no answer before the ``COMMIT``
that holds it, and (counted by ``strace``) an fsync at every group commit.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from lk_helpers import unavailable
from loopkernel import BasePlanner, Event, GraphPatch, Kernel, Snapshot, TaskContext, TaskSpec
from loopkernel.errors import LeaseLost
from loopkernel.graph import RunStatus
from loopkernel.ids import RunId
from loopkernel.store import SQLiteStore
from loopkernel.store._engine import Cursor

STEPS = 12


class Chain(BasePlanner):
    def __init__(self, n: int) -> None:
        self.n = n

    def on_start(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        return GraphPatch().add(TaskSpec(task_id="t0", skill="echo", input={"i": 0}))

    def on_completed(self, snapshot: Snapshot, event: Event) -> GraphPatch:
        i = int((event.task_id or "t0")[1:]) + 1
        if i == self.n:
            return GraphPatch().finish("succeeded")
        spec = TaskSpec(task_id=f"t{i}", skill="echo", input={"i": i})
        return GraphPatch().add(spec, after=[f"t{i - 1}"])


async def echo(ctx: TaskContext) -> Any:
    return {"run": ctx.run_id, "task": ctx.task_id, "input": ctx.input}


async def chain_runs(store: SQLiteStore, run_ids: list[str]) -> dict[str, str]:
    """Every run in ``run_ids`` at once on ``store``; each run's digest."""
    kernel = Kernel(store, Chain(STEPS), {"echo": echo})
    for rid in run_ids:
        await kernel.start(app="group", run_id=rid, max_events=10 * STEPS)
    outcomes = await asyncio.gather(*(kernel.run(rid) for rid in run_ids))
    assert {o.status.value for o in outcomes} == {"succeeded"}
    return {rid: await kernel.digest(rid) for rid in run_ids}


async def _test_many_runs_share_commits_and_end_as_they_do_alone(tmp_path: Path) -> None:
    run_ids = [f"run-{i}" for i in range(24)]
    store = SQLiteStore(tmp_path / "together.db")
    await store.open()
    try:
        together = await chain_runs(store, run_ids)
        stats = store.commit_stats()
    finally:
        await store.close()
    # Each run alone in a store of its own: the digest an unbatched store gives.
    for rid in run_ids[:4]:
        solo = SQLiteStore(tmp_path / f"{rid}.db")
        await solo.open()
        try:
            assert (await chain_runs(solo, [rid]))[rid] == together[rid], rid
        finally:
            await solo.close()
    assert len(set(together.values())) == len(run_ids)  # each result names its run
    assert stats.grouped_writes > 0
    assert stats.largest_group > 1
    assert stats.commits < stats.writes
    assert stats.synced_commits <= stats.commits


class Gate:
    """Holds the writer thread until opened, so that writes queue up behind it."""

    def __init__(self, store: SQLiteStore) -> None:
        self.open = threading.Event()
        self.future = store._on_thread(lambda: self.open.wait(30))


def meta_keys(path: Path) -> set[str]:
    with sqlite3.connect(path) as db:  # a connection of its own: only what is committed
        return {k for (k,) in db.execute("SELECT key FROM meta WHERE key LIKE 'k%'")}


async def _test_a_failing_write_fails_alone_and_its_statements_are_undone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    await store.open()
    try:
        gate = Gate(store)

        def put(key: str, fail: bool = False) -> Any:
            def body(cur: Cursor) -> str:
                cur.run("INSERT INTO meta (key, value) VALUES (?, '1')", (key,))
                if fail:
                    raise ValueError(key)
                return key

            return asyncio.ensure_future(store._call(body, "write"))

        calls = [put("k1"), put("k2", fail=True), put("k3")]
        await asyncio.sleep(0)
        gate.open.set()
        await gate.future
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert results[0] == "k1" and results[2] == "k3"
        assert isinstance(results[1], ValueError)
        assert store.commit_stats().largest_group == 3
        assert meta_keys(store.path) == {"k1", "k3"}
    finally:
        await store.close()


async def _test_a_stale_lease_in_a_group_fails_only_its_run(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    await store.open()
    try:
        kernel = Kernel(store, Chain(1), {"echo": echo})
        for rid in ("a", "b"):
            await kernel.start(app="group", run_id=rid)
        stale = store.fenced(RunId("a"), 99)  # an epoch that is not the run's
        gate = Gate(store)
        calls = [
            asyncio.ensure_future(stale.set_status(RunId("a"), RunStatus.WAITING)),
            asyncio.ensure_future(store.set_status(RunId("b"), RunStatus.WAITING)),
        ]
        await asyncio.sleep(0)
        gate.open.set()
        await gate.future
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert isinstance(results[0], LeaseLost), results
        assert results[1] is None
        assert (await store.get_run(RunId("a"))).status is not RunStatus.WAITING
        assert (await store.get_run(RunId("b"))).status is RunStatus.WAITING
    finally:
        await store.close()


class HeldCommit:
    """A connection whose ``COMMIT`` waits for ``release`` (and says when it got there)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.reached = threading.Event()
        self.release = threading.Event()

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql == "COMMIT":
            self.reached.set()
            self.release.wait(30)
        return self._db.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


async def _test_no_write_of_a_group_is_answered_before_its_commit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    await store.open()
    real = store._db
    assert real is not None
    held = HeldCommit(real)
    try:
        gate = Gate(store)
        store._db = held  # type: ignore[assignment]

        def put(key: str) -> asyncio.Future[Any]:
            def body(cur: Cursor) -> str:
                cur.run("INSERT INTO meta (key, value) VALUES (?, '1')", (key,))
                return key

            return asyncio.ensure_future(store._call(body, "write"))

        calls = [put(f"k{i}") for i in range(4)]
        await asyncio.sleep(0)
        gate.open.set()
        await gate.future
        await asyncio.to_thread(held.reached.wait, 30)
        for _ in range(20):  # let any answer already sent to the loop arrive
            await asyncio.sleep(0)
        assert not any(c.done() for c in calls)
        assert meta_keys(store.path) == set()
        held.release.set()
        assert await asyncio.gather(*calls) == ["k0", "k1", "k2", "k3"]
        assert meta_keys(store.path) == {"k0", "k1", "k2", "k3"}
        assert store.commit_stats().largest_group == 4
    finally:
        held.release.set()
        store._db = real
        await store.close()


GROUPS = 30

_FSYNC_CHILD = textwrap.dedent(
    """
    import asyncio, sys, threading
    from loopkernel.store import SQLiteStore

    async def main(path, groups):
        store = SQLiteStore(path)
        await store.open()
        n = 0
        for g in range(groups):
            gate = threading.Event()
            held = store._on_thread(lambda: gate.wait(30))
            calls = []
            for i in range(4):
                n += 1
                key = f"k{n}"
                def body(cur, key=key):
                    cur.run("INSERT INTO meta (key, value) VALUES (?, '1')", (key,))
                calls.append(asyncio.ensure_future(store._call(body, "write")))
            await asyncio.sleep(0)
            gate.set()
            await held
            await asyncio.gather(*calls)
        stats = store.commit_stats()
        await store.close()
        print("groups", stats.commits - (stats.writes - stats.grouped_writes))

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


STRACE = "LOOPKERNEL_TEST_STRACE"  # =skip runs the rest knowingly without strace


def test_every_group_commit_is_fsynced(tmp_path: Path) -> None:
    """Counted by the kernel, not by the store: ``strace`` sees each fsync SQLite makes."""
    if shutil.which("strace") is None:
        unavailable(
            "strace", "LOOPKERNEL_TEST_STRACE", "strace is not installed (.ci/run installs it)"
        )
    out = tmp_path / "strace.txt"
    proc = subprocess.run(
        [
            *("strace", "-f", "-c", "-o", str(out), "-e", "trace=fsync,fdatasync"),
            *(sys.executable, "-c", _FSYNC_CHILD, str(tmp_path / "runs.db"), str(GROUPS)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if proc.returncode != 0 and "ptrace" in proc.stderr:
        unavailable(
            "strace",
            "LOOPKERNEL_TEST_STRACE",
            f"strace cannot trace here: {proc.stderr.strip()[:200]}",
        )
    assert proc.returncode == 0, proc.stderr
    assert f"groups {GROUPS}" in proc.stdout, proc.stdout
    syncs = sum(
        int(m.group(1))
        for m in re.finditer(
            r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?f(?:data)?sync$", out.read_text(), re.M
        )
    )
    # Each group's COMMIT fsyncs the WAL (open, migrations and close add a few more).
    assert syncs >= GROUPS, out.read_text()


def test_many_runs_share_commits_and_end_as_they_do_alone(tmp_path: Path) -> None:
    asyncio.run(_test_many_runs_share_commits_and_end_as_they_do_alone(tmp_path))


def test_a_failing_write_fails_alone_and_its_statements_are_undone(tmp_path: Path) -> None:
    asyncio.run(_test_a_failing_write_fails_alone_and_its_statements_are_undone(tmp_path))


def test_a_stale_lease_in_a_group_fails_only_its_run(tmp_path: Path) -> None:
    asyncio.run(_test_a_stale_lease_in_a_group_fails_only_its_run(tmp_path))


def test_no_write_of_a_group_is_answered_before_its_commit(tmp_path: Path) -> None:
    asyncio.run(_test_no_write_of_a_group_is_answered_before_its_commit(tmp_path))
